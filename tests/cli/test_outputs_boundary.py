"""Outputs never replace an input, a companion file, another output or a special file, and keep the umask."""

import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge.cli import main
from records import run_database
from serve_sim import write_config


def _judgments(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    rows = [(f"i{i}", f"j{j}", r, float(rng.normal())) for i in range(12) for j in range(3) for r in (1, 2)]
    path = tmp_path / "data.csv"
    pd.DataFrame(rows, columns=["item", "judge", "replicate", "score"]).to_csv(path, index=False)
    return path


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_the_run_reads_its_items_and_responses_so_no_output_lands_on_them(tmp_path):
    config = write_config(tmp_path, 1)
    for name in ("items.csv", "responses.csv"):
        before = (tmp_path / name).read_bytes()
        out = _invoke("run", config, "--dry-run", "--json", tmp_path / name)
        assert out.exit_code == 2 and "that is the input" in out.output, out.output
        assert (tmp_path / name).read_bytes() == before


def test_a_default_export_name_never_replaces_an_existing_file(tmp_path):
    db = run_database(tmp_path / "study.sqlite", n=2)
    (tmp_path / "study.csv").write_text("mine\n")
    out = _invoke("export", db)
    assert out.exit_code == 2 and "exists" in out.output and "--force" in out.output
    assert (tmp_path / "study.csv").read_text() == "mine\n"
    assert _invoke("export", db, "--force").exit_code == 0
    assert (tmp_path / "study.csv").read_text() != "mine\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_two_outputs_on_one_path_and_a_companion_are_refused(tmp_path):
    data = _judgments(tmp_path)
    out = _invoke("analyze", data, "--report", tmp_path / "x.html", "--json", tmp_path / "x.html")
    assert out.exit_code == 2 and "writes there too" in out.output, out.output
    db = run_database(tmp_path / "run.sqlite", n=12)
    out = _invoke("components", db, "--json", f"{db}.lock")
    assert out.exit_code == 2 and "that is the input" in out.output, out.output


def _device(folder: Path, name: str, minor: int) -> Path:
    """A character device of our own (1,3 is null, 1,7 is full), so that a regression replaces a file in
    the test's folder and never the machine's /dev/null."""
    path = folder / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except (PermissionError, OSError):
        pytest.skip("cannot make a device node here (not root, or a nodev file system)")
    return path


@pytest.mark.subprocess
def test_special_files_are_written_in_place_and_stdout_is_dash_everywhere(tmp_path):
    data = _judgments(tmp_path)
    null = _device(tmp_path, "null", 3)
    for args in (["components", data, "--json", null], ["analyze", data, "--report", null, "--json", null]):
        out = _invoke(*args)
        assert stat.S_ISCHR(os.stat(null).st_mode), "the device was replaced by a file"
        assert out.exit_code in (0, 2), out.output
    full = _device(tmp_path, "full", 7)
    out = _invoke("analyze", data, "--report", full)
    assert out.exit_code == 2 and "Traceback" not in out.output and stat.S_ISCHR(os.stat(full).st_mode)
    wide = tmp_path / "wide.csv"
    pd.DataFrame({"item": ["a", "b"], "j1": [1.0, 2.0], "j2": [2.0, 3.0]}).to_csv(wide, index=False)
    out = _invoke("import", "wide", wide, "--id", "item=item", "--columns", "judge=j1,j2", "-o", "-")
    assert out.exit_code == 0 and "item,judge,score" in out.output, out.output
    here = Path.cwd()
    assert not (here / "-").exists()
    out = _invoke("export", run_database(tmp_path / "r.sqlite", n=2), "-o", "-")
    assert out.exit_code == 0 and out.output.startswith("key,") and not (here / "-").exists()


def test_a_symlinked_output_is_written_through_and_files_keep_the_umask(tmp_path):
    data = _judgments(tmp_path)
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    old = os.umask(0o022)
    try:
        assert _invoke("components", data, "--json", link).exit_code == 0
        assert link.is_symlink() and '"components"' in target.read_text()
        fresh = tmp_path / "fresh.json"
        assert _invoke("components", data, "--json", fresh).exit_code == 0
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
    finally:
        os.umask(old)


def _interrupted_write(tmp_path: Path, sig: int) -> Path:
    """A process writing an output, killed by ``sig`` mid-write; the output's path."""
    import subprocess
    import sys
    import time

    target = tmp_path / "out.csv"
    target.write_text("the old contents\n")
    script = (
        "import sys, time\n"
        "from evalgauge.outputs import atomic_write_with, exit_on_terminate\n"
        "exit_on_terminate()\n"
        "def slow(tmp):\n"
        "    with open(tmp, 'w') as fh:\n"
        "        fh.write('half of the new'); fh.flush(); print('writing', flush=True); time.sleep(30)\n"
        f"atomic_write_with({str(target)!r}, slow)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(sig)
    proc.wait(20)
    time.sleep(0.1)
    assert target.read_text() == "the old contents\n"  # never half-written, whatever killed the writer
    return target


def test_an_interrupted_write_keeps_the_old_file_and_leaves_nothing_behind(tmp_path):
    import signal

    target = _interrupted_write(tmp_path, signal.SIGTERM)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]
    # kill -9 runs no clean-up: its temporary file goes with the next write of that output
    _interrupted_write(tmp_path, signal.SIGKILL)
    assert len(list(tmp_path.iterdir())) == 2
    from evalgauge.outputs import atomic_write_text

    atomic_write_text(target, "new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"] and target.read_text() == "new\n"
