"""One door to a fit: the commands that fit go through ``evalgauge.api.fit`` exactly once, and what they print
is what they printed before (their JSON on bundled files against stored copies, numbers to 6 significant
digits; the HTML report's sections).

The stored copies are in tests/fixtures/golden/, written by the version before the commands went through
``eg.fit`` (``EVALGAUGE_WRITE_GOLDEN=1 pytest tests/test_one_door.py`` writes them again).
"""

from __future__ import annotations

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
    """A JSON value without what differs run to run or machine to machine, numbers to 6 significant digits."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in sorted(value.items()) if not VOLATILE.search(k)}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, str):  # notes carry timings and paths: keep their words
        return re.sub(r"\d+(\.\d+)? ?(s|ms|seconds)\b|/[^\s,;)]+", "", value)
    return value


def battles(path: Path) -> str:
    rng = np.random.default_rng(5)
    n = 600
    names = np.array(["alpha", "beta", "gamma", "delta"])
    a = rng.integers(0, 4, n)
    b = (a + rng.integers(1, 4, n)) % 4
    pd.DataFrame({"model_a": names[a], "model_b": names[b], "item": rng.integers(0, 40, n).astype(str),
                  "judge": rng.choice(["j1", "j2"], n),
                  "winner": rng.choice(["model_a", "model_b", "tie"], n, p=[0.45, 0.4, 0.15])}).to_csv(path, index=False)
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
    assert got == json.loads(path.read_text())


def test_the_report_has_the_sections_it_had(tmp_path):
    report = tmp_path / "report.html"
    out = CliRunner().invoke(main, ["analyze", ALPACA, "--drop-missing", "--report", str(report)])
    assert out.exit_code == 0, out.output
    sections = re.findall(r"<h2[^>]*>(.*?)</h2>", report.read_text())
    path = GOLDEN / "report-alpacaeval-sections.json"
    if os.environ.get("EVALGAUGE_WRITE_GOLDEN"):
        path.write_text(json.dumps(sections, indent=1) + "\n")
    assert sections == json.loads(path.read_text())
