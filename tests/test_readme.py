"""The README's runnable examples run: every Python block, and every shell command that needs
neither a network server nor files the reader brings (those are listed, with why, in SKIPPED)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CLI = str(Path(sys.executable).parent / "evalgauge")

# Commands that need something the test cannot supply; each substring names one.
SKIPPED = {
    "serve-sim": "starts a server in the background",
    "--base-url": "needs the serve-sim server",
    "demo-output/sim.sqlite": "made by the collector run above",
    "results/*": "the reader's AlpacaEval results",
    "model_judgment/": "the reader's arena-hard files",
    "ae.csv": "made by the import above",
    "arena.csv": "made by the import above",
}


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def _shell_commands() -> list[str]:
    commands = []
    for block in _blocks("sh"):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith(".venv/bin/evalgauge"):
                commands.append(line)
    return commands


def test_readme_python_examples_run():
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in _blocks("python"):
            exec(compile(block, "README.md", "exec"), namespace)  # the README is ours, not user input
    text = out.getvalue()
    assert "ANOVA" in text and "REML" in text
    assert isinstance(namespace["design"].facets, tuple)


def test_readme_shell_examples_run(tmp_path):
    commands = _shell_commands()
    assert len(commands) >= 15, "the README's shell examples were not found"
    for name in ("tests", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "demo-output").mkdir()
    ran = 0
    for command in commands:
        if any(marker in command for marker in SKIPPED):
            continue
        argv = [CLI, *shlex.split(command)[1:]]
        proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "COLUMNS": "120"})
        # `balance` exits 3 on an incomplete block by design; nothing here is incomplete
        assert proc.returncode == 0, f"README command failed: {command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        ran += 1
    assert ran >= 10
    assert (tmp_path / "demo-output" / "report.html").exists()


@pytest.mark.parametrize("marker", sorted(SKIPPED))
def test_every_skip_marker_is_still_in_the_readme(marker):
    # a stale marker would silently skip a command that should run
    assert any(marker in command for command in _shell_commands())
