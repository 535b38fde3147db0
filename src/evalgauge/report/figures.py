"""The report's figures (matplotlib, Agg), each returned as a base64 PNG for embedding."""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .analysis import Analysis

STYLE = {"figure.dpi": 110, "axes.spines.top": False, "axes.spines.right": False, "font.size": 9}


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def shares(a: Analysis) -> str:
    """Each component's share per observation beside its share of Var(theta-hat) (TEE C.5)."""
    vc = a.components
    theta_shares = a.projection.shares()
    names = [c.name for c in vc.components]
    per_obs = [100 * vc.share(n) for n in names]
    of_theta = [100 * theta_shares.get(n, 0.0) for n in names]
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7, 0.35 * len(names) + 1.2))
        y = range(len(names))
        ax.barh([i + 0.2 for i in y], per_obs, height=0.4, label="per observation", color="#9ab")
        ax.barh([i - 0.2 for i in y], of_theta, height=0.4, label="of Var(theta-hat) at this design", color="#c53")
        ax.set_yticks(list(y), names)
        ax.invert_yaxis()
        ax.set_xlabel("% of variance")
        ax.legend(loc="lower right", frameon=False)
        ax.set_title("Where the variance is, and where the error of the mean comes from")
        return _png(fig)


def interventions(a: Analysis) -> str:
    frame = a.interventions
    key = "pct_change_sigma2_delta" if frame["pct_change_sigma2_delta"].notna().any() else "pct_change_var_abs"
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7, 0.35 * len(frame) + 1.2))
        colors = ["#2a7" if v < 0 else "#c53" for v in frame[key]]
        ax.barh(frame["intervention"], frame[key], color=colors)
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
        ax.set_xscale("log")
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
        ax.set_xscale("log")
        ax.set_yscale("log")
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
        ax.set_xscale("log")
        ax.set_xlabel("judge calls")
        ax.set_ylabel("SE of theta-hat")
        ax.legend(frameon=False)
        ax.set_title("SE against cost over items x judges")
        return _png(fig)


def all_figures(a: Analysis) -> dict[str, str]:
    figs = {"shares": shares(a), "interventions": interventions(a)}
    if "ci_vs_n" in a.curves:
        figs["ci_vs_n"] = ci_vs_n(a)
    if "nomogram" in a.curves:
        figs["nomogram"] = nomogram(a)
        figs["frontier"] = frontier(a)
    return figs
