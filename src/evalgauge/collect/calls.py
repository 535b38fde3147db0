"""What one judge call is, sent on its own or as a batch line: its worst-case cost, the output it asks for,
the verdict read from its completion, and the row stored for it. The runner and the batch collector both use it
(a leaf of the collector beside the reply gate)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from functools import lru_cache

from ..protocols import TRUNCATED, Verdict, parse, read_structured, strip_reasoning, verdict_schema
from ..store import CallRecord
from .config import Judge, RunConfig
from .limits import worst_case_input_tokens
from .parsers import parse_score
from .providers import Output
from .tasks import Task


def worst_case_cost(judge: Judge, prompt: str, system_prompt: str | None = None, history: tuple = ()) -> float:
    """The most a call can cost: the worst-case input (with a re-ask's earlier turns, each token at the most the
    prompt cache can charge for it) and all ``max_tokens`` out."""
    return judge.worst_price(worst_case_input_tokens(prompt, system_prompt, history), judge.max_tokens)


def output_spec(cfg: RunConfig) -> Output | None:
    """What the judges are asked to return beyond free text ([scoring] output)."""
    if cfg.output == "text":
        return None
    return Output(cfg.output, verdict_schema(cfg.mode, cfg.scale_min, cfg.scale_max, cfg.choices, cfg.labels))


def read_verdict(cfg: RunConfig, variant: str, text: str | None, tokens=None, cut: bool = False) -> Verdict:
    """The verdict of a completion: a structured answer's ``score`` (with ``tokens``: the probability-weighted
    score), else by the variant's protocol, else the scoring mode's parser. Reasoning blocks are never read.
    ``cut``: the reply was cut at max_tokens, so only a verdict complete in its final form is read."""
    if cfg.output != "text":
        v = read_structured(text, cfg.mode, scale_min=cfg.scale_min, scale_max=cfg.scale_max, choices=cfg.choices,
                            tokens=tokens if cfg.output == "logprobs" else None, labels=cfg.labels)
        return replace(v, rule=f"{cfg.output}: {v.rule}" if v.rule else None)
    protocol, pattern = cfg.protocol_for(variant)
    if protocol is None:
        score, error = parse_score(strip_reasoning(text) if text else text, cfg.mode, scale_max=cfg.scale_max,
                                   scale_min=cfg.scale_min, choices=cfg.choices, cut=cut, labels=cfg.labels)
        return Verdict(score, error or "", None)
    verdict = parse(text, protocol, scale_min=cfg.scale_min, scale_max=cfg.scale_max, pattern=pattern, cut=cut)
    return replace(verdict, rule=f"{protocol}: {verdict.rule}" if verdict.rule else None)


def call_record(cfg: RunConfig, judge: Judge, task: Task, completion, verdict: Verdict, error: str | None, *,
                started: float, latency: float, tokens: tuple[int, int, int, int], cost: float, flags: str,
                turns: list | None = None, batch: bool = False) -> CallRecord:
    """The stored row of one judged call (synchronous or a batch line): the verdict turned into the score (a
    pairwise call presented second flipped, a keyed choice scored against its key); ``tokens`` = (input,
    output, read from the prompt cache, written to it)."""
    score = verdict.value
    if score is not None and cfg.pairwise and task.position == "BA":
        score = 1.0 - score  # the system was presented second: its win is a "B"
    if score is not None and cfg.choice_keyed:  # the letter chosen against the item's answer key
        score = float(cfg.choices[int(score)].upper() == (task.item.reference or "").strip().upper())
    request = _request_text(judge.model, task.temperature, judge.max_tokens, judge.provider, judge.base_url,
                            bool(cfg.system_prompt), cfg.output, batch)
    dist = verdict.distribution
    tokens_in, tokens_out, cached, written = tokens
    return CallRecord(
        key=task.key, item=task.item.id, category=task.item.category, system=task.system,
        variant=task.variant.id, temperature=task.temperature, judge=task.judge, replicate=task.replicate,
        position=task.position, prompt_hash=task.prompt_hash, request=request, completion=completion.text,
        score=score, parse_error=error, model=completion.model, response_id=completion.response_id,
        started_at=started, finished_at=time.time(), latency_s=latency,
        input_tokens=tokens_in, output_tokens=tokens_out, cost_usd=cost, flags=flags,
        rule=verdict.rule if score is not None else None, finish_reason=completion.finish_reason,
        distribution=json.dumps({f"{v:g}": p for v, p in dist}) if dist else None,
        spread=verdict.spread, reasks=len(turns or ()), turns=json.dumps(turns) if turns else None,
        cached_tokens=cached, cache_write_tokens=written)


@lru_cache(maxsize=256)  # the same for every call of a judge at a temperature
def _request_text(model: str, temperature: float, max_tokens: int, provider: str, base_url: str | None,
                  system_prompt: bool, output: str, batch: bool) -> str:
    """What was asked, as stored with each call (the request's settings, never its key or prompt)."""
    asked = {"model": model, "temperature": temperature, "max_tokens": max_tokens, "provider": provider,
             "base_url": base_url, "system_prompt": system_prompt, "output": output}
    return json.dumps({**asked, "batch": True} if batch else asked)


def verdict_of(cfg: RunConfig, judge: Judge, task: Task, completion) -> tuple[Verdict, str | None]:
    """A completion's verdict and, when none could be read, why (a reply cut at max_tokens said so)."""
    verdict = read_verdict(cfg, task.variant.id, completion.text, completion.tokens,
                           cut=completion.finish_reason == "length")
    error = None if verdict.value is not None else verdict.reason or "no verdict"
    if error is not None and completion.finish_reason == "length":
        error = f"{TRUNCATED} ({judge.max_tokens} tokens) before a verdict: {error}"
    return verdict, error


def count_flags(summary, flags: str | None) -> None:
    for flag in filter(None, (flags or "").split("; ")):
        kind = flag.split(" (")[0]
        summary.flagged[kind] = summary.flagged.get(kind, 0) + 1
