"""Start-up of `evalgauge pairwise` and `evalgauge compare`: the CPU a fresh process spends before it reads its data.

Each command runs in a new Python process with the function that reads its data replaced by one that prints the
process's CPU time and exits: what the command loaded before reading is what it pays on every call, whatever the
data. Beside it, the same process run to the end on a file (100,000 battles; a 5 x 805 x 2 AlpacaEval slice), so
the start-up is seen as a share of a whole run, like with like (a process against a process), and the wall time
the whole run spent importing modules (-X importtime), reading and fitting included. Target: under 0.3 s of CPU
before reading data.

    python bench/bench_startup.py
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.3
HOOK = """
import importlib, sys, time
import evalgauge.cli as cli
def stop(*args, **kwargs):
    print(time.process_time())
    sys.exit(0)
setattr(importlib.import_module({module!r}), {attr!r}, stop)
cli.main({args!r}, standalone_mode=False)
"""


def before_reading(module: str, attr: str, args: list[str]) -> float:
    """CPU seconds until the command calls ``module.attr``, the function that reads its data."""
    out = subprocess.run([sys.executable, "-c", HOOK.format(module=module, attr=attr, args=args)],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def whole_run(args: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "evalgauge", *args], capture_output=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imports_of_run(args: list[str]) -> float:
    """Seconds the whole run spent importing modules (python -X importtime: the sum of every module's own time)."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "evalgauge", *args], capture_output=True,
                         text=True, check=True)
    own = [int(line.split("|")[0].split(":")[1]) for line in out.stderr.splitlines() if line.startswith("import time:")
           and line.split("|")[0].split(":")[1].strip().isdigit()]
    return sum(own) / 1e6


def battles(path: Path, n: int = 100_000, models: int = 50) -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, models, n)
    b = (a + rng.integers(1, models, n)) % models
    winner = rng.choice(["model_a", "model_b", "tie"], n, p=[0.4, 0.4, 0.2])
    names = np.array([f"m{k:02d}" for k in range(models)])
    pd.DataFrame({"model_a": names[a], "model_b": names[b], "winner": winner}).to_parquet(path)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        arena = Path(tmp) / "battles.parquet"
        battles(arena)
        slice_ = str(ROOT / "examples/alpacaeval/alpacaeval_5x805x2.csv")
        cases = [("pairwise", "evalgauge.cli.data", "read_judgments", ["pairwise", str(arena)]),
                 ("compare", "evalgauge.cli.fit", "_load", ["compare", slice_, "--drop-missing", "--pair-gstudies",
                                                            "none"])]
        print(f"{'command':10s} {'CPU before reading':>19s} {'whole run':>10s} {'share':>6s} {'imports in run':>15s}"
              f"  target < {TARGET} s before reading")
        for name, module, attr, args in cases:
            start = min(before_reading(module, attr, args) for _ in range(3))
            total = whole_run(args)
            imports = imports_of_run(args)
            verdict = "met" if start < TARGET else "NOT met"
            print(f"{name:10s} {start:17.3f} s {total:8.2f} s {start / total:6.1%} {imports:13.2f} s  {verdict}")


if __name__ == "__main__":
    main()
