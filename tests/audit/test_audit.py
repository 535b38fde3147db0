"""The sizing paper's published presets and the audit of claims and boards (evalgauge.audit.published,
evalgauge.audit; the command: tests/cli/test_audit_command.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evalgauge import dstudy, vocabulary
from evalgauge.audit import audit
from evalgauge.audit.published import PRESETS, mdd95, preset
from evalgauge.components import VarianceComponents


def test_preset_names_are_the_vocabulary():
    assert tuple(PRESETS) == vocabulary.AUDIT_PRESETS


@pytest.mark.parametrize("name", list(PRESETS))
def test_each_preset_reproduces_printed_figures_it_did_not_use(name):
    # a figure printed to d decimals is reproduced when it lies within half a unit of its last digit of the
    # values the derivation takes over every rounding of its own printed inputs
    p = preset(name)
    assert p.checks
    for check in p.checks:
        lo, hi = p.check_range(check)
        half = check.figure.half_unit
        assert lo - half <= check.figure.value <= hi + half, (name, check.what, lo, hi)
    assert all(v >= 0 for v in p.values.values())


def test_mt_bench_preset_gives_the_papers_floor_and_its_verdict_on_the_median_claim():
    p = preset("mt-bench")
    assert round(mdd95(p.values, 30), 2) == 0.63
    assert round(mdd95(p.values, 80), 2) == 0.54  # sec. 5.6: "still 0.54 at MT-Bench's native 80 items"
    # the 17 MT-Bench improvements recovered from papers have median 0.17 (0-5 basis): below the floor at 30
    # items and at the native 80
    for items in (30, 80):
        result = audit(p.components(items=items), pd.DataFrame({"claim": ["median"], "delta": [0.17]}))
        row = result.claims.iloc[0]
        assert not row["exceeds_mdd"]
        assert row["mdd"] == pytest.approx(mdd95(p.values, items))
        assert row["p_inverted"] == pytest.approx(_phi(-0.17 / row["se"]))
        assert row["se"] == pytest.approx(np.sqrt(2 * dstudy.project(p.components(items=items)).sigma2_delta))
    # a claim on MT-Bench's 1-10 scale is converted by the ranges: 0.2 -> 0.11 on 0-5 (sec. 5.6)
    converted = audit(p.components(), pd.DataFrame({"claim": ["x"], "delta": [0.2]}), scale=(1, 10),
                      components_scale=p.scale)
    assert converted.claims.iloc[0]["delta"] == pytest.approx(0.2 * 5 / 9)


def _phi(x: float) -> float:
    from scipy import stats

    return float(stats.norm.cdf(x))


def test_board_pairs_use_each_systems_own_design():
    vc = VarianceComponents.from_values({"system": 0.05, "system:item": 0.3, "system:judge": 0.03,
                                         "system:item:judge": 0.2, "residual": 0.1},
                                        {"system": 4, "item": 50, "judge": 2}, 1, object="system")
    board = pd.DataFrame({"system": ["a", "b", "c", "d"], "score": [4.1, 3.2, 3.15, 2.0],
                          "items": [50, 200, 50, None], "judges": [1, 1, 3, None]})
    result = audit(vc, board)

    def delta(items, judges):
        return dstudy.project(vc, {"item": items, "judge": judges}, 1).sigma2_delta

    d = [delta(50, 1), delta(200, 1), delta(50, 3), delta(50, 2)]  # d: the components' own design
    pairs = result.pairs
    for k in range(3):
        assert pairs["se"].iloc[k] == pytest.approx(np.sqrt(d[k] + d[k + 1]), rel=1e-12)
        assert pairs["mdd"].iloc[k] == pytest.approx(1.959963984540054 * pairs["se"].iloc[k])
    # a pair is separable exactly when its difference exceeds the simultaneous critical value times its SE
    assert list(pairs["separable"]) == list(pairs["delta"].abs() > result.critical * pairs["se"])
    assert result.board["rank"].tolist() == [1, 2, 3, 4]
    assert (result.board["rank_low"] <= result.board["rank"]).all()
    assert (result.board["rank"] <= result.board["rank_high"]).all()


def test_a_board_inside_the_noise_cannot_rank_at_all():
    p = preset("mt-bench")
    board = pd.DataFrame({"system": [f"m{k}" for k in range(8)], "score": np.linspace(8.0, 7.6, 8)})
    result = audit(p.components(), board, scale=(1, 10), components_scale=p.scale)
    assert result.groups == 1 and result.sentences[0].startswith("This board cannot rank at all")
    assert (result.board["rank_low"] == 1).all() and (result.board["rank_high"] == 8).all()
    spread = pd.DataFrame({"system": ["a", "b", "c"], "score": [9.0, 6.0, 3.0]})
    clear = audit(p.components(), spread, scale=(1, 10), components_scale=p.scale)
    assert clear.pairs["separable"].all() and clear.groups == 3
    assert clear.board["rank_low"].tolist() == [1, 2, 3] == clear.board["rank_high"].tolist()
