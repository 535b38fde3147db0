"""The simultaneous critical value: Genz-Bretz QMC (evalgauge.inference.mvt) against R's mvtnorm (stored values,
tests/fixtures/mvtnorm) and against the Monte Carlo quantile of 4,000 draws that compare() used.

For all pairs of 4, 8 and 12 systems, normal and t with 10 df: our value, its reported relative error
(target: below 0.1%), its difference from mvtnorm, and the 4,000-draw quantile's difference, with times.

Run: `python bench/bench_mvt.py`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "inference"), str(ROOT / "src")]  # test_mvt: the cases

from test_mvt import _pairs_correlation  # noqa: E402

from evalgauge.inference.mvt import max_t_critical  # noqa: E402


def main() -> None:
    fixture = json.loads((ROOT / "tests" / "fixtures" / "mvtnorm" / "critical_values.json").read_text())
    met = True
    print(f"{'p':>3} {'law':>6} {'QMC':>9} {'rel. error':>10} {'vs mvtnorm':>10} {'s':>6} {'4000 draws':>10} "
          f"{'vs mvtnorm':>10}")
    for case in fixture["cases"]:
        corr = _pairs_correlation(case["p"])
        for df, key in ((np.inf, "normal"), (10.0, "t10")):
            t0 = time.perf_counter()
            cv = max_t_critical(corr, df, fixture["level"])
            seconds = time.perf_counter() - t0
            rng = np.random.default_rng(0)
            # the draws compare() used: N(0, corr) (rank-deficient: by eigen-decomposition), over a chi scale
            w, v = np.linalg.eigh(corr)
            root = v * np.sqrt(np.clip(w, 0, None))
            z = rng.standard_normal((4000, len(corr))) @ root.T
            if np.isfinite(df):
                z /= np.sqrt(rng.chisquare(df, 4000) / df)[:, None]
            draws = float(np.quantile(np.abs(z).max(axis=1), fixture["level"]))
            ref = case[key]
            met &= cv.relative_error < 1e-3 and abs(cv.value / ref - 1) < 1e-3
            print(f"{case['p']:>3} {key:>6} {cv.value:9.5f} {100 * cv.relative_error:9.3f}% "
                  f"{100 * (cv.value / ref - 1):+9.3f}% {seconds:6.1f} {draws:10.5f} {100 * (draws / ref - 1):+9.3f}%")
    print(f"target: relative error below 0.1% and within 0.1% of mvtnorm: {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
