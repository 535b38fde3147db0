"""evalgauge inside Inspect AI (the ``inspect`` extra): a real eval written here with Inspect's offline
``mockllm`` provider (tests/inspect_logs.py: 2 systems x 20 samples x 3 epochs x a 3-grader ``collect`` panel),
the ``tee_interval`` metric against ``evalgauge analyze`` on the same rows, and the eval-set report hook loaded
by Inspect through the entry point alone. The slow tier installs inspect-ai; elsewhere these skip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

if os.environ.get("EVALGAUGE_INSPECT_REQUIRED"):
    import inspect_ai  # noqa: F401 - the slow tier installs it: fail, never skip
else:
    pytest.importorskip("inspect_ai", reason="inspect-ai is not installed (pip install -e '.[inspect]')")

from evalgauge.cli import main
from evalgauge.io import import_files

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))
from inspect_logs import EPOCHS, GRADERS, N_SAMPLES, SYSTEMS, write_panel_logs  # noqa: E402

KEYS = ("tee_mean", "tee_se", "tee_low", "tee_high", "naive_se")
THETA = ("estimate", "se", "low", "high", "naive_se")


def _metrics(log: Path) -> dict[str, float]:
    from inspect_ai.log import read_eval_log

    header = read_eval_log(str(log), header_only=True)
    assert header.status == "success"
    return {name: m.value for score in header.results.scores for name, m in score.metrics.items()}


def _analyze_theta(rows_file: Path) -> dict[str, float]:
    out = CliRunner().invoke(main, ["analyze", str(rows_file), "--json", "-"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)["theta"]


@pytest.fixture(scope="module")
def panel_logs(tmp_path_factory) -> list[Path]:
    from evalgauge.inspect_plugin import tee_interval

    return write_panel_logs(tmp_path_factory.mktemp("inspect") / "logs", metrics=[tee_interval()])


def test_a_real_panel_eval_imports_as_360_rows_with_its_graders_named(panel_logs):
    frame = import_files("inspect", [str(p) for p in panel_logs])
    assert len(frame) == len(SYSTEMS) * N_SAMPLES * EPOCHS * len(GRADERS) == 360
    assert sorted(frame["judge"].unique()) == [f"mockllm/{g}" for g in GRADERS]
    assert frame["score"].notna().all()


def test_the_metric_equals_analyze_on_the_same_rows(panel_logs, tmp_path):
    for log in panel_logs:
        shown = _metrics(log)
        rows = tmp_path / f"{log.stem}.csv"
        out = CliRunner().invoke(main, ["import", "inspect", str(log), "-o", str(rows)])
        assert out.exit_code == 0, out.output
        theta = _analyze_theta(rows)
        for key, field in zip(KEYS, THETA, strict=True):
            assert shown[key] == pytest.approx(theta[field], rel=1e-9, abs=1e-12), key
        assert shown["tee_low"] < shown["tee_mean"] < shown["tee_high"]


def test_the_metrics_rows_drop_a_panel_that_lost_a_vote_and_say_so(caplog):
    from inspect_ai.scorer import SampleScore, Score

    from evalgauge.inspect_plugin import score_rows, tee_interval

    scores = [SampleScore(score=Score(value=["C", "I", "C"][: 3 - (k == 4)]), sample_id=f"s{k % 5}")
              for k in range(10)]
    frame, short = score_rows(scores)
    assert short == 1 and len(frame) == 27 and set(frame["judge"]) == {"grader 1", "grader 2", "grader 3"}
    assert sorted(frame["replicate"].unique()) == [1, 2]  # two epochs of each sample, in order
    with caplog.at_level("WARNING"):
        result = tee_interval()(scores)
    assert "1 samples' panels lost a grader's vote" in caplog.text
    assert set(result) == set(KEYS)


def test_the_eval_set_hook_is_loaded_by_inspect_alone_and_writes_the_report(tmp_path):
    """A process that never imports evalgauge: Inspect finds the hook through the entry point."""
    log_dir = tmp_path / "set"
    script = (f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
              "from inspect_logs import run_panel_eval_set\n"
              f"assert run_panel_eval_set({str(log_dir)!r})\n")
    env = {**os.environ, "EVALGAUGE_INSPECT_REPORT": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((log_dir / "evalgauge.json").read_text())
    html = (log_dir / "evalgauge.html").read_text()
    assert "mockllm/sys-a" in html and "mockllm/sys-b" in html
    systems = {row["system"] for row in report["comparison"]["systems"]}
    assert systems == {"mockllm/sys-a", "mockllm/sys-b"}
    # the folder still imports as its logs alone (the report's files are not logs)
    assert len(import_files("inspect", [str(log_dir)])) == 360


def test_without_the_variable_the_hook_writes_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "EVALGAUGE_INSPECT_REPORT"}
    script = (f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
              "from inspect_logs import run_panel_eval_set\n"
              f"assert run_panel_eval_set({str(tmp_path / 'set')!r})\n")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (tmp_path / "set" / "evalgauge.json").exists()


def test_one_scorer_one_epoch_gets_analyzes_single_run_interval_not_nan(tmp_path):
    """The commonest eval (one scorer, one epoch) has no judge or call variance to fit: the metric gives the
    single-run interval `analyze` gives for the same rows (a fit of the items alone once left it NaN)."""
    from inspect_ai.scorer import SampleScore, Score

    from evalgauge.inspect_plugin import score_rows, tee_interval

    scores = [SampleScore(score=Score(value="C" if k % 3 else "I"), sample_id=f"s{k}", scorer="match")
              for k in range(30)]
    shown = tee_interval()(scores)
    frame, _ = score_rows(scores)
    frame.to_csv(tmp_path / "rows.csv", index=False)
    out = CliRunner().invoke(main, ["analyze", str(tmp_path / "rows.csv"), "--json", "-"])
    one = json.loads(out.stdout)["single_run"]
    assert shown["tee_mean"] == pytest.approx(one["mean"], rel=1e-12)
    assert (shown["tee_se"], shown["tee_low"], shown["tee_high"], shown["naive_se"]) == pytest.approx(
        (one["se"], one["low"], one["high"], one["se_items"]), rel=1e-12)
