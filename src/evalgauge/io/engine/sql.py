"""The SQL texts both engines run (DuckDB and Spark SQL read them alike): the scan of the rows to cell
statistics, the exact checks it calls for, the first bad value's query, and the battles' reduction; testable
without an engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...vocabulary import MAX_ABS_SCORE

if TYPE_CHECKING:  # pandas is loaded when the cells are turned into a frame, after the scan has started
    pass


#: the columns of the reduced table besides the facets
N, SUM, SQUARES = "n", "sum", "sum_squares"


#: the scan's per-cell counts of judgments without a usable score (checked, then left behind)
_CHECKS = ("empty", "not_numbers", "too_large")


#: the largest double: a value beyond it is infinite (NaN compares above it in both engines)
_DOUBLE_MAX = "1.7976931348623157E308"


#: the scan's per-cell count of the distinct slots its replicates fall in (a replicate column is checked)
_SLOTS = "replicate_slots"


#: the view's fixed column names (the facets are f0, f1, ...): plain identifiers both SQL dialects read alike
_SCORE, _FILE, _REPLICATE = "s", "src_file", "r"


#: the scan's columns carrying a bad score of each kind with the file holding it ("file\0text", the least such
#: per cell), so that its message never needs the files read again
_FIRST = {"not_numbers": "first_not_number", "too_large": "first_too_large"}


def _slot_bits(numbers: bool, dialect: str, span: tuple[int, int] | None = None) -> str:
    """The distinct slots a cell's replicates fill, as a SQL aggregate: each replicate sets one bit of a bitmap
    and the bitmaps' bits are counted. Without ``span``, one bitmap of 32 slots: a whole number's slot is its last
    five bits (so a cell's replicates within 32 consecutive numbers never share one), any other label's its
    hash's. With ``span`` (the column's least and greatest whole number, from the Parquet parts' statistics) a
    replicate ``v`` sets bit ``v - least`` of as many 62-bit bitmaps as the span needs, so no two replicates
    share a slot whatever their number. An empty replicate sets none. ``numbers``: the column holds numbers (no
    text to parse); ``dialect``: how the engine spells a left shift (the one word the two SQL texts differ in)."""
    r = _REPLICATE

    def shift(slot: str, wide: bool = True) -> str:
        if dialect == "spark":  # 64 bits always: Spark counts a negative int's bits sign-extended to 64
            return f"shiftleft(CAST(1 AS BIGINT), {slot})"
        # DuckDB: the 32 slots in an unsigned 32-bit map (a third of the bitmaps' cost at 100M rows; a signed
        # 1 << 31 overflows there)
        return f"(CAST(1 AS {'BIGINT' if wide else 'UINTEGER'}) << {slot})"

    def counted(bits: str) -> str:
        return f"COALESCE(BIT_COUNT(BIT_OR({bits})), 0)"

    if span is not None:
        v = f"(TRY_CAST({r} AS BIGINT) - {int(span[0])})"
        maps = range((int(span[1]) - int(span[0])) // 62 + 1)
        return " + ".join(counted(f"CASE WHEN {v} >= {62 * k} AND {v} < {62 * k + 62} THEN "
                                  f"{shift(f'CAST({v} - {62 * k} AS INT)')} END") for k in maps)
    whole = (f"TRY_CAST({r} AS BIGINT)" if numbers else
             f"COALESCE(TRY_CAST({r} AS BIGINT), CASE WHEN {r} IS NOT NULL THEN CAST(HASH(CAST({r} AS STRING)) "
             "% 32 AS BIGINT) END)")
    return counted(shift(f"CAST({whole} & 31 AS INT)", wide=False))


def cells_sql(n_facets: int, table: str = "judgments", *, text_scores: bool = True, replicates: str | None = None,
              dialect: str = "duckdb", span: tuple[int, int] | None = None, exact: bool = False) -> str:
    """The one SQL text both engines run: rows of ``table`` (columns ``f0..f{k-1}``, the score ``s`` as text or
    number) grouped by the facets, with each cell's count, sum and sum of squares of the numeric scores and, in
    the same scan, its judgments with an empty score (``empty``) and, when the scores are stored as text
    (``text_scores``), with a score that is not a number (``not_numbers``; a number column has none).

    The scan takes every number as it is; a NaN, an infinity or a value beyond the rows' bound
    (:data:`evalgauge.vocabulary.MAX_ABS_SCORE`) shows in its cell's sum of squares (NaN, infinite or above the bound's
    square: :func:`scores_need_exact_scan`), and only then is the ``exact`` text run: the sums over the usable
    scores alone, a NaN in a number column counted as ``empty`` (as the rows' reader counts it), an infinity or
    unreadable text as ``not_numbers``, and a finite value beyond the bound as ``too_large``.

    With ``replicates`` (the view has the replicate column ``r``, holding ``numbers`` or ``text``) the scan also
    counts, per cell, the distinct slots its replicates fall in (``replicate_slots``, bitmaps' bits, see
    :func:`_slot_bits`; ``span``: a whole-number column's least and greatest value): equal replicates share a
    slot and an empty one has none, so a cell whose slots are as many as its judgments holds neither; only a
    cell with fewer slots needs the exact look of :func:`repeated_replicate_sql`. ``dialect`` (``duckdb``,
    ``spark``) spells the bitmaps' shift."""
    keys = ", ".join(f"f{k}" for k in range(n_facets))
    raw = f"TRY_CAST({_SCORE} AS DOUBLE)" if text_scores else f"CAST({_SCORE} AS DOUBLE)"
    value = f"CASE WHEN ABS({raw}) <= {MAX_ABS_SCORE:.0e} THEN {raw} END" if exact else raw
    checks = f"CAST(COUNT(*) - COUNT({_SCORE}) AS INT) AS empty"
    if exact:
        finite = f"COUNT(CASE WHEN ABS({raw}) <= {_DOUBLE_MAX} THEN 1 END)"
        nans = "0" if text_scores else f"COUNT(CASE WHEN isnan({raw}) THEN 1 END)"
        checks = (f"CAST(COUNT(*) - COUNT({_SCORE}) + {nans} AS INT) AS empty, "
                  f"CAST(COUNT({_SCORE}) - {finite} - {nans} AS INT) AS not_numbers, "
                  f"CAST({finite} - COUNT({value}) AS INT) AS too_large")
        checks += "".join(f", {_carried(_bad_score(kind, text_scores))} AS {column}" for kind, column in _FIRST.items())
    elif text_scores:
        # text that is no number, carried with its file (a few percent of a text scan: see _FIRST)
        checks += (f", CAST(COUNT({_SCORE}) - COUNT({value}) AS INT) AS not_numbers, "
                   f"{_carried(f'{_SCORE} IS NOT NULL AND {raw} IS NULL')} AS {_FIRST['not_numbers']}")
    if replicates:
        checks += f", CAST({_slot_bits(replicates == 'numbers', dialect, span)} AS INT) AS {_SLOTS}"
    return (f"SELECT {', '.join(f'CAST(f{k} AS STRING) AS f{k}' for k in range(n_facets))}, "
            f"CAST(COUNT({value}) AS INT) AS {N}, SUM({value}) AS {SUM}, SUM({value} * {value}) AS {SQUARES}, "
            f"{checks} FROM {table} GROUP BY {keys}")


def scores_need_exact_scan(n, sum_squares) -> bool:
    """Whether a scan's cells (their counts ``n`` of numbers and sums of squares, Arrow arrays or anything Arrow
    takes) show a NaN, an infinity or a score beyond :data:`~evalgauge.vocabulary.MAX_ABS_SCORE` in some cell: any
    such value makes its cell's sum of squares NaN, infinite or above the bound's square, and scores within the
    bound keep it finite (the exact scan of :func:`cells_sql` tells which, rarely for a cell of extreme valid
    scores). A cell without a number (n = 0) has no sum. Arrow's kernels, chunk by chunk: no copy of the cells."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def arrow(values):
        return values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)

    # a sum of squares is never negative: no absolute value (NaN compares false, a cell without a sum is null)
    within = pc.less_equal(arrow(sum_squares), MAX_ABS_SCORE**2)
    return bool(pc.any(pc.and_(pc.greater(arrow(n), 0), pc.invert(within))).as_py())


def repeated_replicate_sql(n_facets: int, table: str = "judgments") -> str:
    """The exact look, run only when the scan's slots leave a repeat possible: the first (cell, replicate) that
    is empty or judged more than once (its labels and replicate), the first file holding it, and the judgments
    that repeat another's cell and replicate (``repeats``, all such groups together) and that have no replicate
    (``empties``). None when there is neither."""
    keys = ", ".join(f"f{k}" for k in range(n_facets))
    labels = ", ".join(f"CAST(f{k} AS STRING)" for k in range(n_facets))
    return (f"SELECT {labels}, CAST({_REPLICATE} AS STRING), "
            f"SUM(CASE WHEN {_REPLICATE} IS NULL THEN 0 ELSE c END) OVER () AS repeats, "
            f"SUM(CASE WHEN {_REPLICATE} IS NULL THEN c ELSE 0 END) OVER () AS empties, w "
            f"FROM (SELECT {keys}, {_REPLICATE}, COUNT(*) AS c, MIN({_FILE}) AS w FROM {table} "
            f"GROUP BY {keys}, {_REPLICATE} HAVING COUNT(*) > 1 OR {_REPLICATE} IS NULL) AS g "
            f"ORDER BY CASE WHEN {_REPLICATE} IS NULL THEN 0 ELSE 1 END LIMIT 1")


def _bad_score(kind: str, text_scores: bool) -> str:
    """The SQL condition of a row's score of ``kind`` (``empty``, ``not_numbers``, ``too_large``, as the exact
    scan of :func:`cells_sql` counts them)."""
    raw = f"TRY_CAST({_SCORE} AS DOUBLE)" if text_scores else f"CAST({_SCORE} AS DOUBLE)"
    nan = "FALSE" if text_scores else f"isnan({raw})"
    return {"empty": f"({_SCORE} IS NULL OR {nan})",
            "not_numbers": f"{_SCORE} IS NOT NULL AND NOT COALESCE(ABS({raw}) <= {_DOUBLE_MAX} OR {nan}, FALSE)",
            "too_large": f"ABS({raw}) > {MAX_ABS_SCORE:.0e} AND ABS({raw}) <= {_DOUBLE_MAX}"}[kind]


def _carried(condition: str) -> str:
    """A cell's least "file\0score text" among its rows meeting ``condition`` (NULL when none): the scan carries
    a bad score to its message (:data:`_FIRST`). Both engines' SQL."""
    return f"MIN(CASE WHEN {condition} THEN {_FILE} || chr(0) || CAST({_SCORE} AS STRING) END)"


def _carried_scores(least: dict[str, str | None]) -> dict[str, tuple[str, str]]:
    """The bad scores a scan carried, kind -> (file, the score's text); ``least``: the least value of each
    carrying column (:data:`_FIRST`) the scan's cells have."""
    found = {}
    for kind, column in _FIRST.items():
        text = least.get(column)
        if text:
            where, _, value = text.partition("\0")  # a path holds no NUL: the first one ends it
            found[kind] = (where, value)
    return found


def first_bad_sql(table: str = "judgments", *, kind: str, text_scores: bool = True) -> str:
    """Where the checks' counts found a bad score the scan did not carry (``kind``: ``empty``, ``not_numbers`` or
    ``too_large``, as :func:`cells_sql` counts them): the first file (and value) holding one. Run only then, and
    it stops at the first such row."""
    return f"SELECT {_FILE}, CAST({_SCORE} AS STRING) FROM {table} WHERE {_bad_score(kind, text_scores)} LIMIT 1"


#: the fields pandas' CSV reader takes as empty (its default ``na_values``; tests/io/test_engine.py checks the list
#: against pandas'): a text part's field that reads as one of them, after its leading spaces, is empty on the
#: engines too, so that a CSV means the same judgments to every reader
CSV_EMPTY = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
             "NA", "NULL", "NaN", "None", "n/a", "nan", "null")


def csv_field_sql(column: str) -> str:
    """A text part's field as the rows' reader takes it (pandas' ``read_csv`` with ``skipinitialspace`` and its
    default empty values): without its leading spaces, and empty (NULL) when it is one of :data:`CSV_EMPTY`. One
    SQL expression both engines run; ``column`` is the field's identifier as the engine quotes it."""
    empty = ", ".join("'" + token + "'" for token in CSV_EMPTY)
    return f"CASE WHEN LTRIM({column}) IN ({empty}) THEN NULL ELSE LTRIM({column}) END"


def _quoted(column: str) -> str:
    """A column name as a SQL identifier: the file's own text, so quoted, its quotes doubled (never spliced)."""
    return '"' + column.replace('"', '""') + '"'


def _json_as_text(types: dict[str, str]):
    """A column of DuckDB's relation as the view selects it: quoted, and a JSON one (JSONL whose column mixes
    numbers and text) as its values' text, so that "q1" is the label q1 and "0.5" the score 0.5, as on the rows,
    not their JSON literals; JSON null is empty."""

    def select(column: str) -> str:
        name = _quoted(column)
        return f"json_extract_string({name}, '$')" if types.get(column) == "JSON" else name

    return select


def _spark_name(column: str) -> str:
    """A column name as Spark reads it literally (a dot in it is not a field of a struct)."""
    return "`" + column.replace("`", "``") + "`"


#: the roles of a pairwise log and the view's plain names for them
_PAIR_VIEW = {"model_a": "pa", "model_b": "pb", "winner": "pw", "item": "pi", "weight": "pwt", "judge": "pj",
              "variant": "pv", "human": "ph"}


def pairs_sql(roles: list[str], table: str = "battles") -> str:
    """The one SQL text both engines run for a pairwise log: its rows (columns ``pa, pb, pw`` and, when present,
    ``pi`` for the item, ``pwt`` for the weight, ``pj`` and ``pv`` for the judge and variant, ``ph`` for the human
    vote when asked for) grouped by every role, with the judgments per group. The verdicts are coded afterwards,
    on the distinct values, by the rule the rows use."""
    keys = [_PAIR_VIEW[r] for r in roles]
    return (f"SELECT {', '.join(f'CAST({k} AS STRING) AS {r}' for k, r in zip(keys, roles, strict=True))}, "
            f"COUNT(*) AS rows_read FROM {table} GROUP BY {', '.join(keys)}")


def _bad_pair_sql(kind: str, role: str) -> str:
    """Where a bad battle is (both engines' SQL; each ``?`` stands for the value): an empty ``role``; ``role``
    equal to the value; a self-comparison; a verdict equal to the value naming neither system of its row."""
    text = f"TRIM(CAST({_PAIR_VIEW[role]} AS STRING))"
    a, b = (f"TRIM(CAST({_PAIR_VIEW[r]} AS STRING))" for r in ("model_a", "model_b"))
    if kind == "empty":
        return f"{_PAIR_VIEW[role]} IS NULL OR {text} = ''"
    if kind == "self":
        return f"{a} = {b}"
    if kind == "verdict":
        return f"{text} = ? AND {a} <> ? AND {b} <> ?"
    return f"{text} = ?"
