"""Battles reduced where they live: the distinct entries of a pairwise log counted by DuckDB or Spark, with its
checks (the roles' columns, the winner's values) and the agreement with a human vote column."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from ...errors import DataError
from .checks import _check_rows
from .on_duckdb import _arrow, _duckdb_connect, _duckdb_relation, _loading_meanwhile
from .on_spark import _spark_frame, is_spark_frame, spark_session
from .parts import Parts, _check_encoding, _check_engine, _checked_parts, _duckdb_errors, _footer, _path
from .sql import _FILE, _PAIR_VIEW, _bad_pair_sql, _json_as_text, _spark_name, pairs_sql

if TYPE_CHECKING:  # pandas is loaded when the cells are turned into a frame, after the scan has started
    import pandas as pd


def _pair_roles(columns: list[str], rename: dict[str, str], source) -> tuple[dict[str, str], bool]:
    """Each role's column in the file (model_a, model_b, winner required; item, weight, judge and variant when
    present; the human vote when named; a column named in ``rename`` must exist) and whether an order/position
    column says slot A is the order shown."""
    from ...pairwise import item_column

    roles = {}
    for role in _PAIR_VIEW:
        if role == "human" and role not in rename:  # the human votes only when asked for, by their column
            continue
        column = rename.get(role, role)
        if role == "item" and role not in rename:  # Chatbot Arena's question_id and the like name the items
            column = item_column(columns) or column
        if column in columns:
            roles[role] = column
        elif role in rename:  # a column the user named: never left out in silence
            named = ", ".join(c for c in columns if c != "filename")
            raise DataError(f"{source}: no column '{column}' (for the {role}). The columns are: {named}.")
        elif role in ("model_a", "model_b", "winner"):
            named = ", ".join(c for c in columns if c != "filename")
            raise DataError(f"{source}: no column '{column}' (columns: {named}); a pairwise log has model_a, "
                            "model_b and winner columns (name others with --model-a, --model-b, --winner).")
    return roles, any(c in columns for c in ("order", "position"))


def _finish_pairs(raw: pd.DataFrame, roles: list[str], source, order: bool, files: int, first_file):
    """The engine's groups checked with the rows' rule (an empty system or verdict, a verdict that is not
    model_a, model_b, tie or a system's name, a self-comparison, a bad weight: named with the first file holding
    it, found by ``first_file(kind, role, value)`` only then; kinds in :func:`_bad_pair_sql`) and coded as
    :class:`~evalgauge.pairwise.BattleCounts`; with a human vote column, what was read carries the judge's
    agreement with it (:func:`~evalgauge.pairwise.human_agreement` on the distinct votes and their judgments)."""
    import numpy as np
    import pandas as pd

    from ...pairwise import battle_counts, winner_codes

    def locate(kind, role, value) -> str:
        found = first_file(kind, role, value)
        return _path(found) if found is not None else str(source)

    _check_rows(int(raw["rows_read"].sum()), source)
    raw = raw.copy()
    for role in ("model_a", "model_b", "winner"):
        text = raw[role].astype("string").str.strip()
        empty = text.isna() | (text == "")
        if empty.any():
            n = int(raw.loc[empty, "rows_read"].sum())
            where = locate("empty", role, None)
            raise DataError(f"{where}: column '{role}' is empty on {n} row(s). Every battle needs both systems and "
                            "a verdict; fill these in or remove the rows.")
        raw[role] = text
    systems = sorted(set(raw["model_a"].unique()) | set(raw["model_b"].unique()))
    index = {s: k for k, s in enumerate(systems)}
    codes, labels = pd.factorize(raw["winner"])
    value, named = winner_codes(np.asarray(labels, dtype=object), index)
    # codes against the sorted systems: no row-by-row lookups for a million distinct battles
    a = pd.Categorical(raw["model_a"], categories=systems).codes.astype(np.int64)
    b = pd.Categorical(raw["model_b"], categories=systems).codes.astype(np.int64)
    outcome, win_sys = value[codes], named[codes]
    outcome[(win_sys >= 0) & (win_sys == a)] = 1.0
    outcome[(win_sys >= 0) & (win_sys == b)] = 0.0
    bad = np.flatnonzero(np.isnan(outcome))
    if bad.size:
        label = raw["winner"].iloc[bad[0]]
        n = int(raw["rows_read"].iloc[bad].sum())
        where = locate("verdict", "winner", label)
        raise DataError(f"{where}: column 'winner' must be model_a, model_b or tie (or a system's name); it holds "
                        f"{str(label)[:80]!r} ({n} such rows).")
    same = np.flatnonzero(a == b)
    if same.size:
        name = raw["model_a"].iloc[same[0]]
        where = locate("self", "model_a", name)
        raise DataError(f"{where}: a row compares {str(name)[:80]!r} with itself; remove self-comparisons.")
    frame = pd.DataFrame({"model_a": raw["model_a"], "model_b": raw["model_b"], "outcome": outcome,
                          "rows": raw["rows_read"].to_numpy(np.int64)})
    for role in ("item", "judge", "variant"):
        if role in roles:
            frame[role] = raw[role].to_numpy()
    if "weight" in roles:
        weight = pd.to_numeric(raw["weight"], errors="coerce").to_numpy(float)
        bad = np.flatnonzero(~(np.isfinite(weight) & (weight >= 0)))
        if bad.size:
            label = raw["weight"].iloc[bad[0]]
            held = "is empty on a row" if pd.isna(label) else f"holds {str(label)[:80]!r}"
            where = locate("empty", "weight", None) if pd.isna(label) else locate("equals", "weight", label)
            raise DataError(f"{where}: column 'weight' {held}; it must hold non-negative numbers on every row.")
        frame["weight"] = weight
    counts = battle_counts(frame, presentation_order=order, keep="item" in roles)
    battles = int(counts.entries.frame["battle"].max()) + 1 if len(frame) else 0
    info = {"rows": counts.judgments, "files": files, "entries": len(counts.rows),
            "battles": counts.judgments if counts.battles_are_rows else battles}
    if "human" in roles:  # the group-by kept each distinct human vote, with its judgments
        from ...pairwise import human_agreement

        judge_vote = pd.Series(np.where(outcome == 1.0, "a", np.where(outcome == 0.0, "b", "tie")))
        info["human_agreement"] = human_agreement(judge_vote, raw["human"].reset_index(drop=True),
                                                  raw["rows_read"].to_numpy(np.int64))
    return counts, info


def _reduce_pairs_duckdb(data: Parts, rename: dict[str, str], source, preload: tuple[str, ...] = ()):
    con = _duckdb_connect()
    try:
        with _duckdb_errors(source):
            rel = _duckdb_relation(con, data)
        found, order = _pair_roles(list(rel.columns), rename, source)
        as_text = _json_as_text({c: str(t) for c, t in zip(rel.columns, rel.types, strict=True)})
        view = rel.select(", ".join([f"{as_text(c)} AS {_PAIR_VIEW[r]}" for r, c in found.items()]
                                    + [f"filename AS {_FILE}"]))
        con.register("battles", view)
        with _duckdb_errors(source), _loading_meanwhile(preload):
            table = _arrow(con, pairs_sql(list(found)))
        raw = table.to_pandas()  # Arrow is the cheaper hand-over from DuckDB

        def first_file(kind, role, value):
            where = _bad_pair_sql(kind, role)
            row = con.execute(f"SELECT {_FILE} FROM battles WHERE {where} LIMIT 1",
                              [str(value)] * where.count("?")).fetchone()
            return row[0] if row else None

        counts, info = _finish_pairs(raw, list(found), source, order, len(data.files), first_file)
        if found.get("item") not in (None, "item"):  # items under another tool's name (question_id)
            info["item_column"] = found["item"]
        return counts, info
    finally:
        con.close()


def reduce_spark_pairs(frame, *, rename: dict[str, str] | None = None, source: str = "the Spark frame",
                       files: int = 0):
    """A pyspark DataFrame of pairwise judgments reduced on its cluster by :func:`pairs_sql`."""
    from pyspark.sql import functions as F

    columns = list(frame.columns)
    found, order = _pair_roles(columns, rename or {}, source)
    file_col = F.col("filename") if "filename" in columns else F.lit(source)
    view = frame.select(*[F.col(_spark_name(c)).alias(_PAIR_VIEW[r]) for r, c in found.items()],
                        file_col.alias(_FILE))
    name = f"evalgauge_battles_{id(view)}"
    view.createOrReplaceTempView(name)
    spark = view.sparkSession

    def first_file(kind, role, value):
        # the value as a column, not spliced into the SQL text: it is the file's untrusted text
        probe = view.withColumn("evalgauge_value", F.lit(str(value)))
        row = probe.filter(F.expr(_bad_pair_sql(kind, role).replace("?", "evalgauge_value"))).select(_FILE).first()
        return row[0] if row else None

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = spark.sql(pairs_sql(list(found), table=name)).toPandas()
        return _finish_pairs(raw, list(found), source, order, files, first_file)
    finally:
        spark.catalog.dropTempView(name)


def reduce_battles(source: Any, *, engine: str = "duckdb", master: str = "local[*]",
                   columns: dict[str, str] | None = None, sep: str | None = None, encoding: str | None = None,
                   preload: tuple[str, ...] = ()):
    """A pairwise log (model_a, model_b, winner; optional item and weight) of a file, a dataset or a pyspark
    DataFrame reduced where it lives to :class:`~evalgauge.pairwise.BattleCounts` (the distinct slot-A system,
    slot-B system, verdict, item and weight with their judgments), and what was read. ``columns`` maps a role to
    the file's column (``{"winner": "verdict"}``); ``sep`` a text part's delimiter (UTF-8 text only);
    ``preload`` modules to import while DuckDB scans."""
    rename = columns or {}
    _check_engine(engine)
    _check_encoding(encoding)
    if is_spark_frame(source):
        return reduce_spark_pairs(source, rename=rename)
    try:
        data = _checked_parts(source, sep)
        if engine == "spark":
            frame = _spark_frame(spark_session(master), data)
            return reduce_spark_pairs(frame, rename=rename, source=str(source), files=len(data.files))
        return _reduce_pairs_duckdb(data, rename, source, preload)
    finally:
        _footer.cache_clear()
