"""The run configuration (TOML): what to judge, how, by whom, and how often.

See the README's "Run configuration" section and ``examples/``. Every path is
relative to the configuration file. API keys are never in the file: a judge
names the environment variable that holds its key.
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from ..errors import DataError
from .parsers import MODES


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

    def price(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.price_input_per_mtok + output_tokens * self.price_output_per_mtok) / 1e6


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

    @property
    def pairwise(self) -> bool:
        return self.mode == "pairwise"

    def fingerprint(self) -> str:
        """A hash of what defines the calls (not keys, paths or concurrency), stored with the run."""
        payload = {
            "items": [asdict(i) for i in self.items], "responses": sorted(map(list, self.responses.items())),
            "variants": [asdict(v) for v in self.variants],
            "judges": [{"name": j.name, "model": j.model, "max_tokens": j.max_tokens} for j in self.judges],
            "temperatures": list(self.temperatures), "mode": self.mode, "baseline": self.baseline,
            "system_prompt": self.system_prompt,
            "generators": [{"name": g.name, "model": g.model, "max_tokens": g.max_tokens} for g in self.generators],
            "generation": [self.generation_template, self.generation_temperature],
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def load_config(path: str | Path, *, base_url: str | None = None, database: str | Path | None = None) -> RunConfig:
    """Read and validate a run configuration; ``base_url`` overrides every judge's endpoint."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such run configuration.")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise DataError(f"{path}: not valid TOML: {exc}") from None
    where = path.parent
    run = raw.get("run", {})
    name = str(run.get("name", path.stem))
    scoring = raw.get("scoring", {})
    mode = scoring.get("mode", "likert")
    if mode not in MODES:
        raise DataError(f"{path}: [scoring] mode must be one of {', '.join(MODES)}, not '{mode}'.")
    data = raw.get("data", {})
    if "items" not in data:
        raise DataError(f"{path}: [data] needs 'items', a CSV or JSONL file with columns id, text "
                        "(and optionally category, reference).")
    items = _read_items(where / data["items"])
    responses, systems = {}, ()
    generators = tuple(_judge(g, k, path, base_url, "[[systems]]") for k, g in enumerate(raw.get("systems", [])))
    if "responses" in data and generators:
        raise DataError(f"{path}: give either [data] responses (a file) or [[systems]] that generate them, not both.")
    if "responses" in data:
        responses, systems = _read_responses(where / data["responses"], {i.id for i in items})
    elif generators:
        systems = tuple(g.name for g in generators)
    generation = raw.get("generation", {})
    baseline = scoring.get("baseline")
    if mode == "pairwise":
        if not baseline or baseline not in systems:
            raise DataError(f"{path}: pairwise scoring needs [scoring] baseline = one of the systems in "
                            f"{data.get('responses', 'the responses file')} ({', '.join(systems) or 'none found'}).")
        systems = tuple(s for s in systems if s != baseline)
    variants = tuple(Variant(str(v.get("id", f"v{k + 1}")), _need(v, "template", path, f"[[variants]] #{k + 1}"))
                     for k, v in enumerate(raw.get("variants", [])))
    if not variants:
        raise DataError(f"{path}: at least one [[variants]] with a template is needed.")
    judges = [_judge(j, k, path, base_url, "[[judges]]") for k, j in enumerate(raw.get("judges", []))]
    if not judges:
        raise DataError(f"{path}: at least one [[judges]] is needed.")
    if len({j.name for j in judges}) != len(judges):
        raise DataError(f"{path}: judge names must be unique.")
    pilot = raw.get("pilot", {})
    notes = []
    if pilot:
        n_items, n_var = int(pilot.get("items", len(items))), int(pilot.get("variants", len(variants)))
        items, variants = items[:n_items], variants[:n_var]
        notes.append(f"pilot: the first {len(items)} items and {len(variants)} variants.")
    db = Path(database) if database else where / run.get("database", f"{name}.sqlite")
    return RunConfig(
        name=name, path=path, database=db, items=items, responses=responses, systems=systems,
        variants=variants, judges=tuple(judges),
        temperatures=tuple(float(t) for t in run.get("temperatures", [0.0])),
        replicates=int(run.get("replicates", 1)), mode=mode,
        scale_min=int(scoring.get("scale_min", 1)), scale_max=int(scoring.get("scale_max", 5)),
        choices=str(scoring.get("choices", "ABCD")), baseline=baseline,
        budget_usd=float(run.get("budget_usd", math.inf)), in_flight=int(run.get("in_flight", 32)),
        timeout_s=float(run.get("timeout_s", 60.0)), max_retries=int(run.get("max_retries", 6)),
        seed=int(run.get("seed", 0)), system_prompt=raw.get("system_prompt"), generators=generators,
        generation_template=str(generation.get("template", "{item}")),
        generation_temperature=float(generation.get("temperature", 0.0)), notes=tuple(notes),
    )


def _judge(j: dict, k: int, path: Path, base_url: str | None, table: str) -> Judge:
    """A judge (or a generating system) from its TOML table; never a key."""
    where = f"{table} #{k + 1}"
    judge = Judge(
        name=str(j.get("name", j.get("model", f"judge{k + 1}"))), model=_need(j, "model", path, where),
        provider=j.get("provider", "openai"), base_url=base_url or j.get("base_url"),
        api_key_env=j.get("api_key_env"), price_input_per_mtok=float(j.get("price_input_per_mtok", 0.0)),
        price_output_per_mtok=float(j.get("price_output_per_mtok", 0.0)),
        max_tokens=int(j.get("max_tokens", 64 if table == "[[judges]]" else 512)), rpm=j.get("rpm"),
        tpm=j.get("tpm"))
    if judge.provider not in ("openai", "anthropic"):
        raise DataError(f"{path}: {where}: provider must be 'openai' (any OpenAI-compatible endpoint) or "
                        f"'anthropic', not '{judge.provider}'.")
    if "api_key" in j:
        raise DataError(f"{path}: {where} holds an api_key: keys never go in the config. Put the key in an "
                        "environment variable and name it with api_key_env.")
    return judge


def _need(table: dict, key: str, path: Path, where: str) -> str:
    if key not in table:
        raise DataError(f"{path}: {where} needs '{key}'.")
    return str(table[key])


def _read_table(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise DataError(f"{path}: no such file.")
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
