"""Writing results without ever losing a user's data.

Three rules, checked before any work is done so that a long fit never ends in a failed write:
no output may be one of the inputs (a run database, a judgments file, a configuration), an
output's folder must exist, and every file is written atomically (a temporary file in the same
folder, then a rename), so a crash or a full disk leaves the old file whole.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import EvalGaugeError


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


def json_safe(value: Any) -> Any:
    """The one JSON sanitiser: NaN and infinities become null, numpy scalars and arrays plain Python.

    Every JSON evalgauge writes goes through here, so no output is invalid JSON (``NaN`` is not JSON).
    """
    import numpy as np

    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        value = float(value)
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, str):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    try:
        import pandas as pd

        if value is pd.NA or value is pd.NaT:
            return None
    except ImportError:  # pragma: no cover
        pass
    return str(value)


def dumps(payload: Any, indent: int | None = 2) -> str:
    return json.dumps(json_safe(payload), indent=indent, allow_nan=False)
