"""Run databases written by ``evalgauge run``, read as a judgments table.

The collector (:mod:`evalgauge.collect`) writes them; this module reads them, so the analysis never
depends on the collector's code beyond its database's schema and reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..errors import DataError
from ..store import FACETS, RunStore

if TYPE_CHECKING:
    from ..analysis.diagnostics import RunDiagnostics


@dataclass(frozen=True)
class RunRecord:
    """What a run database holds for the analysis: every completed call and the run's metadata."""

    path: Path
    calls: pd.DataFrame
    meta: dict[str, str | None]

    def judgments(self) -> pd.DataFrame:
        frame = judgments_from_calls(self.calls, self.path)
        classes = self.meta.get("labels")
        if classes:  # a label or choice run: each verdict is a class (its index stored), never a number to average
            import json

            names = json.loads(classes)
            index = frame.pop("score")
            frame["label"] = index.map(lambda v: names[int(v)] if v == v and 0 <= int(v) < len(names) else None)
        return frame


    def with_design(self, design: dict | None = None, note: str | None = None) -> RunRecord:
        """This record with the run's design (variants, system prompt, judges, scale) as a run records it now, for
        a database written before runs recorded it (its configuration read by the caller), or with a ``note``
        saying why the design is missing."""
        import json

        meta = dict(self.meta)
        if design is not None:
            meta["design"] = json.dumps(design)
        if note:
            meta["design_note"] = note
        return RunRecord(self.path, self.calls, meta)

    def info(self) -> tuple[RunDiagnostics, dict]:
        """(diagnostics, metadata) for the analysis: the run's integrity checks and missing answers
        (:mod:`evalgauge.analysis.diagnostics`), each judge's within-call spread (``output = "logprobs"``), and the
        record with what the calls say (models, first call, temperatures, replicates) and the run's recorded
        design merged in."""
        import json

        from ..analysis.diagnostics import RunDiagnostics, diagnose, missing_answers

        calls, meta = self.calls, dict(self.meta)
        spreads: tuple[dict, ...] = ()
        if "spread" in calls and calls["spread"].notna().any():  # output = "logprobs": each call's own uncertainty
            spread = calls.groupby(calls["judge"].astype(str))["spread"].agg(["mean", "count"]).reset_index()
            spreads = tuple({"judge": r["judge"], "mean_spread": float(r["mean"]), "calls": int(r["count"])}
                            for _, r in spread.iterrows())
        notes: list[str] = []
        meta["models"] = sorted(calls["model"].dropna().astype(str).unique())
        meta["first_call"] = float(calls["started_at"].min()) if len(calls) else None
        meta["temperatures"] = sorted(calls["temperature"].dropna().unique().tolist(), key=str)
        reps = pd.to_numeric(calls["replicate"], errors="coerce")
        meta["replicates"] = int(reps.max()) if reps.notna().any() else 0
        note = meta.pop("design_note", None)
        if note:
            notes.append(note)
        design = meta.pop("design", None)
        if not design and not note and meta.get("config"):
            notes.append(
                f"this run database was written before runs recorded their variants, system prompt and judges; the "
                f"report leaves them out (`evalgauge analyze` reads them from its configuration, {meta['config']}, "
                "where that file still is).")
        if design:  # the run recorded its variants, system prompt and judges with its calls
            recorded = json.loads(design)
            scale = recorded.pop("scale", None)
            meta.update(recorded)
            if scale is not None and meta.get("scale") is None:
                meta["scale"] = scale
        return RunDiagnostics(diagnose(calls), missing_answers(calls), spreads, tuple(notes)), meta


def read_run_record(path: str | Path) -> RunRecord:
    """The calls and metadata of a run database, read in one opening of it."""
    path = Path(path)
    store = RunStore(path)
    try:
        calls = store.calls()
        meta = {k: store.get_meta(k) for k in ("config", "mode", "fingerprint", "adaptive", "scale", "labels",
                                                "design")}
    finally:
        store.close()
    return RunRecord(path, calls, meta)


def read_run(path: Path, encoding: str | None = None, sep: str | None = None) -> pd.DataFrame:
    """The judgments table of a run database (the registry's reader for ``.sqlite``/``.db``)."""
    return read_run_record(path).judgments()


def judgments_from_calls(calls: pd.DataFrame, path: Path) -> pd.DataFrame:
    """The judgments table of a run's calls: facet columns with levels, and the score.

    Columns that are constant or absent in the run (no systems, no positions)
    are left out so the design can be inferred; replicate stays.
    """
    if calls.empty:
        raise DataError(f"{path}: the run database has no completed calls yet; run `evalgauge run CONFIG` first.")
    out = {}
    for col in (*FACETS, "score"):
        binary = np.flatnonzero(calls[col].map(lambda v: isinstance(v, bytes | bytearray)).to_numpy())
        if binary.size:
            raise DataError(f"{path}: calls row {binary[0] + 1}, column '{col}' holds binary data (a BLOB), not a "
                            "level or a number; the run database was changed by hand or is damaged.")
    for col in FACETS:
        values = calls[col]
        if values.isna().all():
            continue
        if col != "replicate" and values.nunique(dropna=True) <= 1 and col not in ("judge", "item"):
            continue
        if col == "replicate":
            reps = pd.to_numeric(values, errors="coerce")
            bad = np.flatnonzero(reps.isna().to_numpy() | (reps % 1 != 0).to_numpy())
            if bad.size:
                raise DataError(f"{path}: calls row {bad[0] + 1} has replicate {values.iloc[bad[0]]!r}, not a whole "
                                "number; the run database was changed by hand or is damaged.")
            out[col] = reps.astype(int)
        else:
            out[col] = values.astype(str)
    frame = pd.DataFrame(out)
    frame["score"] = pd.to_numeric(calls["score"], errors="coerce").where(calls["score"].notna())
    text = calls["score"].notna() & frame["score"].isna()
    if text.any():
        row = int(np.flatnonzero(text.to_numpy())[0])
        raise DataError(f"{path}: calls row {row + 1} has score {calls['score'].iloc[row]!r}, not a number; the run "
                        "database was changed by hand or is damaged.")
    return frame


#: a calls column's declared SQLite type as an Arrow type (Parquet export)
_ARROW_TYPES = {"TEXT": "string", "REAL": "float64", "INTEGER": "int64"}


def write_calls_parquet(path: str | Path, target, *, columns: list[str] | None = None,
                        size: int = 100_000) -> int:
    """The calls of a run database written to Parquet (``target``: a path or a writable stream), ``size`` rows
    at a time with the schema the table declares, so memory holds one piece, not the run. A value that is not of
    its column's type (a database changed by hand) raises :class:`DataError` naming its row and column. Returns the
    rows written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    store = RunStore(path)
    try:
        declared = store.call_columns()
        columns = columns or list(declared)
        schema = pa.schema([(c, getattr(pa, _ARROW_TYPES.get(declared[c], "string"))()) for c in columns])
        written = 0
        with pq.ParquetWriter(target, schema) as writer:
            for rows in store.call_chunks(columns, size):
                arrays = [_typed(path, column, values, field.type, written)
                          for column, values, field in zip(columns, zip(*rows, strict=True), schema, strict=True)]
                writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
                written += len(rows)
    finally:
        store.close()
    return written


def _typed(path: Path, column: str, values: tuple, kind, offset: int):
    import pyarrow as pa

    try:
        return pa.array(values, type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        python = {pa.string(): str, pa.float64(): (int, float), pa.int64(): int}[kind]
        row = next((k for k, v in enumerate(values) if v is not None and not isinstance(v, python)), None)
        if row is None:  # every value of the right kind, yet refused: named by its rows' range
            raise DataError(f"{path}: column '{column}' holds a value out of the range of {kind} in calls rows "
                            f"{offset + 1}-{offset + len(values)}; the run database was changed by hand or is "
                            "damaged.") from None
        raise DataError(f"{path}: calls row {offset + row + 1}, column '{column}' holds {str(values[row])[:80]!r}, "
                        f"not {kind}; the run database was changed by hand or is damaged.") from None


def write_calls_csv(path: str | Path, stream, *, size: int = 100_000, raw: bool = False) -> int:
    """The calls of a run database as CSV on ``stream`` (a text file), ``size`` rows at a time; an empty value
    is an empty field; a text cell a spreadsheet would run as a formula is written as text (a leading ``'``,
    :func:`evalgauge.outputs.csv_safe`) unless ``raw``. Returns the rows written."""
    import csv

    from ..outputs import csv_safe

    store = RunStore(Path(path))
    try:
        columns = list(store.call_columns())
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(columns)
        written = 0
        for rows in store.call_chunks(columns, size, text_cell=None if raw else csv_safe):
            writer.writerows(rows)
            written += len(rows)
    finally:
        store.close()
    return written


def write_judgments_parquet(path: str | Path, target, *, size: int = 100_000) -> int:
    """The judgments of a run database (its facets that vary and the score, as :func:`judgments_from_calls`
    keeps them; the replicate index is left out, an engine sums over it) written to Parquet ``size`` calls at a
    time, for an engine to reduce. Returns the calls written."""
    path = Path(path)
    store = RunStore(path)
    try:
        distinct = store.distinct_counts([c for c in FACETS if c != "replicate"])
    finally:
        store.close()
    if not any(distinct.values()):
        raise DataError(f"{path}: the run database has no completed calls yet; run `evalgauge run CONFIG` first.")
    keep = [c for c, n in distinct.items() if n > 1 or (n == 1 and c in ("judge", "item"))]
    return write_calls_parquet(path, target, columns=[*keep, "score"], size=size)
