"""`evalgauge pairwise DIR --engine duckdb` on an arena-sized Parquet folder, against DuckDB's own group-by.

Writes N battles (100 models, 20% ties, a first-slot advantage, one vote per battle as in Chatbot Arena) as
Parquet parts, then measures two whole processes, like with like, each the fastest of three runs taken in turns:

* the floor: a Python process in which DuckDB, with its own defaults, groups the battles to pair counts
  (slot-A system, slot-B system, verdict) and hands them over as Arrow;
* evalgauge: ``evalgauge pairwise DIR --engine duckdb --bootstrap 0 --json OUT`` (the same scan with its checks,
  the Bradley-Terry-Davidson fit with its standard errors, Chatbot Arena's Elo, position bias, the JSON).

It prints the time ratio (target: at most 2x the floor), evalgauge's peak memory, the time of the default run
with both bootstraps (200 resamples each, on the counts), and with ``--check`` the largest difference of the
ratings from the in-memory analysis of the same rows (``analyze_pairwise`` on the frame; target 1e-9).

    python bench/bench_engine_pairwise.py                 # 20M battles
    python bench/bench_engine_pairwise.py --battles 2000000 --check
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine import best_of, measure, print_ratio

FLOOR = """
import sys, duckdb
con = duckdb.connect()
rel = con.sql("SELECT model_a, model_b, winner, COUNT(*) AS n FROM read_parquet('" + sys.argv[1] + "/*.parquet') "
              "GROUP BY model_a, model_b, winner")
counts = (rel.to_arrow_table if hasattr(rel, "to_arrow_table") else rel.arrow)()
print(counts.num_rows)
"""


def write_battles(folder: Path, battles: int, models: int, seed: int, per_part: int = 2_000_000) -> None:
    """Battles among ``models`` of normal strengths, ties 20%, slot A favoured by 0.1 log odds."""
    rng = np.random.default_rng(seed)
    strength = rng.normal(0, 1, models)
    names = np.array([f"model-{k:03d}" for k in range(models)])
    for part, start in enumerate(range(0, battles, per_part)):
        n = min(per_part, battles - start)
        a = rng.integers(0, models, n)
        b = (a + rng.integers(1, models, n)) % models
        p = 1 / (1 + np.exp(-(strength[a] - strength[b] + 0.1)))
        u = rng.random(n)
        winner = np.where(u < 0.2, "tie", np.where(u < 0.2 + 0.8 * p, "model_a", "model_b"))
        pq.write_table(pa.table({"model_a": names[a], "model_b": names[b], "winner": winner}),
                       folder / f"part-{part:03d}.parquet")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--battles", type=int, default=20_000_000)
    ap.add_argument("--models", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true", help="also analyse the rows in memory and compare the ratings")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "battles"
        folder.mkdir()
        write_battles(folder, args.battles, args.models, args.seed)
        size = sum(p.stat().st_size for p in folder.glob("*.parquet"))
        print(f"{args.battles:,} battles among {args.models} models in {size / 2**20:,.0f} MiB of Parquet")
        out_json = Path(tmp) / "pairwise.json"
        cli = [sys.executable, "-m", "evalgauge.cli", "pairwise", str(folder), "--engine", "duckdb"]
        ours_s, floor_s, ours_peak = best_of([*cli, "--bootstrap", "0", "--json", str(out_json)],
                                             [sys.executable, "-c", FLOOR, str(folder)])
        print_ratio("DuckDB's own group-by to pair counts (the floor), whole process, best of 3:", floor_s,
                    "evalgauge pairwise --engine duckdb --bootstrap 0, whole process, best of 3:", ours_s)
        print(f"evalgauge's peak memory: {ours_peak:.2f} GiB")
        boot_s = measure([*cli, "--json", str(Path(tmp) / "boot.json")])[0]
        print(f"the default run (both bootstraps, 200 resamples each, on the counts), whole process: {boot_s:.2f} s")
        if args.check:
            import pandas as pd

            from evalgauge.analysis.pairwise import analyze_pairwise
            from evalgauge.io import read_judgments

            start = time.perf_counter()
            rows = analyze_pairwise(read_judgments(folder), n_boot=0, components=False)
            in_memory_s = time.perf_counter() - start
            got = pd.DataFrame(json.loads(out_json.read_text())["bradley_terry"]).set_index("system")
            want = rows.table.set_index("system").loc[got.index]
            worst = max(float(np.max(np.abs(got[c].to_numpy() - want[c].to_numpy()))) for c in
                        ("log_strength", "se", "elo_arena"))
            print(f"ratings vs the in-memory analysis of the rows ({in_memory_s:.1f} s in process): largest "
                  f"difference {worst:.1e} (target 1e-9: {'met' if worst <= 1e-9 else 'NOT met'})")


if __name__ == "__main__":
    main()
