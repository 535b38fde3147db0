"""One SQLite database per run (WAL): one row per completed call, keyed by its facet levels.

A call is written, in its own transaction, the moment it completes, so a crash,
Ctrl-C or kill -9 loses no completed call; the unique key means a resumed run
never records a call twice. Failed attempts (after retries) go to a separate
table and are tried again on resume. No API key is ever stored.

The budget holds across crashes: before a priced call is sent, its worst-case cost is
committed to ``inflight``; the call's record replaces it in one transaction. Rows
left in ``inflight`` by a run that was killed were calls the provider may have
billed, so the next run moves them to ``unaccounted`` and counts them as spent.
Only one process writes a run database at a time (a lock file beside it).
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from dataclasses import dataclass, fields
from pathlib import Path

import pandas as pd

from ..errors import DataError

SCHEMA = """
CREATE TABLE IF NOT EXISTS run (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY, item TEXT, category TEXT, system TEXT, variant TEXT, temperature REAL, judge TEXT,
    replicate INTEGER, position TEXT, prompt_hash TEXT, request TEXT, completion TEXT, score REAL,
    parse_error TEXT, model TEXT, response_id TEXT, started_at REAL, finished_at REAL, latency_s REAL,
    input_tokens INTEGER, output_tokens INTEGER, cost_usd REAL
);
CREATE TABLE IF NOT EXISTS failures (key TEXT, attempts INTEGER, error TEXT, at REAL);
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY, item TEXT, system TEXT, prompt_hash TEXT, response TEXT, model TEXT, response_id TEXT,
    started_at REAL, finished_at REAL, latency_s REAL, input_tokens INTEGER, output_tokens INTEGER, cost_usd REAL
);
CREATE TABLE IF NOT EXISTS inflight (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT, usd REAL, at REAL);
CREATE TABLE IF NOT EXISTS unaccounted (key TEXT, usd REAL, at REAL);
"""

FACETS = ("item", "category", "system", "variant", "temperature", "judge", "replicate", "position")


@dataclass(frozen=True)
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


class RunStore:
    """The run database."""

    def __init__(self, path: str | Path, *, writer: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = self._acquire_lock() if writer else None
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes
            self.db.executescript(SCHEMA)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # sqlite may fail to decode its own message
            raise DataError(f"{self.path}: not a usable run database ({exc}).") from None
        try:
            have = {row[1] for row in self.db.execute("PRAGMA table_info(calls)")}
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            self.db.close()
            raise DataError(f"{self.path}: not a usable run database ({exc}).") from None
        missing = [f.name for f in fields(CallRecord) if f.name not in have]
        if missing:
            self.db.close()
            raise DataError(f"{self.path}: a SQLite database, but not one `evalgauge run` wrote (its calls table has "
                            f"no {', '.join(missing[:4])}). Export the judgments to CSV or Parquet instead.")
        self._columns = tuple(f.name for f in fields(CallRecord))
        cols = ", ".join(self._columns)
        marks = ", ".join("?" for _ in fields(CallRecord))
        self._insert = f"INSERT OR IGNORE INTO calls ({cols}) VALUES ({marks})"

    def _acquire_lock(self) -> int:
        """An exclusive lock for the run's writer (released by the OS even after kill -9)."""
        fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataError(f"{self.path}: another `evalgauge run` is writing to this run database; wait for it "
                            "to finish (or stop it) before resuming.") from None
        return fd

    def close(self) -> None:
        self.db.close()
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    # -- metadata ------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM run WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO run (key, value) VALUES (?, ?)", (key, value))

    # -- calls ----------------------------------------------------------------
    def done_keys(self) -> set[str]:
        return {k for (k,) in self.db.execute("SELECT key FROM calls")}

    def record(self, call: CallRecord, reservation: int | None = None) -> bool:
        """Write one completed call and drop its reservation, in one transaction. False if already there."""
        # a flat tuple of the fields (dataclasses.astuple deep-copies each one: a tenth of a call's CPU)
        return self._settle(self._insert, tuple(getattr(call, name) for name in self._columns), reservation)

    def _settle(self, sql: str, row: tuple, reservation: int | None) -> bool:
        """Insert a paid-for row and release its budget reservation atomically: a crash keeps one or the other."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            cur = self.db.execute(sql, row)
            if reservation is not None:
                self.db.execute("DELETE FROM inflight WHERE id = ?", (reservation,))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return cur.rowcount == 1

    # -- the budget across crashes ---------------------------------------------
    def reserve(self, key: str, usd: float) -> int:
        """Commit a call's worst-case cost before it is sent; the id to release or record it with."""
        cur = self.db.execute("INSERT INTO inflight (key, usd, at) VALUES (?, ?, ?)", (key, usd, time.time()))
        return int(cur.lastrowid)

    def release(self, reservation: int) -> None:
        """The call failed without a completion: it was not billed as a completion."""
        self.db.execute("DELETE FROM inflight WHERE id = ?", (reservation,))

    def reclaim_inflight(self) -> tuple[int, float]:
        """Calls in flight when an earlier run stopped: count their worst case as spent, once."""
        self.db.execute("BEGIN IMMEDIATE")
        n, usd = self.db.execute("SELECT COUNT(*), COALESCE(SUM(usd), 0) FROM inflight").fetchone()
        self.db.execute("INSERT INTO unaccounted (key, usd, at) SELECT key, usd, at FROM inflight")
        self.db.execute("DELETE FROM inflight")
        self.db.execute("COMMIT")
        return int(n), float(usd)

    def record_failure(self, key: str, attempts: int, error: str) -> None:
        self.db.execute("INSERT INTO failures (key, attempts, error, at) VALUES (?, ?, ?, ?)",
                        (key, attempts, error, time.time()))

    def cost(self) -> float:
        """Money spent so far: judge calls, generated responses, and the worst case of calls lost in flight."""
        total = 0.0
        for table in ("calls", "responses"):
            total += float(self.db.execute(f"SELECT COALESCE(SUM(cost_usd), 0) FROM {table}").fetchone()[0])
        total += float(self.db.execute("SELECT COALESCE(SUM(usd), 0) FROM unaccounted").fetchone()[0])
        total += float(self.db.execute("SELECT COALESCE(SUM(usd), 0) FROM inflight").fetchone()[0])
        return total

    def record_response(self, row: tuple, reservation: int | None = None) -> bool:
        return self._settle("INSERT OR IGNORE INTO responses VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", row, reservation)

    def responses(self) -> dict[tuple[str, str], str]:
        rows = self.db.execute("SELECT item, system, response FROM responses WHERE response IS NOT NULL")
        return {(i, s): r for i, s, r in rows}

    def done_generations(self) -> set[str]:
        return {k for (k,) in self.db.execute("SELECT key FROM responses")}

    def count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def calls(self) -> pd.DataFrame:
        return self._frame("SELECT * FROM calls ORDER BY rowid")

    def failures(self) -> pd.DataFrame:
        return self._frame("SELECT * FROM failures ORDER BY rowid")

    def _frame(self, sql: str) -> pd.DataFrame:
        try:
            return pd.read_sql_query(sql, self.db)
        except (sqlite3.DatabaseError, pd.errors.DatabaseError, UnicodeDecodeError) as exc:
            raise DataError(f"{self.path}: the run database is damaged ({exc.__cause__ or exc}); the rows that "
                            "can still be read may be saved with the sqlite3 shell's .recover.") from None
