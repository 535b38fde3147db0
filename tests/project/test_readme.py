"""The documentation's runnable examples run (the README and every page under docs/): every Python block, and
every shell command that needs neither a network server nor files the reader brings (those are listed, with
why, in SKIPPED). docs/index.md is the README with its links made relative to the site."""

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

from conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
#: the README, then the site's pages in the order mkdocs.yml lists them (the home page is the README's copy)
PAGES = [ROOT / "README.md"] + [ROOT / "docs" / p for p in re.findall(r":\s*(\S+\.md)\s*$",
                                                                      (ROOT / "mkdocs.yml").read_text(), flags=re.M)
                                 if p != "index.md"]
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


def _blocks(language: str, text: str | None = None) -> list[str]:
    texts = [text] if text is not None else [p.read_text(encoding="utf-8") for p in PAGES]
    return [b for t in texts for b in re.findall(rf"```{language}\n(.*?)```", t, flags=re.S)]


def _shell_commands() -> list[str]:
    commands = []
    for block in _blocks("sh"):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith(".venv/bin/evalgauge"):
                commands.append(line)
    return commands


@pytest.mark.subprocess
def test_readme_python_examples_run():
    out = io.StringIO()
    namespaces = {}
    with contextlib.redirect_stdout(out):
        for page in PAGES:  # each page's blocks in order, in one namespace per page
            namespace: dict = {}
            for block in _blocks("python", page.read_text(encoding="utf-8")):
                exec(compile(block, str(page.relative_to(ROOT)), "exec"), namespace)  # our docs, not user input
            namespaces[str(page.relative_to(ROOT))] = namespace
    text = out.getvalue()
    assert "ANOVA" in text and "REML" in text
    assert isinstance(namespaces["docs/guide/python.md"]["design"].facets, tuple)
    assert "fit" in namespaces["README.md"]


def test_the_sites_home_page_is_the_readme():
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    readme = README.replace("](docs/", "](")
    head = readme.split("## Documentation")[0]
    assert home.startswith(head), "docs/index.md: copy the README's text (links made relative) before Documentation"


def test_the_readme_stays_short():
    assert len(README.splitlines()) <= 300


@pytest.mark.subprocess
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
        assert proc.returncode == 0, \
            f"documented command failed: {command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        ran += 1
    assert ran >= 10
    assert (tmp_path / "demo-output" / "report.html").exists()


@pytest.mark.parametrize("marker", sorted(SKIPPED))
def test_every_skip_marker_is_still_in_the_docs(marker):
    # a stale marker would silently skip a command that should run
    assert any(marker in command for command in _shell_commands())
