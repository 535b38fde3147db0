"""Labels from the data reach the terminal, the HTML report and the figures as text, never as control."""

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge.cli import main
from evalgauge.display import plot_label, shown

HOSTILE = ["m\x1b]0;pwned\x07\x1b[2J-1", "evil\u202eabc", "$\\frac{$", "x" * 10_000, "plain"]


def _data(tmp_path, systems):
    rng = np.random.default_rng(5)
    rows = [(s, f"i{i}", f"j{j}", float(k + rng.normal())) for k, s in enumerate(systems) for i in range(10)
            for j in range(2)]
    path = tmp_path / "d.csv"
    pd.DataFrame(rows, columns=["system", "item", "judge", "score"]).to_csv(path, index=False)
    return path


def test_shown_makes_controls_visible_and_keeps_plain_text():
    assert shown("a\x1b[2Jb\u202ec\n") == "a\\x1b[2Jb\\u202ec\n"
    assert shown("Ünïcode ok, tabs\tand newlines\n") == "Ünïcode ok, tabs\tand newlines\n"
    assert len(plot_label("y" * 10_000)) == 48


@pytest.mark.slow
def test_hostile_labels_in_the_terminal_the_report_and_the_figures(tmp_path):
    data = _data(tmp_path, HOSTILE)
    report = tmp_path / "r.html"
    out = CliRunner().invoke(main, ["analyze", str(data), "--report", str(report)])
    assert out.exit_code == 0, out.output
    for text in (out.output, report.read_text()):
        assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert "\\x1b]0;pwned" in out.output and "evil\\u202eabc" in out.output
    assert report.stat().st_size < 5_000_000


@pytest.mark.slow
def test_the_leaderboard_says_how_many_rows_it_shows(tmp_path):
    data = _data(tmp_path, [f"s{k:02d}" for k in range(45)])
    out = CliRunner().invoke(main, ["compare", str(data)])
    assert out.exit_code == 0, out.output
    assert "the first 40 of 45 by rank" in out.output
