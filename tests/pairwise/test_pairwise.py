"""The pairwise protocol against published references and a known simulation."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, shared_file
from evalgauge.cli import main
from evalgauge.errors import DataError
from evalgauge.pairwise import alpacaeval_win_rate, bootstrap_bt, code_battles, fit_bt, human_agreement, position_bias


def _weighted(frame, a, b, wins_a, wins_b):
    rows = pd.concat([pd.DataFrame({"model_a": frame[a], "model_b": frame[b], "winner": "model_a"}),
                      pd.DataFrame({"model_a": frame[a], "model_b": frame[b], "winner": "model_b"})],
                     ignore_index=True)
    return rows, np.concatenate([frame[wins_a].to_numpy(), frame[wins_b].to_numpy()]).astype(float)


def test_citations_match_bradleyterry2():
    c = pd.read_csv(FIXTURES / "bt" / "citations.csv")
    c = c[c["cited"] != c["citing"]]
    battles = code_battles(pd.DataFrame({"model_a": c["cited"], "model_b": c["citing"], "winner": "model_a"}))
    fit = fit_bt(battles, reference="Biometrika", weights=c["count"].to_numpy())
    got = dict(zip(fit.systems, fit.theta, strict=True))
    for journal, value in {"Comm Statist": -2.9491, "JASA": -0.4796, "JRSS-B": 0.2690}.items():
        assert got[journal] == pytest.approx(value, abs=1e-4)


def test_baseball_with_and_without_home_advantage():
    games = pd.read_csv(FIXTURES / "bt" / "baseball.csv")
    rows, weights = _weighted(games, "home.team", "away.team", "home.wins", "away.wins")
    battles = code_battles(rows)
    plain = fit_bt(battles, reference="Baltimore", weights=weights)
    assert np.round(np.sort(plain.theta[plain.theta != 0]), 2).tolist() == [0.68, 1.11, 1.25, 1.29, 1.44, 1.58]
    home = fit_bt(battles, reference="Baltimore", weights=weights, position=True)
    assert home.log_h == pytest.approx(0.302, abs=5e-4)


def test_alpacaeval_win_rates_and_standard_errors_reproduced():
    path = shared_file("alpaca_eval_annotations", "alpaca_eval_annotations_long.csv")
    board = pd.read_csv(path.parent / "leaderboard__data_AlpacaEval_2_weighted_alpaca_eval_gpt4_turbo_leaderboard.csv",
                        index_col=0)
    ann = pd.read_csv(path)
    ann = ann[ann["annotator"] == "weighted_alpaca_eval_gpt4_turbo"]
    checked = 0
    for model, group in ann.groupby("results_dir_model"):
        if model not in board.index:
            continue
        win, se = alpacaeval_win_rate(group["preference"])
        assert win == pytest.approx(board.loc[model, "win_rate"], abs=1e-9), model
        assert se == pytest.approx(board.loc[model, "standard_error"], abs=1e-9), model
        checked += 1
    assert checked >= 50


def test_known_position_effect_and_strengths_recovered():
    rng = np.random.default_rng(4)
    systems = [f"s{k}" for k in range(6)]
    theta = np.linspace(-1, 1, 6)
    log_h = 0.35
    rows = []
    for _ in range(12_000):
        i, j = rng.choice(6, 2, replace=False)
        p_a = 1 / (1 + np.exp(-(theta[i] + log_h - theta[j])))
        rows.append((systems[i], systems[j], "model_a" if rng.random() < p_a else "model_b"))
    battles = code_battles(pd.DataFrame(rows, columns=["model_a", "model_b", "winner"]))
    fit = fit_bt(battles, reference="s0", position=True)
    assert abs(fit.log_h - log_h) < 0.1  # ~4.5 SE of the position log-odds at this sample size
    for k in range(1, 6):
        assert abs(fit.theta[k] - (theta[k] - theta[0])) < 4.5 * fit.se[k]
    bias = position_bias(battles)
    # the slot-A advantage in win rate implied by the model, averaged over the pairs played
    expected = np.mean([1 / (1 + np.exp(-(theta[i] + log_h - theta[j]))) - 1 / (1 + np.exp(-(theta[i] - log_h
                        - theta[j]))) for i in range(6) for j in range(6) if i != j])
    assert bias.advantage == pytest.approx(expected, abs=4.5 * math.sqrt(0.25 * 2 / (12_000 / 6)))


def test_bootstraps_on_summeval_both_orders(tmp_path):
    path = shared_file("summeval_llm_judges", "llm_pairwise_h2h.csv")
    d = pd.read_csv(path)
    rows = pd.DataFrame({"model_a": d["presented_A"], "model_b": d["presented_B"],
                         "winner": d["parsed_choice"].map({"A": "model_a", "B": "model_b", "C": "tie"}),
                         "item": d["doc_id"], "variant": d["aspect"], "order": d["order"]})
    battles = code_battles(rows)
    fit = fit_bt(battles, reference="M10", position=True)
    naive = bootstrap_bt(battles, fit, method="naive", n_boot=40, seed=1, position=True)
    tee = bootstrap_bt(battles, fit, method="tee", n_boot=40, seed=1, position=True)
    for boot in (naive, tee):
        assert np.all(boot.low <= fit.theta + 1e-9) and np.all(fit.theta <= boot.high + 1e-9)
    # human agreement: the judge's choice against the experts' mean scores (TEE Table 17's two rates)
    human = np.where(d["human_mean_expert_1"] > d["human_mean_expert_2"], "a",
                     np.where(d["human_mean_expert_1"] < d["human_mean_expert_2"], "b", "tie"))
    # expert means are for system_1/system_2; flip to the presented order
    swapped = (d["order"] != "original").to_numpy()
    human = np.where(swapped & (human == "a"), "b", np.where(swapped & (human == "b"), "a", human))
    agree = human_agreement(d["parsed_choice"].map({"A": "a", "B": "b", "C": "tie"}), pd.Series(human))
    assert 0.3 < agree["overall"] < 1 and 0.5 < agree["ab_only"] <= 1 and agree["n_ab"] < agree["n"]


def test_bad_winner_values(tmp_path):
    frame = pd.DataFrame({"model_a": ["x", "y"], "model_b": ["y", "x"], "winner": ["model_a", "maybe"]})
    with pytest.raises(DataError, match="row 2 has 'maybe'"):
        code_battles(frame)
    frame = pd.DataFrame({"model_a": ["x"], "model_b": ["x"], "winner": ["tie"]})
    with pytest.raises(DataError, match="with itself"):
        code_battles(frame)


def test_analytic_information_equals_the_numerical_hessian():
    from evalgauge.pairwise import Battles, fit_bt

    rng = np.random.default_rng(7)
    systems = ("a", "b", "c", "d")
    strength = np.array([0.8, 0.3, 0.0, -0.6])
    rows = []
    for _ in range(600):
        i, j = rng.choice(4, 2, replace=False)
        d = strength[i] - strength[j] + 0.2
        p_a, p_t = 1 / (1 + np.exp(-d)) * 0.8, 0.2
        u = rng.random()
        rows.append((i, j, 1.0 if u < p_a else (0.5 if u < p_a + p_t else 0.0)))
    a, b, y = (np.array(c) for c in zip(*rows, strict=True))
    battles = Battles(systems, a, b, y, pd.DataFrame({"battle": np.arange(len(a))}))
    fit = fit_bt(battles, position=True)
    # the same fit's SEs from a numerical Hessian of the likelihood
    import evalgauge.pairwise.model as pw

    orig = pw._information
    try:
        # numerically, over every original judgment (the fit itself works on one row per ordered pair)
        pw._information = lambda x, unpack, _a, _b, total, structure, has_ties, ridge: _hessian(
            lambda z: -_loglik(z, unpack, a, b, y, has_ties), x)
        numeric = fit_bt(battles, position=True)
    finally:
        pw._information = orig
    assert np.allclose(fit.se, numeric.se, rtol=1e-4)


def _hessian(f, x, h=1e-4):
    """The central-difference Hessian of f at x."""
    n = x.size
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i, n):
            e_i, e_j = np.zeros(n), np.zeros(n)
            e_i[i] = e_j[j] = h
            v = (f(x + e_i + e_j) - f(x + e_i - e_j) - f(x - e_i + e_j) + f(x - e_i - e_j)) / (4 * h * h)
            out[i, j] = out[j, i] = v
    return out


def _loglik(x, unpack, a, b, y, has_ties):
    theta, log_nu, log_h = unpack(x)
    ha, hb = theta[a] + (log_h or 0.0), theta[b]
    stack = np.vstack([ha, hb, log_nu + 0.5 * (ha + hb)] if has_ties else [ha, hb])
    lse = np.logaddexp.reduce(stack, axis=0)
    out = (y == 1.0) @ (ha - lse) + (y == 0.0) @ (hb - lse)
    return out + ((y == 0.5) @ (stack[2] - lse) if has_ties else 0.0)


def test_arena_elo_is_chatbot_arenas_logistic_regression():
    from scipy.optimize import minimize

    from evalgauge.pairwise import Battles, arena_elo

    rng = np.random.default_rng(3)
    systems = tuple(f"m{k}" for k in range(6))
    strength = np.linspace(1, -1, 6)
    a = rng.integers(0, 6, 3000)
    b = (a + rng.integers(1, 6, 3000)) % 6
    d = strength[a] - strength[b]
    u = rng.random(3000)
    y = np.where(u < 0.2, 0.5, np.where(u < 0.2 + 0.8 / (1 + np.exp(-d)), 1.0, 0.0))
    battles = Battles(systems, a, b, y, pd.DataFrame({"battle": np.arange(3000)}))
    ours = arena_elo(battles)
    # Chatbot Arena's compute_mle_elo, written out: wins counted twice, ties once each way, logistic
    # regression on +-log(10) columns without intercept or penalty, 400 x coef + 1000
    wins = np.zeros((6, 6))
    np.add.at(wins, (a[y == 1.0], b[y == 1.0]), 2.0)
    np.add.at(wins, (b[y == 0.0], a[y == 0.0]), 2.0)
    np.add.at(wins, (a[y == 0.5], b[y == 0.5]), 1.0)
    np.add.at(wins, (b[y == 0.5], a[y == 0.5]), 1.0)

    def nll(c):
        diff = np.log(10) * (c[:, None] - c[None, :])
        return -np.sum(wins * -np.logaddexp(0, -diff))

    ref = minimize(nll, np.zeros(6), method="BFGS", options={"gtol": 1e-10}).x
    ref_elo = 400 * (ref - ref.mean()) + 1000
    assert np.max(np.abs(ours - ref_elo)) < 0.1


def test_connectivity_checks_agree_with_scipys_labelling():
    """comparison_groups and separated_systems answer the usual connected case by frontier steps and leave the
    rest to scipy: on random graphs (sparse, chains longer than the step limit, isolated parts) both agree with
    scipy's connected components."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    from evalgauge.pairwise import Battles, comparison_groups, separated_systems

    rng = np.random.default_rng(11)
    graphs = [(m, e) for m in (1, 2, 5, 30) for e in (0, 1, 3, m, 4 * m)]
    graphs += [(200, "chain"), (200, "two chains")]
    for m, e in graphs:
        for _ in range(5):
            if e == "chain":  # a directed path 0 -> 1 -> ... plus one edge back: strongly connected, 200 long
                a, b, y = np.arange(m), np.roll(np.arange(m), -1), np.ones(m)
            elif e == "two chains":
                a, b = np.arange(m - 1), np.arange(1, m)
                a, b, y = a[a != m // 2], b[a != m // 2], np.ones(m - 2)
            else:
                a = rng.integers(0, m, e)
                b = rng.integers(0, m, e)
                a, b = a[a != b], b[a != b]
                y = rng.choice([0.0, 0.5, 1.0], a.size)
            battles = Battles(tuple(f"s{k}" for k in range(m)), a, b, y, pd.DataFrame({"battle": np.arange(a.size)}))
            n, labels = connected_components(coo_matrix((np.ones(a.size), (a, b)), shape=(m, m)), directed=False)
            want = sorted(sorted(f"s{k}" for k in np.flatnonzero(labels == g)) for g in range(n))
            assert sorted(sorted(g) for g in comparison_groups(battles)) == want
            src = np.concatenate([a[y >= 0.5], b[y <= 0.5]])
            dst = np.concatenate([b[y >= 0.5], a[y <= 0.5]])
            n, labels = connected_components(coo_matrix((np.ones(src.size), (src, dst)), shape=(m, m)),
                                             directed=True, connection="strong")
            big = np.bincount(labels).argmax()
            want = [] if n == 1 else [f"s{k}" for k in range(m) if labels[k] != big]
            assert separated_systems(battles) == want


def test_pairs_shown_in_both_orders_on_the_grid_and_on_distinct_pairs():
    """The both-orders check gives a Python set's answer, on the small grid and on the distinct pairs."""
    from evalgauge.pairwise.agreement import _shown_both_ways

    rng = np.random.default_rng(5)
    for m in (2, 3, 10, 5000):
        for n in (1, 5, 40):
            a = rng.integers(0, m, n)
            b = (a + rng.integers(1, m, n)) % m
            pairs = set(zip(a.tolist(), b.tolist(), strict=True))
            assert _shown_both_ways(a, b, m) == any((y, x) in pairs for x, y in pairs)
    assert _shown_both_ways(np.array([0, 1]), np.array([1, 0]), 5000)  # the distinct-pairs branch, both ways


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
def test_chatbot_arenas_question_id_names_the_items(tmp_path, engine):
    """Chatbot Arena's battles name their prompts in question_id: read as the items, the honest interval
    resamples them (it once equalled the naive one while the note said items were resampled)."""
    rng = np.random.default_rng(3)
    systems = ["a", "b", "c", "d"]
    strength = {"a": 0.6, "b": 0.2, "c": -0.1, "d": -0.7}
    hard = rng.normal(0, 1.0, 60)
    rows = []
    for q in range(60):
        for _ in range(6):
            i, j = rng.choice(4, 2, replace=False)
            sa, sb = systems[i], systems[j]
            # each prompt favours some systems: an item x system effect that only item resampling sees
            p = 1 / (1 + np.exp(-(strength[sa] - strength[sb] + hard[q] * (i - j) * 0.3)))
            rows.append({"question_id": f"q{q}", "model_a": sa, "model_b": sb,
                         "winner": "model_a" if rng.random() < p else "model_b"})
    path = tmp_path / "arena.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    out = CliRunner().invoke(main, ["pairwise", str(path), "--engine", engine, "--bootstrap", "200",
                                    "--no-components", "--json", str(tmp_path / "p.json")])
    assert out.exit_code == 0, out.output
    payload = json.loads((tmp_path / "p.json").read_text())
    assert "question_id" in out.output  # the note says which column the items are
    table = pd.DataFrame(payload["bradley_terry"])
    width = lambda lo, hi: (table[hi] - table[lo]).to_numpy()  # noqa: E731
    assert (width("tee_low", "tee_high") != width("naive_low", "naive_high")).any()


def test_a_win_indicator_g_study_that_did_not_converge_is_not_reported(tmp_path, monkeypatch):
    """A fit short of its optimum gives no components, MDD or ceiling: the note says why (it once printed them
    anyway after a 30-minute fit that had not converged)."""
    from dataclasses import replace

    import evalgauge.estimate as estimate

    real = estimate.estimate_components

    def stopped(*args, **kwargs):
        vc = real(*args, **kwargs)
        return replace(vc, reml={**(vc.reml if isinstance(vc.reml, dict) else {}), "converged": False,
                                 "message": "the iteration limit was reached"})

    monkeypatch.setattr(estimate, "estimate_components", stopped)
    rng = np.random.default_rng(5)
    rows = [(s, "base", "model_a" if rng.random() < 0.6 else "model_b", f"i{item}", judge)
            for item in range(30) for judge in ("j1", "j2") for s in ("x", "y")]
    path = tmp_path / "pw.csv"
    pd.DataFrame(rows, columns=["model_a", "model_b", "winner", "item", "judge"]).to_csv(path, index=False)
    out = CliRunner().invoke(main, ["pairwise", str(path), "--reference", "base", "--bootstrap", "20", "--json",
                                    "-", "--components"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert "components" not in payload and "mdd95_win_rate_points" not in payload and "ceiling" not in payload
    assert any("did not converge (the iteration limit was reached)" in n for n in payload["notes"])
    assert payload["bradley_terry"]
