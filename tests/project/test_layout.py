"""The tests stand beside what they test: a package's tests in the folder of its name, a top-level module's at the
top named after it, helpers in helper modules (docs/design/architecture.md, "Tests")."""

import ast
from pathlib import Path

from conftest import ROOT

TESTS = ROOT / "tests"
SRC = ROOT / "src" / "evalgauge"
#: folders of tests that are not a package's: the repository's own files (README, docs, bench, reproduce), the
#: live tier, the data the tests read
NOT_PACKAGES = {"project", "live", "fixtures"}


def _test_modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "fixtures" not in p.relative_to(TESTS).parts)


def test_each_package_has_its_folder_of_tests_and_each_folder_a_package():
    packages = {p.parent.name for p in SRC.glob("*/__init__.py")}
    folders = {p.parent.relative_to(TESTS).parts[0] for p in _test_modules() if p.parent != TESTS}
    strays = sorted(folders - packages - NOT_PACKAGES)
    assert not strays, f"test folders without a package of that name in src/evalgauge: {strays}"
    untested = sorted(packages - folders)
    assert not untested, f"packages of src/evalgauge without a folder of tests: {untested}"
    assert all(len(p.relative_to(TESTS).parts) <= 2 for p in _test_modules()), "one folder deep"


def test_each_top_level_test_module_is_named_for_a_top_level_module():
    modules = {p.stem for p in SRC.glob("*.py") if p.stem not in {"__init__", "__main__"}}
    strays = []
    for path in TESTS.glob("test_*.py"):
        name = path.stem.removeprefix("test_")
        if not any(name == m or name.startswith(m + "_") for m in modules):
            strays.append(path.name)
    assert not strays, f"top-level test modules named for no module of src/evalgauge: {sorted(strays)}"


def test_a_test_module_borrows_only_from_its_own_folder():
    """Shared builders live in helper modules (tests/serve_sim.py, hostile.py, records.py, battles.py, ...): a test
    module importing another folder's test module would work or not by the order pytest collects them in."""
    borrowed = []
    for path in _test_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                if name.startswith("test_") and not (path.parent / f"{name}.py").exists():
                    borrowed.append(f"{path.relative_to(TESTS)} imports {name}")
    assert not borrowed, borrowed
