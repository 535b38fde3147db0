"""The reduction on Spark: a session (local or a cluster), a frame of the parts, and the same SQL text as DuckDB's."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import DataError
from .checks import _cells, _check_labels, _check_repeats, _check_replicates, _check_rows, _check_scores, _facets
from .parts import Parts, _file_columns, _hive, _kind, _numeric, hadoop_path
from .sql import (
    _CHECKS,
    _FILE,
    _FIRST,
    _REPLICATE,
    _SCORE,
    _SLOTS,
    SQUARES,
    N,
    _carried_scores,
    _spark_name,
    cells_sql,
    csv_field_sql,
    scores_need_exact_scan,
)

if TYPE_CHECKING:  # pandas is loaded when the cells are turned into a frame, after the scan has started
    import pandas as pd


#: Spark's log while evalgauge drives it: errors only, on stderr (its default prints a page of notices at start)
_SPARK_LOG = """rootLogger.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def spark_session(master: str = "local[*]"):
    """A Spark session at ``master`` (``local[*]``: every core of this machine; a cluster's ``spark://`` or
    ``yarn`` URL), quiet: no web UI, no progress bars, and a log of errors only from the driver's start."""
    import tempfile

    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise DataError("`engine` spark needs pyspark and a Java runtime: pip install 'evalgauge[spark]' (and, on "
                        "Debian, apt install default-jre-headless).") from None
    with tempfile.TemporaryDirectory(prefix="evalgauge-spark-") as tmp:
        log = Path(tmp) / "log4j2.properties"
        log.write_text(_SPARK_LOG, encoding="utf-8")
        try:
            with warnings.catch_warnings():  # pyspark's notice about pandas versions: the cells are plain columns
                warnings.simplefilter("ignore")
                spark = (SparkSession.builder.master(master).appName("evalgauge")
                         .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log}")
                         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                         .config("spark.sql.shuffle.partitions", "8")
                         # the cells come back as Arrow batches, not one pickled row at a time
                         .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
        except Exception as exc:  # no Java, a master that does not answer
            raise DataError(f"Spark could not start at '{master}' ({str(exc).splitlines()[0][:200]}); check the "
                            "master URL and that Java is installed (java -version).") from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _spark_frame(spark, data: Parts):
    from pyspark.sql import functions as F

    kind, files = _kind(data.files), [hadoop_path(p) for p in data.files]
    base = {"basePath": str(data.root)} if data.root is not None and _hive(data.files, data.root) else {}
    if kind == "parquet":
        frame = spark.read.options(**base).parquet(*files)
    elif kind in ("csv", "tsv"):
        frame = spark.read.options(header="true", sep=data.delimiter, **base).csv(files)
    else:
        frame = spark.read.options(**base).json(files)
    fields = set(_file_columns(list(frame.columns), data)) if kind in ("csv", "tsv") else set()
    # a text part's fields as the rows' reader takes them, and every column's name without surrounding spaces
    frame = frame.select(*[(F.expr(csv_field_sql(_spark_name(c))) if c in fields else F.col(_spark_name(c)))
                           .alias(c.strip()) for c in frame.columns])
    return frame.withColumn("filename", F.input_file_name())


def reduce_spark_frame(frame, *, score: str = "score", drop_missing: bool = False, source: str = "the Spark frame",
                       files: int = 0, replicate: str | None = None,
                       facets: list[str] | None = None) -> tuple[pd.DataFrame, dict]:
    """A pyspark DataFrame of judgments reduced on its cluster by :func:`cells_sql`: only the cells travel."""
    import numpy as np
    from pyspark.sql import functions as F

    columns = list(frame.columns)
    facets, numbered, column = _facets(columns, score, source, replicate, facets)
    file_col = F.col("filename") if "filename" in columns else F.lit(source)
    view = frame.select(*[F.col(_spark_name(c)).alias(f"f{k}") for k, c in enumerate(facets)],
                        F.col(_spark_name(score)).alias(_SCORE), file_col.alias(_FILE),
                        *([F.col(_spark_name(column)).alias(_REPLICATE)] if column else []))
    name = f"evalgauge_judgments_{id(view)}"
    view.createOrReplaceTempView(name)
    spark = view.sparkSession
    try:
        with warnings.catch_warnings():  # pyspark's notices about pandas versions: the cells are plain columns
            warnings.simplefilter("ignore")
            text_scores = not _numeric(view.schema[_SCORE].dataType.simpleString())
            numbers = column and _numeric(view.schema[_REPLICATE].dataType.simpleString())

            def scan(exact: bool):
                return spark.sql(cells_sql(len(facets), table=name, text_scores=text_scores, dialect="spark",
                                           exact=exact, replicates=column and ("numbers" if numbers else "text"))
                                 ).toPandas()

            raw = scan(exact=False)
            if scores_need_exact_scan(raw[N], raw[SQUARES]):
                raw = scan(exact=True)  # a NaN, an infinity or a huge score somewhere: the sums without them
        counts = {c: int(raw[c].sum()) for c in (N, *_CHECKS) if c in raw.columns}
        total = sum(counts.values())
        _check_rows(total, source)

        def query(sql, params=()):
            row = spark.sql(sql.replace("FROM judgments", f"FROM {name}"), args=list(params) or None).first()
            return None if row is None else tuple(row)

        judged = raw[N] + sum(raw[c] for c in _CHECKS if c in raw.columns)
        _check_labels([int(judged[raw[f"f{k}"].isna()].sum()) for k in range(len(facets))], facets, total, query)
        if not numbered:
            repeated = np.flatnonzero(judged.to_numpy() > 1)
            _check_repeats(int(judged.iloc[repeated].sum()),
                           [raw[f"f{k}"].iloc[repeated[0]] for k in range(len(facets))] if repeated.size else None,
                           facets, source, query)
        elif column:
            _check_replicates(bool((raw[_SLOTS] < judged).any()), facets, column, source, query)
        carried = _carried_scores({c: raw[c].dropna().min() for c in _FIRST.values()
                                   if c in raw.columns and raw[c].notna().any()})
        dropped = _check_scores(counts, score, source, drop_missing, query, text_scores=text_scores, carried=carried)
        return _cells(raw, facets, counts[N] + dropped, dropped, files)
    finally:
        spark.catalog.dropTempView(name)


def _reduce_spark(data: Parts, score: str, source, drop_missing: bool, master: str, replicate: str | None,
                  facets: list[str] | None = None):
    frame = _spark_frame(spark_session(master), data)
    return reduce_spark_frame(frame, score=score, drop_missing=drop_missing, source=str(source),
                              files=len(data.files), replicate=replicate, facets=facets)


def is_spark_frame(obj) -> bool:
    """Whether ``obj`` is a pyspark DataFrame (told by its type's module and name: pyspark is not imported)."""
    return type(obj).__module__.startswith("pyspark.sql") and type(obj).__name__ == "DataFrame"
