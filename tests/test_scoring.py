"""Planning the scoring method (TEE E.3) and item discrimination screening (sizing sec. 4, App. F)."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge.cli import main
from evalgauge.errors import DesignError
from evalgauge.scoring import scoring_study, screen_items


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


def test_scoring_errors_and_cli():
    with pytest.raises(DesignError, match="unknown condition"):
        scoring_study({"kapa": [1.0]}, reps=2)
    out = CliRunner().invoke(main, ["simulate", "scoring", "--prevalence", "0.5,0.05", "--reps", "5", "--json", "-"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)["results"]
    assert len(rows) == 2 and {"tau_likert", "tau_binary", "tau_pairwise"} <= set(rows[0])


def _pilot(seed=0, systems=12, items=40):
    rng = np.random.default_rng(seed)
    disc = np.where(np.arange(items) < items // 2, 1.5, 0.05)  # half the items separate systems, half do not
    ability = rng.standard_normal(systems)
    rows = []
    for i in range(items):
        for s in range(systems):
            for r in range(2):
                rows.append((f"s{s}", f"i{i:02d}", 3 + math.sqrt(disc[i]) * ability[s] + rng.normal(0, 0.5), r + 1))
    return pd.DataFrame(rows, columns=["system", "item", "score", "replicate"])


def test_screening_finds_the_discriminating_items_and_is_stable():
    frame = _pilot()
    result = screen_items(frame, keep=0.5, splits=100, seed=1)
    assert set(result.selected) == {f"i{i:02d}" for i in range(20)}
    assert result.split_half_rho > 0.5 and result.split_half_range[0] > 0
    noise = frame.assign(score=np.random.default_rng(2).normal(size=len(frame)))
    assert abs(screen_items(noise, keep=0.5, splits=100).split_half_rho) < 0.3  # nothing to find


def test_screen_cli_reports_what_screening_buys(tmp_path):
    path = tmp_path / "pilot.csv"
    _pilot().to_csv(path, index=False)
    out = CliRunner().invoke(main, ["screen", str(path), "--keep", "0.5", "--splits", "50", "--json", "-"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload["share_selected"]["system"] > payload["share_all"]["system"]
    assert len(payload["selected"]) == 20


def test_a_screening_is_a_result_with_its_fits_and_the_commands_json():
    import evalgauge as eg

    frame = _pilot()
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
