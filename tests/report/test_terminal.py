"""The terminal renderers (report/terminal.py): each takes its typed result and renders what it holds,
computing nothing itself."""


import pandas as pd
import pytest
from rich.console import Console

import evalgauge as eg
from conftest import FIXTURES, ROOT
from evalgauge.analysis import gstudy
from evalgauge.analysis.gstudy import ComponentsSummary, components_summary, summarize_components
from evalgauge.report.terminal import print_components


@pytest.fixture(scope="module")
def penicillin():
    frame = pd.read_csv(FIXTURES / "lme4" / "Penicillin.csv")
    return eg.fit(frame, score="diameter", facets=["plate", "sample"], object="sample").components


def _text(render) -> str:
    console = Console(record=True, width=160)
    render(console)
    return console.export_text()


def test_the_summary_is_typed_and_its_json_is_the_commands(penicillin):
    summary = summarize_components(penicillin)
    assert isinstance(summary, ComponentsSummary) and summary.theta is not None
    assert summary.to_dict() == components_summary(penicillin)
    assert set(summary.shares) == {c.name for c in penicillin.components}
    frame = summary.to_frame()
    assert list(frame["component"]) == [c.name for c in penicillin.components]
    assert frame["share_var_theta"].notna().any()


def test_print_components_renders_the_summary_without_computing_it(penicillin, monkeypatch):
    summary = summarize_components(penicillin)

    def refuse(*args, **kwargs):
        raise AssertionError("the renderer computed a summary")

    for name in ("summarize_components", "components_summary", "theta_interval", "object_interval"):
        monkeypatch.setattr(gstudy, name, refuse)
    text = _text(lambda c: print_components(summary, c))
    assert "Variance components (" in text and "sample" in text and "plate" in text
    for c in penicillin.components:
        share = summary.shares[c.name]
        if share is not None:
            assert f"{100 * share:.1f}%" in text
    assert "theta-hat" in text


def test_a_missing_theta_interval_is_said_with_its_reason(penicillin):
    summary = summarize_components(penicillin)
    said = "theta-hat's interval rests on 0.5 degree(s) of freedom (Satterthwaite): more levels"
    blank = ComponentsSummary(penicillin, None, said, None, summary.shares)
    text = _text(lambda c: print_components(blank, c))
    assert "theta-hat: no interval:" in text and "0.5 degree(s)" in text
    assert blank.to_dict()["theta"] == {"unavailable": said}


def test_print_preset_renders_the_preset_and_its_json_carries_the_same_floors():
    from evalgauge.audit.published import preset
    from evalgauge.report.terminal import print_preset

    chosen = preset("mt-bench")
    floors = chosen.floors()
    assert floors["ceiling"] == pytest.approx(0.6, abs=5e-3) and floors["mdd_30_items"] == pytest.approx(0.63, abs=5e-3)
    payload = chosen.to_dict()
    assert payload["floors"] == floors
    assert all(lo <= row["reproduced"] <= hi for row in payload["checks"] for lo, hi in [row["range_from_rounding"]])
    text = _text(lambda c: print_preset(chosen, c))
    assert f"{floors['mdd_30_items']:.3g} at 30 items" in text and text.count("Reproduces") == len(chosen.checks)


def test_print_plan_renders_the_typed_plan():
    from evalgauge.components import VarianceComponents
    from evalgauge.dstudy import plan
    from evalgauge.report.terminal import print_plan

    vc = VarianceComponents.from_values({"system": 0.08, "system:judge": 0.01, "system:item": 0.3, "residual": 0.2},
                                        {"system": 12, "item": 100, "judge": 2}, 1, object="system")
    out = plan(vc, {"item": [100, 500], "judge": [1, 3]}, target_erho2=0.8, budget=50, prices={"*": 0.01},
               best_of=5)
    text = _text(lambda c: print_plan(out, c))
    assert f"E rho^2 = {out.ceiling.erho2:.4g}" in text and f"Best design within {out.budget.budget:g}" in text
    assert "Best-of-5 gaming surface" in text and all(str(r) in text for r in out.requirements)
    assert text.count("\n") > len(out.designs)


def test_print_analysis_renders_the_analysis_it_is_given(monkeypatch):
    from evalgauge.report.terminal import print_analysis
    from evalgauge.simulate import simulate, sizing_preset

    fitted = eg.fit(simulate(sizing_preset(systems=4, items=12, judges=3, replicates=2), seed=3), object="system")
    analysis = fitted.analysis()
    summary = summarize_components(analysis.components, analysis.bounds)
    monkeypatch.setattr(gstudy, "summarize_components", lambda *a, **k: pytest.fail("the renderer summarised"))
    text = _text(lambda c: print_analysis(analysis, summary, c))
    assert "Variance components (" in text and "Single-factor interventions" in text
    assert "Reporting checklist (TEE Table 15): " in text
    for r in analysis.interventions.to_dict(orient="records"):
        assert r["intervention"] in text


def test_the_effects_are_a_typed_result_the_renderers_share():
    from evalgauge.analysis.gstudy import EffectsSummary
    from evalgauge.report.terminal import print_effects
    from evalgauge.simulate import simulate, sizing_preset

    analysis = eg.fit(simulate(sizing_preset(systems=4, items=12, judges=3, replicates=2), seed=3),
                      object="system").analysis()
    effects = analysis.effects
    assert isinstance(effects, EffectsSummary) and analysis.to_dict()["effects"] == effects.to_dict()
    assert set(effects.to_frame()["term"]) >= {"judge"} and effects.qq and effects.residuals["cells"] > 0
    text = _text(lambda c: print_effects(effects, c))
    judges = effects.levels[effects.levels["term"] == "judge"]
    assert "Effects: conditional modes" in text and all(str(level) in text for level in judges["level"])
    if effects.disagreed_items:
        assert f"{effects.disagreed_items[0]['item']} {effects.disagreed_items[0]['spread']:.3g}" in text
    assert _text(lambda c: print_effects(None, c)) == ""


def test_missing_answers_render_from_the_typed_result_worst_first():
    import numpy as np

    from evalgauge.analysis.diagnostics import RunDiagnostics, diagnose, missing_answers
    from evalgauge.report.terminal import print_missing_answers

    rng = np.random.default_rng(3)
    rows = [{"item": f"q{k}", "judge": f"j{k % 2}", "variant": "v", "system": s, "temperature": 0.0, "replicate": 1,
             "position": "", "completion": "Score: 3", "model": "m", "response_id": f"r{s}{k}",
             "score": None if rng.random() < rate else 3.0, "parse_error": None, "finish_reason": "stop",
             "finished_at": float(k)} for s, rate in (("a", 0.05), ("b", 0.4)) for k in range(80)]
    calls = pd.DataFrame(rows)
    missing = missing_answers(calls)
    text = _text(lambda c: print_missing_answers(missing, c))
    worst = missing.table.assign(rate=lambda f: 1 - f["scored"] / f["calls"]).sort_values("rate").iloc[-1]
    assert "Calls without a score, by judge x variant x system" in text and f"{100 * worst['rate']:.1f}%" in text
    assert f"{missing.unscored} of {missing.calls} stored calls have no score" in text
    run = RunDiagnostics(diagnose(calls), missing, notes=("a note from the record",))
    payload = run.to_dict()
    assert payload["missing_answers"] == missing.to_dict() and payload["design_notes"][-1] == "a note from the record"
    assert run.warnings == run.integrity.warnings and "within_call_spread" not in payload


def test_print_pairwise_renders_the_analysis_and_the_summary_it_is_given():
    import numpy as np

    from evalgauge.analysis.pairwise import analyze_pairwise
    from evalgauge.data import as_judgments
    from evalgauge.report.terminal import print_pairwise

    rng = np.random.default_rng(0)
    systems = ["a", "b", "c", "d"]
    rows = []
    for k in range(1200):
        i, j = rng.choice(4, 2, replace=False)
        win = rng.random() < 1 / (1 + np.exp(-0.4 * (i - j)))
        rows.append({"model_a": systems[i], "model_b": systems[j], "winner": "model_a" if win else "model_b",
                     "item": f"q{k % 40}", "judge": f"j{k % 2}"})
    result = analyze_pairwise(as_judgments(pd.DataFrame(rows)), n_boot=20, components=False)
    text = _text(lambda c: print_pairwise(result, None, c))
    assert "Bradley-Terry (1200 judgments, 4 systems" in text and "Variance components" not in text
    for system in systems:
        assert system in text


def test_the_arena_studies_render_from_their_typed_result_not_the_json():
    from battles import arena_log
    from evalgauge.analysis.arena import ArenaStudies
    from evalgauge.analysis.pairwise import analyze_pairwise
    from evalgauge.data import as_judgments
    from evalgauge.report.terminal import print_arena_studies, print_pairwise

    result = analyze_pairwise(as_judgments(arena_log()), n_boot=30, seed=1, human="human", components=False)
    studies = result.studies
    assert isinstance(studies, ArenaStudies) and result.payload["arena_studies"] == studies.to_dict()
    result.payload.pop("arena_studies")  # the renderer reads the typed result, not the JSON
    text = " ".join(_text(lambda c: print_pairwise(result, None, c)).split())  # titles wrap
    assert f"over {studies.n_configurations} configurations (judge x variant x order; 30 resamples each)" in text
    assert "by the closed form E[max of K] x the configurations' SD" in text  # words, not a markup tag
    assert f"single cell {studies.ratios['single_cell_over_naive']:.2f}x" in text
    assert f"best of K = {studies.gaming['k']} configurations" in text
    first = studies.agreement.iloc[0]
    assert "Agreement with the human votes" in text and f"{100 * first.per_judgment:.1f}%" in text
    for system in studies.se["system"]:
        assert str(system) in text
    assert _text(lambda c: print_arena_studies(None, c)) == ""


def test_print_glmm_renders_the_lpm_summary_it_is_given(monkeypatch):
    import numpy as np

    from evalgauge.report.terminal import print_glmm

    rng = np.random.default_rng(3)
    rows = [(f"s{s}", f"i{i}", f"j{j}") for s in range(4) for i in range(25) for j in range(3)]
    frame = pd.DataFrame(rows, columns=["system", "item", "judge"])
    frame["score"] = (rng.random(len(frame)) < 0.3 + 0.1 * frame["system"].str[1].astype(int)).astype(int)
    fitted = eg.fit(frame, score="score", facets=["system", "item", "judge"], object="system")
    check = fitted.glmm()
    summary = summarize_components(check.lpm)
    monkeypatch.setattr(gstudy, "summarize_components", lambda *a, **k: pytest.fail("the renderer summarised"))
    text = _text(lambda c: print_glmm(check, summary, c))
    assert "Robustness check for binary scores" in text and "GLMM:" in text
    for name in check.table["component"]:
        assert name in text


def test_print_pairwise_reads_the_typed_fields_not_the_json():
    """Weighted win shares, the position bias, the human agreement and the win indicators' MDD and ceiling are
    fields of the analysis: the text is the same with the JSON payload emptied."""
    import numpy as np

    from evalgauge.analysis.pairwise import analyze_pairwise
    from evalgauge.data import as_judgments
    from evalgauge.report.terminal import print_pairwise

    rng = np.random.default_rng(2)
    systems = ["a", "b", "c"]
    rows = []
    for k in range(900):
        i, j = rng.choice(3, 2, replace=False)
        win = rng.random() < 1 / (1 + np.exp(-0.5 * (i - j)))
        rows.append({"model_a": systems[i], "model_b": systems[j], "winner": "model_a" if win else "model_b",
                     "item": f"q{k % 30}", "judge": f"j{k % 3}", "weight": 1 + k % 2,
                     "human": "model_a" if rng.random() < 0.5 else "model_b"})
    result = analyze_pairwise(as_judgments(pd.DataFrame(rows)), n_boot=20, human="human", components=True)
    assert result.win_shares is not None and result.position is not None and result.human is not None
    assert result.projection is not None and result.ceiling is not None
    payload = result.payload
    assert payload["mdd95_win_rate_points"] == 100 * result.projection.mdd95
    assert payload["ceiling"] == result.ceiling.erho2 and payload["human_agreement"] == result.human
    assert payload["weighted_win_share"] == result.win_shares.to_dict(orient="records")
    summary = summarize_components(result.components)
    text = _text(lambda c: print_pairwise(result, summary, c))
    for said in ("Weighted win share", "Slot-A advantage", "Agreement with the human votes", "MDD95",
                 "single-judge ceiling"):
        assert said in text
    result.payload = {}
    assert _text(lambda c: print_pairwise(result, summary, c)) == text


def test_print_screening_renders_the_typed_screening():
    from evalgauge.report.terminal import print_screening
    from evalgauge.scoring import screen_items
    from pilots import screening_pilot

    frame = screening_pilot()
    screening = screen_items(frame, keep=0.5, splits=40, seed=2)
    alone = " ".join(_text(lambda c: print_screening(screening, c)).split())  # lines wrap
    assert f"{len(screening.selected)} of {len(screening.per_item)} items kept" in alone and "40 splits" in alone
    assert "of the variance on all items" not in alone  # no fits: no shares
    kept = frame[frame["item"].isin(screening.selected)]
    fitted = screening.with_components(eg.fit(frame).components, eg.fit(kept).components)
    text = " ".join(_text(lambda c: print_screening(fitted, c)).split())
    share = fitted.shares("all")["system"]
    assert f"system: {100 * share:.1f}% of the variance on all items" in text


def test_print_single_run_renders_the_typed_interval():
    import numpy as np

    from evalgauge.api import single_run
    from evalgauge.report.terminal import print_single_run

    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"system": "m1", "item": [f"q{i}" for i in range(60)], "score": rng.normal(5, 1, 60)})
    result = single_run(frame)
    text = " ".join(_text(lambda c: print_single_run(result, c)).split())
    assert f"One run: mean {result.mean:.4g} over 60 items, one call each" in text
    assert f"[{result.low:.4g}, {result.high:.4g}]" in text and "nothing to compare it with" in text
    for unmeasured in result.unmeasured:
        assert " ".join(unmeasured.split())[:40] in text


def test_a_runs_summary_and_an_adaptive_run_render_from_their_results():
    pytest.importorskip("aiohttp")
    from evalgauge.analysis.diagnostics import diagnose
    from evalgauge.collect.adaptive import AdaptiveResult, Stage
    from evalgauge.collect.runner import RunSummary
    from evalgauge.planning import StageDesign, Target
    from evalgauge.report.terminal import print_adaptive, print_run

    summary = RunSummary(planned=12, already_done=4, completed=8, retries=1, cost_usd=0.0125, seconds=2.5,
                         notes=["a note from the run"])
    diagnostics = diagnose(pd.DataFrame())  # nothing stored yet: no table, a warning
    text = " ".join(_text(lambda c: print_run(summary, diagnostics, "run.sqlite", ["a config note"], c)).split())
    assert ("run.sqlite: 8 calls made now, 4 already there, 0 failed after retries (1 retries), of 12 planned; "
            "cost $0.0125; 2.5 s.") in text
    assert "note: a note from the run" in text and "note: a config note" in text
    assert "warning: no completed calls" in text and "Integrity by judge" not in text
    stage = Stage("pilot", StageDesign(("q1", "q2"), ("j1",), ("v",), 2), 8, 0.0125, achieved=0.91)
    result = AdaptiveResult(Target("mdd95", 0.8), [stage], "unreachable", "the pool holds too few items")
    text = " ".join(_text(lambda c: print_adaptive(result, c)).split())
    assert ("pilot: 2 items x 1 judge(s) x 1 variant(s) x 2 replicate(s); 8 calls sent; $0.0125 spent in all; "
            "0.91 after it") in text and "unreachable: the pool holds too few items" in text


def test_a_dry_run_and_an_adaptive_dry_run_render_from_their_plans():
    from evalgauge.collect.adaptive import AdaptivePlan
    from evalgauge.collect.runner import RunPlan
    from evalgauge.planning import StageDesign, Target
    from evalgauge.report.terminal import print_adaptive_plan, print_run_plan

    plan = RunPlan("run.toml", "run.sqlite", 12, 4, 8, 2, 0.5, 0.75, 1.0, False, ["priced at the batch price"],
                   [{"judge": "j1", "requests": 1200, "worst_case_usd": 0.75}])
    text = " ".join(_text(lambda c: print_run_plan(plan, ["a config note"], c)).split())
    assert ("run.toml: 12 judge calls planned, 4 stored, 8 to send (+2 generations); worst-case cost $0.7500 on top "
            "of $0.5000 spent; budget $1: the run will stop at the cap before finishing.") in text
    assert "batch of judge 'j1': 1,200 requests, worst case $0.7500 at the batch price" in text
    assert "note: priced at the batch price note: a config note" in text
    unbounded = RunPlan("run.toml", "run.sqlite", 12, 0, 12, 0, 0.0, 0.1, None, True, [])
    assert "no budget_usd cap." in _text(lambda c: print_run_plan(unbounded, [], c))
    assert "batches" not in unbounded.to_dict() and unbounded.to_dict()["budget_usd"] is None
    adaptive = AdaptivePlan(Target("mdd95", 0.5), StageDesign(("q1", "q2"), ("j1", "j2"), ("v",), 2), 10,
                            "degrees of freedom: items 1, judges 1", unbounded)
    text = " ".join(_text(lambda c: print_adaptive_plan(adaptive, c)).split())
    assert ("run.toml: adaptive run to MDD <= 0.5. Pilot: 2 of 10 items x 2 judge(s) x 1 variant(s) x 2 "
            "replicate(s) = 12 calls (0 stored), worst-case $0.1000; degrees of freedom: items 1, judges 1.") in text
    payload = adaptive.to_dict()
    assert payload["target"] == "MDD <= 0.5" and payload["pilot"] == {
        "items": 2, "judges": ["j1", "j2"], "variants": ["v"], "replicates": 2,
        "df": "degrees of freedom: items 1, judges 1"}
    assert {k: v for k, v in payload.items() if k not in ("target", "pilot")} == unbounded.to_dict()


def test_labels_that_look_like_markup_print_as_written_on_any_console():
    """A name like "judge [beta]" is data: on a Python caller's console with rich markup on, cells, titles and
    sentences keep it (the command line's console has markup off)."""
    from evalgauge.collect.runner import RunPlan
    from evalgauge.report.terminal import as_text, new_table, print_run_plan

    console = Console(record=True, width=200, markup=True)
    plan = RunPlan("run [v2].toml", "run.sqlite", 2, 0, 2, 0, 0.0, 0.1, None, True, ["note on [bold]x[/bold]"],
                   [{"judge": "judge [beta]", "requests": 2, "worst_case_usd": 0.1}])
    print_run_plan(plan, ["[red]config[/red] note"], console)
    table = new_table(title="D-study (object of measurement: system [v2])")
    table.add_column("system [c]")
    table.add_row("model [beta]")
    as_text(console).print(table)
    text = console.export_text()
    for said in ("run [v2].toml:", "judge 'judge [beta]'", "note: note on [bold]x[/bold]",
                 "note: [red]config[/red] note", "system [v2]", "system [c]", "model [beta]"):
        assert said in text, said
    wrapped = as_text(console)
    assert as_text(wrapped) is wrapped  # a renderer handing its console on does not wrap it twice


def test_the_audit_prints_a_systems_name_without_an_escape(tmp_path):
    from click.testing import CliRunner

    from evalgauge.cli import main

    board = pd.read_csv(ROOT / "examples" / "audit" / "alpacaeval2_leaderboard.csv").head(6)
    board.loc[0, "system"] = "model [beta]"
    board.to_csv(tmp_path / "board.csv", index=False)
    out = CliRunner().invoke(main, ["audit", str(tmp_path / "board.csv"), "--preset", "pairwise", "--scale", "0-100"],
                             env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "model [beta]" in out.output and "\\[beta]" not in out.output


def test_every_renderer_prints_text_as_text_and_titles_through_new_table():
    import ast
    import inspect

    from evalgauge.report import studies, terminal

    for module in (terminal, studies):
        tree = ast.parse(inspect.getsource(module))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith(("print_", "_print_")):
                first = [n for n in node.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
                assert "as_text(" in ast.unparse(first[0]), f"{module.__name__}.{node.name}: start with as_text"
        titled = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Table"
                  and any(k.arg == "title" for k in n.keywords)]
        assert len(titled) <= (1 if module is terminal else 0), "a table titled without new_table"
