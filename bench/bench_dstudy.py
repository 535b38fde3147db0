"""Parametric bootstrap speed: 800 resamples of the 42 x 30 x 9 x 3 design and every derived number.

Target (issue 4): under 1 s for the 800 resamples with the derived numbers
(E rho^2, Phi, MDD, the single-judge ceiling and its MDD floor, judges needed,
P(ceiling >= 0.8)). Balanced ANOVA draws the mean squares from their scaled
chi-square laws, so no data are resimulated. Prints the time, median of 5 runs,
and whether the target is met. For contrast it also times the REML route
(simulate cell statistics and refit) on the same data for 20 resamples.
"""

from __future__ import annotations

import statistics
import time

from evalgauge.estimate import estimate_components
from evalgauge.inference import bootstrap_derived
from evalgauge.simulate import simulate, sizing_preset

TARGET = 1.0


def main() -> None:
    spec = sizing_preset(systems=42, items=30, judges=9, replicates=3)
    frame = simulate(spec, seed=0)
    design = spec.design()
    fit = estimate_components(frame, design)
    times = []
    for seed in range(5):
        t0 = time.perf_counter()
        boot = estimate_components(frame, design, n_boot=800, seed=seed)
        table = bootstrap_derived(boot)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    estimate_components(frame, design)
    t_fit = time.perf_counter() - t0
    med = statistics.median(times)
    print(f"42 x 30 x 9 x 3 ({len(frame):,} rows), {fit.method}: fit alone {t_fit:.3f} s")
    print(f"  800 parametric-bootstrap resamples + derived numbers: {med:.3f} s (median of 5)")
    print(f"  target < {TARGET:g} s: {'MET' if med < TARGET else 'NOT MET'}")
    print(table.to_string(index=False))
    t0 = time.perf_counter()
    estimate_components(frame, design, method="reml", n_boot=20, seed=1)
    print(f"  for contrast, REML with 20 simulate-and-refit resamples: {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
