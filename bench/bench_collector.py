"""Collector overhead against serve-sim at zero latency, and memory across a long run.

Starts `evalgauge serve-sim` as its own process on loopback, then runs the
collector with 256 calls in flight:

* throughput: calls/s over a 10,000-call run (target: above 500 calls/s on this
  2-core machine, server and collector sharing the cores);
* memory: the collector process's resident memory sampled every 10,000 calls
  across a 100,000-call run (target: flat, the last sample within 20 % of the
  one at 20,000 calls).

With ``--against COMMIT``, that commit's collector (its ``src`` from git) runs beside the tree's, alternating
(``--rounds`` runs each), and the ratio of their collector CPU per call is printed (target: at most 1.00x).

Run: `python bench/bench_collector.py [--calls 100000] [--against COMMIT [--rounds 5]]`.
"""

from __future__ import annotations

import argparse
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pandas as pd

from release import ROOT, environment, source_of

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


def collect(calls: int, source: Path | None = None) -> tuple[list[tuple], float]:
    """One collector run of ``calls`` against a fresh serve-sim (the tree's); the collector imported from
    ``source`` (an earlier version's ``src``) when given. (calls, seconds, RSS, collector CPU s, server CPU s)
    sampled every tenth of the run, and the run's wall time."""
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        port = free_port()
        per_item = 4 * 5
        config = write_config(tmp, port, max(1, calls // per_item))
        server = subprocess.Popen([sys.executable, "-m", "evalgauge.cli", "serve-sim", str(config), "--port",
                                   str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(200):
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            runner = subprocess.Popen([sys.executable, "-m", "evalgauge.cli", "run", str(config), "--no-progress"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment(source))
            db = tmp / "bench.sqlite"
            samples = []  # (calls, seconds, rss, client CPU s, server CPU s)
            t0 = time.monotonic()
            step = min(10_000, max(1_000, calls // 10))
            next_mark = step
            while runner.poll() is None:
                time.sleep(0.25)
                if not db.exists():
                    continue
                try:
                    n = sqlite3.connect(db).execute("SELECT COUNT(*) FROM calls").fetchone()[0]
                except sqlite3.Error:
                    continue
                if n >= next_mark:
                    samples.append((n, time.monotonic() - t0, rss_mib(runner.pid), cpu_seconds(runner.pid),
                                    cpu_seconds(server.pid)))
                    next_mark += step
            return samples, time.monotonic() - t0
        finally:
            server.terminate()
            server.wait()


def per_call_ms(samples: list[tuple], calls: int) -> tuple[float, float] | None:
    """Collector and server CPU per call in the steady state: from the first mark (imports and start-up done)
    to the last one taken while calls were still coming in (once every call is in, `run` reads the table back
    for its integrity diagnostics)."""
    samples = [s for s in samples if s[0] < calls]
    if len(samples) < 2:
        return None
    (n0, _, _, c0, s0), (n1, _, _, c1, s1) = samples[0], samples[-1]
    return 1000 * (c1 - c0) / (n1 - n0), 1000 * (s1 - s0) / (n1 - n0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--against", metavar="COMMIT",
                        help="also run that commit's collector, alternating with the tree's, and print the ratio of "
                             "their CPU per call (the lowest run of each)")
    parser.add_argument("--rounds", type=int, default=5, metavar="N",
                        help="with --against: runs of each collector (default 5: runs of one collector differ by "
                             "10-20%% on a shared 2-core machine, and the lowest of five is steady to a few %%)")
    args = parser.parse_args()
    samples, total = collect(args.calls)
    print(f"collector against serve-sim on loopback, 256 in flight, {args.calls:,} calls in {total:.1f} s")
    first = next((s for s in samples if s[0] >= 10_000), samples[-1] if samples else None)
    if first:
        rate = first[0] / first[1]
        print(f"  throughput over the first {first[0]:,} calls: {rate:.0f} calls/s "
              f"(target > {TARGET_RATE:g}: {'MET' if rate > TARGET_RATE else 'NOT MET'})")
    print(f"  overall: {args.calls / total:.0f} calls/s")
    steady = per_call_ms(samples, args.calls)
    if steady:
        client, server_ms = steady
        last = max(s[0] for s in samples if s[0] < args.calls)
        print(f"  CPU per call, calls {samples[0][0]:,} to {last:,}: collector {client:.2f} ms "
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
    if args.against:
        against(args.calls, args.against, steady, max(1, args.rounds))


def against(calls: int, commit: str, first: tuple[float, float] | None, rounds: int = 5) -> None:
    """The tree's collector CPU per call beside ``commit``'s: ``rounds`` runs of each, alternating (the tree's
    run above is its first), the lowest of each counted (what the machine's other work adds is never negative)."""
    with tempfile.TemporaryDirectory(dir=ROOT, prefix=".bench-release-") as releases:
        source, why = source_of(commit, Path(releases))
        if source is None:
            print(f"  no comparison: {why}")
            return
        tree = [first[0]] if first else []
        theirs: list[float] = []
        while len(theirs) < rounds or len(tree) < rounds:
            side = "theirs" if len(theirs) <= len(tree) else "tree"
            steady = per_call_ms(collect(calls, source if side == "theirs" else None)[0], calls)
            if steady is None:
                break
            (theirs if side == "theirs" else tree).append(steady[0])
    if not tree or not theirs:
        print(f"  no comparison: a run with {calls:,} calls gave too few samples")
        return
    ratio = min(tree) / min(theirs)
    print(f"  collector CPU per call, same session, lowest of {len(tree)} and {len(theirs)} runs: tree "
          f"{min(tree):.3f} ms ({', '.join(f'{t:.3f}' for t in tree)}), {commit} {min(theirs):.3f} ms "
          f"({', '.join(f'{t:.3f}' for t in theirs)}): {ratio:.2f}x (target: at most its earlier cost, 1.00x: "
          f"{'MET' if ratio <= 1.0 else 'NOT MET'})")


if __name__ == "__main__":
    main()
