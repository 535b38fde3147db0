"""Inputs that break readers: deep JSON, damaged archives, BLOBs, special files, timestamps, bad shapes."""

import os
import sqlite3
import threading
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge.cli import main
from records import run_database
from serve_sim import write_config

DEEP = "[" * 2000 + "]" * 2000


def _invoke(*args, timeout: float = 60):
    """The CLI in a thread with a deadline: a hang fails the test instead of stalling the suite."""
    box = {}
    thread = threading.Thread(target=lambda: box.update(out=CliRunner().invoke(main, [str(a) for a in args])),
                              daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"hung: {args}"
    out = box["out"]
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert "Traceback" not in out.output
    return out


@pytest.mark.parametrize("fmt,name", [("inspect", "log.json"), ("lm-eval", "samples_x.jsonl"),
                                      ("arena-hard", "j.jsonl"), ("alpaca-eval", "annotations.json"),
                                      ("mt-bench", "m.jsonl"), (None, "d.jsonl")])
def test_json_nested_thousands_deep_is_a_message(tmp_path, fmt, name):
    path = tmp_path / name
    body = '{"a": ' + DEEP + "}"
    path.write_text(body + "\n" if name.endswith("jsonl") else body)
    args = ["components", path] if fmt is None else ["import", fmt, path, "-o", tmp_path / "o.csv"]
    out = _invoke(*args)
    assert out.exit_code == 2 and str(path) in out.output, out.output


def test_a_corrupt_deflate_stream_in_an_inspect_archive_is_a_message(tmp_path):
    path = tmp_path / "log.eval"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("header.json", '{"eval": {"task": "t"}}' * 50)
    raw = bytearray(path.read_bytes())
    start = raw.index(b"header.json") + len("header.json")
    raw[start:start + 3] = b"\xff" * 3  # the deflate stream's first block header: zlib's "invalid block type"
    path.write_bytes(bytes(raw))
    out = _invoke("import", "inspect", path, "-o", tmp_path / "o.csv")
    assert out.exit_code == 2 and str(path) in out.output, out.output


def test_a_blob_in_a_run_database_facet_is_named(tmp_path):
    db = run_database(tmp_path / "run.sqlite", n=6)
    con = sqlite3.connect(db)
    con.execute("UPDATE calls SET item = ? WHERE rowid = 3", (b"\xff\xfe\x00",))
    con.commit()
    con.close()
    out = _invoke("components", db)
    assert out.exit_code == 2 and "row 3, column 'item' holds binary data" in out.output, out.output


def test_timestamps_are_not_scores(tmp_path):
    path = tmp_path / "t.parquet"
    pd.DataFrame({"item": [f"i{i}" for i in range(8)] * 2, "judge": ["a"] * 8 + ["b"] * 8,
                  "score": pd.date_range("2024-01-01", periods=16, freq="h")}).to_parquet(path)
    out = _invoke("components", path)
    assert out.exit_code == 2 and "dates or times" in out.output, out.output


@pytest.mark.parametrize("body", ['[1, 2]', '{"item": "x"}', '{"components": [1, 2]}',
                                  '{"components": [{"component": "item", "variance": "big"}]}', '{}', DEEP,
                                  '{"item": NaN}'])
def test_serve_sim_refuses_malformed_components(tmp_path, body):
    config = write_config(tmp_path, 1)
    path = tmp_path / "c.json"
    path.write_text(body)
    out = _invoke("serve-sim", config, "--components", path, "--port", "1")
    assert out.exit_code == 2 and str(path) in out.output, out.output


def test_special_files_are_refused_not_read(tmp_path):
    fifo = tmp_path / "f.csv"
    os.mkfifo(fifo)
    zero = tmp_path / "z.csv"
    zero.symlink_to("/dev/zero")
    for path in (fifo, zero):
        out = _invoke("components", path, timeout=20)
        assert out.exit_code == 2 and "not a regular file" in out.output, out.output
    config = write_config(tmp_path, 1)
    (tmp_path / "items.csv").unlink()
    (tmp_path / "items.csv").symlink_to("/dev/zero")
    out = _invoke("run", config, "--dry-run", timeout=20)
    assert out.exit_code == 2 and "is a device" in out.output, out.output
    assert Path("/dev/zero").exists()


def test_a_grid_too_large_to_count_is_refused_with_its_sizes_before_allocating(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    n = 20_000
    path = tmp_path / "sparse.csv"
    pd.DataFrame({f: rng.integers(0, 2_000, n).astype(str) for f in ("item", "judge", "variant")}
                 ).assign(score=rng.normal(size=n)).to_csv(path, index=False)
    out = _invoke("components", path)
    assert out.exit_code == 2 and "item 2,000 x judge 2,000 x variant 2,000" in out.output, out.output
    assert "GiB" in out.output and "--nest" in out.output


def test_a_header_of_a_hundred_thousand_columns_is_refused_before_parsing(tmp_path):
    path = tmp_path / "wide.csv"
    cols = [f"c{i}" for i in range(100_000)]
    path.write_text(",".join(cols) + "\n" + ",".join("1" for _ in cols) + "\n")
    out = _invoke("components", path, timeout=20)
    assert out.exit_code == 2 and "100,000 columns" in out.output and "import wide" in out.output


def test_the_two_way_fallback_keeps_every_option_the_user_gave(tmp_path, monkeypatch):
    """When the full model is unaffordable the two-way model is fitted for the same request: the score
    column and the facets the user named, not the ones a fresh inference would pick."""
    import numpy as np

    import evalgauge.estimate as estimate

    monkeypatch.setattr(estimate, "AFFORDABLE_SECONDS", 0.0)  # every full model is "too slow" here
    rng = np.random.default_rng(2)
    rows = [(s, i, j, v, float(rng.normal())) for s in range(3) for i in range(8) for j in range(3)
            for v in range(2) if rng.random() > 0.1]
    frame = pd.DataFrame(rows, columns=["system", "item", "judge", "variant", "score"]).astype(
        {"system": str, "item": str, "judge": str, "variant": str})
    frame["score2"] = frame["score"] * 100.0
    frame["batch"] = rng.integers(0, 3, len(frame)).astype(str)  # a column the user left out with --facets
    path = tmp_path / "d.csv"
    frame.to_csv(path, index=False)
    out = CliRunner().invoke(main, ["components", str(path), "--score", "score2", "--facets",
                                    "system,item,judge,variant", "--json", "-"])
    assert out.exit_code == 0, out.output
    import json

    payload = json.loads(out.output)
    names = {c["component"] for c in payload["components"]}
    assert "interactions of up to two facets were fitted" in " ".join(payload["notes"])
    assert not any("batch" in n for n in names) and "system:item:judge" not in names
    residual = next(c["variance"] for c in payload["components"] if c["component"] == "residual")
    total = sum(c["variance"] for c in payload["components"])
    assert total == pytest.approx(frame["score2"].var(), rel=0.5) and residual > 100  # score2's scale
