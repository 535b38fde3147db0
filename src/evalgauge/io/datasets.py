"""Datasets, not only files: a folder of Parquet (or CSV, TSV, JSONL) parts, a glob, hive-partitioned paths.

A log written by a pipeline is rarely one file: it is ``judgments/part-*.parquet``, or partitioned by a column,
``judgments/system=a/part-0.parquet``. Such a dataset is read as one table: every part through the input gate
(:func:`evalgauge.inputs.check_input_file`), the partition keys of its path (``key=value`` folders) as columns,
and the parts' columns checked against each other before anything is combined, so that a part with a missing or
extra column is named with the column rather than surfacing as empty scores. The whole dataset is held in memory
under the same bound as one file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import DataError
from ..inputs import MAX_INPUT_BYTES, check_input_file

if TYPE_CHECKING:
    import pandas as pd

    from ..data import RowOrigin

#: the suffixes a dataset's parts may have, by kind (one kind per dataset)
PART_KINDS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl",
              ".ndjson": "jsonl"}
_GLOB_CHARS = set("*?[")


def is_dataset(data) -> bool:
    """Whether ``data`` names a dataset (a folder, or a path with a glob pattern) rather than one file."""
    if not isinstance(data, (str, Path)):
        return False
    text = str(data)
    return Path(text).is_dir() or (bool(_GLOB_CHARS & set(text)) and not Path(text).exists())


def dataset_parts(data) -> list[Path]:
    """The parts of a dataset, sorted: every file of a known kind under a folder (hidden and ``_`` files, such as
    ``_SUCCESS``, left out), or every file a glob matches."""
    text = str(data)
    if Path(text).is_dir():
        parts = [p for p in Path(text).rglob("*") if p.is_file() and p.suffix.lower() in PART_KINDS
                 and not any(seg.startswith((".", "_")) for seg in p.relative_to(text).parts)]
        where = f"{text}: a folder with no Parquet, CSV, TSV or JSONL parts"
    else:
        parts = glob_files(text)
        where = f"{text}: no file matches this pattern"
    if not parts:
        raise DataError(where + ".")
    kinds = {PART_KINDS.get(p.suffix.lower()) for p in parts}
    if None in kinds:
        odd = next(p for p in parts if p.suffix.lower() not in PART_KINDS)
        raise DataError(f"{odd}: not a Parquet, CSV, TSV or JSONL part; a dataset's parts are one of these kinds.")
    if len(kinds) > 1:
        raise DataError(f"{text}: the parts mix kinds ({', '.join(sorted(kinds))}); a dataset is one kind of file.")
    return sorted(parts)


def glob_files(pattern: str) -> list[Path]:
    """The files ``pattern`` matches (``*``, ``?``, ``[...]`` within a name; ``**`` any folders below), found
    without following a symbolic link to a folder: a link that loops back (``a/loop -> ..``) would make the
    walk endless. Names starting with a dot match only a pattern that starts with one, as in the shell."""
    import fnmatch
    import os

    segments = Path(pattern).parts
    k = next((i for i, seg in enumerate(segments) if _GLOB_CHARS & set(seg)), len(segments))
    root = Path(*segments[:k]) if k else Path(".")
    rest = segments[k:]
    if not rest:
        return [root] if root.is_file() else []

    def entries(folder: str):
        try:
            with os.scandir(folder) as it:
                return list(it)
        except OSError:  # unreadable, vanished, or not a folder: nothing matches there
            return []

    def walk(folder: str, segs: tuple[str, ...]):
        seg, more = segs[0], segs[1:]
        if seg == "**":
            yield from (walk(folder, more) if more else ())
            for entry in entries(folder):
                if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                    yield from walk(entry.path, segs)
            return
        for entry in entries(folder):
            if entry.name.startswith(".") and not seg.startswith("."):
                continue
            if not fnmatch.fnmatchcase(entry.name, seg):
                continue
            if not more:
                if entry.is_file():
                    yield Path(entry.path)
            elif entry.is_dir(follow_symlinks=False):
                yield from walk(entry.path, more)

    return sorted(set(walk(str(root), rest)))


def partition_keys(part: Path, root: Path | None) -> dict[str, str]:
    """``key=value`` folders between the dataset's root and the part (hive partitioning)."""
    segments = part.relative_to(root).parts[:-1] if root is not None else part.parts[:-1]
    return dict(seg.split("=", 1) for seg in segments if "=" in seg and not seg.startswith("="))


def _kinds(frame: pd.DataFrame) -> dict[str, str]:
    """Each column's kind of value (numbers, text, ...); 'empty' for a column with no value in this part."""
    import pandas as pd

    out = {}
    for col in frame.columns:
        series = frame[col]
        if series.isna().all():
            out[col] = "empty"
        elif pd.api.types.is_bool_dtype(series):
            out[col] = "booleans"
        elif pd.api.types.is_numeric_dtype(series):
            out[col] = "numbers"
        else:
            out[col] = "text"
    return out


def read_dataset(data, encoding: str | None = None, sep: str | None = None) -> tuple[pd.DataFrame, RowOrigin]:
    """Every part of the dataset ``data`` as one frame, with its partition keys as columns, and where its rows
    were read (each part's name, within the dataset's folder, and its first row in the frame: messages name a
    row by its part); a part whose columns differ from the first part's is named with the column, before
    anything is combined."""
    import numpy as np
    import pandas as pd

    from ..data import RowOrigin
    from .files import read_table

    parts = dataset_parts(data)
    total = 0
    for part in parts:
        total += check_input_file(part).stat().st_size
    if total > MAX_INPUT_BYTES:
        raise DataError(f"{data}: {total / 1024**3:.1f} GiB in {len(parts)} parts, more than the "
                        f"{MAX_INPUT_BYTES / 1024**3:.0f} GiB an input may take in memory.")
    root = Path(str(data)) if Path(str(data)).is_dir() else None
    kind = PART_KINDS[parts[0].suffix.lower()]
    frames, first = [], None
    for part in parts:
        frame = read_table(part, kind, encoding, sep)
        keys = partition_keys(part, root)
        clash = sorted(set(keys) & set(frame.columns))
        if clash:
            raise DataError(f"{part}: column '{clash[0]}' is also a partition key of its folder; keep one of them.")
        columns = list(frame.columns)
        if first is None:
            first = (part, columns, sorted(keys), _kinds(frame))
        else:
            missing = [c for c in first[1] if c not in columns]
            extra = [c for c in columns if c not in first[1]]
            if missing or extra:
                what = (f"has no column '{missing[0]}'" if missing else f"has a column '{extra[0]}'")
                raise DataError(f"{part}: {what} that {first[0]} " + ("has" if missing else "does not have")
                                + "; every part of a dataset has the same columns.")
            kinds = _kinds(frame)
            odd = next((c for c in columns if kinds[c] != first[3][c] and "empty" not in (kinds[c], first[3][c])), None)
            if odd is not None:  # typed parts (Parquet, JSONL): a text value among numbers changes the column's type
                raise DataError(f"{part}: column '{odd}' holds {kinds[odd]} where {first[0]} holds {first[3][odd]}; "
                                "a value that is not a number (or a different type) is in this part.")
            if sorted(keys) != first[2]:
                raise DataError(f"{part}: partitioned by {sorted(keys) or 'nothing'}, while {first[0]} is "
                                f"partitioned by {first[2] or 'nothing'}; every part sits at the same depth.")
        frames.append(frame.assign(**keys) if keys else frame)
    starts = np.cumsum([0] + [len(f) for f in frames[:-1]])
    names = tuple(str(p.relative_to(root)) if root is not None else str(p) for p in parts)
    return pd.concat(frames, ignore_index=True), RowOrigin(names, tuple(int(k) for k in starts))
