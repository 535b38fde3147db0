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


def chromium(profile: Path) -> list[str]:
    """Debian's headless Chromium and the flags a closed network needs (no background connections), with a fresh
    profile folder; skip when it is not installed (.ci/run installs it)."""
    import shutil

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0"]
