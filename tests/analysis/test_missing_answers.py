"""Calls without a score: where they fall (judge x variant x system) and whether their rate depends on the
system, said before any mean when it does (issue 26.5)."""

import json
import sqlite3

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge.analysis.diagnostics import missing_answers
from evalgauge.cli import main
from serve_sim import KEY, collect, free_port, write_config


def _calls(rates: dict[str, float], n: int, rng, truncate: float = 0.0) -> pd.DataFrame:
    rows = []
    for system, rate in rates.items():
        for k in range(n):
            failed = rng.random() < rate
            cut = failed and rng.random() < truncate
            rows.append({"judge": f"j{k % 2}", "variant": f"v{k % 3}", "system": system,
                         "score": None if failed else 3.0, "finish_reason": "length" if cut else "stop"})
    return pd.DataFrame(rows)


def test_the_table_counts_unread_and_truncated_calls_per_cell():
    rng = np.random.default_rng(0)
    m = missing_answers(_calls({"a": 0.2, "b": 0.2}, 60, rng, truncate=0.5))
    assert m.calls == 120 and m.unscored == m.table["calls"].sum() - m.table["scored"].sum()
    assert m.truncated == m.table["truncated"].sum() > 0
    assert (m.table["unread"] + m.table["truncated"] + m.table["scored"] == m.table["calls"]).all()
    assert list(m.table.columns[:3]) == ["judge", "variant", "system"] and len(m.table) == 2 * 3 * 2


def test_the_chi_square_agrees_with_scipy_on_the_system_by_outcome_table():
    from scipy.stats import chi2_contingency

    rng = np.random.default_rng(1)
    calls = _calls({"a": 0.1, "b": 0.3, "c": 0.2}, 100, rng)
    m = missing_answers(calls)
    table = pd.crosstab(calls["system"], calls["score"].isna())
    stat, p, df, _ = chi2_contingency(table, correction=False)
    assert m.test["method"] == "chi-square" and m.test["df"] == df == 2
    assert m.test["statistic"] == pytest.approx(stat, rel=1e-12) and m.test["p"] == pytest.approx(p, rel=1e-10)


@pytest.mark.slow
def test_the_test_holds_its_level_when_the_rate_does_not_depend_on_the_system():
    # 400 runs at equal rates: rejections ~ Binomial(400, 0.05): mean 20, sd 4.4; 35 is 3.4 sd above
    rng = np.random.default_rng(2)
    rejected = sum(missing_answers(_calls({"a": 0.15, "b": 0.15, "c": 0.15}, 80, rng)).headline is not None
                   for _ in range(400))
    assert 5 <= rejected <= 35


def test_a_rate_that_depends_on_the_system_is_said_first_with_the_rates():
    rng = np.random.default_rng(3)
    m = missing_answers(_calls({"a": 0.05, "b": 0.4}, 80, rng))
    assert m.test["p"] < 1e-4 and m.headline and "different subset" in m.headline and "a " in m.headline


def test_small_counts_use_the_permutation_test():
    rng = np.random.default_rng(4)
    m = missing_answers(_calls({"a": 0.0, "b": 0.5}, 8, rng))
    assert m.test["method"] == "permutation chi-square" and 0 < m.test["p"] <= 1


@pytest.mark.slow
def test_analyze_says_first_that_the_means_come_from_different_subsets(tmp_path, monkeypatch):
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = write_config(tmp_path, port, mode="numeric", items=12, systems=3, reps=2, judges=2)
    cfg, _ = collect(config, port)
    with sqlite3.connect(cfg.database) as db:  # one system's verdicts unreadable in half its calls
        db.execute("UPDATE calls SET score = NULL, parse_error = 'no score found' WHERE system = 's2' "
                   "AND rowid % 2 = 0")
        db.execute("UPDATE calls SET score = NULL, parse_error = 'cut', finish_reason = 'length' WHERE system = 's1' "
                   "AND rowid % 7 = 0")
    report = tmp_path / "r.html"
    out = CliRunner().invoke(main, ["analyze", str(cfg.database), "--json", str(tmp_path / "a.json"),
                                    "--report", str(report)])
    assert out.exit_code == 0, out.output
    first = out.output.strip().splitlines()[0]
    assert first.startswith("caution:") and "s2" in out.output.split("\n\n")[0]
    assert "Calls without a score" in out.output
    payload = json.loads((tmp_path / "a.json").read_text())
    missing = payload["diagnostics"]["missing_answers"]
    assert missing["test"]["p"] < 0.05 and missing["truncated"] > 0
    assert {r["system"] for r in missing["by_system"]} == {"s0", "s1", "s2"}
    check = next(i for i in payload["checklist"] if i["item"] == "Missing answers")
    assert not check["met"] and "depends" in check["evidence"]
    html = report.read_text()
    assert html.index("Caution.") < html.index("Variance components") and "Calls without a score" in html


def test_a_fully_scored_run_meets_the_missing_answers_item(tmp_path, monkeypatch):
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = write_config(tmp_path, port, mode="numeric", items=6, systems=2, reps=2, judges=2)
    cfg, _ = collect(config, port)
    out = CliRunner().invoke(main, ["analyze", str(cfg.database), "--json", "-"])
    payload = json.loads(out.output)
    check = next(i for i in payload["checklist"] if i["item"] == "Missing answers")
    assert check["met"] and payload["diagnostics"]["missing_answers"]["headline"] is None


def test_failures_that_depend_on_the_variant_are_said_first_with_one_system():
    """One system, a fixed temperature, two prompt variants: 76.7% of variant a's replies unread against 19.2%
    of variant b's (a small model's real run). The system test cannot run; the variant test flags it, and the
    headline says how the scored calls lean."""
    rng = np.random.default_rng(7)
    rows = []
    for variant, rate in (("a", 0.767), ("b", 0.192)):
        for _ in range(240):
            failed = rng.random() < rate
            rows.append({"judge": "j", "variant": variant, "temperature": 0.7, "system": "s",
                         "score": None if failed else 3.0, "finish_reason": "stop"})
    m = missing_answers(pd.DataFrame(rows))
    assert m.test is None and set(m.tests) == {"variant"}  # one system, one judge, one temperature: untested
    assert m.tests["variant"]["p_holm"] < 1e-10
    assert m.headline.startswith("The judges failed to give a readable verdict at rates that differ by variant")
    scored_b = sum(r["score"] is not None for r in rows if r["variant"] == "b")
    share = scored_b / sum(r["score"] is not None for r in rows)
    assert f"{100 * share:.0f}% of the scored calls are variant b, which the design gives 50%" in m.headline


@pytest.mark.slow
def test_holm_keeps_the_family_level_when_no_facet_matters():
    # 300 runs of 3 facets at equal rates: the chance that any facet is flagged stays near 5% (Holm), not
    # 1 - 0.95^3 = 14%. Binomial(300, 0.05): mean 15, sd 3.8; 30 is 4 sd above
    rng = np.random.default_rng(11)
    flagged = 0
    for _ in range(300):
        rows = [{"judge": f"j{k % 2}", "variant": f"v{k % 3}", "system": f"s{k % 4}",
                 "score": None if rng.random() < 0.2 else 1.0} for k in range(240)]
        flagged += missing_answers(pd.DataFrame(rows)).headline is not None
    assert flagged <= 30


@pytest.mark.slow
def test_fixed_temperature_and_variant_failures_end_to_end(tmp_path, monkeypatch):
    """Issue 39's run: one system, a temperature fixed at two chosen levels, replies unread far more often in
    one variant. The finding about the variant comes first; the temperature is Tier 2: its sensitivity index is
    shown, it has no share of Var(theta-hat) and no intervention changes it."""
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = write_config(tmp_path, port, mode="numeric", items=12, systems=1, reps=2, judges=2)
    config.write_text(config.read_text().replace("temperatures = [0.0]", "temperatures = [0.0, 0.7]"))
    cfg, _ = collect(config, port)
    with sqlite3.connect(cfg.database) as db:  # 3 in 4 of variant v1's verdicts unread, 1 in 10 of v2's
        # chosen by the cells' keys, not by rowid: the calls are stored in the order they finish, which differs
        # from run to run, and so would the data the fit sees
        for variant, unread in (("v1", lambda k: k % 4 != 0), ("v2", lambda k: k % 10 == 0)):
            keys = [k for (k,) in db.execute("SELECT key FROM calls WHERE variant = ? ORDER BY key", (variant,))]
            db.executemany("UPDATE calls SET score = NULL, parse_error = 'no score found' WHERE key = ?",
                           [(key,) for k, key in enumerate(keys) if unread(k)])
    out = CliRunner().invoke(main, ["analyze", str(cfg.database), "--drop-missing", "--json",
                                    str(tmp_path / "a.json")])
    assert out.exit_code == 0, out.output
    first = out.output.strip().splitlines()[0]
    assert first.startswith("caution:") and "variant" in first
    payload = json.loads((tmp_path / "a.json").read_text())
    components = payload["components"]
    assert components["fixed"] == ["temperature"]
    fixed_rows = [c for c in components["components"] if c["kind"] == "fixed"]
    assert [c["component"] for c in fixed_rows] == ["temperature"] and fixed_rows[0]["share"] is None
    assert "temperature" not in payload["var_theta_shares"] and set(payload["sensitivity_indices"]) == {"temperature"}
    assert not any("temperature" in row["intervention"] for row in payload["interventions"])
    assert "Tier 2 (fixed facets" in out.output and "sensitivity indices (TEE C.4" in out.output
    assert f"temperature {max(fixed_rows[0]['variance'], 0.0):.4g}" in out.output


@pytest.mark.slow
def test_the_report_knows_the_runs_prompts_without_its_configuration_file(tmp_path, monkeypatch):
    """The run records its variants, system prompt and judges with its calls: moving or deleting the TOML file
    loses nothing from the report or the checklist."""
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = write_config(tmp_path, port, mode="numeric", items=6, systems=2, reps=2, judges=2)
    cfg, _ = collect(config, port)
    config.unlink()
    out = CliRunner().invoke(main, ["analyze", str(cfg.database), "--json", "-"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.output)
    prompt = next(i for i in payload["checklist"] if i["item"] == "Prompt text")
    assert prompt["met"]
    with sqlite3.connect(cfg.database) as db:
        design = json.loads(db.execute("SELECT value FROM run WHERE key = 'design'").fetchone()[0])
    assert [v["id"] for v in design["variants"]] == ["v1", "v2"] and len(design["judges"]) == 2
    assert all(set(j) == {"name", "model", "provider"} for j in design["judges"])  # no key, no endpoint
    # a run database from before runs recorded this, its configuration file broken: said, not swallowed
    with sqlite3.connect(cfg.database) as db:
        db.execute("DELETE FROM run WHERE key = 'design'")
    config.write_text("this is [not toml")
    old = CliRunner().invoke(main, ["analyze", str(cfg.database), "--json", "-"])
    assert old.exit_code == 0, old.output
    notes = json.loads(old.output)["diagnostics"]["design_notes"]
    assert any("could not be read" in n and str(config) in n for n in notes)
