"""Pilot data for the item-screening tests."""

import math

import numpy as np
import pandas as pd


def screening_pilot(seed=0, systems=12, items=40) -> pd.DataFrame:
    """Systems x items x two replicates where half the items separate the systems and half do not."""
    rng = np.random.default_rng(seed)
    disc = np.where(np.arange(items) < items // 2, 1.5, 0.05)  # half the items separate systems, half do not
    ability = rng.standard_normal(systems)
    rows = []
    for i in range(items):
        for s in range(systems):
            for r in range(2):
                rows.append((f"s{s}", f"i{i:02d}", 3 + math.sqrt(disc[i]) * ability[s] + rng.normal(0, 0.5), r + 1))
    return pd.DataFrame(rows, columns=["system", "item", "score", "replicate"])
