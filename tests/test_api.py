"""The fitted-object Python API, and the edge: every command reads its input once."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import evalgauge as eg
from evalgauge import dstudy
from evalgauge.cli import main
from evalgauge.simulate import simulate, sizing_preset


@pytest.fixture(scope="module")
def frame():
    return simulate(sizing_preset(systems=5, items=24, judges=3, replicates=2), seed=9)


@pytest.mark.slow
def test_fit_verbs_agree_with_the_functions_they_wrap(frame, tmp_path):
    fit = eg.fit(frame, object="system")
    direct = eg.estimate_components(frame, eg.infer_design(frame))
    assert np.allclose(fit.components.values, direct.values)
    assert fit.plan(item=500, judge=2).mdd95 == pytest.approx(dstudy.project(direct, {"item": 500, "judge": 2}).mdd95)
    assert fit.ceiling("judge").erho2 == pytest.approx(dstudy.ceiling(direct, "judge", 1).erho2)
    comparison = fit.compare(n_boot=300)
    assert list(comparison.systems.columns[:3]) == ["object", "mean", "raw_mean"] and len(comparison.pairs) == 10
    assert fit.interval().se > fit.interval().naive_se
    out = fit.report(tmp_path / "r.html")
    assert out.exists() and "Which system is better" in out.read_text()
    assert fit.to_frame().shape[0] == len(fit.components.components)
    with pytest.raises(eg.DesignError, match="unknown facet"):
        fit.plan(items=500)


def test_read_maps_columns(frame, tmp_path):
    path = tmp_path / "j.csv"
    frame.rename(columns={"system": "exam_model"}).to_csv(path, index=False)
    judgments = eg.read(path, columns={"system": "exam_model"})
    assert "system" in judgments.frame and judgments.n_rows == len(frame)


def _count_reads(monkeypatch) -> list:
    """Every file reader of the registry, counting its calls."""
    from dataclasses import replace

    from evalgauge import io

    calls: list = []

    def counting(read):
        return lambda *a, **k: calls.append(a[0]) or read(*a, **k)

    for suffix, reader in list(io.READERS.items()):
        monkeypatch.setitem(io.READERS, suffix, replace(reader, read=counting(reader.read)))
    return calls


@pytest.mark.parametrize("args", [["components"], ["analyze"], ["balance"], ["compare", "--bootstrap", "200"],
                                  ["screen"]])
def test_every_command_reads_its_input_once(frame, tmp_path, monkeypatch, args):
    path = tmp_path / "j.csv"
    frame.to_csv(path, index=False)
    calls = _count_reads(monkeypatch)
    out = CliRunner().invoke(main, [args[0], str(path), *args[1:]])
    assert out.exit_code in (0, 3), out.output
    assert len(calls) == 1, calls


def test_pairwise_reads_once(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    rows = [{"model_a": a, "model_b": b, "winner": rng.choice(["model_a", "model_b", "tie"]), "item": f"q{k}"}
            for k in range(30) for a, b in (("x", "y"), ("y", "z"), ("z", "x"))]
    path = tmp_path / "b.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    calls = _count_reads(monkeypatch)
    out = CliRunner().invoke(main, ["pairwise", str(path), "--bootstrap", "0"])
    assert out.exit_code == 0, out.output
    assert len(calls) == 1


def test_public_names_load_lazily_and_all_is_complete():
    import evalgauge

    assert sorted(evalgauge.__all__) == sorted([*evalgauge._PUBLIC, "__version__"])
    for name in evalgauge.__all__:
        assert getattr(evalgauge, name) is not None
    from evalgauge import vocabulary
    from evalgauge.estimate import METHODS
    from evalgauge.simulate import PRESETS

    assert tuple(sorted(PRESETS)) == vocabulary.PRESET_NAMES and METHODS == vocabulary.METHODS


def test_version_and_help_start_without_the_numeric_stack():
    import subprocess
    import sys

    code = ("import sys; from click.testing import CliRunner; from evalgauge.cli import main; "
            "CliRunner().invoke(main, ['--help']); "
            "print(','.join(m for m in ('numpy', 'pandas', 'scipy', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr


def test_the_collector_without_its_extra_says_how_to_install_it(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "aiohttp" else real(name, *a))
    out = CliRunner().invoke(main, ["run", str(tmp_path / "x.toml")])
    assert out.exit_code == 2 and "pip install 'evalgauge[collect]'" in out.output


@pytest.mark.parametrize("command", ["analyze", "components"])
@pytest.mark.slow
def test_a_run_database_is_read_once(tmp_path, monkeypatch, command):
    """A run database gives both the judgments and the collector's diagnostics from one reading."""
    import sqlite3

    from evalgauge.store import RunStore

    path = tmp_path / "run.sqlite"
    RunStore(path, writer=True).close()
    rng = np.random.default_rng(3)
    cells = [(i, s, j, r) for i in range(6) for s in range(3) for j in range(2) for r in (1, 2)]
    rows = [(f"k{n}", f"i{i}", f"s{s}", f"j{j}", r, float(s + rng.normal())) for n, (i, s, j, r) in enumerate(cells)]
    with sqlite3.connect(path) as con:
        con.executemany("INSERT INTO calls (key, item, system, judge, replicate, score) VALUES (?,?,?,?,?,?)", rows)
    opened = []
    original = RunStore.calls
    monkeypatch.setattr(RunStore, "calls", lambda self: opened.append(self.path) or original(self))
    out = CliRunner().invoke(main, [command, str(path)])
    assert out.exit_code == 0, out.output
    assert len(opened) == 1, opened


CORE = ("data", "design", "components", "estimate", "dstudy", "inference", "compare", "pairwise", "simulate",
        "vocabulary", "errors", "protocols", "display", "audit", "planning", "scoring", "analysis", "labels",
        "robustness", "gold")
EDGES = ("io", "collect", "report", "cli", "api", "outputs", "inputs")


def _imports(path) -> set[str]:
    """The evalgauge modules a source file imports, at the top or inside functions."""
    import ast

    tree = ast.parse(path.read_text())
    package = path.relative_to(SRC).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1]) if node.level > 1 else list(package)
                name = ".".join([*base, node.module] if node.module else base)
                targets = [name] if node.module else [f"{name}.{a.name}".strip(".") for a in node.names]
            else:
                targets = [node.module.removeprefix("evalgauge.")] if node.module.startswith("evalgauge") else []
            found.update(t.strip(".").split(".")[0] for t in targets if t.strip("."))
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("evalgauge."))
    return found


SRC = Path(__file__).resolve().parents[1] / "src" / "evalgauge"


def test_the_core_never_imports_an_edge():
    """Data flows one way: io, collect, report and cli may use the core; the core opens no file and
    knows nothing of them (ARCHITECTURE.md)."""
    offenders = {}
    for name in CORE:
        paths = [SRC / f"{name}.py"] if (SRC / f"{name}.py").exists() else sorted((SRC / name).glob("*.py"))
        assert paths, name
        for path in paths:
            bad = _imports(path) & set(EDGES)
            if bad:
                offenders[str(path.relative_to(SRC))] = sorted(bad)
    assert offenders == {}
    # and the check can see an import: the API does import the core
    assert {"analysis", "estimate"} <= _imports(SRC / "api.py")


def test_typed_plan_and_fit_summary(frame):
    """The D-study answers with a Plan and a REML fit carries a FitSummary: typed, with to_dict/to_frame,
    and the JSON the command line writes."""
    fit = eg.fit(frame.sample(frac=0.9, random_state=1), object="system")  # unbalanced: REML
    summary = fit.components.reml
    assert isinstance(summary, eg.FitSummary) and summary.kind == "reml" and summary.converged
    assert summary["deviance"] == summary.criterion and summary.evaluations >= summary.iterations >= 1
    assert "beta_cov" not in summary.to_dict() and "beta_cov" in summary  # kept out of the JSON only
    assert fit.components.to_dict()["reml"]["deviance"] == pytest.approx(summary.criterion)
    plan = eg.plan(fit.components, {"item": [30, 300], "judge": [1, 2]}, target_erho2=0.8, best_of=5)
    assert isinstance(plan, eg.Plan) and len(plan.to_frame()) == 4
    assert set(plan.to_frame()["n_item"]) == {30.0, 300.0}
    row = plan.to_frame().query("n_item == 300 and n_judge == 2").iloc[0]
    assert row["mdd95"] == pytest.approx(fit.plan(item=300, judge=2).mdd95)
    assert plan.ceiling.erho2 == pytest.approx(fit.ceiling("judge").erho2)
    payload = plan.to_dict()
    assert payload["ceiling"] == plan.ceiling.erho2 and payload["gaming"]["k"] == 5
    assert {r["facet"] for r in payload["requirements"]} == {"item", "judge"}
    json.loads(plan.to_json())


def test_the_model_is_resolved_once(frame, monkeypatch):
    """A design, a formula or the design options become one ModelSpec; the fits take it as it is and
    never infer a design again."""
    from evalgauge import design as design_module
    from evalgauge.estimate import ModelSpec, resolve_model

    spec = resolve_model(eg.read(frame), object="system")
    assert spec.score == "score" and spec.facets == ["system", "item", "judge"]
    inferred = []
    original = design_module.infer_design
    monkeypatch.setattr(design_module, "infer_design", lambda *a, **k: inferred.append(1) or original(*a, **k))
    by_spec = eg.estimate_components(frame, spec)
    assert inferred == []
    formula = ModelSpec(formula="score ~ (1|system) + (1|item) + (1|judge) + (1|system:item) + (1|system:judge)"
                                " + (1|item:judge) + (1|system:item:judge)")
    reml = eg.estimate_components(frame, formula)
    assert reml["system:judge"].variance == pytest.approx(by_spec["system:judge"].variance, rel=1e-5)
    with pytest.raises(eg.DesignError, match="either a design or a formula"):
        ModelSpec()
    with pytest.raises(eg.DesignError, match="not both"):
        resolve_model(eg.read(frame), spec.design, formula.formula)


#: the package's floors, lowest first: a module may import its own floor and those below, never one above
LAYERS = (
    ("ground", ("version", "errors", "vocabulary", "results", "display", "store", "machine")),
    ("core", CORE),
    ("edges", ("io", "inputs", "outputs")),
    ("collect", ("collect",)),
    ("report", ("report",)),
    ("api", ("api",)),
    ("harnesses", ("inspect_plugin", "eee_export")),
    ("command line", ("cli", "__main__")),
)


def _floor(name: str) -> int:
    return next(k for k, (_, names) in enumerate(LAYERS) if name in names)


def test_no_module_imports_one_above_it_and_the_top_level_has_no_cycle():
    top = {p.stem if p.is_file() else p.name for p in SRC.iterdir()
           if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert top == {n for _, names in LAYERS for n in names}, "every module has a floor (LAYERS)"
    upward, edges = {}, {}
    for name in top:
        paths = [SRC / f"{name}.py"] if (SRC / f"{name}.py").exists() else sorted((SRC / name).glob("*.py"))
        imported = set().union(*(_imports(p) for p in paths)) & top - {name}
        edges[name] = imported
        above = sorted(m for m in imported if _floor(m) > _floor(name))
        if above:
            upward[name] = above
    assert upward == {}
    # no cycle between top-level modules (within a floor too): depth-first search
    state: dict[str, int] = {}

    def visit(node: str, path: tuple[str, ...]) -> None:
        state[node] = 1
        for nxt in edges[node]:
            assert state.get(nxt) != 1, f"import cycle: {' -> '.join((*path, node, nxt))}"
            if nxt not in state:
                visit(nxt, (*path, node))
        state[node] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name, ())


def _module_imports(path: Path, modules: set[str]) -> set[str]:
    """The evalgauge modules (dotted, within the package) a source file imports, at the top or inside functions:
    a name imported from a package is its submodule when it is one. Imports under ``if TYPE_CHECKING:`` are left
    out: they name types for annotations and never run."""
    import ast

    rel = path.relative_to(SRC).with_suffix("").parts
    package = list(rel[:-1])
    found = set()
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or id(node) in typing_only:
            continue
        if node.level:
            base = package[: len(package) - node.level + 1] if node.level > 1 else package
            module = ".".join([*base, node.module] if node.module else base)
        elif node.module and node.module.startswith("evalgauge"):
            module = node.module.removeprefix("evalgauge").strip(".")
        else:
            continue
        for alias in node.names:
            sub = f"{module}.{alias.name}".strip(".")
            found.add(sub if sub in modules else module)
    return found & modules


def test_no_circle_between_any_two_modules():
    """Every module of every subpackage, with the imports made inside functions too: no module reaches itself
    (a circle held together by function-level imports works until someone moves one of them)."""
    paths = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).with_suffix("").parts
        paths[".".join(rel[:-1] if rel[-1] == "__init__" else rel)] = path
    modules = set(paths)
    edges = {name: _module_imports(path, modules) - {name} for name, path in paths.items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: tuple[str, ...]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            assert state.get(nxt) != 1, f"import circle: {' -> '.join((*trail, node, nxt))}"
            if nxt not in state:
                visit(nxt, (*trail, node))
        state[node] = 2

    assert {"collect.limits", "io.readers", "analysis.diagnostics"} <= modules and edges["collect.reply"]
    for name in sorted(edges):
        if name not in state:
            visit(name, ())


def test_fit_interval_stays_inside_the_scale_as_analyze_does(tmp_path):
    """On 20 C/I scores whose normal interval leaves 0-1, eg.fit(...).interval() is analyze's logit interval."""
    from evalgauge.io import import_files

    log = Path(__file__).parent / "fixtures" / "importers" / "inspect" / "arithmetic_mockllm_inspect-0.3.285.eval"
    frame = import_files("inspect", [str(log)])
    frame.to_csv(tmp_path / "rows.csv", index=False)
    out = CliRunner().invoke(main, ["analyze", str(tmp_path / "rows.csv"), "--json", "-"])
    theta = json.loads(out.stdout)["theta"]
    interval = eg.fit(frame).interval()
    assert theta["method"].startswith("logit") and interval.method == theta["method"]
    assert (interval.low, interval.high) == pytest.approx((theta["low"], theta["high"]), rel=1e-12)
    assert 0 < interval.low < interval.high < 1
