"""Property-based: corrupted, truncated and type-mutated inputs to every reader, importer and the pairwise
reader give a result or a message (exit 2) that names the file, never a traceback."""

import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from evalgauge.cli import main
from evalgauge.store import RunStore

IMPORTERS = FIXTURES / "importers"
#: EVALGAUGE_FUZZ_EXAMPLES=400 for a longer hunt (the suite runs 40 per test)
SETTINGS = settings(max_examples=int(os.environ.get("EVALGAUGE_FUZZ_EXAMPLES", "40")), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

CELL = st.one_of(st.none(), st.text(max_size=8), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                 st.sampled_from(["", "NaN", "inf", "-inf", "1e308", "nan", "\x1b[2J", "é", "1,5", "TRUE"]))


def _judgments() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = [(f"s{s}", f"i{i}", f"j{j}", float(rng.integers(1, 6))) for s in range(3) for i in range(5)
            for j in range(2)]
    return pd.DataFrame(rows, columns=["system", "item", "judge", "score"])


def _write(frame: pd.DataFrame, path: Path) -> None:
    if path.suffix == ".parquet":
        frame.astype(str).to_parquet(path, index=False)
    elif path.suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True)
    elif path.suffix == ".tsv":
        frame.to_csv(path, sep="\t", index=False)
    else:
        frame.to_csv(path, index=False)


def _mutate_bytes(data: bytes, draw) -> bytes:
    kind = draw(st.sampled_from(["truncate", "flip", "insert", "none"]))
    if kind == "truncate" and data:
        return data[:draw(st.integers(0, len(data) - 1))]
    if kind == "flip" and data:
        at = draw(st.integers(0, len(data) - 1))
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    if kind == "insert":
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    return data


def _check(result, path: Path) -> None:
    assert result.exit_code in (0, 2, 3), (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 2 and "Usage:" not in result.output:
        assert path.name in result.output, result.output


@SETTINGS
@given(data=st.data(), suffix=st.sampled_from([".csv", ".tsv", ".jsonl", ".parquet"]))
@pytest.mark.slow
def test_readers_never_traceback(tmp_path_factory, data, suffix):
    tmp = tmp_path_factory.mktemp("r")
    frame = _judgments().astype(object)
    for _ in range(data.draw(st.integers(0, 3))):
        row = data.draw(st.integers(0, len(frame) - 1))
        col = data.draw(st.sampled_from(list(frame.columns)))
        frame.loc[row, col] = data.draw(CELL)
    if data.draw(st.booleans()):
        frame = frame.drop(columns=[data.draw(st.sampled_from(list(frame.columns)))])
    path = tmp / f"j{suffix}"
    try:
        _write(frame, path)
    except (ValueError, TypeError, OverflowError):  # not writable in this format: nothing a user can have
        return
    if suffix != ".parquet" or data.draw(st.booleans()):
        path.write_bytes(_mutate_bytes(path.read_bytes(), data.draw))
    command = data.draw(st.sampled_from(["components", "balance", "analyze"]))
    _check(CliRunner().invoke(main, [command, str(path)]), path)


@SETTINGS
@given(data=st.data())
@pytest.mark.slow
def test_run_databases_never_traceback(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("db")
    path = tmp / "run.sqlite"
    RunStore(path, writer=True).close()  # the collector's schema
    con = sqlite3.connect(path)
    noise = np.random.default_rng(2).normal(size=60)
    rows = [(f"k{n}", f"i{n % 5}", None, f"s{n % 3}", "v", 0.0, f"j{n % 2}", 1 + n // 30, None,
             float(n % 5) + noise[n]) for n in range(60)]
    for _ in range(data.draw(st.integers(0, 3))):
        n = data.draw(st.integers(0, len(rows) - 1))
        col = data.draw(st.integers(1, 9))
        row = list(rows[n])
        row[col] = data.draw(CELL)
        rows[n] = tuple(row)
    con.executemany("INSERT OR IGNORE INTO calls (key, item, category, system, variant, temperature, judge, "
                    "replicate, position, score) VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
    con.commit()
    con.close()
    if data.draw(st.booleans()):
        path.write_bytes(_mutate_bytes(path.read_bytes(), data.draw))
    command = data.draw(st.sampled_from(["components", "analyze", "export"]))
    args = [command, str(path)] + (["-o", str(tmp / "out.csv")] if command == "export" else [])
    _check(CliRunner().invoke(main, args), path)


IMPORTS = {
    "inspect": "inspect/security-guide_gpt-4o-mini.json",
    "lm-eval": "lm-eval/meta-llama__Meta-Llama-3-8B-Instruct/samples_asdiv_2024-08-21T03-44-09.494230.jsonl",
    "arena-hard": "arena-hard/gpt-3.5-turbo-0125/Nexusflow__Athene-V2-Chat.jsonl",
    "alpaca-eval": "alpaca-eval/gpt-3.5-turbo-1106/weighted_alpaca_eval_gpt4_turbo/annotations.json",
    "mt-bench": "mt-bench/phi-3-dpo_stefanstud/gpt-4_pair.jsonl",
}


def _mutate_json(node, draw, depth=0):
    """Replace one value somewhere in a parsed JSON document with a value of another type."""
    if isinstance(node, dict) and node and depth < 6:
        key = draw(st.sampled_from(sorted(node, key=str)))
        if draw(st.booleans()):
            node[key] = _mutate_json(node[key], draw, depth + 1)
        elif draw(st.booleans()):
            del node[key]
        else:
            node[key] = draw(st.one_of(CELL, st.lists(st.integers(), max_size=2), st.just({})))
        return node
    if isinstance(node, list) and node and depth < 6:
        k = draw(st.integers(0, len(node) - 1))
        node[k] = _mutate_json(node[k], draw, depth + 1)
        return node
    return draw(st.one_of(CELL, st.lists(st.integers(), max_size=2), st.just({}), st.just([])))


@SETTINGS
@given(data=st.data(), fmt=st.sampled_from(sorted(IMPORTS)))
def test_importers_never_traceback(tmp_path_factory, data, fmt):
    tmp = tmp_path_factory.mktemp("imp")
    src = IMPORTERS / IMPORTS[fmt]
    folder = tmp / src.parent.name
    folder.mkdir()
    path = folder / src.name
    text = src.read_text(encoding="utf-8")
    if src.suffix == ".jsonl":
        lines = text.splitlines()[:12]
        k = data.draw(st.integers(0, len(lines) - 1))
        lines[k] = json.dumps(_mutate_json(json.loads(lines[k]), data.draw))
        payload = ("\n".join(lines) + "\n").encode()
    else:
        doc = json.loads(text)
        if isinstance(doc, list):
            doc = doc[:12]
        if isinstance(doc, dict) and isinstance(doc.get("samples"), list):
            doc["samples"] = doc["samples"][:3]
        payload = json.dumps(_mutate_json(doc, data.draw)).encode()
    path.write_bytes(_mutate_bytes(payload, data.draw) if data.draw(st.booleans()) else payload)
    args = ["import", fmt, str(path), "-o", str(tmp / "out.csv")]
    if fmt == "arena-hard":
        args += ["--baseline", "gpt-4-0314"]
    if fmt == "lm-eval":
        args += ["--system", "m"]
    _check(CliRunner().invoke(main, args), path)


@SETTINGS
@given(data=st.data())
def test_pairwise_reader_never_tracebacks(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("pw")
    rng = np.random.default_rng(1)
    systems = ["a", "b", "c"]
    rows = []
    for n in range(30):
        x, y = rng.choice(3, 2, replace=False)
        rows.append({"model_a": systems[x], "model_b": systems[y], "item": f"q{n % 6}",
                     "winner": ["model_a", "model_b", "tie"][n % 3]})
    frame = pd.DataFrame(rows).astype(object)
    for _ in range(data.draw(st.integers(0, 3))):
        frame.loc[data.draw(st.integers(0, len(frame) - 1)), data.draw(st.sampled_from(list(frame.columns)))] = \
            data.draw(CELL)
    path = tmp / "battles.csv"
    frame.to_csv(path, index=False)
    if data.draw(st.booleans()):
        path.write_bytes(_mutate_bytes(path.read_bytes(), data.draw))
    _check(CliRunner().invoke(main, ["pairwise", str(path), "--bootstrap", "0"]), path)
