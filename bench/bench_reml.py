"""REML fit time and peak memory against lme4 (R, with the machine's BLAS) and mixedlm, same session.

Each fitter runs in its own process on the same data, fitting the same model
several times; the bench prints the median fit time (data already loaded) and
the process's peak resident memory, the ratios, and whether issue 3's targets
are met: at least 10x faster than lme4 and 2x faster than mixedlm on the TEE
and sizing designs, under 2 s (TEE) and 2.2 s (sizing); issue 13.6's 2x faster than mixedlm on InstEval
(three crossed random terms, ../shared).

lme4 needs R (`apt-get install r-cran-lme4 libopenblas0`); mixedlm needs
`pip install mixedlm` (`make bench` installs it). A missing one is reported and skipped.

Run: `make bench` or `python bench/bench_reml.py [--repeats N] [--only tee,sizing,insteval]`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "reml"
SHARED = ROOT.parent / "shared" / "data" / "lme4_reference" / "InstEval.csv"
sys.path.insert(0, str(ROOT / "bench"))
from reml_designs import SIZING_FORMULA, TEE_FORMULA  # noqa: E402

DESIGNS = {
    "tee": (FIXTURES / "tee.parquet", TEE_FORMULA, ["category", "item", "variant", "temperature", "judge"],
            {"seconds": 2.0, "lme4": 10, "mixedlm": 2}),
    "sizing": (FIXTURES / "sizing.parquet", SIZING_FORMULA, ["system", "item", "judge"],
               {"seconds": 2.2, "lme4": 10, "mixedlm": 2}),
    "insteval": (SHARED, "y ~ 1 + service + (1|s) + (1|d) + (1|dept)", ["s", "d", "dept", "service"],
                 {"mixedlm": 2}),  # issue 13.6: a third crossed factor
}

OURS = """
import json, sys, time, statistics
import pandas as pd
from evalgauge.estimate import estimate_components
frame = pd.read_csv(sys.argv[1], dtype=str); frame[sys.argv[3]] = frame[sys.argv[3]].astype(float)
times = []
for _ in range(int(sys.argv[4])):
    t = time.perf_counter(); r = estimate_components(frame, formula=sys.argv[2]); times.append(time.perf_counter() - t)
print(json.dumps({"seconds": statistics.median(times), "criterion": r.reml["deviance"]}))
"""

MIXEDLM = """
import json, sys, time, statistics
import pandas as pd
import mixedlm
frame = pd.read_csv(sys.argv[1], dtype=str); frame[sys.argv[3]] = frame[sys.argv[3]].astype(float)
times = []
for _ in range(int(sys.argv[4])):
    t = time.perf_counter(); m = mixedlm.lmer(sys.argv[2], frame, REML=True); times.append(time.perf_counter() - t)
print(json.dumps({"seconds": statistics.median(times), "criterion": float(m.REMLcrit())}))
"""

LME4 = r"""
suppressPackageStartupMessages(library(lme4))
a <- commandArgs(trailingOnly = TRUE)
d <- read.csv(a[1], colClasses = "character")
for (f in strsplit(a[3], ",")[[1]]) d[[f]] <- factor(d[[f]])
f <- as.formula(a[2]); d[[all.vars(f)[1]]] <- as.numeric(d[[all.vars(f)[1]]])
times <- c()
for (i in seq_len(as.integer(a[4]))) {
  t0 <- proc.time()[["elapsed"]]
  m <- lmer(f, data = d, REML = TRUE, control = lmerControl(calc.derivs = FALSE))
  times <- c(times, proc.time()[["elapsed"]] - t0)
}
cat(sprintf('{"seconds": %.6f, "criterion": %.10f}\n', median(times), REMLcrit(m)))
"""


def run(cmd: list[str]) -> tuple[dict | None, float, str]:
    """Run a fitter; return its JSON line, its peak RSS in MiB, and any error text."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    peak = usage.ru_maxrss / 1024
    if status != 0:
        return None, peak, err.strip().splitlines()[-1] if err.strip() else f"exit {status}"
    return json.loads(out.strip().splitlines()[-1]), peak, ""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="tee,sizing,insteval")
    args = parser.parse_args()
    rscript = shutil.which("Rscript")
    try:
        import mixedlm  # noqa: F401
        have_mixedlm = True
    except ImportError:
        have_mixedlm = False
    print("REML benchmark: median fit seconds (data loaded), peak process RSS; same machine, same session")
    if not rscript:
        print("  lme4: Rscript not found (apt-get install r-cran-lme4 libopenblas0); skipped")
    if not have_mixedlm:
        print("  mixedlm: not installed (pip install mixedlm); skipped")
    all_met = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            path, formula, factors, target = DESIGNS[name]
            if not path.exists():
                print(f"\n{name}: {path} not present; skipped")
                continue
            csv = Path(tmp) / f"{name}.csv"
            frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path, dtype=str)
            frame.to_csv(csv, index=False)
            response = formula.split("~")[0].strip()
            reps = str(args.repeats)
            results = {"evalgauge": run([sys.executable, "-c", OURS, str(csv), formula, response, reps])}
            if have_mixedlm:
                results["mixedlm"] = run([sys.executable, "-c", MIXEDLM, str(csv), formula, response, reps])
            if rscript:
                results["lme4"] = run([rscript, "-e", LME4, str(csv), formula, ",".join(factors), reps])
            print(f"\n{name}: {len(frame):,} rows; {formula}")
            ours = results["evalgauge"][0]
            for tool, (res, peak, err) in results.items():
                if res is None:
                    print(f"  {tool:10s} failed: {err}")
                    continue
                ratio = ""
                if tool != "evalgauge" and ours is not None:
                    ratio = f"  evalgauge is {res['seconds'] / ours['seconds']:.1f}x faster"
                print(f"  {tool:10s} {res['seconds']:8.3f} s   peak {peak:7.0f} MiB   REML criterion "
                      f"{res['criterion']:.6f}{ratio}")
            if ours is None or not target:
                continue
            checks = []
            if "seconds" in target:
                checks.append((f"under {target['seconds']} s", ours["seconds"] < target["seconds"]))
            for tool in ("lme4", "mixedlm"):
                factor = target.get(tool)
                if factor and tool in results and results[tool][0] is not None:
                    checks.append((f">= {factor}x faster than {tool}",
                                   results[tool][0]["seconds"] / ours["seconds"] >= factor))
            for label, ok in checks:
                all_met &= ok
                print(f"  target {label}: {'MET' if ok else 'NOT MET'}")
    print(f"\nall targets met: {all_met}")


if __name__ == "__main__":
    main()
