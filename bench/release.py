"""A commit's package source, for running an earlier version beside the tree in the same session.

``source_of(commit, into)`` unpacks ``src/`` of ``commit`` (``git archive``) under ``into`` and returns its path;
a process started with that path first on ``PYTHONPATH`` imports that version of evalgauge, with the same
Python, libraries, files and machine as the tree's own run. The regression guard (``check.py``) and the
collector bench (``bench_collector.py --against``) judge the tree against it.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def source_of(commit: str | None, into: Path) -> tuple[Path | None, str]:
    """``src`` of ``commit`` unpacked under ``into`` (once), or None and the reason it is not at hand."""
    if not commit:
        return None, "the stored figures name no commit"
    target = into / commit
    if (target / "src").is_dir():
        return target / "src", ""
    try:
        proc = subprocess.run(["git", "archive", "--format=tar", commit, "src"], cwd=ROOT, capture_output=True,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"git could not give commit {commit}'s source ({exc})"
    if proc.returncode != 0:
        return None, f"commit {commit} is not in this clone ({proc.stderr.decode(errors='replace').strip()[:120]})"
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(target, filter="data")
    return target / "src", ""


def environment(source: Path | None, base: dict | None = None) -> dict:
    """The environment of a process that imports evalgauge from ``source`` (the installed one when None)."""
    env = dict(os.environ if base is None else base)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    return env
