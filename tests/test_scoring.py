"""Planning the scoring method (TEE E.3) and item discrimination screening (sizing sec. 4, App. F)."""

import json
import math

import numpy as np
import pytest

from evalgauge.errors import DesignError
from evalgauge.scoring import scoring_study, screen_items
from pilots import screening_pilot


def _z(frame, a, b, arm_a, arm_b=None):
    """z statistic of the difference of two conditions' mean tau (independent replicates)."""
    arm_b = arm_b or arm_a
    d = frame.loc[a, f"tau_{arm_a}"] - frame.loc[b, f"tau_{arm_b}"]
    se = math.hypot(frame.loc[a, f"mc_se_{arm_a}"], frame.loc[b, f"mc_se_{arm_b}"])
    return d / se


def test_binary_collapses_at_low_prevalence_pairwise_does_not():
    frame = scoring_study({"prevalence": [0.5, 0.005]}, reps=40, seed=1).results.set_index("prevalence")
    assert _z(frame, 0.5, 0.005, "binary") > 4.5  # TEE: 0.60 at 50 % to 0.06 at 0.05 %
    assert abs(_z(frame, 0.5, 0.005, "pairwise")) < 4.5  # pairwise is not affected by prevalence


@pytest.mark.slow
def test_compression_and_coarse_scales_hurt_likert_not_pairwise():
    frame = scoring_study({"kappa": [1.0, 0.3], "points": [7, 3]}, reps=40, seed=2).results \
        .set_index(["kappa", "points"])
    assert _z(frame, (1.0, 7), (0.3, 3), "likert") > 4.5
    assert abs(_z(frame, (1.0, 7), (0.3, 3), "pairwise")) < 4.5


@pytest.mark.slow
def test_anchoring_and_scale_use_cancel_in_pairwise():
    frame = scoring_study({"sigma_anchor": [0.0, 1.5], "sigma_slope": [0.0, 1.0]}, reps=40, seed=3) \
        .results.set_index(["sigma_anchor", "sigma_slope"])
    assert _z(frame, (0.0, 0.0), (1.5, 1.0), "likert") > 4.5
    assert abs(_z(frame, (0.0, 0.0), (1.5, 1.0), "pairwise")) < 4.5


def test_an_unknown_condition_is_refused():
    with pytest.raises(DesignError, match="unknown condition"):
        scoring_study({"kapa": [1.0]}, reps=2)


def test_screening_finds_the_discriminating_items_and_is_stable():
    frame = screening_pilot()
    result = screen_items(frame, keep=0.5, splits=100, seed=1)
    assert set(result.selected) == {f"i{i:02d}" for i in range(20)}
    assert result.split_half_rho > 0.5 and result.split_half_range[0] > 0
    noise = frame.assign(score=np.random.default_rng(2).normal(size=len(frame)))
    assert abs(screen_items(noise, keep=0.5, splits=100).split_half_rho) < 0.3  # nothing to find


def test_a_screening_is_a_result_with_its_fits_and_the_commands_json():
    import evalgauge as eg

    frame = screening_pilot()
    result = screen_items(frame, keep=0.5, splits=30, seed=1)
    assert result.splits == 30 and result.to_frame().equals(result.per_item)
    assert result.shares("all") is None and "components_all" not in result.to_dict()
    kept = frame[frame["item"].isin(result.selected)]
    both = result.with_components(eg.fit(frame).components, "no fit: one item")
    out = both.to_dict()
    assert list(out) == ["threshold", "selected", "split_half_rho", "split_half_range", "per_item",
                         "components_all", "share_all", "components_selected"]
    assert out["components_selected"] == {"unavailable": "no fit: one item"} and both.shares("selected") is None
    vc = eg.fit(kept).components
    fitted = result.with_components(eg.fit(frame).components, vc)
    assert fitted.shares("selected") == {c.name: vc.share(c.name) for c in vc.components}
    assert json.loads(fitted.to_json())["share_selected"]["system"] == pytest.approx(vc.share("system"))
