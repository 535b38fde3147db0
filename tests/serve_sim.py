"""A judge server on loopback for the collector's tests: serve-sim started as its own process, the run
configuration it answers (items x systems x two prompt variants x judges x replicates) and the key it expects."""

import json
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd

from evalgauge.collect.config import load_config
from evalgauge.collect.runner import run

KEY = "sk-test-SECRET-0123456789abcdef"
TRUTH = {"item": 0.4, "system": 0.3, "judge": 0.2, "variant": 0.05, "system:item": 0.25, "item:judge": 0.1,
         "system:judge": 0.05, "residual": 0.15}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(tmp: Path, port: int, *, mode="numeric", items=12, systems=4, reps=2, judges=3, provider="openai",
                 extra_run="", timeout=10.0, in_flight=32) -> Path:
    rng = np.random.default_rng(0)
    pd.DataFrame({"id": [f"q{i:02d}" for i in range(items)], "text": [f"Question {i}?" for i in range(items)]}) \
        .to_csv(tmp / "items.csv", index=False)
    rows = [(f"q{i:02d}", f"s{s}", f"Answer {s}-{i} {rng.integers(1000)}")
            for i in range(items) for s in range(systems)]
    pd.DataFrame(rows, columns=["item", "system", "response"]).to_csv(tmp / "responses.csv", index=False)
    judge_blocks = "\n".join(textwrap.dedent(f"""
        [[judges]]
        name = "j{k}"
        model = "sim-{k}"
        provider = "{provider}"
        base_url = "http://127.0.0.1:{port}{'' if provider == 'anthropic' else '/v1'}"
        api_key_env = "SIM_KEY"
        price_input_per_mtok = 1.0
        price_output_per_mtok = 2.0
        max_tokens = 16
        """) for k in range(judges))
    text = textwrap.dedent(f"""
        [run]
        name = "t"
        replicates = {reps}
        temperatures = [0.0]
        in_flight = {in_flight}
        timeout_s = {timeout}
        max_retries = 8
        {extra_run}

        [data]
        items = "items.csv"
        responses = "responses.csv"

        [scoring]
        mode = "{mode}"

        [[variants]]
        id = "v1"
        template = "Rate: {{item}} / {{response}}. Reply 'Score: N'."

        [[variants]]
        id = "v2"
        template = "Grade strictly. Q: {{item}} A: {{response}}. 'Score: N'."
        """) + judge_blocks
    path = tmp / "run.toml"
    path.write_text(text)
    (tmp / "truth.json").write_text(json.dumps(TRUTH))
    return path


class Server:
    def __init__(self, config: Path, port: int, *faults: str, extra: tuple[str, ...] = (), env=None):
        cmd = [sys.executable, "-m", "evalgauge.cli", "serve-sim", str(config), "--port", str(port),
               "--components", str(config.parent / "truth.json"), "--seed", "7", *extra]
        for f in faults:
            cmd += ["--fault", f]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.time() + 20
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"serve-sim did not start: {self.stop()}")

    def stop(self) -> str:
        self.proc.terminate()
        try:
            out, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        return (out or "") + (err or "")


def collect(config: Path, port: int, *faults: str):
    """Run the configuration's factorial against a fresh serve-sim; (config, summary)."""
    server = Server(config, port, *faults)
    try:
        cfg = load_config(config)
        return cfg, run(cfg)
    finally:
        server.stop()
