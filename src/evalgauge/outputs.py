"""Writing results without ever losing a user's data.

Three rules, checked before any work is done so that a long fit never ends in a failed write:
no output may be one of the inputs (a run database, a judgments file, a configuration), an
output's folder must exist, and every file is written atomically (a temporary file in the same
folder, then a rename), so a crash or a full disk leaves the old file whole.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .errors import EvalGaugeError
from .results import dumps, json_safe

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_write_with", "check_outputs", "dumps",
           "json_safe"]


def _companions(path: Path) -> list[Path]:
    """A path and the files SQLite keeps beside a database (its WAL and shared memory)."""
    return [path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")]


def _same(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def check_outputs(inputs: Iterable[str | Path | None], outputs: dict[str, str | Path | None]) -> None:
    """Refuse (before any work) an output that is an input, sits in a missing folder, or is a folder.

    ``outputs`` maps the option that names each output (e.g. ``--report``) to its path; ``-`` (stdout)
    and None are skipped.
    """
    ins = [Path(p) for p in inputs if p is not None and str(p) != "-"]
    for option, out in outputs.items():
        if out is None or str(out) == "-":
            continue
        out = Path(out)
        for src in ins:
            if any(_same(out, c) for c in _companions(src)):
                raise EvalGaugeError(f"{option} {out}: that is the input {src}; writing there would destroy it. "
                                     "Choose another output path.")
        if out.is_dir():
            raise EvalGaugeError(f"{option} {out}: is a folder; give a file name inside it.")
        parent = out.parent if str(out.parent) else Path(".")
        if not parent.is_dir():
            raise EvalGaugeError(f"{option} {out}: the folder {parent} does not exist; create it first "
                                 f"(mkdir -p {parent}) or choose another path.")


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder, flushed, then a rename."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    return atomic_write_with(path, write)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_with(path: str | Path, writer) -> Path:
    """``writer(tmp_path)`` writes a file (e.g. ``frame.to_parquet``); it then replaces ``path`` at once."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix or ".tmp", dir=folder)
    os.close(fd)
    try:
        writer(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
