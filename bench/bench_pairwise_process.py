"""Bradley-Terry on 1M battles, whole process against whole process: `evalgauge pairwise FILE --bootstrap 0`
against Chatbot Arena's method (a Python process that reads the same file with pandas and runs
`compute_mle_elo`, scikit-learn's logistic regression on win/tie tables, as in `bench_pairwise.py`).

The battles are `bench_pairwise.battles` (100 models, 20% ties), written once as Parquet and once as CSV. Each
process runs five times, taken in turns, and the fastest counts (the noise of a shared machine only adds time):
CPU (user + system of the child), wall time and peak memory. Prints the CPU ratio of each format (target: the
Arena method takes at least 2x evalgauge's CPU) and the largest difference of evalgauge's Arena-scale Elo from
the Arena method's (target 0.1 Elo).

    python bench/bench_pairwise_process.py                 # 1M battles
    python bench/bench_pairwise_process.py --battles 200000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

#: the battles written by a child process: a child's peak memory would otherwise start at this one's
WRITE = """
import sys
sys.path.insert(0, sys.argv[3])
from bench_pairwise import battles
frame = battles(int(sys.argv[2]))
frame.to_parquet(sys.argv[1] + "/battles.parquet")
frame.to_csv(sys.argv[1] + "/battles.csv", index=False)
"""

ARENA = """
import sys
sys.path.insert(0, sys.argv[3])
import pandas as pd
from bench_pairwise import arena_method
path = sys.argv[1]
df = pd.read_parquet(path) if path.endswith(".parquet") else pd.read_csv(path)
arena_method(df).rename("elo").to_csv(sys.argv[2])
"""


def run(cmd: list[str]) -> tuple[float, float, float]:
    """(CPU s, wall s, peak MiB) of one child process."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if status:
            err.seek(0)
            raise SystemExit(err.read().decode(errors="replace")[-2000:])
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024


def best(cmds: dict[str, list[str]], rounds: int) -> dict[str, tuple[float, float, float]]:
    """The fastest CPU and wall of ``rounds`` runs of each command (taken in turns) and its largest peak."""
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in cmds}
    for _ in range(rounds):
        for name, cmd in cmds.items():
            runs[name].append(run(cmd))
    return {k: (min(r[0] for r in v), min(r[1] for r in v), max(r[2] for r in v)) for k, v in runs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--battles", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    here = str(Path(__file__).parent)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-c", WRITE, tmp, str(args.battles), here], check=True)
        files = {"Parquet": Path(tmp) / "battles.parquet", "CSV": Path(tmp) / "battles.csv"}
        print(f"{args.battles:,} battles among 100 models; whole processes, the fastest of {args.rounds} runs each")
        for kind, path in files.items():
            ours_json, arena_csv = Path(tmp) / f"{kind}.json", Path(tmp) / f"{kind}.csv"
            got = best({"arena": [sys.executable, "-W", "ignore", "-c", ARENA, str(path), str(arena_csv), here],
                        "evalgauge": [sys.executable, "-m", "evalgauge", "pairwise", str(path), "--bootstrap", "0",
                                      "--json", str(ours_json)]}, args.rounds)
            ratio = got["arena"][0] / got["evalgauge"][0]
            for name, (cpu, wall, peak) in got.items():
                print(f"  {kind:<8} {name:<10} CPU {cpu:5.2f} s  wall {wall:5.2f} s  peak {peak:5.0f} MiB")
            ours = pd.DataFrame(json.loads(ours_json.read_text())["bradley_terry"]).set_index("system")["elo_arena"]
            theirs = pd.read_csv(arena_csv, index_col=0)["elo"]
            worst = float((ours - theirs.loc[ours.index]).abs().max())
            print(f"  {kind:<8} the Arena method's CPU / evalgauge's: {ratio:.2f}x (target >= 2x: "
                  f"{'met' if ratio >= 2 else 'NOT met'}); largest Elo difference {worst:.3f} (target 0.1: "
                  f"{'met' if worst <= 0.1 else 'NOT met'})")


if __name__ == "__main__":
    main()
