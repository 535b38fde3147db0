"""The unbalanced designs of issue 3, generated deterministically (seeded).

* ``tee``: TEE's safety design, 141 items in 12 categories x 5 variants x 3
  temperatures x 3 judges x 8 replicates, temperature and judge fixed, with 10 %
  of rows missing at random; the Table 8 components (scaled up where Table 8
  has no value) with fixed temperature and judge effects.
* ``sizing``: the sizing design 42 systems x 30 items x 9 judges x 3
  replicates, with one judge missing on 12 items (empty completions) and 10 %
  of the remaining rows missing at random.

`python bench/reml_designs.py OUTDIR` writes both as CSV and Parquet.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from evalgauge.simulate import simulate, sizing_preset, tee_table8

TEE_FORMULA = ("score ~ temperature + judge + (1|category) + (1|category:item) + (1|variant) + "
               "(1|item:variant) + (1|item:temperature) + (1|item:judge) + (1|variant:temperature) + "
               "(1|variant:judge) + (1|item:variant:temperature:judge)")
SIZING_FORMULA = ("score ~ 1 + (1|system) + (1|item) + (1|judge) + (1|system:item) + (1|system:judge) + "
                  "(1|item:judge) + (1|system:item:judge)")


def tee_data(seed: int = 20261130) -> pd.DataFrame:
    spec = tee_table8(categories=12, items_per_category=12, variants=5, temperatures=3, judges=3, replicates=8)
    comps = dict(spec.components)
    comps["category:item:variant:temperature:judge"] = 0.01  # the cell term epsilon
    spec = type(spec)(spec.counts, comps, spec.nest, spec.fixed, spec.replicates, spec.mu, spec.object, None)
    rng = np.random.default_rng(seed)
    df = simulate(spec, rng)
    df["item"] = df["item"].astype(str)
    # 141 items: drop the last item of three categories
    df = df[~df["item"].isin(["c01-i12", "c02-i12", "c03-i12"])]
    df = df[rng.random(len(df)) >= 0.10]
    return df.reset_index(drop=True)


def sizing_data(seed: int = 20261201) -> pd.DataFrame:
    spec = sizing_preset(systems=42, items=30, judges=9, replicates=3)
    rng = np.random.default_rng(seed)
    df = simulate(spec, rng)
    for col in ("system", "item", "judge"):
        df[col] = df[col].astype(str)
    lost = df["judge"].eq("j9") & df["item"].isin([f"i{k:02d}" for k in range(19, 31)])
    df = df[~lost]
    df = df[rng.random(len(df)) >= 0.10]
    return df.reset_index(drop=True)


def main(out: str) -> None:
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    for name, frame in (("tee", tee_data()), ("sizing", sizing_data()), ("binary", binary_data())):
        frame.to_csv(path / f"{name}.csv", index=False)
        frame.to_parquet(path / f"{name}.parquet", index=False)
        print(f"{name}: {len(frame)} rows -> {path}/{name}.csv, .parquet")



BINARY_FORMULA = "score ~ 1 + (1|system) + (1|item) + (1|judge) + (1|system:item) + (1|item:judge)"


def binary_data(seed: int = 20261202) -> pd.DataFrame:
    """Binary judgments from a logit-scale s x i x j x r model (for the GLMM check against glmer)."""
    from scipy.special import expit

    spec = sizing_preset(systems=12, items=25, judges=4, replicates=2)
    spec = type(spec)(spec.counts, {"system": 0.5, "item": 1.2, "judge": 0.3, "system:item": 0.6,
                                    "item:judge": 0.4}, spec.nest, spec.fixed, spec.replicates, 0.4, "system", None)
    rng = np.random.default_rng(seed)
    df = simulate(spec, rng)
    df["score"] = (rng.random(len(df)) < expit(df["score"].to_numpy())).astype(int)
    for col in ("system", "item", "judge"):
        df[col] = df[col].astype(str)
    return df


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/data")
