"""The REML problem's memory-saving layouts (evalgauge.estimate.criterion): each gives bit for bit what the
plain arrays it replaces give, so a fit is the same number whichever layout it runs on."""

import numpy as np
import pandas as pd
import pytest

from evalgauge.estimate.criterion import (
    _bincount,
    _Cells,
    _LazyIndex,
    _pairs_product,
    _pattern,
    _row_pairs,
    _row_pattern,
    _RowPairs,
    _Segments,
)
from evalgauge.estimate.model import parse_formula
from evalgauge.estimate.reml import RemlProblem, cell_data, fixed_matrix, term_levels
from evalgauge.io import read_judgments
from evalgauge.simulate import simulate, sizing_preset


def _csr(lengths, n, rng):
    ptr = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    cols = np.concatenate([np.sort(rng.choice(n, size=k, replace=False)) for k in lengths]).astype(np.int32)
    return ptr, cols


def test_row_pairs_by_length_sum_as_the_kept_pairs_do():
    rng = np.random.default_rng(0)
    n = 150
    lengths = [0, 1, 2, 12, 12, 3, 0, _RowPairs.SHORT, _RowPairs.SHORT + 1, 100, 12, 5]
    ptr, cols = _csr(lengths, n, rng)
    vals, mat = rng.normal(size=cols.size), rng.normal(size=(n, n))
    expected = _pairs_product(_row_pairs(ptr, cols, n), vals, mat)
    pairs = _RowPairs(ptr, cols, n)
    assert pairs.long is not None and pairs.long[0].size == _RowPairs.SHORT + 1 + 100  # the two long rows
    assert np.array_equal(pairs.product(cols, vals, mat, chunk=200), expected)  # chunks of a few rows
    assert np.array_equal(pairs.product(cols, vals, mat), expected)
    short = _RowPairs(*_csr([12] * 40, n, rng), n)
    assert short.long is None and short.nbytes == 40 * 12 * 4  # one int32 per entry, nothing per pair


@pytest.mark.parametrize("keep", [None, np.array([0, 2, 3, 7])])
def test_a_lazy_index_is_the_index_it_stands_for(keep):
    rng = np.random.default_rng(1)
    m, g = 9, 7
    gi, gj = rng.integers(0, g, m).astype(np.int32), rng.integers(0, g, m)
    segments = [(((gi, g), (gj, 1)), keep), (((gj, g), (gi, 1)), None)]
    index = _LazyIndex(segments, m)
    first = (gi.astype(np.int64) * g + gj) if keep is None else (gi.astype(np.int64) * g + gj)[keep]
    plain = np.concatenate([first, gj * g + gi])
    assert index.size == plain.size and index.nbytes == 0
    assert np.array_equal(index[:], plain)
    for part in index.parts():
        assert np.array_equal(index[part], plain[part])
    weights = rng.normal(size=plain.size)
    assert np.array_equal(index.add(lambda part: weights[part], g * g), np.bincount(plain, weights, g * g))
    kept = _Segments([gi, gj], [0, 5])
    assert np.array_equal(kept[:], np.concatenate([gi, gj + 5])) and np.array_equal(kept[kept.parts()[1]], gj + 5)
    # a shift past int32's range is made in 64 bits
    assert kept.segment(0).dtype == np.int32 and _Segments([gi], [2**31]).segment(0).min() >= 2**31


def test_tiled_cells_gather_and_sum_as_their_index_would():
    rng = np.random.default_rng(2)
    m, reps = 11, 3
    tiled, indexed = _Cells(None, reps, m), _Cells(np.tile(np.arange(m, dtype=np.int32), reps), reps, m)
    v, entries = rng.normal(size=m), rng.normal(size=reps * m)
    assert tiled.size == indexed.size == reps * m and tiled.nbytes == 0
    assert np.array_equal(tiled.take(v), indexed.take(v))
    for part in (slice(None), slice(m, 2 * m)):
        assert np.array_equal(tiled.take_part(v, part), indexed.take_part(v, part))
    assert np.array_equal(tiled.sum(entries), indexed.sum(entries))
    assert np.array_equal(tiled.sum(entries), np.bincount(np.tile(np.arange(m), reps), entries, m))
    # sums of v at the entries' cells into places: the same to the last bit as bincount over every entry
    n = 5
    index = rng.integers(0, n, reps * m).astype(np.int32)
    for values in (None, entries):
        whole = np.bincount(index, weights=np.tile(v, reps) * (1.0 if values is None else values), minlength=n)
        assert np.array_equal(tiled.scatter(index, v, values, n), whole)
        assert np.array_equal(indexed.scatter(index, v, values, n), whole)


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_the_row_pattern_made_a_range_of_rows_at_a_time_is_the_whole_pattern(chunk):
    rng = np.random.default_rng(3)
    m, n_rows, width = 200, 37, 50
    rows = rng.integers(0, n_rows, m).astype(np.int32)
    cols = [rng.integers(0, 20, m).astype(np.int32), rng.integers(0, 8, m), rng.integers(0, 3, m).astype(np.int32)]
    shifts = [0, 20, 40]
    whole = _pattern(np.tile(rows, 3), np.concatenate([c + s for c, s in zip(cols, shifts, strict=True)]), width)
    ranged = _row_pattern(rows, n_rows, cols, shifts, width, chunk=chunk)
    for a, b in zip(whole, ranged, strict=True):
        assert np.array_equal(a, b)


def test_bincount_of_a_narrow_index_is_numpys():
    rng = np.random.default_rng(3)
    idx, w = rng.integers(0, 50, 10_000).astype(np.int32), rng.normal(size=10_000)
    assert np.array_equal(_bincount(idx, w, 50), np.bincount(idx, w, 50))
    assert np.array_equal(_bincount(idx, w, 20), np.bincount(idx, w, 20))  # beyond minlength: numpy's length
    assert _bincount(np.zeros(0, np.int32), np.zeros(0), 4).dtype == np.float64


@pytest.mark.parametrize("formula", [
    # s x i x j x r, 1% of cells gone: system x item eliminated first, system blocks, the rest dense
    "score ~ 1 + (1|system) + (1|item) + (1|judge) + (1|system:item) + (1|system:judge) + (1|item:judge)"
    " + (1|system:item:judge)",
    # systems as fixed effects: X's dummies touch their own cells only (segments on a subset of cells)
    "score ~ system + (1|item) + (1|judge) + (1|item:judge) + (1|system:judge)",
])
def test_the_segmented_layout_evaluates_to_the_plain_ones_bits(monkeypatch, formula):
    """A large problem keeps its scatters as segments (no index of every entry, cells as tiles, the eliminated
    term's short rows without pairs); a small one keeps plain arrays. Forced either way on the same data, every
    evaluation is the same to the last bit."""
    from evalgauge.estimate import criterion

    frame = simulate(sizing_preset(systems=60, items=30, judges=4, replicates=2), seed=1)
    frame = frame.sample(frac=0.99, random_state=2).reset_index(drop=True)
    model = parse_formula(formula)
    cells = cell_data(read_judgments(frame), model)
    levels, sizes = zip(*(term_levels(cells, t) for t in model.random), strict=True)
    x, _, _ = fixed_matrix(cells, model)
    groups = [np.asarray(pd.factorize(cells.codes[c])[0]) for c in model.columns]
    cell_term = next((k for k, q in enumerate(sizes) if q == cells.n_cells), None)

    def problem(threshold):
        monkeypatch.setattr(criterion, "_SEGMENTED_ENTRIES", threshold)
        return RemlProblem(cells.n_obs, cells.count, cells.mean, cells.ss_within, x, list(levels), list(sizes),
                           cell_term, groups, True)

    segmented, plain = problem(0), problem(2**62)
    assert segmented.segmented and not plain.segmented
    assert segmented.ll_idx.nbytes == segmented.lg_idx.nbytes == segmented.gg_idx.nbytes == 0
    assert plain.gg_idx.nbytes > 0 and plain.gg_cell.index is not None
    if cell_term is not None:
        assert segmented.diag is not None and segmented.t0_cell.index is None
    rng = np.random.default_rng(4)
    for theta in (np.full(segmented.n_terms, 0.5), rng.uniform(0.0, 1.5, segmented.n_terms)):
        one, two = segmented.evaluate(theta, gradient=True, hessian=True), plain.evaluate(theta, gradient=True,
                                                                                            hessian=True)
        assert one.deviance == two.deviance
        assert np.array_equal(one.gradient, two.gradient)
        assert np.array_equal(one.extra["information"], two.extra["information"], equal_nan=True)
    if cell_term is not None:  # the eliminated term's rows are short (a level's global entries): no pairs kept
        assert segmented.t0_pairs is not None and segmented.t0_pairs.long is None
