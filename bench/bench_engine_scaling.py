"""How `evalgauge components DIR --engine duckdb` grows: with the rows at fixed cells, and with the cells at fixed rows.

* rows 10^6, 10^7, 10^8 at 10^6 cells (50 systems x 2,000 items x 10 judges; 1, 10, 100 replicates): the time
  should follow the scan;
* cells 10^5, 10^6, 10^7 at 10^7 rows (200, 2,000, 20,000 items; 100, 10, 1 replicates): the time should follow
  the reduction's output and the fit.

Each point is a whole process, the fastest of three (evalgauge's, and DuckDB's own group-by to the same cells as
the floor) on a
balanced Parquet folder. Prints the table, the slope of log time on log size for each sweep, and, on paper,
what 10^10 rows would take from the measured scan rate.

    python bench/bench_engine_scaling.py               # both sweeps (writes 1.3e8 + 3e7 rows; a few minutes)
    python bench/bench_engine_scaling.py --quick       # a tenth of each size
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine import FLOOR, best_of, write_log


def point(tmp: Path, items: int, reps: int) -> tuple[int, int, float, float, float]:
    """(rows, cells, evalgauge's seconds, the floor's seconds, evalgauge's peak GiB so far) for 50 x items x 10."""
    folder = tmp / f"log-{items}-{reps}"
    folder.mkdir()
    rows, _, _ = write_log(folder, 50, items, 10, reps, seed=1)
    ours, floor, peak = best_of([sys.executable, "-m", "evalgauge.cli", "components", str(folder), "--engine",
                                 "duckdb", "--json", str(tmp / "out.json")], [sys.executable, "-c", FLOOR, str(folder)])
    for part in folder.iterdir():
        part.unlink()
    folder.rmdir()
    return rows, 50 * items * 10, ours, floor, peak


def slope(x: list[float], y: list[float]) -> float:
    return float(np.polyfit(np.log10(x), np.log10(y), 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of each size")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    scale = 10 if args.quick else 1
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'sweep':<24}{'rows':>14}{'cells':>13}{'evalgauge s':>13}{'floor s':>10}{'ratio':>8}")
        sweeps = {"rows at fixed cells": [(2000 // scale, reps) for reps in (1, 10, 100)],
                  "cells at fixed rows": [(items // scale, 20000 // items) for items in (200, 2000, 20000)]}
        results = {}
        for name, grid in sweeps.items():
            results[name] = []
            for items, reps in grid:
                rows, cells, ours, floor, _ = point(Path(tmp), items, reps)
                results[name].append((rows, cells, ours, floor))
                print(f"{name:<24}{rows:>14,}{cells:>13,}{ours:>13.2f}{floor:>10.2f}{ours / floor:>8.2f}")
        by_rows = results["rows at fixed cells"]
        by_cells = results["cells at fixed rows"]
        for label, sweep, k in (("rows at fixed cells", by_rows, 0), ("cells at fixed rows", by_cells, 1)):
            size = [r[k] for r in sweep]
            print(f"slope of log time on log {label}: evalgauge {slope(size, [r[2] for r in sweep]):.2f}, "
                  f"floor {slope(size, [r[3] for r in sweep]):.2f}")
        rows, _, ours, floor = by_rows[-1]
        rate = rows / floor  # rows per second the scan reaches here (2 cores)
        print(f"on paper: the scan ran at {rate / 1e6:.0f}M rows/s on this machine's 2 cores; 10^10 rows of this "
              f"log at that rate take {1e10 / rate / 60:.0f} min here, and about {1e10 / rate / 50:.0f} s of scanning "
              "on a Spark cluster of 100 such cores (the scan divides across them; reading 10^10 rows from remote "
              f"storage adds its transfer); the cells of this design then fit in {ours - floor:.0f} s more, whatever "
              "the rows")

if __name__ == "__main__":
    main()
