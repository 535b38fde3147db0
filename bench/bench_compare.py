"""`evalgauge compare` speed: 50 systems x 500 items x 5 judges with 2,000 draws (issue 10).

Target: under 2 s for the comparison including 2,000 draws (marginal and simultaneous rank sets, the naive
item bootstrap), the simultaneous critical value by Monte Carlo to its draw budget (its error printed) and
the adjacent pairs' own G-studies, the fit
excluded and timed beside it. The reference in the same process is the fit itself (balanced ANOVA).
Prints the median of 3 runs and whether the target is met.
"""

from __future__ import annotations

import statistics
import time

from evalgauge.compare import compare
from evalgauge.estimate import estimate_components
from evalgauge.simulate import simulate, sizing_preset

TARGET = 2.0


def main() -> None:
    spec = sizing_preset(systems=50, items=500, judges=5, replicates=1)
    frame = simulate(spec, seed=0)
    t0 = time.perf_counter()
    vc = estimate_components(frame, spec.design())
    t_fit = time.perf_counter() - t0
    times = []
    for seed in range(3):
        t0 = time.perf_counter()
        result = compare(frame, vc, n_boot=2000, seed=seed)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(f"compare: 50 x 500 x 5 ({len(frame):,} rows, {len(result.pairs):,} pairs), 2,000 draws: {med:.3f} s "
          f"(median of 3); the fit alone {t_fit:.3f} s ({med / t_fit:.1f}x)")
    crit = result.extra["critical"]
    share = 100 * crit["error"] / crit["value"]
    print(f"  simultaneous critical value {crit['value']:.4f} +- {crit['error']:.2g} ({share:.2f}%, "
          f"{crit['method']}, {crit['points']:,} draws)")
    print(f"  target < {TARGET:g} s: {'MET' if med < TARGET else 'NOT MET'}")


if __name__ == "__main__":
    main()
