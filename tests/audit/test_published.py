"""Published variance components reproduced from real data (Brennan 2001, lme4, mGENOVA)."""

import json

import numpy as np
import pandas as pd
import pytest

import evalgauge as eg
from conftest import FIXTURES, shared_file

BRENNAN = {
    # fixture: (estimate_anova options, {our component name: the fixture's key})
    "design1": (dict(facets="p,i"), {"p": "person", "i": "item", "residual": "person x item"}),
    "design2": (dict(facets="p,i", nest="p/i"), {"p": "person", "residual": "item:person"}),
    "design3": (dict(facets="p,i,o"), {"p": "person", "i": "i", "o": "o", "p:i": "person x i",
                                       "p:o": "person x o", "i:o": "i x o", "residual": "person x i x o"}),
    "design4": (dict(facets="p,t,r", nest="t/r"), {"p": "person", "t": "t", "t:r": "r:t",
                                                   "p:t": "person x t", "residual": "person x (r:t)"}),
}


@pytest.mark.parametrize("name", sorted(BRENNAN))
def test_brennan_synthetic_data(name):
    options, key = BRENNAN[name]
    expected = json.loads((FIXTURES / "brennan" / f"{name}_expected.json").read_text())
    result = eg.estimate_anova(eg.read(FIXTURES / "brennan" / f"{name}_data.csv"), score="score", **options)
    assert set(result.names) == set(key)
    for ours, theirs in key.items():
        c = result[ours]
        # Brennan prints 4 decimals: agreement to rounding.
        assert c.variance == pytest.approx(expected["variances_dict"][theirs], abs=5e-5)
        assert c.df == expected["deg_freedom_dict"][theirs]
        assert c.df * c.mean_square == pytest.approx(expected["ss_values_dict"][theirs], abs=5e-4)


def test_brennan_design3_mean_square_typo_is_theirs():
    # The fixture prints MS(p x o) = 1.3383, but its own SS/df is 12.05/9 = 1.3389.
    expected = json.loads((FIXTURES / "brennan" / "design3_expected.json").read_text())
    result = eg.estimate_anova(eg.read(FIXTURES / "brennan" / "design3_data.csv"), facets="p,i,o")
    assert expected["ss_values_dict"]["person x o"] / 9 == pytest.approx(1.33889, abs=1e-5)
    assert result["p:o"].mean_square == pytest.approx(1.33889, abs=1e-5)


def test_penicillin_matches_lme4():
    ref = json.loads((FIXTURES / "lme4" / "published_reference_values.json").read_text())["Penicillin"]
    result = eg.estimate_anova(eg.read(FIXTURES / "lme4" / "Penicillin.csv"), score="diameter", facets="plate,sample")
    reml = ref["REML_lme4"]["more_digits_lme4_2.0.1"]
    # Balanced with positive components: ANOVA is the exact REML optimum; lme4's
    # default stopping rule leaves ~1e-4 relative error on the 6-level sample term.
    assert result["plate"].variance == pytest.approx(reml["var_plate"], rel=2e-4)
    assert result["sample"].variance == pytest.approx(reml["var_sample"], rel=2e-4)
    assert result["residual"].variance == pytest.approx(reml["sigma"] ** 2, rel=2e-4)
    assert result["residual"].confounded_with == "plate:sample"
    assert result.grand_mean == pytest.approx(reml["intercept"], abs=1e-5)
    assert any("confounded" in n for n in result.notes)


def test_pastes_matches_lme4():
    ref = json.loads((FIXTURES / "lme4" / "published_reference_values.json").read_text())["Pastes"]["REML_lme4"]
    result = eg.estimate_anova(eg.read(FIXTURES / "lme4" / "Pastes.csv"), score="strength", facets="batch,cask",
                               nest="batch/cask", replicate="auto")
    assert result["batch"].variance == pytest.approx(ref["var_batch"], abs=5e-4)
    assert result["batch:cask"].variance == pytest.approx(ref["var_sample_cask_in_batch"], abs=5e-4)
    assert result["residual"].variance == pytest.approx(ref["var_residual"], abs=5e-4)
    assert result.grand_mean == pytest.approx(ref["intercept"], abs=5e-5)


@pytest.mark.parametrize("variable,columns,expected", [
    ("First", slice(0, 12), {"p": 4.40529, "i": 1.31260, "residual": 3.90950}),
    ("Second", slice(12, 24), {"p": 3.36027, "i": 0.94521, "residual": 2.64765}),
])
def test_mgenova_design1(variable, columns, expected):
    path = shared_file("mgenova_rajaratnam_sim", "Dat1.txt")
    wide = np.loadtxt(path)[:, columns]
    long = pd.DataFrame({
        "p": np.repeat(np.arange(wide.shape[0]), wide.shape[1]).astype(str),
        "i": np.tile(np.arange(wide.shape[1]), wide.shape[0]).astype(str),
        "score": wide.ravel(),
    })
    result = eg.estimate_anova(long, facets="p,i")
    for name, value in expected.items():
        assert result[name].variance == pytest.approx(value, abs=6e-6), name
