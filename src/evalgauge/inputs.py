"""Reading inputs without hanging, without bound, or by surprise: the one gate every input passes.

A judgments file, another tool's log, a run configuration, its items and responses, a run database:
each is checked here before it is opened, so a FIFO never hangs a command, a symlink to ``/dev/zero``
never reads without end, and a file too large for memory is refused with its size before it is read.
"""

from __future__ import annotations

from pathlib import Path

from .errors import DataError

#: the largest single input read into memory (a bigger one is refused with its size, before it is read)
MAX_INPUT_BYTES = 16 * 1024**3


def check_input_file(path: str | Path, *, what: str = "input") -> Path:
    """``path`` as an input that can be read once and whole: it exists, is a regular file (not a FIFO, a
    device such as ``/dev/zero`` behind a symlink, or a socket, which would hang or never end), and fits
    the memory bound. Every reader and the run configuration go through here."""
    import stat

    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file. Check the path (relative paths start at {Path.cwd()}).") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc.strerror}).") from None
    if stat.S_ISDIR(st.st_mode):
        raise DataError(f"{path}: is a directory; give a file.")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(
            st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file"
        raise DataError(f"{path}: is {kind}, not a regular file; evalgauge reads an {what} whole, more than once "
                        "for checks. Save the stream to a file first.")
    if st.st_size > MAX_INPUT_BYTES:
        raise DataError(f"{path}: {st.st_size / 1024**3:.1f} GiB, more than the {MAX_INPUT_BYTES / 1024**3:.0f} GiB "
                        "an input may take in memory; split it, or convert it to Parquet with only the columns "
                        "needed.")
    return path
