"""The factorial of calls a run configuration asks for, and the prompts they send."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from ..store import call_key
from .config import Item, RunConfig, Variant, check_templates


# one per call, made and read, never changed: not frozen (a frozen class sets each field through
# object.__setattr__, several times the cost)
@dataclass(slots=True)
class Task:
    key: str
    item: Item
    system: str | None
    variant: Variant
    temperature: float
    judge: str
    replicate: int
    position: str | None  # pairwise: "AB" (the system first) or "BA" (the baseline first)
    prompt: str
    #: :func:`prompt_hash` of ``prompt`` (one prompt is sent by every judge, temperature and replicate of a cell)
    prompt_hash: str


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()[:24]


def render(cfg: RunConfig, item: Item, system: str | None, variant: Variant, position: str | None) -> str:
    values = {"item": item.text, "item_id": item.id, "category": item.category or "",
              "reference": item.reference or "", "system": system or ""}
    if system is not None:
        values["response"] = cfg.responses.get((item.id, system), "")
    if cfg.pairwise and system is not None:
        mine = cfg.responses.get((item.id, system), "")
        base = cfg.responses.get((item.id, cfg.baseline), "")
        values["response_a"], values["response_b"] = (mine, base) if position == "AB" else (base, mine)
    return variant.template.format_map(values)


def build_tasks(cfg: RunConfig, skip: set[str] | None = None) -> Iterator[Task]:
    """Every call of the factorial, lazily (memory stays flat), leaving out keys in ``skip``."""
    check_templates(cfg)
    skip = skip or set()
    systems: tuple[str | None, ...] = cfg.systems if cfg.systems else (None,)
    positions: tuple[str | None, ...] = ("AB", "BA") if cfg.pairwise else (None,)
    for item in cfg.items:
        for system in systems:
            if system is not None and (item.id, system) not in cfg.responses:
                continue  # no response from this system on this item: nothing to judge
            for variant in cfg.variants:
                for position in positions:
                    prompt = None
                    for temperature in cfg.temperatures:
                        for judge in cfg.judges:
                            for rep in range(1, cfg.replicates + 1):
                                key = call_key(item.id, system, variant.id, temperature, judge.name, rep, position)
                                if key in skip:
                                    continue
                                if prompt is None:
                                    prompt = render(cfg, item, system, variant, position)
                                    hashed = prompt_hash(prompt)
                                yield Task(key, item, system, variant, temperature, judge.name, rep, position,
                                           prompt, hashed)


def generation_prompt(cfg: RunConfig, item: Item) -> str:
    """The prompt a generating system answers (``[generation] template``, default the item itself)."""
    return cfg.generation_template.format_map({"item": item.text, "item_id": item.id,
                                               "category": item.category or "", "reference": item.reference or ""})


def count_tasks(cfg: RunConfig) -> int:
    systems = len(cfg.systems) or 1
    if cfg.generators:
        judged = len(cfg.generators) - (1 if cfg.pairwise else 0)
        per_item = len(cfg.items) * judged
    elif cfg.systems:
        per_item = sum(1 for i in cfg.items for s in cfg.systems if (i.id, s) in cfg.responses)
    else:
        per_item = len(cfg.items) * systems
    positions = 2 if cfg.pairwise else 1
    return per_item * len(cfg.variants) * positions * len(cfg.temperatures) * len(cfg.judges) * cfg.replicates
