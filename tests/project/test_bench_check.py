"""The regression guard's rules (bench/check.py): what fails, what a CHANGELOG line excuses, and a digest that
ignores what differs run to run but not a changed number."""

import json
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import check
import release

THEN = {"cpu_s": 2.0, "peak_mib": 200.0, "digest": "abc"}


def _now(**kw):
    return {"id": "case-a", "cpu_s": 2.0, "peak_mib": 200.0, "digest": "abc", **kw}


def test_a_slowdown_more_memory_or_changed_numbers_fail():
    assert check.verdict(_now(), THEN, set()) == []
    assert check.verdict(_now(cpu_s=2.9), THEN, set()) == []  # within 25% and 0.5 s
    assert "CPU" in check.verdict(_now(cpu_s=3.1), THEN, set())[0]
    assert "peak" in check.verdict(_now(peak_mib=300.0), THEN, set())[0]
    assert "numbers changed" in check.verdict(_now(digest="def"), THEN, set())[0]
    assert check.verdict(_now(digest="def"), THEN, {"case-a"}) == []  # named under Unreleased: explained
    assert check.verdict(_now(), None, set()) == ["new (no stored figures)"]
    assert check.verdict({"id": "case-a", "error": "exit 2: boom"}, THEN, set())[0].startswith("failed")


def test_the_digest_ignores_timings_and_paths_but_not_numbers():
    a = {"theta": {"estimate": 0.123456789, "se": 0.01}, "reml": {"seconds": 0.11}, "source": "/tmp/x/a.csv",
         "notes": ["REML criterion 3.2 (7 evaluations, 0.11 s) on /tmp/x/a.csv"]}
    b = json.loads(json.dumps(a))
    b["reml"]["seconds"], b["source"] = 0.57, "/tmp/y/a.csv"
    b["notes"] = ["REML criterion 3.2 (7 evaluations, 0.57 s) on /tmp/y/a.csv"]
    b["theta"]["estimate"] = 0.1234568  # below the 5 significant digits kept
    assert check.digest(json.dumps(a), []) == check.digest(json.dumps(b), [])
    b["theta"]["se"] = 0.0101
    assert check.digest(json.dumps(a), []) != check.digest(json.dumps(b), [])
    assert check.digest("a table for people", []) is None


def test_the_changelog_names_what_changed(tmp_path, monkeypatch):
    log = tmp_path / "CHANGELOG.md"
    log.write_text("# Changelog\n\n## Unreleased\n\n- `case-a`: a bug fixed.\n\n## 0.1.0\n\n- `case-b`: old.\n")
    monkeypatch.setattr(check, "CHANGELOG", log)
    assert check.unreleased_mentions() == {"case-a"}


def test_every_documented_command_and_real_file_is_a_case_with_a_stable_name(tmp_path):
    ids = [cid for cid, _, _ in check.cases(tmp_path)]
    assert len(ids) == len(set(ids)) >= 30
    assert any(i.startswith("doc-analyze-alpacaeval") for i in ids) and "real-alpacaeval-58-compare" in ids
    stored = json.loads(check.BASELINE.read_text())["cases"]
    missing = [i for i in ids if i not in stored]
    assert not missing, f"cases without stored figures (make bench-record): {missing}"


def test_a_case_is_judged_against_the_release_run_here_when_it_ran():
    stored = {"cpu_s": 1.0, "peak_mib": 150.0, "digest": "old"}
    here = {"cpu_s": 1.8, "peak_mib": 200.0, "digest": "abc"}  # a slower machine, another last digit
    now = _now(cpu_s=1.9, peak_mib=215.0, digest="abc", reference=here)
    base, label = check.against(now, stored)
    assert (base, label) == (here, "release here")
    assert check.verdict(now, base, set()) == []  # against the stored figures it would fail three times
    assert len(check.verdict(now, stored, set())) == 3
    failed = _now(reference={"error": "exit 2: no such option"})
    assert check.against(failed, stored) == (stored, "stored")
    assert check.against(_now(), stored) == (stored, "stored")


def test_the_release_source_comes_from_git_or_says_why_not(tmp_path):
    src, why = release.source_of("HEAD", tmp_path)
    assert why == "" and (src / "evalgauge" / "__init__.py").is_file()
    assert release.source_of("HEAD", tmp_path)[0] == src  # unpacked once
    src, why = release.source_of("0" * 40, tmp_path)
    assert src is None and "not in this clone" in why
    assert release.source_of(None, tmp_path) == (None, "the stored figures name no commit")


def test_measure_runs_both_sides_alternately_and_keeps_the_fastest(tmp_path, monkeypatch):
    calls = []

    def fake(argv, cwd, source=None):
        calls.append(source)
        cpu = 2.0 if source is None else 1.0
        return cpu + 0.1 * len(calls), 100.0, '{"x": 1}', 0, ""

    monkeypatch.setattr(check, "run_once", fake)
    release = tmp_path / "src"
    now = check.measure("case-a", ["analyze", "x.csv"], tmp_path, release)
    assert calls == [release, None] * 3  # the installed code writes last: later cases read its outputs
    assert now["cpu_s"] == 2.2 and now["reference"]["cpu_s"] == 1.1 and now["runs"] == 3
    assert now["digest"] == now["reference"]["digest"] is not None
    calls.clear()
    assert "reference" not in check.measure("case-a", ["analyze", "x.csv"], tmp_path) and calls == [None] * 3
