"""The boundary under attack: hostile server replies, special files, outputs on devices, inputs that
must not change. Prints the cases tried and, for each invariant, how many cases broke it.

* hostile server (tests/hostile.py): every reply class x share of calls hit x budget x broken on
  every try or only the first, each a 32-call factorial through the real runner;
* special files as inputs (a FIFO, /dev/zero behind a symlink, a folder) to every reading command;
* outputs on devices (a null and a full device made in a temporary folder) from every writing command;
* every reading command on a run database and a CSV: the inputs' bytes before and after;
* the fourth round's faults: a file name read as a glob, a folder link that loops, an archive member that
  decompresses to 300 MB, an epoch of 1e400, a leaderboard naming its systems 'model', levels holding '|'
  (the hostile server adds a 307 to another origin and a 200 whose body stalls past the timeout).

Run: `python bench/fuzz_boundary.py [--quick]`.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "src")]

KEY = "sk-test-SECRET-0123456789abcdef"


def _hostile_cases(quick: bool):
    from hostile import MODES

    modes = [m for m in MODES if m != "good"]
    shares = (1.0,) if quick else (0.3, 1.0)
    budgets = (None, 0.002)
    firsts = (False, True)
    return list(itertools.product(modes, shares, budgets, firsts))


def run_hostile(tmp: Path, mode, share, budget, first_only) -> list[str]:
    from hostile import HostileServer, boundary_violations, collect_against

    other = HostileServer("good", KEY) if mode == "redirect" else None  # another origin a 307 points to
    extra = {"redirect_to": f"http://localhost:{other.port}"} if other else {}
    try:
        _, summary, calls, _, cost, server, blob = collect_against(
            tmp, mode, KEY, budget=budget, share=share, first_only=first_only,
            timeout=0.5 if mode == "stall" else 10.0, **extra)
    finally:
        if other is not None:
            other.stop()
    broke = boundary_violations(mode, KEY, summary, calls, cost, budget, server, blob)
    if other is not None and any(KEY in str(h) for h in other.headers):
        broke.append("leak")
    return broke


def _pipe_levels(tmp: Path) -> list[str]:
    """Items and systems whose names hold '|': every cell stored exactly once, none paid twice."""
    import pandas as pd

    from evalgauge.collect.config import load_config
    from evalgauge.collect.runner import run
    from evalgauge.store import RunStore
    from hostile import HostileServer, hostile_config

    server = HostileServer("good", KEY)
    try:
        config = hostile_config(tmp, server)
        pd.DataFrame({"id": ["a", "a|b"], "text": ["Q1", "Q2"]}).to_csv(tmp / "items.csv", index=False)
        pd.DataFrame([("a", "b|c", "R1"), ("a|b", "c", "R2")], columns=["item", "system", "response"]).to_csv(
            tmp / "responses.csv", index=False)
        cfg = load_config(config)
        run(cfg)
        run(cfg)
    finally:
        server.stop()
    store = RunStore(cfg.database)
    try:
        stored = store.count()
    finally:
        store.close()
    return [] if stored == server.requests == 8 else ["lost or repeated cells"]


def new_file_cases(tmp: Path) -> tuple[int, dict[str, int]]:
    """The faults of the fourth round: names read as globs, a folder link that loops, archive members that
    decompress past their bound or are encrypted, an epoch of 1e400, a run database that is a device, template
    fields that ask for gigabytes, a leaderboard naming its systems 'model', levels holding '|'."""
    import json
    import zipfile

    import pandas as pd

    counts = {"traceback": 0, "hang": 0, "lost or repeated cells": 0, "misread": 0}
    frame = pd.DataFrame([(f"s{s}", f"i{i}", f"j{j}", float(s + i % 3)) for s in range(3) for i in range(8)
                          for j in range(2)], columns=["system", "item", "judge", "score"])
    (tmp / "g").mkdir()
    frame.to_csv(tmp / "g" / "x[1].csv", index=False)
    frame.head(6).to_csv(tmp / "g" / "x1.csv", index=False)
    loop = tmp / "loop" / "a"
    loop.mkdir(parents=True)
    frame.to_parquet(loop / "p.parquet", index=False)
    (loop / "back").symlink_to(tmp / "loop", target_is_directory=True)
    bomb = tmp / "bomb.eval"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("header.json", json.dumps({"eval": {"model": "m", "task": "t"}}))
        z.writestr("samples/1_epoch_1.json", b'{"id": 1, "pad": "' + b" " * (300 * 1024 * 1024) + b'"}')
    epoch = tmp / "epoch.json"
    epoch.write_text('{"eval": {"model": "m", "task": "t"}, "samples": [{"id": 1, "epoch": 1e400, "scores": '
                     '{"s": {"value": "C"}}}]}')
    board = tmp / "board.csv"
    pd.DataFrame({"model": ["a", "b", "c"], "score": [80.1, 60.2, 40.3]}).to_csv(board, index=False)
    attempts = [
        ("components", lambda: _cli("components", tmp / "g" / "x[1].csv", "--engine", "duckdb", "--json", "-"),
         lambda out: json.loads(out.stdout)["n_obs"] == len(frame)),
        ("glob loop", lambda: _cli("components", tmp / "loop" / "**" / "*.parquet", "--engine", "duckdb"), None),
        ("glob loop in memory", lambda: _cli("components", tmp / "loop" / "**" / "*.parquet"), None),
        ("zip bomb", lambda: _cli("import", "inspect", bomb, "-o", tmp / "o.csv"), lambda out: out.exit_code == 2),
        ("epoch", lambda: _cli("import", "inspect", epoch, "-o", tmp / "o2.csv"), lambda out: out.exit_code == 2),
        ("audit model", lambda: _cli("audit", board, "--preset", "pairwise", "--scale", "0-100"),
         lambda out: out.exit_code == 0),
    ]
    for name, attempt, check in attempts:
        outcome, out = _with_deadline(attempt, 120)
        if outcome != "ok":
            counts[outcome] += 1
            print(f"  {outcome}: {name}: {out!r}")
        elif check is not None and not check(out):
            counts["misread"] += 1
            print(f"  misread: {name}: {out.output[:300]}")
    pipes = tmp / "pipes"
    pipes.mkdir()
    outcome, broke = _with_deadline(lambda: _pipe_levels(pipes), 120)
    if outcome != "ok":
        counts[outcome] += 1
    else:
        for b in broke:
            counts[b] += 1
    return len(attempts) + 1, counts


def _with_deadline(fn, seconds: float):
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # a traceback is what this bench counts
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        return "hang", None
    if "error" in box:
        return "traceback", box["error"]
    return "ok", box["value"]


def _cli(*args):
    from click.testing import CliRunner

    from evalgauge.cli import main

    out = CliRunner().invoke(main, [str(a) for a in args])
    if out.exception is not None and not isinstance(out.exception, SystemExit):
        raise out.exception
    return out


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def file_cases(tmp: Path) -> tuple[int, dict[str, int]]:
    """Special inputs, device outputs, and inputs that must stay byte for byte."""
    import numpy as np
    import pandas as pd

    from records import run_database

    counts = {"traceback": 0, "hang": 0, "changed input": 0, "replaced special file": 0}
    cases = 0
    data_dir = tmp / "data"
    data_dir.mkdir()
    rng = np.random.default_rng(0)
    csv = data_dir / "d.csv"
    pd.DataFrame([(f"s{s}", f"i{i}", f"j{j}", float(s + rng.normal())) for s in range(3) for i in range(8)
                  for j in range(2)], columns=["system", "item", "judge", "score"]).to_csv(csv, index=False)
    db = run_database(data_dir / "run.sqlite", n=12)
    readers = [["components"], ["analyze"], ["balance"], ["compare"], ["screen"]]
    special = tmp / "special"
    special.mkdir()
    fifo = special / "f.csv"
    os.mkfifo(fifo)
    (special / "z.csv").symlink_to("/dev/zero")
    (special / "dir.csv").mkdir()
    for cmd, src in itertools.product(readers, [fifo, special / "z.csv", special / "dir.csv"]):
        cases += 1
        outcome, _ = _with_deadline(lambda cmd=cmd, src=src: _cli(*cmd, src), 30)
        if outcome != "ok":
            counts[outcome] += 1
    # devices of our own (null and full), so a regression replaces a node in the temporary folder and
    # never the machine's /dev/null; and a FIFO with a reader, as /dev/stdout piped to another program
    devices = []
    for name, minor in (("null", 3), ("full", 7)):
        try:
            os.mknod(special / name, stat.S_IFCHR | 0o666, os.makedev(1, minor))
            devices.append(special / name)
        except OSError:
            print(f"note: cannot make a {name} device here; that case is skipped")
    for cmd, src, dev in itertools.product([["components"], ["analyze"], ["compare"]], [csv, db], devices):
        cases += 1
        before = stat.S_ISCHR(os.stat(dev).st_mode)
        outcome, _ = _with_deadline(lambda cmd=cmd, src=src, dev=dev: _cli(*cmd, src, "--json", dev), 60)
        if outcome != "ok":
            counts[outcome] += 1
        if before and not stat.S_ISCHR(os.stat(dev).st_mode):
            counts["replaced special file"] += 1
    before = _digest(data_dir)
    for cmd, src in itertools.product([*readers, ["export", "-o", tmp / "e.csv"]], [csv, db]):
        if cmd[0] == "export" and src == csv:
            continue
        cases += 1
        outcome, _ = _with_deadline(lambda cmd=cmd, src=src: _cli(cmd[0], src, *cmd[1:]), 60)
        if outcome != "ok":
            counts[outcome] += 1
        after = _digest(data_dir)
        if after != before:
            counts["changed input"] += 1
            before = after
    return cases, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one share of calls hit per reply class")
    args = parser.parse_args()
    os.environ["SIM_KEY"] = KEY
    t0 = time.monotonic()
    totals = {"traceback": 0, "hang": 0, "leak": 0, "overrun": 0, "under-charged": 0,
              "broken reply stored as an answer": 0}
    cases = _hostile_cases(args.quick)
    with tempfile.TemporaryDirectory() as tmp:
        for k, (mode, share, budget, first) in enumerate(cases):
            case = Path(tmp) / f"h{k}"
            case.mkdir()
            outcome, broke = _with_deadline(
                lambda case=case, mode=mode, share=share, budget=budget, first=first: run_hostile(
                    case, mode, share, budget, first), 120)
            if outcome != "ok":
                totals[outcome] += 1
                print(f"  {outcome}: {mode} share={share} budget={budget} first_only={first}: {broke!r}")
                continue
            for b in broke:
                totals[b] += 1
                print(f"  {b}: {mode} share={share} budget={budget} first_only={first}")
        n_files, file_counts = file_cases(Path(tmp))
        round4 = Path(tmp) / "round4"
        round4.mkdir()
        n_new, new_counts = new_file_cases(round4)
        n_files += n_new
        for k, v in new_counts.items():
            file_counts[k] = file_counts.get(k, 0) + v
    print(f"hostile server: {len(cases)} runs of 32 calls ({len(cases) * 32} cells) over "
          f"{len({c[0] for c in cases})} reply classes")
    print(f"files: {n_files} cases (special inputs, outputs on devices, inputs re-hashed after each read)")
    merged = {**totals}
    for k, v in file_counts.items():
        merged[k] = merged.get(k, 0) + v
    print(f"cases tried: {len(cases) + n_files}; " + ", ".join(f"{v} {k}" for k, v in merged.items()))
    print(f"target: every count 0: {'met' if not any(merged.values()) else 'NOT met'} "
          f"({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
