"""The command line's own cost: start-up, and a fit through the CLI against the same fit in-process.

Issue 13's targets: `evalgauge --version` and `--help` under 0.3 s of CPU; `evalgauge components` on a
large file within 1.2x of the CPU of reading it and fitting it in a Python process (both in their own
process, CPU of the child from the OS, so interpreter start-up counts on both sides).

Run: `make bench` or `python bench/bench_cli.py [--rows 2000000]`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

IN_PROCESS = """
import sys
import evalgauge as eg
from evalgauge.analysis.gstudy import components_summary
judgments = eg.read(sys.argv[1])
vc = eg.estimate_components(judgments, object="system")
components_summary(vc)
"""


def cpu(cmd: list[str]) -> float:
    """CPU seconds (user + system) of a child process."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"{' '.join(cmd[:3])} failed: {proc.stderr.read().decode()[-300:]}")
    return usage.ru_utime + usage.ru_stime


def best(cmd: list[str], repeats: int) -> float:
    return min(cpu(cmd) for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    exe = [sys.executable, "-m", "evalgauge"]
    met = True
    print("Command-line overhead (CPU seconds of the child process, best of repeats)")
    for flag in ("--version", "--help"):
        seconds = best([*exe, flag], 5)
        ok = seconds < 0.3
        met &= ok
        print(f"  evalgauge {flag:10s} {seconds:6.3f} s   target under 0.3 s: {'met' if ok else 'NOT met'}")
    from evalgauge.simulate import simulate, sizing_preset

    items = args.rows // (50 * 10 * 2)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "judgments.parquet"
        simulate(sizing_preset(systems=50, items=items, judges=10, replicates=2), seed=1).to_parquet(path)
        inproc = best([sys.executable, "-c", IN_PROCESS, str(path)], args.repeats)
        cli = best([*exe, "components", str(path), "--object", "system", "--json", str(Path(tmp) / "c.json")],
                   args.repeats)
    ratio = cli / inproc
    ok = ratio <= 1.2
    met &= ok
    print(f"  components on {args.rows:,} rows: CLI {cli:.2f} s, in-process {inproc:.2f} s ({ratio:.2f}x)   "
          f"target within 1.2x: {'met' if ok else 'NOT met'}")
    print(f"\nCLI targets: {'met' if met else 'not met'}")


if __name__ == "__main__":
    main()
