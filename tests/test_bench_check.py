"""The regression guard's rules (bench/check.py): what fails, what a CHANGELOG line excuses, and a digest that
ignores what differs run to run but not a changed number."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import check  # noqa: E402

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
