from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


def shared_file(*parts: str) -> Path:
    """A file from ../shared/data, or skip: users' machines do not have it."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not present (../shared/data is only on the developers' machines)")
    return path
