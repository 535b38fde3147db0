#!/usr/bin/env bash
# make demo: collect a small factorial from serve-sim through the real collector, analyse it, then
# analyse a bundled real dataset (AlpacaEval 2, 5 systems x 805 items x 2 judges) into report.html.
set -euo pipefail
BIN=.venv/bin
OUT=demo-output
mkdir -p "$OUT"
rm -f "$OUT"/sim-demo.sqlite*
free_port() { $BIN/python -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
SIMS=()
trap 'kill "${SIMS[@]}" 2>/dev/null || true' EXIT
# start_sim CONFIG PORT LOG: serve-sim for one configuration, waiting until it says it listens, for as
# long as its process lives (at most 5 minutes on a loaded machine)
start_sim() {
    $BIN/evalgauge serve-sim "$1" --port "$2" > "$3" 2>&1 &
    local pid=$!
    SIMS+=("$pid")
    $BIN/python - "$pid" "$3" <<'PY'
import os, sys, time
pid, log = int(sys.argv[1]), sys.argv[2]
deadline = time.time() + 300
while time.time() < deadline:
    if "serve-sim listening" in open(log, errors="replace").read():
        sys.exit(0)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("serve-sim stopped before it was ready:\n" + open(log, errors="replace").read())
    time.sleep(0.1)
sys.exit("serve-sim was not ready after 5 minutes")
PY
}
PORT=$(free_port)
start_sim examples/sim/run.toml "$PORT" "$OUT/serve-sim.log"
echo "== 1. a 1,152-call factorial against the simulated judge panel (serve-sim on port $PORT)"
$BIN/evalgauge run examples/sim/run.toml --base-url "http://127.0.0.1:$PORT/v1" --database "$OUT/sim-demo.sqlite" \
    --no-progress
echo "== 2. analyse the collected run"
$BIN/evalgauge analyze "$OUT/sim-demo.sqlite" \
    --terms system,item,judge,variant,item:system,item:judge,system:judge --report "$OUT/sim-report.html"
echo "== 3. adaptive: from a pool of 60 items, a pilot on 12, a fit, the cheapest design reaching MDD <= 0.8 at"
echo "      the judges' prices, only the missing calls, a refit (examples/sim-adaptive)"
rm -f "$OUT"/sim-adaptive.sqlite*
PORT2=$(free_port)
start_sim examples/sim-adaptive/run.toml "$PORT2" "$OUT/serve-sim-adaptive.log"
$BIN/evalgauge run examples/sim-adaptive/run.toml --base-url "http://127.0.0.1:$PORT2/v1" \
    --database "$OUT/sim-adaptive.sqlite" --target-mdd 0.8 --pilot-items 12 --yes --no-progress \
    || [ $? -eq 3 ]  # 3: the target was out of reach (said why)
echo "== 4. analyse real AlpacaEval 2 judgments (examples/alpacaeval)"
$BIN/evalgauge analyze examples/alpacaeval/alpacaeval_5x805x2.csv --drop-missing --report "$OUT/report.html" \
    --json "$OUT/report.json"
echo
echo "Report: $(pwd)/$OUT/report.html  (and $(pwd)/$OUT/sim-report.html for the simulated run)"
