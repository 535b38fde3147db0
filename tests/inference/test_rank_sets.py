"""Rank sets (Mogstad, Romano, Shaikh & Wilhelm 2024) against their authors' package csranks 1.2.3 (CRAN
source, installed here with R CMD INSTALL; fixtures made by tests/fixtures/csranks/make_reference.R).

Both sides read their critical values from Monte Carlo draws, so a set whose bound sits at a decision's
edge can differ between any two runs: csranks was run with R = 40,000 draws and three seeds, and a set
that moved between its seeds is marked unstable. Every set csranks is stable about must equal ours.
"""

import json

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES
from evalgauge.inference.multiplicity import rank_sets

HERE = FIXTURES / "csranks"
REFERENCE = json.loads((HERE / "csranks_reference.json").read_text())


def _draws(cov: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    vals, vecs = np.linalg.eigh(cov)
    return np.random.default_rng(seed).standard_normal((n, cov.shape[0])) @ (vecs * np.sqrt(np.clip(vals, 0, None))).T


def _case(name):
    if name == "pisa2018_math":
        pisa = pd.read_csv(HERE / "pisa2018_math.csv")
        return pisa["math_score"].to_numpy(), np.diag(pisa["math_se"].to_numpy() ** 2), 40_000
    cor = pd.read_csv(HERE / "correlated.csv")
    return cor["mean"].to_numpy(), cor[[c for c in cor if c.startswith("cov")]].to_numpy(), 200_000


@pytest.mark.parametrize("name", ["pisa2018_math", "correlated"])
@pytest.mark.parametrize("kind", ["marginal", "simultaneous"])
def test_rank_sets_equal_csranks(name, kind):
    x, cov, n = _case(name)
    lo, hi = rank_sets(x, cov, _draws(cov, n), 0.95, simultaneous=kind == "simultaneous")
    ref = REFERENCE[name][kind]
    stable = np.array(ref["stable"])
    assert stable.sum() >= len(x) - 2
    assert (lo[stable] == np.array(ref["L"])[stable]).all() and (hi[stable] == np.array(ref["U"])[stable]).all()


def test_a_decided_pair_keeps_its_reverse_hypothesis_in_the_family():
    """System 0 is far above 1 and 2, whose difference is t = 2.1. Once (0, 1) and (0, 2) are decided, the
    family left is {(1, 2), (2, 1), (1, 0), (2, 0)}: its 95% quantile is 2.19 (the reverse hypotheses stay), so
    1 and 2 stay tied. Dropping the decided pairs in both directions would leave |t_12| alone, whose quantile
    is 1.96, and would separate them."""
    x = np.array([10.0, 0.0, -2.1 * np.sqrt(2)])
    cov = np.eye(3)
    z = _draws(cov, 400_000)
    four = np.column_stack([(z[:, a] - z[:, b]) / np.sqrt(2) for a, b in ((1, 2), (2, 1), (1, 0), (2, 0))])
    assert np.quantile(four.max(axis=1), 0.95) > 2.1 > np.quantile(np.abs(four[:, 0]), 0.95)
    lo, hi = rank_sets(x, cov, z, 0.95, simultaneous=True)
    assert lo.tolist() == [1, 2, 2] and hi.tolist() == [1, 3, 3]
