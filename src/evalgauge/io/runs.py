"""Run databases written by ``evalgauge run``, read as a judgments table.

The collector (:mod:`evalgauge.collect`) writes them; this module reads them, so the analysis never
depends on the collector's code beyond its database's schema and reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import DataError
from ..store import FACETS, RunStore


@dataclass(frozen=True)
class RunRecord:
    """What a run database holds for the analysis: every completed call and the run's metadata."""

    path: Path
    calls: pd.DataFrame
    meta: dict[str, str | None]

    def judgments(self) -> pd.DataFrame:
        return judgments_from_calls(self.calls, self.path)


def read_run_record(path: str | Path) -> RunRecord:
    """The calls and metadata of a run database, read in one opening of it."""
    path = Path(path)
    store = RunStore(path)
    try:
        calls = store.calls()
        meta = {k: store.get_meta(k) for k in ("config", "mode", "fingerprint", "adaptive")}
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

