"""One SQLite database per run (WAL): one row per completed call, keyed by its facet levels.

A call is written, in its own transaction, the moment it completes, so a crash,
Ctrl-C or kill -9 loses no completed call; the unique key means a resumed run
never records a call twice. Failed attempts (after retries) go to a separate
table and are tried again on resume. No API key is ever stored.

The budget holds across crashes: before a priced call is sent, its worst-case cost is
committed to ``inflight``; the call's record replaces it in one transaction. Rows
left in ``inflight`` by a run that was killed were calls the provider may have
billed, so the next run moves them to ``unaccounted`` and counts them as spent.
Only one process writes a run database at a time: the writer holds an exclusive ``flock`` on the
database file itself, so a second path to it (a symlink, a hard link, ``..``) meets the same lock.

Readers never write: they open the database read-only (``mode=ro``), and as ``immutable`` when no
writer holds it and no write-ahead log is pending, so an unrelated SQLite file, a read-only mount or
another user's run database is read without a byte of it (or of a companion file) changing.
"""

from __future__ import annotations

import fcntl
import operator
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, fields
from pathlib import Path
from urllib.parse import quote

import pandas as pd

from .errors import DataError

SCHEMA = """
CREATE TABLE IF NOT EXISTS run (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY, item TEXT, category TEXT, system TEXT, variant TEXT, temperature REAL, judge TEXT,
    replicate INTEGER, position TEXT, prompt_hash TEXT, request TEXT, completion TEXT, score REAL,
    parse_error TEXT, model TEXT, response_id TEXT, started_at REAL, finished_at REAL, latency_s REAL,
    input_tokens INTEGER, output_tokens INTEGER, cost_usd REAL, flags TEXT, rule TEXT, finish_reason TEXT,
    distribution TEXT, spread REAL, reasks INTEGER, turns TEXT, cached_tokens INTEGER, cache_write_tokens INTEGER
);
CREATE TABLE IF NOT EXISTS failures (key TEXT, attempts INTEGER, error TEXT, at REAL);
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY, item TEXT, system TEXT, prompt_hash TEXT, response TEXT, model TEXT, response_id TEXT,
    started_at REAL, finished_at REAL, latency_s REAL, input_tokens INTEGER, output_tokens INTEGER, cost_usd REAL
);
CREATE TABLE IF NOT EXISTS inflight (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT, usd REAL, at REAL);
CREATE TABLE IF NOT EXISTS unaccounted (key TEXT, usd REAL, at REAL);
CREATE TABLE IF NOT EXISTS batches (
    local_id TEXT PRIMARY KEY, judge TEXT, protocol TEXT, batch_id TEXT, file_id TEXT, state TEXT, requests INTEGER,
    worst_usd REAL, created_at REAL, ended_at REAL, counts TEXT
);
CREATE TABLE IF NOT EXISTS batch_requests (
    custom_id TEXT PRIMARY KEY, local_id TEXT, key TEXT, reservation INTEGER, state TEXT
);
CREATE TABLE IF NOT EXISTS rescores (
    key TEXT, at REAL, protocol TEXT, old_score REAL, old_parse_error TEXT, old_rule TEXT, score REAL,
    parse_error TEXT, rule TEXT
);
"""

FACETS = ("item", "category", "system", "variant", "temperature", "judge", "replicate", "position")


def cell_key(*levels: str) -> str:
    """A cell's key: its levels joined by ``|``, each with ``\\`` and ``|`` escaped, so that no two cells
    share a key whatever their levels hold (item ``a`` with system ``b|c`` and item ``a|b`` with system ``c``
    are two cells). Levels without either character give the plain ``a|b|c`` of earlier run databases."""
    plain = "|".join(levels)
    if "\\" not in plain and plain.count("|") == len(levels) - 1:  # nothing to escape (one scan, every call)
        return plain
    return "|".join(level.replace("\\", "\\\\").replace("|", "\\|") for level in levels)


def call_key(item: str, system: str | None, variant: str, temperature: float, judge: str, replicate: int,
             position: str | None) -> str:
    """The key of one judge call (a cell of the factorial and its replicate)."""
    return cell_key(item, system or "", variant, f"{temperature:g}", judge, str(replicate), position or "")


#: a writer's write-ahead log is copied into the database after this many pages (SQLite's default: 1,000)
WAL_CHECKPOINT_PAGES = 10_000

#: the run table's entry saying the keys are escaped (:func:`cell_key`); a writer migrates a database without it
KEYS_ESCAPED = "cell_keys_escaped"


# not frozen: a frozen class's __init__ sets each of its 31 fields through object.__setattr__, 5x the cost, once
# per stored call; a record is made once and written, never changed
@dataclass(slots=True)
class CallRecord:
    key: str
    item: str
    category: str | None
    system: str | None
    variant: str
    temperature: float
    judge: str
    replicate: int
    position: str | None
    prompt_hash: str
    request: str  # JSON of the request parameters (never a key)
    completion: str | None
    score: float | None
    parse_error: str | None
    model: str | None
    response_id: str | None
    started_at: float
    finished_at: float
    latency_s: float
    input_tokens: int
    output_tokens: int
    cost_usd: float
    #: what the reply did that was corrected before storing ("implausible usage ...; key-shaped text redacted")
    flags: str | None = None
    #: the verdict protocol's rule that matched ("mt-bench-single: [[N]]"); None for the mode's parser
    rule: str | None = None
    #: why generation stopped ("stop"; "length": cut at max_tokens)
    finish_reason: str | None = None
    #: output = "logprobs": the judge's probability of each scale value (JSON {"1": p, ...}) and its SD
    distribution: str | None = None
    spread: float | None = None
    #: follow-up turns sent after unreadable verdicts, and the earlier turns' answers (JSON list)
    reasks: int = 0
    turns: str | None = None
    #: of input_tokens, those the provider read from its prompt cache and those it wrote to it
    cached_tokens: int = 0
    cache_write_tokens: int = 0


#: Columns a database written before these existed lacks; they are added when it is next written.
OPTIONAL_COLUMNS = {"flags": "TEXT", "rule": "TEXT", "finish_reason": "TEXT", "distribution": "TEXT",
                    "spread": "REAL", "reasks": "INTEGER", "turns": "TEXT", "cached_tokens": "INTEGER",
                    "cache_write_tokens": "INTEGER"}


class RunStore:
    """The run database."""

    def __init__(self, path: str | Path, *, writer: bool = False):
        self.path = Path(path)
        # a file object, not a bare descriptor: a store dropped without close() still frees its lock
        self._lock = None
        with self._guard():
            if writer:
                if self.path.exists() and not self.path.is_file():
                    # SQLite would write its journal beside a device (/dev/null-journal) or fail on a FIFO
                    raise DataError(f"{self.path}: not a regular file; a run database must be one (SQLite keeps "
                                    "its log beside it). Set [run] database to a file path.")
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._lock = self._acquire_lock()
                held = os.fstat(self._lock.fileno())
                self._identity = (held.st_dev, held.st_ino)
                self._size_seen = held.st_size
                self._intact_at = float("-inf")  # when check_intact last passed (time.monotonic)
                self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes
                # the log copied into the file every 10,000 pages (40 MB), not 1,000: the key index's pages are
                # rewritten by many calls between checkpoints and each is copied once a checkpoint (a row's
                # insert ~15% cheaper: 31-column rows, 35-40 us -> 31-33 us)
                self.db.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
            else:
                self.db = self._open_read_only()
        # a text cell that is not UTF-8 reads with U+FFFD in place of its bad bytes, never as an exception
        self.db.text_factory = lambda b: b.decode("utf-8", "replace")
        try:
            self._check_schema(writer)
        except BaseException:
            self.close()
            raise
        self._columns = tuple(f.name for f in fields(CallRecord))
        self._row = operator.attrgetter(*self._columns)  # a record's values in the insert's order
        cols = ", ".join(self._columns)
        marks = ", ".join("?" for _ in fields(CallRecord))
        self._insert = f"INSERT OR IGNORE INTO calls ({cols}) VALUES ({marks})"

    def _open_read_only(self) -> sqlite3.Connection:
        """A connection that cannot write the file: immutable when nothing is writing it, else ``mode=ro``."""
        if not self.path.is_file():
            raise DataError(f"{self.path}: no such run database (or not a regular file).")
        uri = "file:" + quote(str(self.path.resolve()))
        wal = Path(f"{self.path.resolve()}-wal")
        lock = open(self.path, "rb")  # noqa: SIM115 - held until close()
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # a run is writing it: read what it has committed, through its log
            lock.close()
            return sqlite3.connect(uri + "?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
        if wal.exists() and wal.stat().st_size > 0:  # a log a killed run left: only mode=ro reads it
            lock.close()
            return sqlite3.connect(uri + "?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
        self._lock = lock  # held while reading, so no run starts writing under an immutable reader
        return sqlite3.connect(uri + "?immutable=1", uri=True, isolation_level=None, check_same_thread=False)

    def _any_table(self) -> bool:
        with self._guard():
            return self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' LIMIT 1").fetchone() is not None

    def _check_schema(self, writer: bool) -> None:
        with self._guard():
            if writer:
                self.db.executescript(SCHEMA)
            have = {row[1] for row in self.db.execute("PRAGMA table_info(calls)")}
            if writer:
                for name, kind in OPTIONAL_COLUMNS.items():
                    if name not in have:
                        self.db.execute(f"ALTER TABLE calls ADD COLUMN {name} {kind}")
                        have.add(name)
        missing = [f.name for f in fields(CallRecord) if f.name not in have and f.name not in OPTIONAL_COLUMNS]
        if not have and not self._any_table():  # a run that has just created the file has no tables yet
            raise DataError(f"{self.path}: a SQLite database with no calls table yet: an `evalgauge run` may be "
                            "starting on it (read it again in a moment), or the file is not a run database.")
        if missing:
            raise DataError(f"{self.path}: a SQLite database, but not one `evalgauge run` wrote (its calls table has "
                            f"no {', '.join(missing[:4])}). Export the judgments to CSV or Parquet instead.")
        if writer:
            self._escape_keys()

    def _escape_keys(self) -> None:
        """Give the calls and responses whose levels hold ``|`` or ``\\`` their escaped keys (:func:`cell_key`),
        once per database, in one transaction. Their old keys could collide; the levels in their columns
        cannot, so the new keys are computed from them."""
        with self._guard():
            if self.db.execute("SELECT 1 FROM run WHERE key = ?", (KEYS_ESCAPED,)).fetchone():
                return
            def odd(*columns: str) -> str:  # a level holding | or \\ (the rows whose key is escaped)
                return " OR ".join(f"instr(COALESCE({c}, ''), '|') OR instr(COALESCE({c}, ''), '\\')"
                                   for c in columns)

            with self._transaction():
                calls = self.db.execute("SELECT rowid, item, system, variant, temperature, judge, replicate, position "
                                        f"FROM calls WHERE {odd('item', 'system', 'variant', 'judge', 'position')}"
                                        ).fetchall()
                self.db.executemany("UPDATE calls SET key = ? WHERE rowid = ?",
                                    [(call_key(i, s, v, t, j, r, p), rowid) for rowid, i, s, v, t, j, r, p in calls])
                made = self.db.execute(f"SELECT rowid, item, system FROM responses WHERE {odd('item', 'system')}"
                                       ).fetchall()
                self.db.executemany("UPDATE responses SET key = ? WHERE rowid = ?",
                                    [(cell_key(i, s), rowid) for rowid, i, s in made])
                self.db.execute("INSERT OR REPLACE INTO run (key, value) VALUES (?, '1')", (KEYS_ESCAPED,))

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT, rolled back on any error (SQLite may have rolled back itself already)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                with suppress(sqlite3.Error):
                    self.db.execute("ROLLBACK")
            raise

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """SQLite's errors as messages that say what happened to the stored calls and what to do."""
        try:
            yield
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise self._said(exc) from None

    def _said(self, exc: sqlite3.DatabaseError | UnicodeDecodeError) -> DataError:
        """The DataError that says what a SQLite error means for the stored calls and what to do."""
        if not isinstance(exc, sqlite3.OperationalError):  # sqlite may fail to decode its own message
            return DataError(f"{self.path}: not a usable run database, or a damaged one ({exc}); the rows that can "
                             "still be read may be saved with the sqlite3 shell's .recover.")
        text = str(exc)
        if "full" in text:
            return DataError(f"{self.path}: the disk is full; the calls stored so far are kept (the call being "
                             "written was not). Free some space and run again to resume.")
        if "readonly" in text or "read-only" in text or "unable to open" in text:
            return DataError(f"{self.path}: cannot be opened for this ({text}); check the folder's and the "
                             "file's permissions, or copy the database somewhere writable.")
        if "locked" in text or "busy" in text:
            return DataError(f"{self.path}: another process holds the database ({text}); try again when it "
                             "has finished.")
        return DataError(f"{self.path}: not a usable run database ({text}).")

    def _acquire_lock(self):
        """An exclusive lock on the database file itself (released by the OS even after kill -9).

        ``flock`` locks the file, not its name, so every path to it meets the same lock; it is independent
        of SQLite's own (POSIX) locks, and is released only after the connection is closed."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # an empty file is an empty database
        lock = os.fdopen(fd, "r+b")
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise DataError(f"{self.path}: another `evalgauge run` (or a reader) is using this run database; wait "
                            "for it to finish (or stop it) before resuming.") from None
        return lock

    def check_intact(self, max_age: float = 0.0) -> None:
        """A writer's check, before each call is paid for, that its file is still the one it opened: not
        deleted, not replaced by another file at the same path (whose own writer would pay for the same
        cells), not truncated, its SQLite header whole. A DataError saying which, else nothing.

        A stat and a 16-byte read: two system calls, about 15 us of CPU in a busy run. ``max_age``: a check
        passed less than that many seconds ago stands (calls that start together share one)."""
        started = time.monotonic()
        if started - self._intact_at < max_age:
            return
        what = None
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            what = "was deleted"
        except OSError as exc:
            what = f"cannot be read ({exc.strerror})"
        else:
            if (now.st_dev, now.st_ino) != self._identity:
                what = "was replaced by another file (deleted and made again, perhaps by another run)"
            elif now.st_size < self._size_seen:
                what = f"was truncated ({self._size_seen:,} -> {now.st_size:,} bytes)"
            elif now.st_size and os.pread(self._lock.fileno(), 16, 0) != b"SQLite format 3\x00":
                what = "was overwritten (its SQLite header is gone)"
            else:
                self._size_seen = now.st_size
                self._intact_at = started
        if what is not None:
            self._intact_at = float("-inf")  # a failed check leaves no earlier pass standing
            raise DataError(f"{self.path}: the run database {what} during the run")

    def close(self) -> None:
        db = getattr(self, "db", None)
        if db is not None:
            db.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    # -- metadata ------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        with self._guard():
            try:
                row = self.db.execute("SELECT value FROM run WHERE key = ?", (key,)).fetchone()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return None
                raise
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._guard():
            self.db.execute("INSERT OR REPLACE INTO run (key, value) VALUES (?, ?)", (key, value))

    # -- calls ----------------------------------------------------------------
    def done_keys(self) -> set[str]:
        with self._guard():
            return {k for (k,) in self.db.execute("SELECT key FROM calls")}

    def record(self, call: CallRecord, reservation: int | list[int] | None = None) -> bool:
        """Write one completed call and drop its reservations, in one transaction. False if already there."""
        # a flat tuple of the fields (dataclasses.astuple deep-copies each one: a tenth of a call's CPU)
        return self._settle(self._insert, self._row(call), reservation)

    def _settle(self, sql: str, row: tuple, reservation: int | list[int] | None) -> bool:
        """Insert a paid-for row and release its budget reservation atomically: a crash keeps one or the other.

        On an error (a full disk) SQLite may have rolled the transaction back itself; the reservation then
        stays committed, so the call's worst case counts as spent on resume. Once per stored call: written
        out rather than through the context managers, which cost a fifth of it."""
        held = [r for r in (reservation if isinstance(reservation, list) else [reservation]) if r is not None]
        db = self.db
        if not held:  # one statement outside a transaction is its own (the connection autocommits)
            try:
                return db.execute(sql, row).rowcount == 1
            except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
                raise self._said(exc) from None
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                cur = db.execute(sql, row)
                for r in held:
                    db.execute("DELETE FROM inflight WHERE id = ?", (r,))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    with suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise self._said(exc) from None
        return cur.rowcount == 1

    # -- the budget across crashes ---------------------------------------------
    def reserve(self, key: str, usd: float) -> int:
        """Commit a call's worst-case cost before it is sent; the id to release or record it with."""
        try:
            cur = self.db.execute("INSERT INTO inflight (key, usd, at) VALUES (?, ?, ?)", (key, usd, time.time()))
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise self._said(exc) from None
        return int(cur.lastrowid)

    def charge(self, key: str, usd: float) -> None:
        """A reply the provider may have billed without a usable completion: its worst case is spent."""
        with self._guard():
            self.db.execute("INSERT INTO unaccounted (key, usd, at) VALUES (?, ?, ?)", (key, usd, time.time()))

    def release(self, reservation: int) -> None:
        """The call failed without a completion: it was not billed as a completion."""
        with self._guard():
            self.db.execute("DELETE FROM inflight WHERE id = ?", (reservation,))

    def reclaim_inflight(self) -> tuple[int, float]:
        """Calls in flight when an earlier run stopped: count their worst case as spent, once. The lines of a
        batch still open at the provider stay reserved: their results are fetched on resume."""
        lost = "FROM inflight WHERE id NOT IN (SELECT reservation FROM batch_requests WHERE state = 'pending')"
        with self._guard():
            self.db.execute("BEGIN IMMEDIATE")
            n, usd = self.db.execute(f"SELECT COUNT(*), COALESCE(SUM(usd), 0) {lost}").fetchone()
            self.db.execute(f"INSERT INTO unaccounted (key, usd, at) SELECT key, usd, at {lost}")
            self.db.execute(f"DELETE {lost}")
            self.db.execute("COMMIT")
        return int(n), float(usd)

    # -- batches ------------------------------------------------------------------
    def open_batch(self, local_id: str, judge: str, protocol: str, lines: list[tuple[str, str, float]]) -> None:
        """Before a batch is submitted: the batch (state "new"), and each line's custom id, cell key and worst case
        reserved against the budget, in one transaction (a crash keeps all of it or none)."""
        with self._guard(), self._transaction():
            self.db.execute("INSERT INTO batches (local_id, judge, protocol, state, requests, worst_usd, created_at) "
                            "VALUES (?, ?, ?, 'new', ?, ?, ?)",
                            (local_id, judge, protocol, len(lines), sum(u for _, _, u in lines), time.time()))
            now = time.time()
            for custom_id, key, usd in lines:
                cur = self.db.execute("INSERT INTO inflight (key, usd, at) VALUES (?, ?, ?)", (key, usd, now))
                self.db.execute("INSERT OR REPLACE INTO batch_requests VALUES (?, ?, ?, ?, 'pending')",
                                (custom_id, local_id, key, cur.lastrowid))

    def batch_submitted(self, local_id: str, batch_id: str, file_id: str | None = None) -> None:
        with self._guard():
            self.db.execute("UPDATE batches SET batch_id = ?, file_id = ?, state = 'submitted' WHERE local_id = ?",
                            (batch_id, file_id, local_id))

    def batch_state(self, local_id: str, state: str, counts: str | None = None) -> None:
        """A batch's state: "ended" (the provider finished it; its lines are being read) or "ingested"."""
        with self._guard():
            self.db.execute("UPDATE batches SET state = ?, counts = COALESCE(?, counts), ended_at = "
                            "COALESCE(ended_at, ?) WHERE local_id = ?", (state, counts, time.time(), local_id))

    def batches(self) -> list[dict]:
        """Every batch of the run, oldest first."""
        with self._guard():
            cur = self.db.execute("SELECT * FROM batches ORDER BY created_at, local_id")
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur]

    def batch_lines(self, local_id: str) -> dict[str, tuple[str, int]]:
        """A batch's lines still waiting for their result: custom id -> (cell key, reservation)."""
        with self._guard():
            return {c: (k, r) for c, k, r in self.db.execute(
                "SELECT custom_id, key, reservation FROM batch_requests WHERE local_id = ? AND state = 'pending'",
                (local_id,))}

    def has_table(self, name: str) -> bool:
        with self._guard():
            return self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                   (name,)).fetchone() is not None

    def pending_batch_keys(self) -> set[str]:
        with self._guard():
            return {k for (k,) in self.db.execute("SELECT key FROM batch_requests WHERE state = 'pending'")}

    def record_batch_line(self, custom_id: str, call: CallRecord, reservation: int) -> bool:
        """A batch line's call, its reservation released and the line closed, in one transaction."""
        row = self._row(call)
        with self._guard(), self._transaction():
            cur = self.db.execute(self._insert, row)
            self.db.execute("DELETE FROM inflight WHERE id = ?", (reservation,))
            self.db.execute("UPDATE batch_requests SET state = 'done' WHERE custom_id = ?", (custom_id,))
        return cur.rowcount == 1

    def fail_batch_line(self, custom_id: str, key: str, reservation: int, error: str, charged: float = 0.0) -> None:
        """A batch line without a usable result: not billed (errored, expired, canceled), or billed without a
        usable completion (``charged``: its worst case, spent); the cell is asked again."""
        with self._guard(), self._transaction():
            self.db.execute("DELETE FROM inflight WHERE id = ?", (reservation,))
            if charged:
                self.db.execute("INSERT INTO unaccounted (key, usd, at) VALUES (?, ?, ?)", (key, charged, time.time()))
            self.db.execute("UPDATE batch_requests SET state = 'failed' WHERE custom_id = ?", (custom_id,))
            self.db.execute("INSERT INTO failures (key, attempts, error, at) VALUES (?, 1, ?, ?)",
                            (key, error, time.time()))

    def record_failure(self, key: str, attempts: int, error: str) -> None:
        with self._guard():
            self.db.execute("INSERT INTO failures (key, attempts, error, at) VALUES (?, ?, ?, ?)",
                            (key, attempts, error, time.time()))

    def cost(self) -> float:
        """Money spent so far: judge calls, generated responses, and the worst case of calls lost in flight."""
        total = 0.0
        with self._guard():
            for table in ("calls", "responses"):
                total += float(self.db.execute(f"SELECT COALESCE(SUM(cost_usd), 0) FROM {table}").fetchone()[0])
            total += float(self.db.execute("SELECT COALESCE(SUM(usd), 0) FROM unaccounted").fetchone()[0])
            total += float(self.db.execute("SELECT COALESCE(SUM(usd), 0) FROM inflight").fetchone()[0])
        return total

    def record_response(self, row: tuple, reservation: int | None = None) -> bool:
        return self._settle("INSERT OR IGNORE INTO responses VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", row, reservation)

    def responses(self) -> dict[tuple[str, str], str]:
        with self._guard():
            rows = self.db.execute("SELECT item, system, response FROM responses WHERE response IS NOT NULL")
            return {(i, s): r for i, s, r in rows}

    def done_generations(self) -> set[str]:
        with self._guard():
            return {k for (k,) in self.db.execute("SELECT key FROM responses")}

    def count(self) -> int:
        with self._guard():
            return int(self.db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def rescore(self, read, protocol: str) -> tuple[int, int]:
        """Each stored completion read again by ``read(completion, position, cut) -> (score, error, rule)``
        (``cut``: the reply was cut at max_tokens), in one transaction; the earlier parse of every changed call
        is kept in ``rescores``. (changed, calls)."""
        with self._guard():
            rows = self.db.execute("SELECT key, completion, position, score, parse_error, rule, finish_reason "
                                   "FROM calls").fetchall()
            changed = []
            for key, completion, position, score, error, rule, finish in rows:
                new = read(completion, position, finish == "length")
                if (new[0], new[1], new[2]) != (score, error, rule):
                    changed.append((key, score, error, rule, *new))
            now = time.time()
            with self._transaction():
                self.db.executemany("INSERT INTO rescores VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                    [(k, now, protocol, s, e, ru, ns, ne, r)
                                     for k, s, e, ru, ns, ne, r in changed])
                self.db.executemany("UPDATE calls SET score = ?, parse_error = ?, rule = ? WHERE key = ?",
                                    [(ns, ne, r, k) for k, _, _, _, ns, ne, r in changed])
        return len(changed), len(rows)

    def calls(self) -> pd.DataFrame:
        return self._frame("SELECT * FROM calls ORDER BY rowid")

    def call_columns(self) -> dict[str, str]:
        """The calls table's columns and their declared types (TEXT, REAL, INTEGER)."""
        with self._guard():
            return {name: kind.upper() for _, name, kind, *_ in self.db.execute("PRAGMA table_info(calls)")}

    def call_chunks(self, columns: list[str], size: int = 100_000, *, text_cell=None) -> Iterator[list[tuple]]:
        """The calls' ``columns`` in the order they were stored, ``size`` rows at a time: a run of millions of
        calls is read in pieces, never whole. ``text_cell(value)``: applied to each text cell that starts with
        a character a spreadsheet reads as a formula's (:func:`evalgauge.outputs.csv_safe`); SQLite picks
        those cells out, so the function runs on them only."""
        # the names come from call_columns (the table's own): quoted as identifiers, never spliced from input
        quoted = ['"' + c.replace('"', '""') + '"' for c in columns]
        if text_cell is not None:  # on the columns declared TEXT (a number column holds text only by hand edits)
            self.db.create_function("text_cell", 1, text_cell, deterministic=True)
            starts = "('=', '+', '-', '@', char(9), char(13))"
            kinds = self.call_columns()
            quoted = [f"CASE WHEN substr({q}, 1, 1) IN {starts} AND typeof({q}) = 'text' THEN text_cell({q}) "
                      f"ELSE {q} END" if kinds.get(c, "TEXT") not in ("REAL", "INTEGER") else q
                      for c, q in zip(columns, quoted, strict=True)]
        cols = ", ".join(quoted)
        with self._guard():
            cursor = self.db.execute(f"SELECT {cols} FROM calls ORDER BY rowid")
            while rows := cursor.fetchmany(size):
                yield rows

    def distinct_counts(self, columns: list[str]) -> dict[str, int]:
        """How many distinct non-empty values each of ``columns`` holds (one scan of the calls)."""
        quoted = ['"' + c.replace('"', '""') + '"' for c in columns]
        with self._guard():
            row = self.db.execute(f"SELECT {', '.join(f'COUNT(DISTINCT {q})' for q in quoted)} FROM calls").fetchone()
        return dict(zip(columns, (int(v) for v in row), strict=True))

    def failures(self) -> pd.DataFrame:
        return self._frame("SELECT * FROM failures ORDER BY rowid")

    def _frame(self, sql: str) -> pd.DataFrame:
        try:
            return pd.read_sql_query(sql, self.db)
        except (sqlite3.DatabaseError, pd.errors.DatabaseError, UnicodeDecodeError) as exc:
            raise DataError(f"{self.path}: the run database is damaged ({exc.__cause__ or exc}); the rows that "
                            "can still be read may be saved with the sqlite3 shell's .recover.") from None
