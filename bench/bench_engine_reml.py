"""REML from the engine's cell statistics against REML on the rows in memory, with 1% of the cells missing.

Writes an unbalanced log (systems x items x judges x replicates with 1% of the system x item x judge cells
absent, so the closed form does not apply and both paths fit REML) as Parquet parts, then runs two whole
processes on it, like with like:

* in memory: a Python process that reads the rows with pandas and fits them (``eg.fit(frame, object="system")``);
* the engine: ``evalgauge components DIR --engine duckdb --json OUT`` (DuckDB reduces the rows to the cells'
  counts, sums and sums of squares; REML on those).

It prints both times and peak memories (target: the engine's memory no more than the in-memory fit's) and
how far apart the two REML optima are. Both paths run the same optimiser on the same sufficient statistics,
summed in a different order (DuckDB's, pandas'), so they agree as optima, to the optimiser's tolerance: the
criterion to 1e-9 relative, and each component to a thousandth of its standard error (a flat direction of the
likelihood, such as a facet with five levels, moves by that much for a criterion change of 1e-5).

    python bench/bench_engine_reml.py                      # 10M rows (100 x 1,000 x 5 x 20), 1% of cells gone
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine import measure

IN_MEMORY = """
import json, sys
import pandas as pd
import evalgauge as eg
fit = eg.fit(pd.read_parquet(sys.argv[1]), object="system")
print(json.dumps({"method": fit.components.method, "criterion": fit.components.reml.criterion,
                  "components": {c.name: c.variance for c in fit.components.components},
                  "se": {c.name: c.se for c in fit.components.components}}))
"""


def write_log(folder: Path, systems: int, items: int, judges: int, reps: int, missing: float, seed: int) -> int:
    """y = s + i + j + si + sj + ij + e, one Parquet part per system, each cell absent with probability
    ``missing`` (all its replicates)."""
    rng = np.random.default_rng(seed)
    s_eff, i_eff, j_eff = rng.normal(0, 0.5, systems), rng.normal(0, 1.0, items), rng.normal(0, 0.7, judges)
    ij = rng.normal(0, 0.4, (items, judges))
    sj = rng.normal(0, 0.3, (systems, judges))
    item_names = np.array([f"i{k:05d}" for k in range(items)])
    judge_names = np.array([f"j{k:02d}" for k in range(judges)])
    rows = 0
    for s in range(systems):
        si = rng.normal(0, 0.6, items)
        mean = s_eff[s] + i_eff[:, None] + j_eff[None, :] + si[:, None] + sj[s][None, :] + ij
        score = (mean[:, :, None] + rng.normal(0, 1.0, (items, judges, reps))).ravel()
        keep = np.repeat(rng.random(items * judges) >= missing, reps)
        table = pa.table({
            "system": np.full(int(keep.sum()), f"s{s:03d}"),
            "item": np.repeat(item_names, judges * reps)[keep],
            "judge": np.tile(np.repeat(judge_names, reps), items)[keep],
            "replicate": np.tile(np.arange(reps), items * judges)[keep],
            "score": score[keep],
        })
        pq.write_table(table, folder / f"part-{s:03d}.parquet")
        rows += table.num_rows
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", type=int, default=100)
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--judges", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--missing", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "log"
        folder.mkdir()
        rows = write_log(folder, args.systems, args.items, args.judges, args.reps, args.missing, args.seed)
        print(f"{rows:,} rows ({args.systems} systems x {args.items:,} items x {args.judges} judges x {args.reps} "
              f"replicates, {100 * args.missing:g}% of the cells absent)")
        out_json = Path(tmp) / "components.json"
        engine_s, engine_mem, _ = measure([sys.executable, "-m", "evalgauge.cli", "components", str(folder),
                                           "--engine", "duckdb", "--json", str(out_json)])
        memory_s, memory_mem, text = measure([sys.executable, "-c", IN_MEMORY, str(folder)])
        rows_fit = json.loads(text.strip().splitlines()[-1])
        cells_fit = json.loads(out_json.read_text())
        got = {c["component"]: c["variance"] for c in cells_fit["components"]}
        want, se = rows_fit["components"], rows_fit["se"]
        worst = max(abs(got[name] - value) / max(abs(value), 1e-300) for name, value in want.items())
        in_se = max(abs(got[name] - value) / se[name] for name, value in want.items() if se[name])
        criterion = abs(cells_fit["reml"]["deviance"] - rows_fit["criterion"]) / abs(rows_fit["criterion"])
        print(f"in memory (pandas reads the rows, eg.fit): {memory_s:7.1f} s, peak {memory_mem:5.2f} GiB, "
              f"{rows_fit['method']}, criterion {rows_fit['criterion']:.6f}")
        print(f"engine (DuckDB's cells, REML on them):     {engine_s:7.1f} s, peak {engine_mem:5.2f} GiB, "
              f"{cells_fit['method']}, criterion {cells_fit['reml']['deviance']:.6f}")
        print(f"memory: engine {engine_mem / memory_mem:.2f}x the in-memory fit's (target <= 1x: "
              f"{'met' if engine_mem <= memory_mem else 'NOT met'}); time {engine_s / memory_s:.2f}x")
        ok = criterion <= 1e-9 and in_se <= 1e-3
        print(f"the optima: criterion relative difference {criterion:.1e}, components' largest difference "
              f"{in_se:.1e} of their standard error ({worst:.1e} relative) (target 1e-9 and 1e-3 SE: "
              f"{'met' if ok else 'NOT met'})")

if __name__ == "__main__":
    main()
