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
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pandas as pd

TARGET_RATE = 500.0
TARGET_CLIENT_MS = 1.0


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


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a live process so far (from /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
            samples = []  # (calls, seconds, rss, client CPU s, server CPU s)
            t0 = time.monotonic()
            step = min(10_000, max(1_000, args.calls // 10))
            next_mark = step
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
                    samples.append((n, time.monotonic() - t0, rss_mib(runner.pid), cpu_seconds(runner.pid),
                                    cpu_seconds(server.pid)))
                    next_mark += step
            total = time.monotonic() - t0
        finally:
            server.terminate()
            server.wait()
    print(f"collector against serve-sim on loopback, 256 in flight, {args.calls:,} calls in {total:.1f} s")
    first = next((s for s in samples if s[0] >= 10_000), samples[-1] if samples else None)
    if first:
        rate = first[0] / first[1]
        print(f"  throughput over the first {first[0]:,} calls: {rate:.0f} calls/s "
              f"(target > {TARGET_RATE:g}: {'MET' if rate > TARGET_RATE else 'NOT MET'})")
    print(f"  overall: {args.calls / total:.0f} calls/s")
    if len(samples) >= 2:  # steady state: from the first mark (imports and start-up done) to the last
        (n0, _, _, c0, s0), (n1, _, _, c1, s1) = samples[0], samples[-1]
        client, server_ms = 1000 * (c1 - c0) / (n1 - n0), 1000 * (s1 - s0) / (n1 - n0)
        print(f"  CPU per call, calls {n0:,} to {n1:,}: collector {client:.2f} ms "
              f"(target <= {TARGET_CLIENT_MS:g} ms: {'MET' if client <= TARGET_CLIENT_MS else 'NOT MET'}), "
              f"serve-sim {server_ms:.2f} ms")
    for n, secs, rss, _, _ in samples:
        print(f"  {n:>7,} calls  {secs:6.1f} s  RSS {rss:6.1f} MiB")
    # during collection only: once every call is in, `run` reads the table back for its integrity
    # diagnostics, which takes memory in proportion to the run (printed, not part of the flatness check)
    during = [s for s in samples if s[0] < args.calls]
    ref = next((s for s in during if s[0] >= 20_000), None)
    if ref and during[-1][0] > ref[0]:
        growth = during[-1][2] / ref[2] - 1
        print(f"  memory from {ref[0]:,} to {during[-1][0]:,} calls: {100 * growth:+.1f}% "
              f"(target flat, within 20%: {'MET' if abs(growth) < 0.2 else 'NOT MET'}); the last line is after "
              "the run, with the integrity diagnostics reading every call")

if __name__ == "__main__":
    main()
