"""ANOVA estimation speed and memory against a single numpy group-means pass.

Prints, for the sizing paper's balanced s x i x j x r design at 42 x 30 x 9 x 3
(34,020 rows) and at its full size 42 x 329 x 9 x 3 (373,086 rows, the paper's
373,019 calls rounded to a complete block):

* wall time of `estimate_anova` on a DataFrame with text facet columns (as read
  from CSV), best of several runs, and its peak traced memory;
* the same for the floor: one numpy group-means pass over the same frame
  (factorise each facet column, ravel to a cell index, bincount sums and counts,
  divide), i.e. the least any estimator must do to see every row once;
* the ratio, and whether it meets the target of 3x.

Also printed, for context only: the floor without factorising (integer codes
already in hand). Run: `make bench` or `python bench/bench_anova.py`.
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pandas as pd

from evalgauge.estimate import estimate_anova
from evalgauge.simulate import simulate, sizing_preset

TARGET = 3.0
FACETS = ["system", "item", "judge"]


def group_means_floor(frame: pd.DataFrame) -> np.ndarray:
    codes, sizes = [], []
    for col in FACETS:
        c, u = pd.factorize(frame[col])
        codes.append(c)
        sizes.append(len(u))
    cell = np.ravel_multi_index(tuple(codes), tuple(sizes))
    y = frame["score"].to_numpy(dtype=np.float64)
    return np.bincount(cell, weights=y) / np.bincount(cell)


def best_time(func, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - t0)
    return best


def peak_memory(func) -> float:
    tracemalloc.start()
    func()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def bench(items: int, repeats: int) -> bool:
    spec = sizing_preset(items=items)
    frame = simulate(spec, seed=0)
    frame = frame.astype(dict.fromkeys(FACETS, str))  # as read from a CSV file
    design = spec.design()
    ours = best_time(lambda: estimate_anova(frame, design), repeats)
    floor = best_time(lambda: group_means_floor(frame), repeats)
    cell_codes = [pd.factorize(frame[c])[0] for c in FACETS]
    sizes = tuple(int(c.max()) + 1 for c in cell_codes)
    y = frame["score"].to_numpy()

    def codes_only():
        cell = np.ravel_multi_index(tuple(cell_codes), sizes)
        return np.bincount(cell, weights=y) / np.bincount(cell)

    codes_floor = best_time(codes_only, repeats)
    mem_ours = peak_memory(lambda: estimate_anova(frame, design))
    mem_floor = peak_memory(lambda: group_means_floor(frame))
    ratio = ours / floor
    met = ratio <= TARGET
    print(f"\n{spec.counts['system']} x {items} x {spec.counts['judge']} x {spec.replicates} "
          f"= {len(frame):,} rows")
    print(f"  estimate_anova           {ours * 1e3:8.1f} ms   peak {mem_ours:7.1f} MiB")
    print(f"  group-means floor        {floor * 1e3:8.1f} ms   peak {mem_floor:7.1f} MiB")
    print(f"  (floor on integer codes  {codes_floor * 1e3:8.1f} ms, for context)")
    print(f"  time ratio {ratio:.2f}x, memory ratio {mem_ours / mem_floor:.2f}x; "
          f"target <= {TARGET:g}x: {'MET' if met else 'NOT MET'}")
    return met


def main() -> None:
    print("evalgauge ANOVA benchmark (best of repeated runs; memory = tracemalloc peak)")
    results = [bench(30, repeats=15), bench(329, repeats=7)]
    print(f"\nall targets met: {all(results)}")


if __name__ == "__main__":
    main()
