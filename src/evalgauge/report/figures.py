"""The report's figures (matplotlib, Agg), each returned as a base64 PNG for embedding."""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ..analysis.gstudy import Analysis
from ..display import letters_note, plot_label

# labels are data: "$" starts no mathtext (a label "$\\frac{$" would fail to render), and each is cut short
STYLE = {"figure.dpi": 110, "axes.spines.top": False, "axes.spines.right": False, "font.size": 9,
         "text.parse_math": False}


def _log_axes(ax, which: str = "x") -> None:
    """A log scale whose ticks read as plain numbers (10, 100, 0.01): with mathtext off (labels are data),
    matplotlib's own log ticks would show their mathtext source."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    for name in which:
        axis = ax.xaxis if name == "x" else ax.yaxis
        (ax.set_xscale if name == "x" else ax.set_yscale)("log")
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def shares(a: Analysis) -> str:
    """Each component's share per observation beside its share of Var(theta-hat) (TEE C.5)."""
    vc = a.components
    theta_shares = a.projection.shares()
    names = [c.name for c in vc.components if c.kind != "fixed"]  # Tier 2 terms are no share (TEE Table 2)
    per_obs = [100 * vc.share(n) for n in names]
    of_theta = [100 * theta_shares.get(n, 0.0) for n in names]
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7, 0.35 * len(names) + 1.2))
        y = range(len(names))
        ax.barh([i + 0.2 for i in y], per_obs, height=0.4, label="per observation", color="#9ab")
        ax.barh([i - 0.2 for i in y], of_theta, height=0.4, label="of Var(theta-hat) at this design", color="#c53")
        ax.set_yticks(list(y), [plot_label(n) for n in names])
        ax.invert_yaxis()
        ax.set_xlabel("% of variance")
        ax.legend(loc="lower right", frameon=False)
        ax.set_title("Where the variance is, and where the error of the mean comes from")
        return _png(fig)


def interventions(a: Analysis) -> str:
    frame = a.interventions
    key = f"pct_change_{frame.attrs.get('ranked_by', 'var_abs')}"  # the quantity the table is ranked by
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7, 0.35 * len(frame) + 1.2))
        colors = ["#2a7" if v < 0 else "#c53" for v in frame[key]]
        ax.barh([plot_label(n) for n in frame["intervention"]], frame[key], color=colors)
        ax.axvline(0, color="k", lw=0.8)
        ax.invert_yaxis()
        ax.set_xlabel("% change in " + ("relative error sigma2_delta" if "delta" in key else "Var(theta-hat)"))
        ax.set_title("Single-factor interventions")
        return _png(fig)


def nomogram(a: Analysis) -> str:
    data = a.curves["nomogram"]
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7, 4))
        for m, values in data["lines"].items():
            line, = ax.plot(data["n"], values, label=f"{m} judge{'s' if int(m) > 1 else ''}")
            ax.axhline(data["ceilings"][m], color=line.get_color(), ls=":", lw=0.8)
        ax.axhline(0.8, color="k", lw=0.8)
        _log_axes(ax, "x")
        ax.set_ylim(0, 1)
        ax.set_xlabel("items")
        ax.set_ylabel("E rho^2")
        ax.legend(frameon=False, fontsize=8)
        ax.set_title("E rho^2 against items; dotted: each panel's ceiling (sizing eq. 4)")
        return _png(fig)


def ci_vs_n(a: Analysis) -> str:
    data = a.curves["ci_vs_n"]
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7, 3.8))
        ax.plot(data["n"], data["full"], label="full (all components)", color="#c53")
        ax.plot(data["n"], data["naive"], label="naive (item sampling only)", color="#9ab")
        ax.axvline(data["observed"], color="k", ls="--", lw=0.8, label="this study")
        _log_axes(ax, "xy")
        ax.set_xlabel("items N")
        ax.set_ylabel("95% CI half-width")
        ax.legend(frameon=False)
        ax.set_title("The naive interval keeps shrinking; the honest one bottoms out")
        return _png(fig)


def frontier(a: Analysis) -> str:
    data = a.curves["frontier"]
    rows = data["rows"]
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.scatter([r["calls"] for r in rows], [r["se"] for r in rows], s=10, color="#bbb", label="designs")
        front = sorted((r for r in rows if r["pareto"]), key=lambda r: r["calls"])
        ax.plot([r["calls"] for r in front], [r["se"] for r in front], color="#2a7", label="cost-efficiency frontier")
        ax.scatter([data["current"]["calls"]], [data["current"]["se"]], color="#c53", zorder=3, label="this design")
        _log_axes(ax, "x")
        ax.set_xlabel("judge calls")
        ax.set_ylabel("SE of theta-hat")
        ax.legend(frameon=False)
        ax.set_title("SE against cost over items x judges")
        return _png(fig)


def _per_system(a: Analysis, draw, labels, xlabel: str, title: str) -> str:
    """A figure with one row per system (best at the top): ``draw(ax, systems, rows)`` plots the rows, the
    y labels come from ``labels(systems)``; the legend sits outside the axes."""
    sysf = a.comparison.systems.iloc[::-1]
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7, 0.32 * len(sysf) + 1.3))
        y = list(range(len(sysf)))
        draw(ax, sysf, y)
        ax.set_yticks(y, [plot_label(n) for n in labels(sysf)])
        ax.set_xlabel(xlabel)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
        ax.set_title(title)
        return _png(fig)


def forest(a: Analysis) -> str:
    """The leaderboard: each system's mean with its full interval and the naive (item-only) one."""

    def draw(ax, sysf, y):
        ax.errorbar(sysf["mean"], [k + 0.12 for k in y], xerr=[sysf["mean"] - sysf["low"], sysf["high"] - sysf["mean"]],
                    fmt="o", color="#c53", ms=4, capsize=2, label="full interval (every source of error)")
        ax.errorbar(sysf["mean"], [k - 0.12 for k in y],
                    xerr=[sysf["mean"] - sysf["naive_low"], sysf["naive_high"] - sysf["mean"]],
                    fmt="none", color="#9ab", capsize=2, label="naive (item bootstrap)")

    if letters_note(list(a.comparison.systems["group"])):  # dozens of overlapping groups: names alone
        return _per_system(a, draw, lambda sysf: list(sysf["object"]), "mean score", "Leaderboard")
    return _per_system(a, draw, lambda sysf: [f"{r} {g}" for r, g in zip(sysf["object"], sysf["group"], strict=True)],
                       "mean score", "Leaderboard (letters: groups the design cannot tell apart)")


def pair_matrix(a: Analysis) -> str:
    """Every pair's difference (row minus column), marked where separable after multiplicity."""
    import numpy as np

    c = a.comparison
    names = list(c.systems["object"])
    k = {n: i for i, n in enumerate(names)}
    diff = np.full((len(names), len(names)), np.nan)
    sig = np.zeros_like(diff, dtype=bool)
    for r in c.pairs.itertuples(index=False):
        i, j = k[r.a], k[r.b]
        diff[i, j], diff[j, i] = r.diff, -r.diff
        sig[i, j] = sig[j, i] = bool(r.separable)
    with plt.rc_context(STYLE):
        size = 0.38 * len(names) + 2.2
        fig, ax = plt.subplots(figsize=(size + 1, size))
        lim = np.nanmax(np.abs(diff)) if np.isfinite(diff).any() else 1.0
        im = ax.imshow(diff, cmap="RdBu_r", vmin=-lim, vmax=lim)
        for i in range(len(names)):
            for j in range(len(names)):
                if sig[i, j]:
                    ax.text(j, i, "*", ha="center", va="center", fontsize=9)
        ax.set_xticks(range(len(names)), [plot_label(n) for n in names], rotation=90)
        ax.set_yticks(range(len(names)), [plot_label(n) for n in names])
        fig.colorbar(im, ax=ax, shrink=0.7, label="difference (row - column)")
        ax.set_title("Pairs: * separable with simultaneous intervals")
        return _png(fig)


def rank_sets(a: Analysis) -> str:
    """Each system's rank with its marginal and simultaneous confidence set (1 = best)."""

    def draw(ax, sysf, y):
        ax.hlines([k + 0.12 for k in y], sysf["rank_low"], sysf["rank_high"], color="#c53", lw=3,
                  label="marginal rank set")
        ax.hlines([k - 0.12 for k in y], sysf["rank_low_simultaneous"], sysf["rank_high_simultaneous"],
                  color="#9ab", lw=3, label="simultaneous rank sets")
        ax.scatter(sysf["rank"], y, color="k", s=12, zorder=3, label="estimated rank")
        if len(sysf) <= 20:
            ax.set_xticks(range(1, len(sysf) + 1))
        else:  # a tick per rank runs together on a large board: whole numbers, about a dozen of them
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True))

    return _per_system(a, draw, lambda sysf: list(sysf["object"]), "rank (1 = highest mean)",
                       "Rank confidence sets (Mogstad, Romano, Shaikh & Wilhelm 2024)")


def qq(a: Analysis) -> str:
    """Each random term's conditional modes, standardised by the term's SD, against normal quantiles (TEE C.6):
    on the line if the term's effects are normal as the model assumes (the modes shrink, so the slope is
    below one where a term is estimated from few observations per level)."""
    import numpy as np
    from scipy.special import ndtri

    terms = a.effects.qq
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for name, modes in terms.items():
            n = len(modes)
            ax.plot(ndtri((np.arange(1, n + 1) - 0.5) / n), modes, ".", ms=3, label=plot_label(name))
        lim = max(2.5, *(abs(m) for v in terms.values() for m in (v[0], v[-1])))
        ax.plot([-lim, lim], [-lim, lim], color="#888", lw=0.8)
        ax.set_xlabel("normal quantile")
        ax.set_ylabel("conditional mode / the term's SD")
        ax.legend(loc="upper left", frameon=False, fontsize=8)
        ax.set_title("Q-Q plot of each term's conditional modes")
        return _png(fig)


def residuals(a: Analysis) -> str:
    """Each cell's mean minus its fitted value (X beta + Z u) against the fitted value (TEE C.6): a funnel says the
    variance grows with the mean, stripes a bounded or discrete score."""
    data = a.effects.residuals
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(data["fitted"], data["residual"], ".", ms=2, alpha=0.5, color="#357")
        ax.axhline(0, color="#888", lw=0.8)
        ax.set_xlabel("fitted cell mean")
        ax.set_ylabel("cell mean - fitted")
        shown = len(data["fitted"])
        ax.set_title("Residuals against fitted values" + (f" ({shown:,} of {data['cells']:,} cells)"
                                                          if shown < data["cells"] else ""))
        return _png(fig)


#: systems beyond which the pair matrix's cells are too small to read (the report's pair table holds every pair)
PAIR_MATRIX_UP_TO = 60


def all_figures(a: Analysis) -> dict[str, str]:
    figs = {"shares": shares(a), "interventions": interventions(a)}
    if a.effects is not None and a.effects.qq:
        figs["qq"] = qq(a)
    if a.effects is not None and a.effects.residuals.get("fitted"):
        figs["residuals"] = residuals(a)
    if a.comparison is not None:
        figs.update(forest=forest(a), rank_sets=rank_sets(a))
        if len(a.comparison.systems) <= PAIR_MATRIX_UP_TO:
            figs["pair_matrix"] = pair_matrix(a)
    if "ci_vs_n" in a.curves:
        figs["ci_vs_n"] = ci_vs_n(a)
    if "nomogram" in a.curves:
        figs["nomogram"] = nomogram(a)
        figs["frontier"] = frontier(a)
    return figs
