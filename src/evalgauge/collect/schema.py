"""The run configuration's schema: every table, key and type, checked before anything runs.

A misspelt key (``budget`` for ``budget_usd``, ``replicats``) would otherwise be ignored and the run
would spend without a cap or fill half the cells, so unknown keys are refused with the closest valid
name; every value is type-checked with a message naming the table, the key and the file. A literal
API key anywhere in the file is refused without echoing it.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import DataError
from .parsers import MODES

#: Prefixes of provider keys (OpenAI, Anthropic, OpenRouter, Google, Groq, xAI, Hugging Face, GitHub, AWS).
_KEY_PATTERN = re.compile(r"(sk-[A-Za-z0-9_\-]{8,}|sk_[A-Za-z0-9]{16,}|AIza[0-9A-Za-z_\-]{20,}|gsk_[A-Za-z0-9]{16,}|"
                          r"xai-[A-Za-z0-9]{16,}|hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})")
#: Keys whose value is a secret, whatever it looks like.
_SECRET_KEYS = {"api_key", "apikey", "key", "token", "secret", "password", "authorization", "bearer",
                "access_token", "auth_token", "api_token"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def looks_like_key(value: str) -> bool:
    """True for a value that looks like an API key: a known provider prefix, or a long random token.

    Environment variable names are words joined by underscores; a key is a long run of mixed-case
    letters and digits. Used to refuse keys in the config and never to echo one in a message.
    """
    if _KEY_PATTERN.search(value):
        return True
    token = value.strip()
    if len(token) < 24 or not re.fullmatch(r"[A-Za-z0-9_\-.+/=]+", token):
        return False
    digits = sum(c.isdigit() for c in token)
    return digits >= 4 and any(c.islower() for c in token) and any(c.isupper() for c in token)


class _Table(BaseModel):
    # strict: TOML has types, so "two" is never coerced to 2 nor 0.7 to [0.7]
    # and finite: nan or inf in a temperature, a timeout or a price has no meaning a server would honour
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class RunSpec(_Table):
    name: str | None = None
    database: str | None = None
    replicates: int = Field(1, ge=1, le=1000)
    # 0-2 is the range OpenAI-compatible servers take (Anthropic's is 0-1; the server says so on a 400)
    temperatures: list[Annotated[float, Field(ge=0, le=2)]] = Field(default_factory=lambda: [0.0], min_length=1)
    budget_usd: float | None = Field(None, gt=0)
    in_flight: int = Field(32, ge=1, le=10_000)
    timeout_s: float = Field(60.0, gt=0, le=3600)
    max_retries: int = Field(6, ge=0, le=100)
    seed: int = 0
    #: where the judges' prices come from: as written ("config"; an unset price is 0), or pydantic's
    #: genai-prices table for every price a judge does not set
    prices: Literal["config", "genai-prices"] = "config"
    #: send the missing calls through the providers' batch APIs (half price, results within a day)
    batch: bool = False
    #: seconds between polls of a batch's state at first (doubling to 8 times this)
    batch_poll_s: float = Field(30.0, gt=0, le=3600)
    #: requests in one batch at most (default: the provider's limit, 50,000 OpenAI, 100,000 Anthropic)
    batch_size: int | None = Field(None, ge=1, le=100_000)
    #: lines a batch returns failed or expired: sent in the next batch, or as synchronous calls
    batch_failed: Literal["rebatch", "sync"] = "rebatch"
    #: exchange the batches as files in this directory (for an offline runner: ``vllm run-batch``)
    batch_dir: str | None = None


class DataSpec(_Table):
    items: str | None = None
    responses: str | None = None


class ScoringSpec(_Table):
    mode: str = "likert"
    scale_min: int = 1
    scale_max: int = 5
    choices: str = Field("ABCD", min_length=2, max_length=26)
    #: mode = "label": the classes a verdict names (a stance: ["favor", "against", "neutral"])
    labels: list[str] | None = None
    baseline: str | None = None
    #: a verdict protocol (evalgauge.protocols); unset: the scoring mode's own parser
    protocol: str | None = None
    pattern: str | None = None
    #: what the judge returns: free text, an object following the verdict's JSON schema, or that object with
    #: the top log-probabilities at the answer token (the probability-weighted score)
    output: Literal["text", "json", "logprobs"] = "text"
    #: follow-up turns after a verdict that cannot be read (each inside the budget)
    reask: int = Field(0, ge=0, le=5)

    @field_validator("choices")
    @classmethod
    def _distinct_letters(cls, value: str) -> str:
        if not value.isalnum() or len(set(value.upper())) != len(value):
            raise ValueError("choices must be distinct letters or digits, e.g. \"ABCD\"")
        return value


class VariantSpec(_Table):
    id: str | None = None
    template: str = Field(min_length=1)
    protocol: str | None = None  # how this variant's verdicts are read (default: [scoring] protocol)
    pattern: str | None = None


class JudgeSpec(_Table):
    name: str | None = None
    model: str = Field(min_length=1)
    provider: Literal["openai", "anthropic"] = "openai"
    base_url: str | None = None
    api_key_env: str | None = None
    price_input_per_mtok: float = Field(0.0, ge=0)
    price_output_per_mtok: float = Field(0.0, ge=0)
    # None: the input price (reads) or the provider's write rule; a table's price with [run] prices
    price_cached_input_per_mtok: float | None = Field(None, ge=0)
    price_cache_write_per_mtok: float | None = Field(None, ge=0)
    #: a batch call's price as a fraction of the synchronous one (OpenAI's and Anthropic's batches: 0.5)
    price_batch_factor: float = Field(0.5, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1, le=1_000_000)
    # a limit below one request a minute waits for hours; the limiter keeps a log of a minute's requests
    rpm: float | None = Field(None, ge=1, le=1_000_000, allow_inf_nan=False)
    tpm: float | None = Field(None, ge=1, le=1e10, allow_inf_nan=False)


class GenerationSpec(_Table):
    template: str = "{item}"
    temperature: float = Field(0.0, ge=0, le=2)


class PilotSpec(_Table):
    items: int | None = Field(None, ge=1)
    variants: int | None = Field(None, ge=1)


class ConfigSpec(_Table):
    run: RunSpec = Field(default_factory=RunSpec)
    data: DataSpec | None = None
    scoring: ScoringSpec = Field(default_factory=ScoringSpec)
    variants: list[VariantSpec] = Field(default_factory=list)
    judges: list[JudgeSpec] = Field(default_factory=list)
    systems: list[JudgeSpec] = Field(default_factory=list)
    generation: GenerationSpec = Field(default_factory=GenerationSpec)
    pilot: PilotSpec | None = None
    system_prompt: str | None = None


_TABLE_NAMES = {"run": "[run]", "data": "[data]", "scoring": "[scoring]", "variants": "[[variants]]",
                "judges": "[[judges]]", "systems": "[[systems]]", "generation": "[generation]", "pilot": "[pilot]"}
_MODELS: dict[str, type[BaseModel]] = {"run": RunSpec, "data": DataSpec, "scoring": ScoringSpec,
                                       "variants": VariantSpec, "judges": JudgeSpec, "systems": JudgeSpec,
                                       "generation": GenerationSpec, "pilot": PilotSpec}


def validate_raw(raw: dict[str, Any], path: Path) -> ConfigSpec:
    """The parsed TOML checked against the schema; a :class:`DataError` naming file, table and key if not."""
    _refuse_keys(raw, path, ())
    try:
        spec = ConfigSpec.model_validate(raw)
    except ValidationError as exc:
        raise DataError(f"{path}: " + "; ".join(_describe(err, raw) for err in exc.errors()[:5])) from None
    if spec.scoring.mode not in MODES:
        raise DataError(f"{path}: [scoring] mode must be one of {', '.join(MODES)}, not '{spec.scoring.mode}'.")
    for table in ("judges", "systems"):
        for k, j in enumerate(getattr(spec, table)):
            if j.api_key_env is not None and not _ENV_NAME.fullmatch(j.api_key_env):
                raise DataError(f"{path}: {_TABLE_NAMES[table]} #{k + 1}: api_key_env must be the *name* of an "
                                "environment variable (letters, digits, underscores), e.g. "
                                "api_key_env = \"OPENAI_API_KEY\"; export the key in that variable.")
    return spec


def _refuse_keys(node: Any, path: Path, where: tuple) -> None:
    """Refuse a literal key anywhere in the file, naming where it is but never the value."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = (*where, key)
            if str(key).lower() in _SECRET_KEYS:
                raise DataError(f"{path}: {_place(here)} holds an API key: keys never go in the config. Put the "
                                "key in an environment variable and name it with api_key_env.")
            _refuse_keys(value, path, here)
    elif isinstance(node, list):
        for k, value in enumerate(node):
            _refuse_keys(value, path, (*where, k))
    elif isinstance(node, str) and looks_like_key(node):
        raise DataError(f"{path}: {_place(where)} holds what looks like an API key (not shown): keys never go in "
                        "the config. Put the key in an environment variable and name it with api_key_env.")


def _place(loc: tuple) -> str:
    """A location in the TOML as the user wrote it: `[[judges]] #2 max_tokens`."""
    if not loc:
        return "the file"
    head, rest = loc[0], list(loc[1:])
    out = _TABLE_NAMES.get(str(head), str(head)) if rest or str(head) in _TABLE_NAMES else f"top-level '{head}'"
    if rest and isinstance(rest[0], int):
        out += f" #{rest.pop(0) + 1}"
    if rest:  # a list's element is its position as the user counts it: `temperatures #2`
        out += " " + "".join(f" #{r + 1}" if isinstance(r, int) else f".{r}" for r in rest).lstrip(".")
    return out.replace("  #", " #")


def _describe(err: dict, raw: dict) -> str:
    loc = tuple(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        parent, key = loc[:-1], str(loc[-1])
        valid = _valid_keys(parent)
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else f"; valid keys: {', '.join(valid)}."
        where = _place(parent) if parent else "the top level"
        return f"unknown key '{key}' in {where}{hint}"
    value = _value_at(raw, loc)
    shown = "" if value is _MISSING else f" (got {_show(value)})"
    if kind == "missing":
        return f"{_place(loc)} is required"
    return f"{_place(loc)}: {err['msg'].lower()}{shown}"


_MISSING = object()


def _value_at(raw: Any, loc: tuple) -> Any:
    node = raw
    for part in loc:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return node


def _show(value: Any) -> str:
    if isinstance(value, str):
        return "a value that looks like a key" if looks_like_key(value) else repr(value[:40])
    if isinstance(value, dict | list):
        return type(value).__name__
    return repr(value)


def _valid_keys(parent: tuple) -> list[str]:
    if not parent:
        return list(ConfigSpec.model_fields)
    model = _MODELS.get(str(parent[0]))
    return list(model.model_fields) if model else []
