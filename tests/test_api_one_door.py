"""One door to a fit: the commands that fit go through ``evalgauge.api.fit`` exactly once, and what they print
is what they printed before (their JSON on bundled files against stored copies: the same keys, words and
counts, every number within 1e-4 of its stored value relative to its size, the precision at which a REML
optimum is reproduced across machines whose BLAS round differently; the HTML report's sections).

The stored copies are in tests/fixtures/golden/, written by the version before the commands went through
``eg.fit`` (``EVALGAUGE_WRITE_GOLDEN=1 pytest tests/test_api_one_door.py`` writes them again).
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge import api
from evalgauge.cli import main

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "fixtures" / "golden"
ALPACA = str(ROOT / "examples" / "alpacaeval" / "alpacaeval_5x805x2.csv")
SIZING = str(ROOT / "tests" / "fixtures" / "reml" / "sizing.parquet")
PASTES = str(ROOT / "tests" / "fixtures" / "lme4" / "Pastes.csv")
PENICILLIN = str(ROOT / "tests" / "fixtures" / "lme4" / "Penicillin.csv")
VOLATILE = re.compile(r"(seconds|elapsed|timestamp|date|version|source|path|file|database|wall|started|finished)",
                      re.I)


def scrub(value):
    """A JSON value without what differs run to run or machine to machine, numbers to 6 significant digits
    (and within 1e-12 of 0, a quantity that is 0 but for rounding, as 0)."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in sorted(value.items()) if not VOLATILE.search(k)}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, float):
        return 0.0 if abs(value) < 1e-12 else float(f"{value:.6g}")
    if isinstance(value, str):  # notes carry timings and paths: keep their words
        return re.sub(r"\d+(\.\d+)? ?(s|ms|seconds)\b|/[^\s,;)]+", "", value)
    return value


def battles(path: Path) -> str:
    rng = np.random.default_rng(5)
    n = 600
    names = np.array(["alpha", "beta", "gamma", "delta"])
    a = rng.integers(0, 4, n)
    b = (a + rng.integers(1, 4, n)) % 4
    item, judge = rng.integers(0, 40, n).astype(str), rng.choice(["j1", "j2"], n)
    winner = rng.choice(["model_a", "model_b", "tie"], n, p=[0.45, 0.4, 0.15])
    pd.DataFrame({"model_a": names[a], "model_b": names[b], "item": item, "judge": judge,
                  "winner": winner}).to_csv(path, index=False)
    return str(path)


def commands(tmp: Path) -> dict[str, list[str]]:
    return {
        "analyze-alpacaeval": ["analyze", ALPACA, "--drop-missing", "--json", "-"],
        "compare-alpacaeval": ["compare", ALPACA, "--drop-missing", "--json", "-"],
        "components-sizing": ["components", SIZING, "--json", "-"],
        "components-penicillin-engine": ["components", PENICILLIN, "--score", "diameter", "--facets", "plate,sample",
                                         "--engine", "duckdb", "--json", "-"],
        "components-pastes-nested": ["components", PASTES, "--score", "strength", "--facets", "batch,cask", "--nest",
                                     "batch/cask", "--replicate", "auto", "--json", "-"],
        "analyze-penicillin": ["analyze", PENICILLIN, "--score", "diameter", "--facets", "plate,sample",
                               "--object", "sample", "--json", "-"],
        "pairwise-items": ["pairwise", battles(tmp / "battles.csv"), "--bootstrap", "100", "--json", "-"],
    }


def run(args: list[str]) -> dict:
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


@pytest.mark.parametrize("name", ["analyze-alpacaeval", "compare-alpacaeval", "components-sizing",
                                  "components-penicillin-engine", "components-pastes-nested", "analyze-penicillin",
                                  "pairwise-items"])
def test_the_json_is_what_it_was(tmp_path, name):
    got = scrub(run(commands(tmp_path)[name]))
    path = GOLDEN / f"{name}.json"
    if os.environ.get("EVALGAUGE_WRITE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert_same(got, json.loads(path.read_text()))


def assert_same(got, stored, where: str = "") -> None:
    """The same JSON value: equal keys, lengths, words and flags; numbers within 1e-4 relative (1e-9 absolute)."""
    if isinstance(stored, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(stored), f"{where}: keys {sorted(got)}"
        for key in stored:
            assert_same(got[key], stored[key], f"{where}/{key}")
    elif isinstance(stored, list):
        assert isinstance(got, list) and len(got) == len(stored), f"{where}: {got!r} against {stored!r}"
        for k, (a, b) in enumerate(zip(got, stored, strict=True)):
            assert_same(a, b, f"{where}[{k}]")
    elif isinstance(stored, float) and not isinstance(got, bool) and isinstance(got, int | float):
        same = (np.isnan(got) and np.isnan(stored)) or np.isclose(got, stored, rtol=1e-4, atol=1e-9)
        assert same, f"{where}: {got!r} against {stored!r}"
    else:
        assert got == stored, f"{where}: {got!r} against {stored!r}"


def test_the_report_has_the_sections_it_had(tmp_path):
    report = tmp_path / "report.html"
    out = CliRunner().invoke(main, ["analyze", ALPACA, "--drop-missing", "--report", str(report)])
    assert out.exit_code == 0, out.output
    sections = re.findall(r"<h2[^>]*>(.*?)</h2>", report.read_text())
    path = GOLDEN / "report-alpacaeval-sections.json"
    if os.environ.get("EVALGAUGE_WRITE_GOLDEN"):
        path.write_text(json.dumps(sections, indent=1) + "\n")
    assert sections == json.loads(path.read_text())


BINARY = str(ROOT / "tests" / "fixtures" / "reml" / "binary.parquet")


def judged(path: Path) -> str:
    """4 systems x 30 items x 3 judges x 2 replicates of 0/1 scores (logit = system + item + judge effects), one
    judgment missing."""
    rng = np.random.default_rng(8)
    grid = pd.MultiIndex.from_product([range(4), range(30), range(3), [1, 2]],
                                      names=["system", "item", "judge", "replicate"])
    frame = grid.to_frame(index=False).iloc[1:]
    logit = (rng.normal(0, 0.7, 4)[frame["system"]] + rng.normal(0, 1.5, 30)[frame["item"]]
             + rng.normal(0, 0.5, 3)[frame["judge"]])
    frame["score"] = (rng.random(len(frame)) < 1 / (1 + np.exp(-logit))).astype(int)
    frame = frame.assign(system="s" + frame["system"].astype(str), item="i" + frame["item"].astype(str),
                         judge="j" + frame["judge"].astype(str))
    frame.to_csv(path, index=False)
    return str(path)
PENICILLIN_FACETS = [PENICILLIN, "--score", "diameter", "--facets", "plate,sample"]


@pytest.mark.parametrize("args", [
    ["components", SIZING],
    ["components", *PENICILLIN_FACETS, "--engine", "duckdb"],
    ["components", PASTES, "--score", "strength", "--facets", "batch,cask", "--nest", "batch/cask", "--replicate",
     "auto", "--bootstrap", "20", "--seed", "1"],
    ["components", "{judged}", "--by", "judge"],
    ["components", BINARY, "--formula", "score ~ 1 + (1|system) + (1|item) + (1|judge)", "--glmm"],
    ["analyze", *PENICILLIN_FACETS, "--object", "sample"],
    ["analyze", "{judged}", "--by", "judge", "--glmm"],
    ["compare", ALPACA, "--drop-missing", "--bootstrap", "200"],
    ["pairwise", "{battles}", "--bootstrap", "0"],
    ["pairwise", "{battles}", "--bootstrap", "0", "--engine", "duckdb"],
    ["screen", SIZING, "--splits", "20"],
], ids=["components", "components-engine", "components-bootstrap", "components-by", "components-glmm", "analyze",
        "analyze-by-glmm", "compare", "pairwise", "pairwise-engine", "screen"])
def test_every_command_that_fits_goes_through_the_one_door_once(monkeypatch, tmp_path, args):
    """A command is read -> eg.fit -> verb -> render: it calls evalgauge.api.fit exactly once (``screen``
    twice: it compares the components of all items with those of the items it keeps), and never an estimator
    itself."""
    import evalgauge.estimate as estimate

    calls = []
    door = api.fit

    def counted(*a, **k):
        calls.append(1)
        return door(*a, **k)

    monkeypatch.setattr(api, "fit", counted)
    outside = []
    for name in ("estimate_components", "estimate_from_sums"):
        real = getattr(estimate, name)
        monkeypatch.setattr(estimate, name, lambda *a, _real=real, _name=name, **k: (
            outside.append(_name) if not calls else None, _real(*a, **k))[1])
    made = {"{battles}": lambda: battles(tmp_path / "battles.csv"), "{judged}": lambda: judged(tmp_path / "j.csv")}
    args = [made[a]() if a in made else a for a in args]
    out = CliRunner().invoke(main, [*args, "--json", "-"])
    assert out.exit_code == 0, out.output
    assert len(calls) == (2 if args[0] == "screen" else 1) and outside == []


def small_run(db: Path) -> Path:
    """A run database as the collector writes it: 3 systems x 8 items x 2 judges x 2 replicates."""
    from evalgauge.store import CallRecord, RunStore

    store = RunStore(db, writer=True)
    rng = np.random.default_rng(0)
    try:
        for system in ("s1", "s2", "s3"):
            for item in range(8):
                for judge in ("j1", "j2"):
                    for rep in (1, 2):
                        store.record(CallRecord(
                            key=f"{system}|{item}|{judge}|{rep}", item=f"i{item}", category=None, system=system,
                            variant="v", temperature=0.0, judge=judge, replicate=rep, position=None, prompt_hash="h",
                            request="{}", completion="Score: 3", score=float(rng.integers(1, 6)), parse_error=None,
                            model="m", response_id=f"{system}{item}{judge}{rep}", started_at=0.0, finished_at=1.0,
                            latency_s=1.0, input_tokens=10, output_tokens=3, cost_usd=1e-5))
    finally:
        store.close()
    return db


def test_the_adaptive_loop_fits_through_the_door(tmp_path, monkeypatch):
    """The collector reads and fits nothing itself: the command line hands it api.fit_run, which fits a run
    database (written as the collector writes it) through api.fit."""
    db = small_run(tmp_path / "run.sqlite")
    calls = []
    door = api.fit
    monkeypatch.setattr(api, "fit", lambda *a, **k: calls.append(1) or door(*a, **k))
    components, run_calls = api.fit_run(db)
    assert len(calls) == 1 and len(run_calls) == 96 and components.object == "system"
    assert {frozenset(c.facets) for c in components.components} >= {
        frozenset({"system"}), frozenset({"item"}), frozenset({"judge"}), frozenset({"system", "item"})}


SRC = ROOT / "src" / "evalgauge"
EDGES = ("cli", "report", "collect", "io")


def test_no_edge_imports_a_private_name_of_another_package():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).parts
        home = parts[0] if len(parts) > 1 else path.stem
        if home not in EDGES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level):
                continue
            package = list(parts[:-1])
            base = package[: len(package) - node.level + 1] if node.level > 1 else package
            target = ([*base, node.module] if node.module else base)[0] if (base or node.module) else ""
            private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            if private and target != home:
                offenders.append(f"{'/'.join(parts)}:{node.lineno} {private}")
    assert offenders == []


def test_the_reader_never_opens_a_run_configuration(tmp_path):
    """A run database written before runs recorded their design: RunRecord.info() says what is missing and where
    the command line finds it, and reads no file; with_design() supplies it (as the command line does)."""
    from evalgauge.io.runs import RunRecord, read_run_record

    record = read_run_record(small_run(tmp_path / "run.sqlite"))
    config = tmp_path / "run.toml"
    config.write_text("this is [not toml")  # a reader that opened it would fail
    old = RunRecord(record.path, record.calls, {**{k: v for k, v in record.meta.items() if k != "design"},
                                                "config": str(config)})
    diagnostics, meta = old.info()
    assert any("before runs recorded" in n and str(config) in n for n in diagnostics.design_notes)
    assert diagnostics.to_dict()["design_notes"] == list(diagnostics.design_notes)
    design = {"variants": [{"id": "v", "template": "Rate {response}"}], "system_prompt": None, "judges": []}
    diagnostics, meta = old.with_design(design).info()
    assert meta["variants"] == design["variants"]
    assert not any("before runs recorded" in n for n in diagnostics.design_notes)


def test_a_fit_of_cell_sums_is_the_engine_fit_and_refuses_what_needs_rows(tmp_path):
    """eg.fit(cells, sums=True) fits cell statistics reduced elsewhere as the engine path fits its own, and says
    which options need the rows instead of ignoring them."""
    from evalgauge.errors import DesignError

    on_engine = api.fit(PENICILLIN, score="diameter", facets="plate,sample", engine="duckdb")
    again = api.fit(on_engine.cells, design=on_engine.design, sums=True)
    assert again.components.to_dict() == on_engine.components.to_dict()
    with pytest.raises(DesignError, match="n_boot, method need"):
        api.fit(on_engine.cells, design=on_engine.design, sums=True, n_boot=10, method="reml")
