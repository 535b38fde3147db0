"""Spark (local master) against the in-memory path on slices: a scored log and a pairwise log.

* scored: 2M rows (40 systems x 1,000 items x 5 judges x 10 replicates, 1% of the cells absent, so REML): the
  cells Spark reduces (``reduce_cells(DIR, engine="spark")``) fitted by ``estimate_from_sums``, against
  ``eg.fit`` on the rows read with pandas;
* pairwise: 2M battles (30 models, 2,000 items, two judges, both orders): the battles Spark counts
  (``reduce_battles(DIR, engine="spark")``) analysed by ``analyze_battle_counts``, against ``analyze_pairwise``
  on the rows read with pandas, like with like: first Bradley-Terry, both Elo scales and 100 resamples of both
  bootstraps (``components=False`` on both paths), then the win indicators' G-study alone (REML over the
  system x item x judge x slot cells, from Spark's distinct judgments and from the rows).

Prints each path's time (Spark's includes its JVM start and its scan) and the differences: the REML optima agree
to the optimiser's tolerance (criterion to 1e-9 relative, components to a thousandth of their SE: the cells are
summed in another order, see bench_engine_reml.py); the pairwise numbers to 1e-9 (the entries come out in one
canonical order, so the seeded bootstraps agree too).

    python bench/bench_engine_spark.py [--master local[*]]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine_reml import write_log


def write_battles(folder: Path, battles: int, models: int, items: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    strength = rng.normal(0, 1, models)
    names = np.array([f"model-{k:02d}" for k in range(models)])
    a = rng.integers(0, models, battles)
    b = (a + rng.integers(1, models, battles)) % models
    p = 1 / (1 + np.exp(-(strength[a] - strength[b] + 0.1)))
    u = rng.random(battles)
    frame = pd.DataFrame({"model_a": names[a], "model_b": names[b],
                          "winner": np.where(u < 0.15, "tie", np.where(u < 0.15 + 0.85 * p, "model_a", "model_b")),
                          "item": np.char.add("q", rng.integers(0, items, battles).astype(str)),
                          "judge": rng.choice(["judge-1", "judge-2"], battles),
                          "order": rng.choice(["AB", "BA"], battles)})
    for k, part in enumerate(np.array_split(np.arange(battles), 8)):
        frame.iloc[part].to_parquet(folder / f"part-{k}.parquet", index=False)


def same_optimum(got, want) -> tuple[float, float, bool]:
    """Two REML fits of one model: the criterion's relative difference, the largest difference of a component in
    units of its SE, and whether both are within the optimiser's tolerance (1e-9, 1e-3 SE)."""
    in_se = max(abs(got.sigma2(c.name) - c.variance) / c.se for c in want.components if c.se and np.isfinite(c.se))
    criterion = abs(got.reml.criterion - want.reml.criterion) / abs(want.reml.criterion)
    return criterion, in_se, criterion <= 1e-9 and in_se <= 1e-3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import evalgauge as eg
    from evalgauge.analysis.pairwise import analyze_battle_counts, analyze_pairwise
    from evalgauge.estimate import estimate_from_sums
    from evalgauge.io import read_judgments
    from evalgauge.io.engine import reduce_battles, reduce_cells, spark_session

    with tempfile.TemporaryDirectory() as tmp:
        scored = Path(tmp) / "scored"
        scored.mkdir()
        rows = write_log(scored, 40, 1000, 5, 10, 0.01, seed=3)
        start = time.perf_counter()
        spark_session(args.master)  # the JVM's start, timed with Spark's path
        cells, _ = reduce_cells(scored, engine="spark", master=args.master)
        on_spark = estimate_from_sums(cells)
        spark_s = time.perf_counter() - start
        start = time.perf_counter()
        in_memory = eg.fit(pd.read_parquet(scored), object="system").components
        memory_s = time.perf_counter() - start
        worst = max(abs(on_spark.sigma2(c.name) - c.variance) / max(abs(c.variance), 1e-300)
                    for c in in_memory.components)
        criterion, in_se, ok = same_optimum(on_spark, in_memory)
        print(f"scored slice, {rows:,} rows (1% of cells absent, {in_memory.method}): Spark {spark_s:.1f} s, in memory "
              f"{memory_s:.1f} s; the REML optima: criterion relative difference {criterion:.1e}, components "
              f"{in_se:.1e} of their SE ({worst:.1e} relative) (target 1e-9 and 1e-3 SE, the optimiser's "
              f"tolerance: {'met' if ok else 'NOT met'})")

        battles = Path(tmp) / "battles"
        battles.mkdir()
        write_battles(battles, 2_000_000, 30, 2000, seed=4)
        start = time.perf_counter()
        counts, _ = reduce_battles(battles, engine="spark", master=args.master)
        on_spark = analyze_battle_counts(counts, n_boot=100, seed=1, components=False)
        spark_s = time.perf_counter() - start
        start = time.perf_counter()
        judgments = read_judgments(battles)
        on_rows = analyze_pairwise(judgments, n_boot=100, seed=1, components=False)
        memory_s = time.perf_counter() - start
        a = on_spark.table.set_index("system")
        b = on_rows.table.set_index("system").loc[a.index, a.columns]
        worst = float(np.max(np.abs(a.to_numpy() - b.to_numpy())))
        print(f"pairwise slice, 2,000,000 battles ({len(counts.rows):,} distinct entries): Spark {spark_s:.1f} s, in "
              f"memory {memory_s:.1f} s; ratings, SEs and both bootstraps' intervals: largest difference {worst:.1e} "
              f"(target 1e-9: {'met' if worst <= 1e-9 else 'NOT met'})", flush=True)
        # the G-study of the win indicators, alone on each path (the counts are already on the driver)
        start = time.perf_counter()
        from_cells = analyze_battle_counts(counts, n_boot=0).components
        cells_s = time.perf_counter() - start
        start = time.perf_counter()
        from_rows = analyze_pairwise(judgments, n_boot=0).components
        rows_s = time.perf_counter() - start
        criterion, in_se, ok = same_optimum(from_cells, from_rows)
        print(f"pairwise slice, win indicators' components ({from_rows.reml.cells:,} cells, "
              f"{len(from_rows.components)} components, {from_rows.method}): from Spark's counts {cells_s:.1f} s, "
              f"from the rows {rows_s:.1f} s; criterion relative difference {criterion:.1e}, components {in_se:.1e} "
              f"of their SE (target 1e-9 and 1e-3 SE: {'met' if ok else 'NOT met'})")

if __name__ == "__main__":
    main()
