"""The run configuration (TOML): what to judge, how, by whom, and how often.

See the README's "Run configuration" section and ``examples/``. Every path is
relative to the configuration file. API keys are never in the file: a judge
names the environment variable that holds its key.
"""

from __future__ import annotations

import hashlib
import json
import math
import string
import tomllib
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path

import pandas as pd

from ..errors import DataError
from ..inputs import check_input_file
from .schema import JudgeSpec, validate_raw


@dataclass(frozen=True)
class Judge:
    name: str
    model: str
    provider: str = "openai"  # openai: any OpenAI-compatible endpoint; anthropic
    base_url: str | None = None
    api_key_env: str | None = None
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0
    max_tokens: int = 64
    rpm: float | None = None  # requests per minute
    tpm: float | None = None  # tokens per minute
    #: input tokens read from the provider's prompt cache (None: at the input price, never under the bill)
    price_cached_input_per_mtok: float | None = None
    #: input tokens written to the prompt cache (None: Anthropic's 1.25 x the input price, else the input price)
    price_cache_write_per_mtok: float | None = None
    #: a batch call's prices as a fraction of these (the providers' batch APIs charge half)
    price_batch_factor: float = 0.5

    def at_batch_price(self) -> Judge:
        """This judge with every price a batch call's: the discount applies to input, cache reads and writes and
        output alike (OpenAI's Batch API and Anthropic's Message Batches)."""
        f = self.price_batch_factor

        def scaled(value: float | None) -> float | None:
            return None if value is None else value * f
        return replace(self, price_input_per_mtok=self.price_input_per_mtok * f,
                       price_output_per_mtok=self.price_output_per_mtok * f,
                       price_cached_input_per_mtok=scaled(self.price_cached_input_per_mtok),
                       price_cache_write_per_mtok=scaled(self.price_cache_write_per_mtok), price_batch_factor=1.0)

    @property
    def cached_price(self) -> float:
        return self.price_input_per_mtok if self.price_cached_input_per_mtok is None \
            else self.price_cached_input_per_mtok

    @property
    def write_price(self) -> float:
        if self.price_cache_write_per_mtok is not None:
            return self.price_cache_write_per_mtok
        return 1.25 * self.price_input_per_mtok if self.provider == "anthropic" else self.price_input_per_mtok

    def price(self, input_tokens: int, output_tokens: int, cached: int = 0, written: int = 0) -> float:
        """The call's cost: ``input_tokens`` in all, of which ``cached`` read from the prompt cache and ``written``
        to it, each at its price, and the output."""
        fresh = input_tokens - cached - written
        return (fresh * self.price_input_per_mtok + cached * self.cached_price + written * self.write_price
                + output_tokens * self.price_output_per_mtok) / 1e6

    def worst_price(self, input_tokens: int, output_tokens: int) -> float:
        """The most ``input_tokens`` and ``output_tokens`` can cost, however much of the input the cache takes."""
        per_input = max(self.price_input_per_mtok, self.cached_price, self.write_price)
        return (input_tokens * per_input + output_tokens * self.price_output_per_mtok) / 1e6


@dataclass(frozen=True)
class Variant:
    id: str
    template: str


@dataclass(frozen=True)
class Item:
    id: str
    text: str
    category: str | None = None
    reference: str | None = None


@dataclass(frozen=True)
class RunConfig:
    name: str
    path: Path
    database: Path
    items: tuple[Item, ...]
    responses: dict[tuple[str, str], str]  # (item, system) -> response text
    systems: tuple[str, ...]
    variants: tuple[Variant, ...]
    judges: tuple[Judge, ...]
    temperatures: tuple[float, ...] = (0.0,)
    replicates: int = 1
    mode: str = "likert"
    scale_min: int = 1
    scale_max: int = 5
    choices: str = "ABCD"
    #: mode = "label": the classes, in order (a verdict is stored as its index and read back as its name)
    labels: tuple[str, ...] = ()
    baseline: str | None = None  # pairwise: every system against this one, in both orders
    budget_usd: float = math.inf
    in_flight: int = 32
    timeout_s: float = 60.0
    max_retries: int = 6
    seed: int = 0
    system_prompt: str | None = None
    #: systems under test that generate the responses first ([[systems]]), instead of a responses file
    generators: tuple[Judge, ...] = ()
    generation_template: str = "{item}"
    generation_temperature: float = 0.0
    notes: tuple[str, ...] = field(default=(), compare=False)
    #: the files the configuration reads (items, responses): inputs that no output may replace
    sources: tuple[Path, ...] = field(default=(), compare=False)
    #: how verdicts are read (evalgauge.protocols): the run's protocol and pattern, and per variant id
    protocol: str | None = None
    pattern: str | None = None
    variant_protocols: tuple[tuple[str, str, str | None], ...] = ()
    #: "text", "json" (the verdict's JSON schema sent) or "logprobs" (and the scale's distribution read)
    output: str = "text"
    #: follow-up turns after an unreadable verdict
    reask: int = 0
    #: a stage of an adaptive run is part of its pool's factorial: it carries the pool's fingerprint
    fingerprint_override: str | None = field(default=None, compare=False)
    #: the batch APIs ([run] batch): polling, batch size, and what becomes of failed lines
    batch: bool = False
    batch_poll_s: float = 30.0
    batch_size: int | None = None
    batch_failed: str = "rebatch"
    #: the batches as files in this directory, for an offline runner (``vllm run-batch``), instead of an API
    batch_dir: Path | None = None

    @property
    def pairwise(self) -> bool:
        return self.mode == "pairwise"

    @cached_property  # read on every stored call: once per configuration, not once per call and item
    def choice_keyed(self) -> bool:
        """A choice run whose every item has its answer key (``reference``, one of the choices): each verdict
        is scored correct (1) or incorrect (0); without a key for every item the letters are classes."""
        if self.mode != "choice" or not self.items:
            return False
        letters = {c.upper() for c in self.choices}
        return all((i.reference or "").strip().upper() in letters for i in self.items)

    def protocol_for(self, variant: str) -> tuple[str | None, str | None]:
        """The verdict protocol and pattern of a variant's calls (None: the scoring mode's parser)."""
        for vid, protocol, pattern in self.variant_protocols:
            if vid == variant:
                return protocol, pattern
        return self.protocol, self.pattern

    def fingerprint(self) -> str:
        """A hash of what defines the calls (not keys, paths or concurrency), stored with the run."""
        if self.fingerprint_override is not None:
            return self.fingerprint_override
        payload = {
            "items": [asdict(i) for i in self.items], "responses": sorted(map(list, self.responses.items())),
            "variants": [asdict(v) for v in self.variants],
            "judges": [{"name": j.name, "model": j.model, "max_tokens": j.max_tokens} for j in self.judges],
            "temperatures": list(self.temperatures), "mode": self.mode, "baseline": self.baseline,
            "system_prompt": self.system_prompt,
            "generators": [{"name": g.name, "model": g.model, "max_tokens": g.max_tokens} for g in self.generators],
            "generation": [self.generation_template, self.generation_temperature],
        }
        if self.protocol or self.variant_protocols:  # only when set: older runs keep their fingerprint
            payload["protocol"] = [self.protocol, self.pattern, list(map(list, self.variant_protocols))]
        if self.output != "text" or self.reask:
            payload["output"] = [self.output, self.reask]
        if self.labels:
            payload["labels"] = list(self.labels)
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def load_config(path: str | Path, *, base_url: str | None = None, database: str | Path | None = None) -> RunConfig:
    """Read and validate a run configuration; ``base_url`` overrides every judge's endpoint.

    Every key is checked against the schema in :mod:`.schema` (unknown keys are refused with the
    closest valid name, every value type-checked), a literal API key anywhere in the file is refused,
    and each template is checked for the placeholders the scoring mode needs.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such run configuration.")
    check_input_file(path, what="configuration")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise DataError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}); save the configuration as UTF-8.") from None
    spec = validate_raw(raw, path)
    where = path.parent
    run, scoring = spec.run, spec.scoring
    name = run.name or path.stem
    if spec.data is None or spec.data.items is None:
        raise DataError(f"{path}: [data] needs 'items', a CSV or JSONL file with columns id, text "
                        "(and optionally category, reference).")
    items = _read_items(where / spec.data.items)
    responses: dict[tuple[str, str], str] = {}
    systems: tuple[str, ...] = ()
    table_prices = spec.run.prices == "genai-prices"
    generators = tuple(_judge(g, k, path, base_url, "[[systems]]", 512, table_prices)
                       for k, g in enumerate(spec.systems))
    if spec.data.responses and generators:
        raise DataError(f"{path}: give either [data] responses (a file) or [[systems]] that generate them, not both.")
    if spec.data.responses:
        responses, systems = _read_responses(where / spec.data.responses, {i.id for i in items})
    elif generators:
        systems = tuple(g.name for g in generators)
    if len(set(systems)) != len(systems):
        raise DataError(f"{path}: [[systems]] names must be unique.")
    baseline = scoring.baseline
    if scoring.mode == "pairwise":
        if not baseline or baseline not in systems:
            raise DataError(f"{path}: pairwise scoring needs [scoring] baseline = one of the systems in "
                            f"{spec.data.responses or 'the responses file'} ({', '.join(systems) or 'none found'}).")
        systems = tuple(s for s in systems if s != baseline)
    variants = tuple(Variant(v.id or f"v{k + 1}", v.template) for k, v in enumerate(spec.variants))
    if not variants:
        raise DataError(f"{path}: at least one [[variants]] with a template is needed.")
    if len({v.id for v in variants}) != len(variants):
        raise DataError(f"{path}: [[variants]] ids must be unique.")
    judges = [_judge(j, k, path, base_url, "[[judges]]", 64, table_prices) for k, j in enumerate(spec.judges)]
    if not judges:
        raise DataError(f"{path}: at least one [[judges]] is needed.")
    if len({j.name for j in judges}) != len(judges):
        raise DataError(f"{path}: judge names must be unique.")
    if scoring.scale_min >= scoring.scale_max:
        raise DataError(f"{path}: [scoring] scale_min ({scoring.scale_min}) must be below scale_max "
                        f"({scoring.scale_max}).")
    labels = _labels(scoring, path)
    if scoring.mode == "likert" and scoring.scale_max - scoring.scale_min > MAX_LIKERT_POINTS:
        # a rating scale's points are listed (the JSON schema's enum, the re-ask's wording): a million of them
        # is no rating scale, and listing them took gigabytes before the first call
        raise DataError(f"{path}: [scoring] a likert scale of {scoring.scale_min}..{scoring.scale_max} has more "
                        f"than {MAX_LIKERT_POINTS} points; use mode = \"numeric\" for a score on a continuous "
                        "range (its values are validated when read).")
    notes = []
    if spec.pilot is not None:
        n_items = spec.pilot.items if spec.pilot.items is not None else len(items)
        n_var = spec.pilot.variants if spec.pilot.variants is not None else len(variants)
        items, variants = items[:n_items], variants[:n_var]
        notes.append(f"pilot: the first {len(items)} items and {len(variants)} variants.")
    if run.batch_dir:
        check_batch_files(judges, f"{path}: [run] batch_dir")
    db = Path(database) if database else where / (run.database or f"{name}.sqlite")
    generation = spec.generation
    cfg = RunConfig(
        name=name, path=path, database=db, items=items, responses=responses, systems=systems,
        variants=variants, judges=tuple(judges), temperatures=tuple(run.temperatures), replicates=run.replicates,
        mode=scoring.mode, scale_min=scoring.scale_min, scale_max=scoring.scale_max, choices=scoring.choices,
        labels=labels,
        baseline=baseline, budget_usd=run.budget_usd if run.budget_usd is not None else math.inf,
        in_flight=run.in_flight, timeout_s=run.timeout_s, max_retries=run.max_retries, seed=run.seed,
        system_prompt=spec.system_prompt, generators=generators,
        generation_template=generation.template, generation_temperature=generation.temperature, notes=tuple(notes),
        sources=tuple(where / f for f in (spec.data.items, spec.data.responses) if f),
        protocol=scoring.protocol, pattern=scoring.pattern,
        variant_protocols=_variant_protocols(spec, variants, path),
        output=scoring.output, reask=scoring.reask, batch=run.batch or bool(run.batch_dir),
        batch_poll_s=run.batch_poll_s, batch_size=run.batch_size, batch_failed=run.batch_failed,
        batch_dir=where / run.batch_dir if run.batch_dir else None,
    )
    check_templates(cfg)
    check_output(cfg)
    return cfg


def check_batch_files(judges, where: str) -> None:
    """Batch files (``batch_dir``) are in OpenAI's batch format, for OpenAI-compatible judges (``vllm run-batch``)."""
    for j in judges:
        if j.provider != "openai":
            raise DataError(f"{where}: judge '{j.name}': batch files are in OpenAI's batch format (for `vllm "
                            "run-batch`); an Anthropic judge's batches go through its Message Batches API (drop the "
                            "batch directory, keep batch = true).")


def check_output(cfg: RunConfig) -> None:
    """A structured ``output`` the scoring can use, before any call: log-probabilities weigh a scale of single
    digits (a value such as 10 is two tokens in many tokenizers, so no one token holds the judge's choice),
    and no protocol reads what a schema already fixes."""
    where = f"{cfg.path}: [scoring] output = \"{cfg.output}\""
    if cfg.output == "text":
        return
    if cfg.protocol not in (None, "json") or any(p != "json" for _, p, _ in cfg.variant_protocols):
        raise DataError(f"{where} fixes how the verdict is written (an object with a 'score' field), so a protocol "
                        "has nothing to read; remove protocol (or set output = \"text\" to keep it).")
    if cfg.output == "logprobs":
        if cfg.mode != "likert":
            raise DataError(f"{where} weighs the judge's probabilities over a rating scale; it needs mode = "
                            f"\"likert\", not \"{cfg.mode}\". Use output = \"json\" for this mode.")
        if cfg.scale_min < 0 or cfg.scale_max > 9:
            raise DataError(f"{where} needs a scale of single digits (0-9): the value {max(cfg.scale_max, 10)} is "
                            f"split into several tokens by many tokenizers, so no one token carries the judge's "
                            f"choice. Use a scale within 0-9 (e.g. scale_min = 1, scale_max = 5), or output = "
                            f"\"json\".")
        anthropic = [j.name for j in cfg.judges if j.provider == "anthropic"]
        if anthropic:
            raise DataError(f"{where}: judge '{anthropic[0]}' is on Anthropic's Messages API, which returns no "
                            "log-probabilities. Use output = \"json\" (a forced tool call) for it.")


def _judge(j: JudgeSpec, k: int, path: Path, base_url: str | None, table: str, default_max_tokens: int,
           table_prices: bool = False) -> Judge:
    """A judge (or a generating system) from its validated TOML table; never a key. With ``table_prices`` a judge
    whose input or output price is not set gets every price it does not set from genai-prices
    (:func:`table_prices_of`); one that sets both is priced as written (a local model at 0)."""
    name = j.name or j.model or f"judge{k + 1}"
    prices = {f: getattr(j, f) for f in PRICE_FIELDS}
    unset = [f for f in PRICE_FIELDS if f not in j.model_fields_set]
    if table_prices and {"price_input_per_mtok", "price_output_per_mtok"} & set(unset):
        where = f"{path}: {table} #{k + 1} ('{name}', model '{j.model}')"
        prices.update({f: v for f, v in table_prices_of(j.model, j.provider, j.base_url, where).items() if f in unset})
    return Judge(
        name=name, model=j.model, provider=j.provider,
        base_url=base_url or j.base_url, api_key_env=j.api_key_env,
        max_tokens=j.max_tokens if j.max_tokens is not None else default_max_tokens, rpm=j.rpm, tpm=j.tpm,
        price_batch_factor=j.price_batch_factor, **prices)


#: a judge's prices, USD per million tokens: input, output, input read from the prompt cache, written to it
PRICE_FIELDS = ("price_input_per_mtok", "price_output_per_mtok", "price_cached_input_per_mtok",
                "price_cache_write_per_mtok")


def table_prices_of(model: str, provider: str, base_url: str | None, where: str) -> dict[str, float]:
    """A model's prices from pydantic's genai-prices table (``evalgauge[prices]``): the provider found by the
    endpoint's URL when one is given, else by the judge's provider; per million tokens at the lowest tier (priced
    at 1,000 tokens, so a long-context tier does not apply)."""
    try:
        import genai_prices
    except ImportError:
        raise DataError(f"{where}: [run] prices = \"genai-prices\" needs the price table: pip install "
                        "'evalgauge[prices]'.") from None
    found = {"provider_api_url": base_url} if base_url else {"provider_id": provider}
    usages = {"price_input_per_mtok": {"input_tokens": 1000}, "price_output_per_mtok": {"output_tokens": 1000},
              "price_cached_input_per_mtok": {"input_tokens": 1000, "cache_read_tokens": 1000},
              "price_cache_write_per_mtok": {"input_tokens": 1000, "cache_write_tokens": 1000}}
    try:
        return {f: float(genai_prices.calc_price(genai_prices.Usage(**u), model, **found).total_price) * 1000
                for f, u in usages.items()}
    except LookupError as exc:
        raise DataError(f"{where}: genai-prices has no price for it ({exc}); set price_input_per_mtok and "
                        "price_output_per_mtok in its table (0 for a local model).") from None


PLACEHOLDERS = {"item", "item_id", "category", "reference", "response", "system", "response_a", "response_b"}
RESPONSE_FIELDS = {"response", "response_a", "response_b", "system"}


def template_fields(template: str, what: str) -> set[str]:
    """The placeholders of a template, or a message naming ``what`` when it is not a valid format string.

    Placeholders are plain ``{name}``: a format spec or a conversion (``{item:>99999999999}`` asks for a
    string of 10^11 characters, ``{item!r}`` quotes the text) is refused, so a template can only insert text."""
    try:
        parsed = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(template) if f is not None]
        fancy = next((f for f, spec, conv in parsed if spec or conv or "." in f or "[" in f), None)
        if fancy is not None:
            name = fancy.split(".")[0].split("[")[0]
            raise DataError(f"{what}: the placeholder {{{name}...}} has a format spec, a conversion, an attribute or "
                            f"an index; write plain placeholders such as {{{name}}}, and a literal brace as '{{{{' "
                            "or '}}}}'.")
        fields = {f for f, _, _ in parsed}
        template.format_map({f: "" for f in fields if f})
    except (ValueError, KeyError, IndexError, AttributeError, TypeError) as exc:
        raise DataError(f"{what}: the template is not valid ({exc}); write a literal brace as '{{{{' or '}}}}'.") \
            from None
    if "" in fields:
        raise DataError(f"{what}: the template has an empty '{{}}'; name a placeholder, e.g. {{item}}, or write a "
                        "literal brace as '{{{{' or '}}}}'.")
    return fields


def _labels(scoring, path: Path) -> tuple[str, ...]:
    """mode = "label"'s classes, checked: at least two, distinct whatever their case, none empty."""
    if scoring.mode != "label":
        if scoring.labels:
            raise DataError(f"{path}: [scoring] labels are the classes of mode = \"label\"; set the mode, or drop "
                            "labels.")
        return ()
    labels = tuple(str(lab).strip() for lab in (scoring.labels or ()))
    if len(labels) < 2 or any(not lab for lab in labels) or len({lab.lower() for lab in labels}) != len(labels):
        raise DataError(f"{path}: [scoring] mode = \"label\" needs labels = [...] with at least two distinct, "
                        "non-empty classes, e.g. labels = [\"favor\", \"against\", \"neutral\"].")
    return labels


#: the most points a likert scale may span (0-100 and 1-1000 rating scales exist; a million-point one does not)
MAX_LIKERT_POINTS = 1000


def check_templates(cfg: RunConfig) -> None:
    """Every template names known placeholders and shows what the scoring mode needs, before any call.

    A template without ``{item}`` scores every item from the same prompt, and one without the response
    (``{response}``, or ``{response_a}``/``{response_b}`` for pairwise) scores every system from the same
    prompt: either makes the facet's variance unmeasurable, so both are refused.
    """
    known = ", ".join("{" + p + "}" for p in sorted(PLACEHOLDERS))
    for v in cfg.variants:
        what = f"{cfg.path}: variant '{v.id}'"
        fields = template_fields(v.template, what)
        unknown = fields - PLACEHOLDERS
        if unknown:
            raise DataError(f"{what} uses unknown placeholder(s) "
                            f"{', '.join('{' + u + '}' for u in sorted(unknown))}; known: {known}.")
        if "item" not in fields:
            raise DataError(f"{what} does not show the item ({{item}}): every item would get the same prompt. "
                            "Add {item} to the template.")
        if fields & RESPONSE_FIELDS and not cfg.systems:
            raise DataError(f"{what} shows a response, so [data] needs a responses file (or [[systems]]).")
        if cfg.pairwise:
            if not {"response_a", "response_b"} <= fields:
                raise DataError(f"{what}: a pairwise template must show {{response_a}} and {{response_b}}.")
        elif cfg.systems and "response" not in fields:
            raise DataError(f"{what} does not show the response ({{response}}) although systems are given: every "
                            "system would get the same prompt and system variance could not be measured. Add "
                            "{response} to the template.")
    if cfg.generators:
        fields = template_fields(cfg.generation_template, f"{cfg.path}: [generation] template")
        bad = fields - {"item", "item_id", "category", "reference"}
        if bad or "item" not in fields:
            raise DataError(f"{cfg.path}: [generation] template must show {{item}} and may use {{item_id}}, "
                            "{category}, {reference} only.")


def _variant_protocols(spec, variants, path: Path) -> tuple[tuple[str, str, str | None], ...]:
    """Each variant's own protocol, checked (a known name; a pattern that compiles with one group)."""
    import re

    from ..protocols import PROTOCOLS

    out = []
    checks = [("[scoring]", spec.scoring.protocol, spec.scoring.pattern)]
    for v, vs in zip(variants, spec.variants, strict=True):
        checks.append((f"variant '{v.id}'", vs.protocol, vs.pattern))
        if vs.protocol is not None:
            out.append((v.id, vs.protocol, vs.pattern))
    for where, protocol, pattern in checks:
        if protocol is None:
            if pattern is not None:
                raise DataError(f"{path}: {where} gives a pattern without protocol = \"pattern\".")
            continue
        if protocol not in PROTOCOLS:
            raise DataError(f"{path}: {where} protocol must be one of {', '.join(PROTOCOLS)}, not '{protocol}'.")
        if protocol == "pattern":
            try:
                groups = re.compile(pattern or "").groups
            except re.error as exc:
                raise DataError(f"{path}: {where} pattern is not a valid regular expression ({exc}).") from None
            if not pattern or groups != 1:
                raise DataError(f"{path}: {where} protocol \"pattern\" needs a pattern with exactly one group "
                                "(the number), e.g. pattern = 'Verdict: (\\d+)'.")
    return tuple(out)


def _read_table(path: Path) -> pd.DataFrame:
    check_input_file(path)
    try:
        if path.suffix.lower() in (".jsonl", ".ndjson"):
            return pd.read_json(path, lines=True, dtype=False).astype(object)
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    except ValueError as exc:
        raise DataError(f"{path}: could not be read: {exc}") from None


def _read_items(path: Path) -> tuple[Item, ...]:
    frame = _read_table(path)
    for col in ("id", "text"):
        if col not in frame.columns:
            raise DataError(f"{path}: no column '{col}'; an items file has id, text and optionally category, "
                            f"reference. The columns are: {', '.join(map(str, frame.columns))}.")
    ids = frame["id"].astype(str)
    dup = ids[ids.duplicated()]
    if len(dup):
        raise DataError(f"{path}: item id '{dup.iloc[0]}' appears twice (row {dup.index[0] + 1}); ids must be unique.")
    empty = frame.index[frame["text"].astype(str).str.strip() == ""]
    if len(empty):
        raise DataError(f"{path}: row {empty[0] + 1} has an empty text.")
    return tuple(Item(str(r["id"]), str(r["text"]), _opt(r.get("category")), _opt(r.get("reference")))
                 for _, r in frame.iterrows())


def _read_responses(path: Path, item_ids: set[str]) -> tuple[dict[tuple[str, str], str], tuple[str, ...]]:
    frame = _read_table(path)
    for col in ("item", "system", "response"):
        if col not in frame.columns:
            raise DataError(f"{path}: no column '{col}'; a responses file has item, system, response.")
    unknown = frame.index[~frame["item"].astype(str).isin(item_ids)]
    if len(unknown):
        r = unknown[0]
        raise DataError(f"{path}: row {r + 1} names item '{frame['item'].iloc[r]}', which is not in the items file.")
    responses = {(str(r["item"]), str(r["system"])): str(r["response"]) for _, r in frame.iterrows()}
    systems = tuple(dict.fromkeys(str(s) for s in frame["system"]))
    return responses, systems


def _opt(value) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    value = str(value)
    return value if value.strip() else None
