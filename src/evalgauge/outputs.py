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

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_write_with", "check_new", "check_outputs", "dumps",
           "is_special", "json_safe"]


def _companions(path: Path) -> list[Path]:
    """A path and the files kept beside a database (SQLite's WAL, shared memory, journal; a .lock file)."""
    return [path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal"), Path(f"{path}.lock")]


def is_special(path: Path) -> bool:
    """A device, FIFO or socket (``/dev/null``, ``/dev/stdout``): written in place, never replaced."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


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
    seen: dict[Path, str] = {}
    for option, out in outputs.items():
        if out is None or str(out) == "-":
            continue
        out = Path(out)
        if is_special(out):
            continue  # a device or FIFO is written in place: it cannot be an input's data
        for other, other_option in seen.items():
            if _same(out, other):
                raise EvalGaugeError(f"{option} {out}: {other_option} writes there too; give each output its own "
                                     "path.")
        seen[out] = option
        for src in ins:
            if any(_same(out, c) for c in _companions(src)):
                raise EvalGaugeError(f"{option} {out}: that is the input {src}; writing there would destroy it. "
                                     "Choose another output path.")
            if src.is_dir() and Path(os.path.realpath(_target(out))).is_relative_to(os.path.realpath(src)):
                raise EvalGaugeError(f"{option} {out}: inside the input dataset {src}, whose parts are read from "
                                     "that folder; choose a path outside it.")
        if out.is_dir():
            raise EvalGaugeError(f"{option} {out}: is a folder; give a file name inside it.")
        parent = _target(out).parent
        if not parent.is_dir():
            raise EvalGaugeError(f"{option} {out}: the folder {parent} does not exist; create it first "
                                 f"(mkdir -p {parent}) or choose another path.")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise EvalGaugeError(f"{option} {out}: the folder {parent} is not writable; choose another path.")


def check_new(option: str, path: str | Path, force: bool) -> None:
    """A default output name never replaces an existing file unless the user says ``--force``."""
    path = Path(path)
    if path.exists() and not is_special(path) and not force:
        raise EvalGaugeError(f"{option} {path}: the file exists; give another path with {option}, or --force to "
                             "replace it.")


def _target(path: Path) -> Path:
    """Where a write to ``path`` lands: a symlink's target (the link itself stays), else the path."""
    path = Path(path)
    if path.is_symlink():
        return Path(os.path.realpath(path))
    return path if str(path.parent) else Path(".") / path


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
    """``writer(tmp_path)`` writes a file (e.g. ``frame.to_parquet``); it then replaces ``path`` at once.

    A symlink is written through (its target is replaced, the link stays); a device or FIFO
    (``/dev/null``, ``/dev/stdout``) is written in place, never turned into a regular file. The new
    file gets the mode the umask gives (or the mode of the file it replaces), not mkstemp's 0600.
    """
    path = Path(path)
    try:
        return _atomic_write(path, writer)
    except OSError as exc:  # a full disk, a full device, a folder made read-only since the check
        raise EvalGaugeError(f"{path}: could not be written ({exc.strerror or exc}); nothing was replaced. Free "
                             "space or choose another path.") from None


def _atomic_write(path: Path, writer) -> Path:
    if is_special(path):
        return _write_special(path, writer)
    target = _target(path)
    _remove_stale(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.evalgauge-{os.getpid()}-", suffix=target.suffix or ".tmp",
                               dir=target.parent)
    os.close(fd)
    try:
        writer(tmp)
        os.chmod(tmp, _mode_for(target))
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _remove_stale(target: Path) -> None:
    """Temporary files a write to ``target`` left when its process was killed (``kill -9`` runs no clean-up):
    removed by the next write, once their process is gone."""
    for leftover in target.parent.glob(f".{target.name}.evalgauge-*"):
        pid = leftover.name[len(target.name) + len(".evalgauge-") + 1:].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            leftover.unlink(missing_ok=True)
        except PermissionError:  # another user's live process
            pass


def exit_on_terminate() -> None:
    """SIGTERM ends the command as Ctrl-C does, through the clean-up of any write in progress."""
    import signal
    import sys
    import threading

    # only the main thread may set a handler (a command run from a thread keeps the default)
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def _mode_for(target: Path) -> int:
    try:
        return os.stat(target).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _write_special(path: Path, writer) -> Path:
    """Through a temporary file (the writer may need a path), then copied into the device as it is."""
    import shutil

    fd, tmp = tempfile.mkstemp(prefix=".evalgauge.", suffix=path.suffix or ".tmp")
    os.close(fd)
    try:
        writer(tmp)
        with open(tmp, "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
    finally:
        os.unlink(tmp)
    return path


#: what a spreadsheet reads as the start of a formula (OWASP's CSV injection list)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: object) -> object:
    """A text cell a spreadsheet would run as a formula (``=HYPERLINK(...)``, ``@SUM``, ``+cmd|...``), with a
    leading ``'`` so it shows as the text it is; numbers ("-0.5") and other values are returned as they are.
    Judge completions and imported levels are untrusted text, so every CSV evalgauge writes passes here
    unless the user asks for the raw cells (``--raw-csv``)."""
    if not isinstance(value, str) or not value.startswith(_FORMULA_START):
        return value
    try:
        float(value)
    except ValueError:
        return "'" + value
    return value


def csv_safe_frame(frame):
    """``frame`` with :func:`csv_safe` applied to its text cells (a copy; numeric columns untouched)."""
    import pandas as pd

    out = {}
    for c in frame.columns:
        col = frame[c]
        if not (col.dtype == object or isinstance(col.dtype, pd.StringDtype)):
            continue
        # vectorised (a non-string cell of an object column reads as NaN here: not a formula)
        hit = col.str.startswith(_FORMULA_START) if isinstance(col.dtype, pd.StringDtype) else \
            col.map(lambda v: isinstance(v, str) and v.startswith(_FORMULA_START))
        hit = hit.fillna(False).astype(bool)
        if hit.any():
            out[c] = col.where(~hit, col[hit].map(csv_safe))
    return frame.assign(**out) if out else frame
