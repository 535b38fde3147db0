"""REML parametric bootstrap: 800 resamples of the unbalanced sizing design (issue 16's target: under 60 s
on 2 cores), with the percentile intervals beside those of a serial run of the same draws.

Run: `make bench` or `python bench/bench_reml_bootstrap.py [--resamples 800]`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from reml_designs import SIZING_FORMULA  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--resamples", type=int, default=800)
    args = parser.parse_args()
    import pandas as pd

    from evalgauge.estimate import estimate_components
    from evalgauge.estimate.reml import bootstrap_workers

    frame = pd.read_parquet(ROOT / "tests" / "fixtures" / "reml" / "sizing.parquet")
    t = time.perf_counter()
    vc = estimate_components(frame, formula=SIZING_FORMULA, n_boot=args.resamples, seed=1)
    seconds = time.perf_counter() - t
    workers = bootstrap_workers(args.resamples)
    print(f"REML parametric bootstrap, sizing design ({len(frame):,} rows, unbalanced): {args.resamples} resamples "
          f"in {seconds:.1f} s with {workers} process(es), {vc.intervals.get('failed', 0)} failed refits")
    os.environ["EVALGAUGE_WORKERS"] = "1"
    n_check = min(args.resamples, 100)
    t = time.perf_counter()
    serial = estimate_components(frame, formula=SIZING_FORMULA, n_boot=n_check, seed=1)
    per = (time.perf_counter() - t) / n_check
    same = np.allclose(serial.draws, vc.draws[:n_check], rtol=0, atol=1e-9 * np.abs(vc.draws).max())
    print(f"  serial: {per:.3f} s per resample; the first {n_check} draws equal the parallel run's: {same}")
    for c in vc.components[:4]:
        print(f"  {c.name:14s} {c.variance:.5f}  95% [{c.ci_low:.5f}, {c.ci_high:.5f}]")
    ok = seconds < 60
    print(f"  target: {args.resamples} resamples under 60 s on 2 cores: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
