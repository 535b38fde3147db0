"""Writes the gold-label example: 300 texts scored 1-7 by three LLM judges twice each, and expert gold scores on
60 of them drawn at random (the truth is simulated, seed 7: the judges share a bias of +0.3 and an error per
text). Run from the repository root: `.venv/bin/python examples/gold/make.py`."""

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent


def main() -> None:
    rng = np.random.default_rng(7)
    n = 300
    truth = np.clip(rng.normal(4.0, 1.2, n), 1, 7)
    shared = rng.normal(0.0, 0.6, n)  # what every judge gets wrong on a text
    rows = []
    for judge, bias in (("gpt-4o", 0.1), ("claude-3.5", 0.3), ("llama-3.1-70b", 0.5)):
        for replicate in (1, 2):
            score = np.clip(np.round(truth + bias + shared + rng.normal(0.0, 0.6, n)), 1, 7)
            rows += [{"item": f"text-{i:03d}", "judge": judge, "replicate": replicate, "score": int(score[i])}
                     for i in range(n)]
    pd.DataFrame(rows).to_csv(HERE / "annotations.csv", index=False)
    chosen = np.sort(rng.choice(n, 60, replace=False))
    pd.DataFrame({"item": [f"text-{i:03d}" for i in chosen], "gold": np.round(truth[chosen], 2)}).to_csv(
        HERE / "gold.csv", index=False)


if __name__ == "__main__":
    main()
