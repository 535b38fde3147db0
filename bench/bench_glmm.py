"""The logit GLMM (`components --glmm`) against lme4's glmer(nAGQ = 0), same data, same session.

Three designs: the bundled binary fixture (12 systems x 25 items x 4 judges x 2 replicates), a
sizing-shaped binary design (8 systems x 30 items x 4 judges x 2 replicates with every interaction,
11 % of rows missing), and the real TriviaQA judgments of Thakur et al. (9 exam models x 400 questions x
7 LLM judges, 25,035 rows) when ../shared/data is present. Each fitter runs in its own process, fitting
the model `--repeats` times on data already loaded; the bench prints the median fit time, the ratio,
the criterion of each fit evaluated by the same Laplace function (ours at glmer's estimates, so the two
are comparable), and issue 13's targets: at least 5x faster than glmer(nAGQ = 0), with a criterion no
worse than glmer's with the tight PIRLS tolerance `tolPwrss = 1e-12`.

It also times our fit with the BLAS thread count evalgauge chooses (one thread for small dense parts)
against the library default, the measurement behind that choice.

glmer needs R (`apt-get install r-cran-lme4 libopenblas0`); without it the lme4 columns are skipped.
Run: `make bench` or `python bench/bench_glmm.py [--repeats N]`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "reml"
TRIVIA = ROOT.parent / "shared" / "data" / "judging_the_judges_triviaqa" / "triviaqa_judgments_v1.csv"
sys.path.insert(0, str(ROOT / "bench"))
from reml_designs import BINARY_FORMULA  # noqa: E402

FULL = ("score ~ 1 + (1|system) + (1|item) + (1|judge) + (1|system:item) + (1|system:judge) + (1|item:judge)")
SIZING_BINARY = FULL + " + (1|system:item:judge)"
TRIVIA_JUDGES = ["Mistral-7B", "Llama-7B", "Llama-13B", "Llama3-8B", "Gemma-2B", "Llama-70B", "GPT-4"]

OURS = """
import json, sys, time, statistics
import pandas as pd
import evalgauge.estimate.glmm as glmm
from evalgauge.data import Judgments
from evalgauge.estimate.model import parse_formula
if sys.argv[4] == "default-threads":
    glmm.SINGLE_THREAD_BELOW = 0   # leave the BLAS thread count to the library
frame = pd.read_csv(sys.argv[1], dtype=str); frame["score"] = frame["score"].astype(float)
model = parse_formula(sys.argv[2])
times, cpu = [], []
for _ in range(int(sys.argv[3])):
    t, c = time.perf_counter(), time.process_time()
    fit = glmm.fit_glmm_logit(Judgments(frame, "bench"), model)
    times.append(time.perf_counter() - t); cpu.append(time.process_time() - c)
print(json.dumps({"seconds": statistics.median(times), "cpu": statistics.median(cpu),
                  "criterion": fit.reml.criterion, "evaluations": fit.reml.evaluations,
                  "components": {c.name: c.variance for c in fit.components if c.kind == "random"}}))
"""

GLMER = r"""
suppressPackageStartupMessages(library(lme4))
a <- commandArgs(trailingOnly = TRUE)
d <- read.csv(a[1], colClasses = "character")
for (f in c("system", "item", "judge")) d[[f]] <- factor(d[[f]])
d$score <- as.numeric(d$score)
ctrl <- if (a[4] == "tight") glmerControl(tolPwrss = 1e-12, optimizer = "bobyqa",
                                          optCtrl = list(rhoend = 1e-10, maxfun = 1e6)) else glmerControl()
times <- c()
for (i in seq_len(as.integer(a[3]))) {
  t0 <- proc.time()[["elapsed"]]
  m <- glmer(as.formula(a[2]), data = d, family = binomial, nAGQ = 0, control = ctrl)
  times <- c(times, proc.time()[["elapsed"]] - t0)
}
vc <- as.data.frame(VarCorr(m))
comps <- paste(sprintf('"%s": %.12g', vc$grp, vc$vcov), collapse = ", ")
cat(sprintf('{"seconds": %.6f, "components": {%s}}\n', median(times), comps))
"""


def sizing_binary(seed: int = 20261213) -> pd.DataFrame:
    """8 systems x 30 items x 4 judges x 2 replicates of logit-scale judgments, 11 % of rows missing."""
    from scipy.special import expit

    from evalgauge.simulate import simulate, sizing_preset

    spec = sizing_preset(systems=8, items=30, judges=4, replicates=2)
    spec = type(spec)(spec.counts, {"system": 0.5, "item": 1.2, "judge": 0.3, "system:item": 0.6,
                                    "system:judge": 0.2, "item:judge": 0.4, "system:item:judge": 0.3},
                      spec.nest, spec.fixed, spec.replicates, 0.0, "system", None)
    rng = np.random.default_rng(seed)
    df = simulate(spec, rng)
    df["score"] = (rng.random(len(df)) < expit(df["score"].to_numpy())).astype(int)
    return df.sample(frac=0.89, random_state=seed).reset_index(drop=True)


def trivia() -> pd.DataFrame:
    wide = pd.read_csv(TRIVIA)
    long = wide.melt(id_vars=["exam_model", "question_id"], value_vars=TRIVIA_JUDGES, var_name="judge",
                     value_name="score").dropna(subset=["score"])
    return long.rename(columns={"exam_model": "system", "question_id": "item"})


def run(cmd: list[str]) -> dict | None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"    failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def laplace_at(frame: pd.DataFrame, formula: str, components: dict[str, float]) -> float:
    """Our Laplace deviance at another fitter's components (theta_k = sd_k on the logit scale)."""
    from evalgauge.data import Judgments
    from evalgauge.estimate.cells import cell_data, fixed_matrix, grouping_candidates, random_structure
    from evalgauge.estimate.criterion import RemlProblem
    from evalgauge.estimate.glmm import _Laplace
    from evalgauge.estimate.model import parse_formula

    model = parse_formula(formula)
    cells = cell_data(Judgments(frame, "bench"), model)
    terms, levels, sizes, cell_term, _ = random_structure(cells, model, [])
    x, _, _ = fixed_matrix(cells, model)
    problem = RemlProblem(cells.n_obs, cells.count, cells.mean, 0.0, x, levels, sizes, cell_term,
                          grouping_candidates(cells, terms), diagonal=False)
    theta = np.array([np.sqrt(max(components[t.name], 0.0)) for t in terms])
    return _Laplace(problem, cells.count, cells.mean).deviance(theta)


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # progress shows while glmer runs
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rscript = shutil.which("Rscript")
    designs = {"binary fixture": (pd.read_parquet(FIXTURES / "binary.parquet"), BINARY_FORMULA),
               "sizing-shaped binary": (sizing_binary(), SIZING_BINARY)}
    if TRIVIA.exists():
        designs["TriviaQA (real)"] = (trivia(), FULL)
    else:
        print(f"TriviaQA: {TRIVIA} not present; skipped")
    print("Logit GLMM (Laplace, nAGQ = 0): median fit seconds, data loaded; same machine, same session")
    if not rscript:
        print("  glmer: Rscript not found (apt-get install r-cran-lme4 libopenblas0); skipped")
    all_met = True
    reps = str(args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (frame, formula) in designs.items():
            csv = Path(tmp) / "data.csv"
            frame.to_csv(csv, index=False)
            print(f"\n{name}: {len(frame):,} rows; {formula}")
            ours = run([sys.executable, "-c", OURS, str(csv), formula, reps, "chosen-threads"])
            default = run([sys.executable, "-c", OURS, str(csv), formula, reps, "default-threads"])
            if ours is None:
                all_met = False
                continue
            print(f"  evalgauge          {ours['seconds']:8.3f} s ({ours['cpu']:.3f} s CPU)  criterion "
                  f"{ours['criterion']:.6f}  {ours['evaluations']} evaluations (exact gradient)")
            if default is not None:
                print(f"  evalgauge, default BLAS threads {default['seconds']:8.3f} s ({default['cpu']:.3f} s CPU): "
                      f"the chosen thread count is {default['seconds'] / ours['seconds']:.2f}x faster")
            if not rscript:
                continue
            slow = "1" if len(frame) > 10_000 else reps  # glmer takes minutes on the real data: fit it once
            refs = {kind: run([rscript, "-e", GLMER, str(csv), formula, slow, kind]) for kind in ("default", "tight")}
            for kind, ref in refs.items():
                if ref is None:
                    continue
                crit = laplace_at(frame, formula, ref["components"])
                print(f"  glmer nAGQ=0 {kind:7s} {ref['seconds']:8.3f} s   criterion at its estimates {crit:.6f}  "
                      f"evalgauge is {ref['seconds'] / ours['seconds']:.1f}x faster")
                ref["criterion"] = crit
            if refs["default"] is not None and refs["tight"] is not None:
                speed = refs["default"]["seconds"] / ours["seconds"] >= 5
                no_worse = ours["criterion"] <= refs["tight"]["criterion"] + 1e-6
                all_met &= speed and no_worse
                print(f"  target: >= 5x faster than glmer(nAGQ = 0): {'met' if speed else 'NOT met'}; criterion no "
                      f"worse than glmer with tolPwrss = 1e-12 ({ours['criterion'] - refs['tight']['criterion']:+.2e}):"
                      f" {'met' if no_worse else 'NOT met'}")
    print(f"\nGLMM targets: {'all met' if all_met else 'not all met'}" + ("" if rscript else " (glmer not run)"))


if __name__ == "__main__":
    main()
