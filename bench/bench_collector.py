"""Collector overhead against serve-sim at zero latency, and memory across a long run.

Starts `evalgauge serve-sim` as its own process on loopback, then runs the
collector with 256 calls in flight:

* throughput: calls/s over a 10,000-call run (target: above 500 calls/s on this
  2-core machine, server and collector sharing the cores);
* memory: the collector process's resident memory sampled every 10,000 calls
  across a 100,000-call run (target: flat, the last sample within 20 % of the
  one at 20,000 calls).

Run: `python bench/bench_collector.py [--calls 100000]`.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pandas as pd

TARGET_RATE = 500.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(tmp: Path, port: int, n_items: int, judges: int = 4, reps: int = 5) -> Path:
    pd.DataFrame({"id": [f"q{i}" for i in range(n_items)], "text": [f"Q{i}" for i in range(n_items)]}) \
        .to_csv(tmp / "items.csv", index=False)
    blocks = "\n".join(f'[[judges]]\nname = "j{k}"\nmodel = "m{k}"\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                       f"max_tokens = 8\n" for k in range(judges))
    (tmp / "run.toml").write_text(textwrap.dedent(f"""
        [run]
        name = "bench"
        replicates = {reps}
        in_flight = 256
        [data]
        items = "items.csv"
        [scoring]
        mode = "numeric"
        [[variants]]
        id = "v"
        template = "Rate {{item}}. Score: N"
        """) + blocks)
    return tmp / "run.toml"


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        port = free_port()
        per_item = 4 * 5
        config = write_config(tmp, port, max(1, args.calls // per_item))
        server = subprocess.Popen([sys.executable, "-m", "evalgauge.cli", "serve-sim", str(config), "--port",
                                   str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(200):
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            runner = subprocess.Popen([sys.executable, "-m", "evalgauge.cli", "run", str(config), "--no-progress"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            db = tmp / "bench.sqlite"
            samples = []  # (calls, seconds, rss)
            t0 = time.monotonic()
            next_mark = 10_000
            while runner.poll() is None:
                time.sleep(0.25)
                if not db.exists():
                    continue
                import sqlite3

                try:
                    n = sqlite3.connect(db).execute("SELECT COUNT(*) FROM calls").fetchone()[0]
                except sqlite3.Error:
                    continue
                if n >= next_mark:
                    samples.append((n, time.monotonic() - t0, rss_mib(runner.pid)))
                    next_mark += 10_000
            total = time.monotonic() - t0
        finally:
            server.terminate()
            server.wait()
    print(f"collector against serve-sim on loopback, 256 in flight, {args.calls:,} calls in {total:.1f} s")
    first = next((s for s in samples if s[0] >= 10_000), None)
    if first:
        rate = first[0] / first[1]
        print(f"  throughput over the first {first[0]:,} calls: {rate:.0f} calls/s "
              f"(target > {TARGET_RATE:g}: {'MET' if rate > TARGET_RATE else 'NOT MET'})")
    print(f"  overall: {args.calls / total:.0f} calls/s")
    for n, secs, rss in samples:
        print(f"  {n:>7,} calls  {secs:6.1f} s  RSS {rss:6.1f} MiB")
    ref = next((s for s in samples if s[0] >= 20_000), None)
    if ref and samples[-1][0] > ref[0]:
        growth = samples[-1][2] / ref[2] - 1
        print(f"  memory from {ref[0]:,} to {samples[-1][0]:,} calls: {100 * growth:+.1f}% "
              f"(target flat, within 20%: {'MET' if abs(growth) < 0.2 else 'NOT MET'})")


if __name__ == "__main__":
    main()
