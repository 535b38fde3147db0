"""The run database at its edges: one writer whatever the path, readers that never write, and a
damaged or full database answered with a message that keeps the stored calls."""

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT
from evalgauge.cli import main
from evalgauge.errors import DataError
from evalgauge.store import RunStore
from records import run_database, stored_record


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("link", ["symlink", "hardlink", "dotdot"])
def test_one_writer_whatever_the_path(tmp_path, link):
    db = run_database(tmp_path / "run.sqlite", n=2)
    other = tmp_path / "other.sqlite"
    if link == "symlink":
        other.symlink_to(db)
    elif link == "hardlink":
        os.link(db, other)
    else:
        (tmp_path / "sub").mkdir()
        other = tmp_path / "sub" / ".." / "run.sqlite"
    first = RunStore(db, writer=True)
    try:
        with pytest.raises(DataError, match="another `evalgauge run`"):
            RunStore(other, writer=True)
    finally:
        first.close()
    RunStore(other, writer=True).close()  # free again once the first writer is done
    assert not list(tmp_path.glob("*.lock"))  # no lock file by name


def test_reading_an_unrelated_sqlite_file_changes_nothing(tmp_path):
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (a, b)")
    con.execute("INSERT INTO t VALUES (1, 2)")
    con.commit()
    con.close()
    before = _digest(tmp_path)
    for args in (["components", str(other)], ["analyze", str(other)], ["export", str(other), "-o",
                                                                        str(tmp_path / "x.csv")]):
        out = CliRunner().invoke(main, args)
        assert out.exit_code != 0 and "not one `evalgauge run` wrote" in out.output, out.output
        assert "Traceback" not in out.output
    assert _digest(tmp_path) == before  # no WAL switch, no tables, no companion files


@pytest.mark.subprocess
def test_reading_a_run_database_writes_nothing_and_needs_no_write_access(tmp_path):
    db = run_database(tmp_path / "run.sqlite")
    before = _digest(tmp_path)
    mtime = db.stat().st_mtime_ns
    for args in (["components", str(db)], ["analyze", str(db), "--json", "-"], ["run", "--help"]):
        out = CliRunner().invoke(main, args)
        assert out.exit_code == 0, out.output
    assert _digest(tmp_path) == before and db.stat().st_mtime_ns == mtime
    # a read-only folder and file, as another user sees them (the CLI as its own process, as nobody)
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed: cannot drop root to check a read-only database")
    folder = Path(tempfile.mkdtemp(dir="/tmp"))  # every parent traversable by another user
    try:
        shutil.copy(db, folder / "run.sqlite")
        os.chmod(folder / "run.sqlite", 0o444)
        os.chmod(folder, 0o555)
        before = _digest(folder)
        cmd = [sys.executable, "-m", "evalgauge.cli", "components", str(folder / "run.sqlite")]
        if os.geteuid() == 0:
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd="/")
        assert out.returncode == 0 and "judge" in out.stdout, out.stdout + out.stderr
        assert _digest(folder) == before
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(folder)


def test_a_reader_beside_a_live_writer_sees_what_it_committed(tmp_path):
    db = run_database(tmp_path / "run.sqlite", n=3)
    writer = RunStore(db, writer=True)
    try:
        writer.record(stored_record(99, key="late"))
        reader = RunStore(db)
        try:
            assert reader.count() == 3 * 4 + 1
        finally:
            reader.close()
        writer.record(stored_record(100, key="later"))  # the reader's close left the writer's locks alone
    finally:
        writer.close()
    assert RunStore(db).count() == 3 * 4 + 2


def test_a_damaged_run_database_is_a_message_not_a_traceback(tmp_path):
    db = run_database(tmp_path / "run.sqlite")
    raw = bytearray(db.read_bytes())
    raw[100:4000] = os.urandom(3900)  # the header's tail and the schema page
    db.write_bytes(bytes(raw))
    for args in (["components", str(db)], ["analyze", str(db)], ["export", str(db), "-o", str(tmp_path / "o.csv")]):
        out = CliRunner().invoke(main, args)
        assert out.exit_code != 0 and "Traceback" not in out.output and str(db) in out.output, out.output
    with pytest.raises(DataError, match="run database"):
        RunStore(db, writer=True).cost()


def test_a_full_disk_keeps_every_stored_call_and_says_what_to_do(tmp_path):
    db = tmp_path / "run.sqlite"
    store = RunStore(db, writer=True)
    store.db.execute("PRAGMA max_page_count = 12")  # SQLite's 'database or disk is full' at page 12
    stored = 0
    with pytest.raises(DataError, match=r"disk is full.*calls stored so far are kept"):
        for i in range(10_000):
            reservation = store.reserve(f"k{i}", 1e-5)
            store.record(stored_record(i, completion="x" * 400), reservation)
            stored += 1
    store.close()
    again = RunStore(db)
    try:
        assert again.count() == stored > 0
    finally:
        again.close()


@pytest.mark.parametrize("special", ["null", "fifo", "folder"])
def test_a_run_database_that_is_not_a_regular_file_is_refused_and_nothing_is_left_beside_it(tmp_path, special):
    """database = "/dev/null" once left /dev/null-journal in /dev: a device, a FIFO or a folder is refused
    before SQLite opens it (the device here is a symlink to /dev/null in the test's folder)."""
    from evalgauge.errors import DataError
    from evalgauge.store import RunStore

    path = tmp_path / "run.sqlite"
    if special == "null":
        path.symlink_to("/dev/null")
    elif special == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(DataError, match="not a regular file"):
        RunStore(path, writer=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def _paced_run(tmp_path, on_request, *, items=12):
    """A factorial of 12 items x 2 systems x 2 variants x 2 replicates (96 calls, 4 in flight) against the
    loopback server, each reply 20 ms late, ``on_request(n, database)`` called as request n arrives."""
    from evalgauge.collect.config import load_config
    from hostile import HostileServer, hostile_config
    from serve_sim import KEY

    holder = {}
    server = HostileServer("good", KEY, delay=0.02, on_request=lambda n: on_request(n, holder["db"]))
    config = hostile_config(tmp_path, server)
    import pandas as pd

    pd.DataFrame({"id": [f"q{i:02d}" for i in range(items)], "text": [f"Q{i}?" for i in range(items)]}).to_csv(
        tmp_path / "items.csv", index=False)
    pd.DataFrame([(f"q{i:02d}", f"s{s}", f"A{s}{i}") for i in range(items) for s in range(2)],
                 columns=["item", "system", "response"]).to_csv(tmp_path / "responses.csv", index=False)
    cfg = load_config(config)
    holder["db"] = cfg.database
    return server, cfg


@pytest.mark.parametrize("fault", ["delete", "truncate", "overwrite"])
def test_a_run_whose_database_is_deleted_or_damaged_stops_at_once(tmp_path, monkeypatch, fault):
    from evalgauge.collect.runner import run
    from serve_sim import KEY

    monkeypatch.setenv("SIM_KEY", KEY)

    def damage(n, db):
        if n == 20:
            if fault == "delete":
                os.unlink(db)
            elif fault == "truncate":
                os.truncate(db, 0)
            else:
                with open(db, "r+b") as fh:
                    fh.write(b"\0" * 100)

    server, cfg = _paced_run(tmp_path, damage)
    try:
        with pytest.raises(DataError, match="during the run; the run stopped at once") as err:
            run(cfg)
    finally:
        server.stop()
    assert server.requests <= 20 + 4 + 1  # the calls in flight then, no more (96 were planned)
    assert "paid for" in str(err.value) and KEY not in str(err.value)


def test_a_second_run_on_a_recreated_path_stops_the_first(tmp_path, monkeypatch):
    """The first run's file is deleted and a second run starts on the same path (a new file, its own lock):
    the first stops at its next call, so no cell is paid twice beyond the calls it had in flight."""
    from evalgauge.collect.runner import run
    from serve_sim import KEY

    monkeypatch.setenv("SIM_KEY", KEY)
    second = {}

    def start_second(n, db):
        if n == 20:
            os.unlink(db)
            second["store"] = RunStore(db, writer=True)  # a second writer takes the path (and holds it)

    server, cfg = _paced_run(tmp_path, start_second)
    try:
        with pytest.raises(DataError, match=r"replaced by another file|was deleted"):
            run(cfg)
    finally:
        server.stop()
        if "store" in second:
            second["store"].close()
    assert server.requests <= 25


@pytest.mark.subprocess
@pytest.mark.parametrize("signame,after", [("SIGTERM", 5), ("SIGTERM", 17), ("SIGTERM", 33), ("SIGINT", 9),
                                           ("SIGINT", 41)])
def test_a_signal_during_a_run_stops_it_cleanly_and_a_resume_finishes(tmp_path, monkeypatch, signame, after):
    """SIGTERM (or Ctrl-C) while calls are in flight: the run cancels them where they wait and closes its
    sessions (no traceback: aiohttp's once reached the terminal), exits 143 (130), keeps every stored call,
    and a resume sends only what is missing."""
    import signal
    import subprocess
    import sys
    import time

    from serve_sim import KEY

    monkeypatch.setenv("SIM_KEY", KEY)
    sent = {}

    def on_request(n, db):
        if n == after and "proc" in sent:
            sent["proc"].send_signal(getattr(signal, signame))

    server, cfg = _paced_run(tmp_path, on_request)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "evalgauge.cli", "run", str(cfg.path), "--no-progress"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sent["proc"] = proc
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == (130 if signame == "SIGINT" else 143), (out, err)
        assert "Traceback" not in out + err and "Unclosed" not in out + err and "Task exception" not in err, err
        assert f"stopped by {signame}" in out + err
        con = sqlite3.connect(cfg.database)
        stored = con.execute("SELECT COUNT(*), COUNT(DISTINCT key) FROM calls").fetchone()
        con.close()
        assert stored[0] == stored[1] and after - 5 <= stored[0] < 96
        t0 = time.monotonic()
        again = subprocess.run([sys.executable, "-m", "evalgauge.cli", "run", str(cfg.path), "--no-progress"],
                               capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        assert time.monotonic() - t0 < 60
    finally:
        server.stop()
    con = sqlite3.connect(cfg.database)
    assert con.execute("SELECT COUNT(*), COUNT(DISTINCT key) FROM calls").fetchone() == (96, 96)
    con.close()
    assert server.requests <= 96 + 4  # at most the calls in flight at the signal were sent twice


def test_a_database_a_run_has_just_created_says_so_not_that_it_is_foreign(tmp_path):
    """Between creating the file and writing its tables, a run database is an empty SQLite file: a reader
    (a progress poll, `analyze` started too early) is told a run may be starting, not that another tool wrote it."""
    empty = tmp_path / "t.sqlite"
    sqlite3.connect(empty).close()
    with pytest.raises(DataError, match="no calls table yet: an `evalgauge run` may be starting"):
        RunStore(empty)
