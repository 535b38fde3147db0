"""One self-contained HTML file: tables, embedded PNG figures, the checklist. No network needed.

Everything that comes from the data (labels, judge output, notes) is escaped:
judge output is untrusted text.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from html import escape as _html_escape
from pathlib import Path

from .. import vocabulary
from ..analysis.gstudy import Analysis
from ..display import letters_note
from ..version import __version__
from .figures import PAIR_MATRIX_UP_TO, all_figures
from .text import (
    ceiling_sentence,
    convention_sentence,
    disagreed_sentence,
    effects_rows,
    object_score_sentence,
    theta_of_objects_sentence,
    theta_sentence,
    tier_sentence,
)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;
color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}td,th{padding:3px 10px;border-bottom:1px solid #eee;
text-align:right}td:first-child,th:first-child{text-align:left}.met{color:#1a7f37}.missing{color:#b42318}.not-measured{color:#6e7781}
.box{background:#f6f8fa;border-radius:6px;padding:.8em 1em}.warn{background:#fff4e5;border-radius:6px;padding:.5em 1em}
img{max-width:100%}.muted{color:#666;font-size:.85em}.nw{white-space:nowrap}.scroll{overflow-x:auto}
"""


def escape(text: object) -> str:
    """Data as HTML text: controls and bidi overrides made visible (:func:`evalgauge.display.shown`), then
    HTML-escaped."""
    from ..display import shown

    return _html_escape(shown(text))


def _num(value, fmt=".4g") -> str:
    if value is None or value != value:
        return "—"
    return format(value, fmt)


def _interval(low, high, fmt: str = ".4g", comparable: bool = True) -> str:
    """[low, high], "not comparable" for a confounded pair, or "not estimable" where the design has no interval."""
    if not comparable:
        return "not comparable"
    if low is None or high is None or low != low or high != high:
        return "not estimable"
    return f"[{format(low, fmt)}, {format(high, fmt)}]"


def _critical_said(c) -> str:
    crit = c.extra.get("critical")
    return f" +- {crit['error']:.2g} by {escape(crit['method'])}" if crit else ""


def _table(headers: list[str], rows: list[list]) -> str:
    """A table that scrolls sideways on a narrow page; an interval ("[low, high]") never breaks across lines."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _cell(value) -> str:
    text = str(value)
    return f"<td class='nw'>{escape(text)}</td>" if text.startswith("[") else f"<td>{escape(text)}</td>"


def _object_scores_html(a: Analysis) -> str:
    """Each object's mean with the full and the naive interval, and what the naive one misses."""
    oi, scores = a.object_interval, a.object_scores
    full, naive = oi.half_widths()
    obj, facet = escape(oi.object), escape(oi.sampling_facet)
    rows = [[r[oi.object], _num(r["mean"]), r["n"], f"[{_num(r['low'])}, {_num(r['high'])}]",
             f"[{_num(r['naive_low'])}, {_num(r['naive_high'])}]"] for r in scores.to_dict(orient="records")]
    return (f"<h2>{obj} scores</h2><p>One {obj}'s score is uncertain by <b>+-{_num(full)}</b> (95%, every source of "
            f"error at this design: the absolute error sigma2_Delta, SE {_num(oi.se)}, Satterthwaite df "
            f"{_num(oi.df, '.1f')}), not the +-{_num(naive)} that resampling {facet}s gives "
            f"(SE {_num(oi.naive_se)}): the honest SE is <b>{_num(oi.se_ratio, '.2f')}x</b> the naive one. "
            f"Differences between two {obj}s are judged by the MDD above, which leaves out what they share.</p>"
            + _table([oi.object, "mean", "n", "95% CI (full)", f"95% CI ({oi.sampling_facet} sampling only)"], rows))


def _comparison_html(a: Analysis, figs: dict) -> str:
    """Which system is better: the leaderboard with rank sets, the pair table, one sentence per neighbour."""
    c = a.comparison
    obj = escape(c.object)
    pct = f"{100 * c.level:g}%"
    records = c.systems.to_dict(orient="records")
    too_many = letters_note([r["group"] for r in records])
    rows = [[r["rank"], r["object"], _num(r["mean"]), r["n"], _interval(r["low"], r["high"]),
             f"[{_num(r['naive_low'])}, {_num(r['naive_high'])}]", f"{r['rank_low']}-{r['rank_high']}",
             f"{r['rank_low_simultaneous']}-{r['rank_high_simultaneous']}", "" if too_many else r["group"]]
            for r in records]
    pairs = [[r["a"], r["b"], _num(r["diff"]), _num(r["se"], ".3g"),
              _interval(r["low"], r["high"], ".3g", r.get("comparable", True)),
              _interval(r["low_simultaneous"], r["high_simultaneous"], ".3g", r.get("comparable", True)),
              _num(r["p_holm"], ".3g"), f"[{_num(r['naive_low'], '.3g')}, {_num(r['naive_high'], '.3g')}]",
              "yes" if r["separable"] else "no"] for r in c.pairs.to_dict(orient="records")]
    warn = "".join(f"<div class='box warn'><b>Not comparable:</b> {escape(t)}</div>"
                   for t in c.extra.get("confounded", []))
    warn += "".join(f"<div class='box'><b>Not measured:</b> {escape(t)}</div>"
                    for t in c.extra.get("unmeasured", []))
    return (f"<h2>Which {obj} is better</h2>{warn}<p>Each {obj}'s mean with its own {pct} interval (its own cells), "
            "the naive one that resamples items only, and its rank confidence sets (marginal and simultaneous). "
            + (f"{obj.capitalize()}s sharing a letter cannot be told apart at this design.</p>" if not too_many
               else f"{escape(too_many.capitalize())}.</p>")
            + _table(["rank", c.object, "mean", "n", f"{pct} CI", "naive CI", "rank set", "simultaneous", "group"],
                     rows)
            + f"<img alt='leaderboard' src='data:image/png;base64,{figs['forest']}'>"
            + f"<img alt='rank sets' src='data:image/png;base64,{figs['rank_sets']}'>"
            + "<ul>" + "".join(f"<li>{escape(t)}</li>" for t in c.sentences) + "</ul>"
            + f"<h3>Every pair</h3><p class='muted'>Simultaneous intervals hold for all {len(c.pairs):,} pairs at once "
            f"(critical value {_num(c.critical_simultaneous, '.4g')}{_critical_said(c)}); p-values Holm-adjusted.</p>"
            + _pair_table(pairs, pct, open_=len(c.pairs) <= OPEN_PAIRS)
            + (f"<img alt='pair matrix' src='data:image/png;base64,{figs['pair_matrix']}'>" if "pair_matrix" in figs
               else f"<p class='muted'>No pair matrix above {PAIR_MATRIX_UP_TO} {obj}s (its cells would be too small "
                    "to read); the pair table above holds every pair.</p>")
            + "".join(f"<p class='muted'>{escape(n)}</p>" for n in c.notes))


#: pair tables longer than this start folded (a 58-system board has 1,653 pairs), with a filter box
OPEN_PAIRS = 45
#: filters the pair table's rows by the text typed (a system's name): the report stays one self-contained file
_FILTER = ("<input type='search' placeholder='filter pairs by system' oninput=\"var q=this.value.toLowerCase();"
           "this.nextElementSibling.querySelectorAll('tbody tr').forEach(function(r){r.style.display="
           "r.textContent.toLowerCase().indexOf(q)<0?'none':''})\">")


def _pair_table(rows: list[list], pct: str, open_: bool) -> str:
    """Every pair, in a fold that opens itself on small boards, with a filter box."""
    table = _table(["a", "b", "diff", "SE", f"{pct} CI", "simultaneous", "p (Holm)", "naive", "separable"], rows)
    return (f"<details{' open' if open_ else ''}><summary>all {len(rows):,} pairs</summary>{_FILTER}{table}"
            "</details>")


def _missing_html(missing: dict) -> str:
    """Every judge x variant x system cell's calls without a score (all rows; the worst first)."""
    from ..analysis.checklist import missing_sentence

    rows = sorted(missing["table"], key=lambda r: -r["rate"])
    keys = [k for k in ("judge", "variant", "system") if rows and k in rows[0]]
    body = [[*(r[k] for k in keys), r["calls"], r["scored"], r["unread"], r["truncated"], f"{100 * r['rate']:.1f}%"]
            for r in rows]
    return ("<h2>Calls without a score</h2>" + f"<p>{escape(missing_sentence(missing))}.</p>"
            + _table([*keys, "calls", "scored", "unread", "cut at max_tokens", "unscored"], body))


def render(a: Analysis, gold=None) -> str:
    """The report's HTML; ``gold`` (:class:`evalgauge.gold.GoldAnalysis`) adds the gold labels' section."""
    vc = a.components
    figs = all_figures(a)
    shares = a.projection.shares()
    parts = [f"<h1>evalgauge report</h1><p class='muted'>{escape(a.source)} · {vc.n_obs} judgments · "
             f"{escape(vc.method)} · evalgauge {__version__} · {dt.date.today().isoformat()}</p>"]
    missing = a.diagnostics.missing.to_dict() if a.diagnostics is not None else None
    if missing and missing.get("headline"):  # before any mean: the means rest on different subsets of cells
        parts.append(f"<div class='box warn'><b>Caution.</b> {escape(missing['headline'])}</div>")
    if a.comparison is not None:  # systems compared: the question they are compared for comes first
        parts.append(_comparison_html(a, figs))
    if missing and missing["unscored"]:
        parts.append(_missing_html(missing))
    spread = a.diagnostics.within_call_spread if a.diagnostics is not None else ()
    if spread:
        parts.append("<p>Judges' within-call spread (the SD of each call's distribution over the scale, output = "
                     "logprobs; the judge's own uncertainty, not counted in the components): " + ", ".join(
                         f"{escape(str(r['judge']))} {r['mean_spread']:.3g} (mean of {r['calls']} calls)"
                         for r in spread) + ".</p>")
    if a.theta:  # the same sentences as the terminal's (evalgauge.report.text)
        parts.append(f"<div class='box'>{escape(theta_sentence(a.theta.to_dict()))}</div>")
        if a.object_interval is not None:
            parts.append(f"<p class='muted'>{escape(theta_of_objects_sentence(vc.object))}</p>")
    if a.object_interval is not None:  # the headline of one system's number, as the terminal and JSON give it
        said = object_score_sentence(a.object_interval.to_dict(), vocabulary.MIN_DF)
        parts.append(f"<div class='box'>{escape(said)}</div>")
    if a.ceiling:
        req = a.judges_needed
        said = ceiling_sentence(vc.object, a.projection.erho2, a.projection.mdd95, asdict(a.ceiling), str(req),
                                req.target)
        parts.append(f"<p>{escape(said)}</p>")
    if a.comparison is None and a.object_interval is not None:
        parts.append(_object_scores_html(a))
    if a.pairwise:
        pw = a.pairwise
        def interval(r, name):
            return f"[{_num(r[name + '_low'], '.2f')}, {_num(r[name + '_high'], '.2f')}]"

        rows = [[r["system"], _num(r["log_strength"], ".3f"), _num(r["elo"], ".0f"),
                 _num(r["win_rate_vs_reference"], ".3f"), interval(r, "naive"), interval(r, "tee")]
                for r in pw["bradley_terry"]]
        parts.append(f"<h2>Bradley-Terry strengths (reference {escape(str(pw['reference']))} at 0)</h2>" + _table(
            ["system", "log strength", "Elo", "win rate vs reference", "naive 95% (battles)",
             "TEE-aware 95% (battles and cells)"], rows))
        if "position_bias" in pw:
            b = pw["position_bias"]
            parts.append(f"<p>Position bias: a system presented first wins {100 * b['slot_a_advantage']:+.1f} "
                         f"points more often than presented second (sd {100 * b['spread_sd']:.1f} across systems, "
                         f"max {100 * b['max']:+.1f}; sizing sec. 5.4). Run both orders.</p>")
    if a.adaptive:
        parts.append(_adaptive_section(a.adaptive))
    if a.diagnostics is not None and a.diagnostics.warnings:
        parts.append("<h2>Integrity warnings from the collector</h2>" + "".join(
            f"<p class='warn'>{escape(w)}</p>" for w in a.diagnostics.warnings))
    rows = [[c.name, c.kind, _num(c.variance), _num(c.se, ".3g"),
             "—" if c.kind == "fixed" else f"{100 * vc.share(c.name):.1f}%",
             "—" if c.kind == "fixed" else f"{100 * shares.get(c.name, 0.0):.1f}%"] for c in vc.components]
    if gold is not None:
        parts.append(_gold_html(gold))
    parts.append("<h2>Variance components</h2>" + _table(
        ["component", "kind", "variance", "SE", "share per observation", "share of Var(theta-hat)"], rows))
    if vc.fixed:
        parts.append("<p class='muted'>" + escape(tier_sentence(vc.to_dict())) + "</p>")
    parts.append(f"<p class='muted'>{escape(vc.method_reason)}</p>")
    if vc.reml is not None:  # the model the likelihood fit was of, as lme4 writes it
        parts.append(f"<p class='muted'>Model: <code>{escape(vc.reml['formula'])}</code></p>")
    parts.append(f"<img alt='variance shares' src='data:image/png;base64,{figs['shares']}'>")
    convention = convention_sentence(vc.to_dict())
    if convention:
        parts.append(f"<p class='muted'>{escape(convention)}</p>")
    parts.append(_effects_section(a, figs))
    ranked = "sigma2_delta" if a.interventions.attrs.get("ranked_by") == "sigma2_delta" else "Var(theta-hat)"
    parts.append(f"<h2>What to change</h2><p class='muted'>Ranked by the change in {ranked}; a change "
                 "of less than 1% is listed last.</p>" + _table(
        ["intervention", "% change Var(theta-hat)", "% change sigma2_delta"],
        [[r["intervention"], _num(r["pct_change_var_abs"], "+.1f"), _num(r["pct_change_sigma2_delta"], "+.1f")]
         for r in a.interventions.to_dict(orient="records")]))
    parts.append(f"<img alt='interventions' src='data:image/png;base64,{figs['interventions']}'>")
    if "nomogram" in figs:
        parts.append("<h2>Judges and items</h2>"
                     f"<img alt='nomogram' src='data:image/png;base64,{figs['nomogram']}'>"
                     f"<img alt='frontier' src='data:image/png;base64,{figs['frontier']}'>")
    if "ci_vs_n" in figs:
        parts.append("<h2>Naive and honest intervals as items grow</h2>"
                     f"<img alt='ci vs n' src='data:image/png;base64,{figs['ci_vs_n']}'>")
    parts.append("<h2>Reporting checklist (TEE Table 15)</h2>" + "".join(
        f"<p><span class='{i.get('status', 'met' if i['met'] else 'missing').replace(' ', '-')}'>"
        f"{i.get('status', 'met' if i['met'] else 'missing')}</span> · "
        f"<b>{escape(i['tier'])}</b> · {escape(i['item'])}: {escape(i['evidence'])}</p>" for i in a.checklist))
    if vc.notes:
        parts.append("<h2>Notes</h2>" + "".join(f"<p class='muted'>{escape(n)}</p>" for n in vc.notes))
    parts.append("<h2>How to read this</h2><p class='muted'>The per-observation share says how a single call "
                 "varies; the share of Var(theta-hat) says what the reported mean's error is made of at this "
                 "design (each component divided by the number of its levels averaged over, TEE eq. 3). The "
                 "naive interval is what item resampling gives; the full interval adds prompt, judge, temperature "
                 "and replicate variance. Messing, arXiv 2604.11581; Ask Which, Not How Good, arXiv 2609.27787."
                 "</p>")
    body = "\n".join(parts)
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>evalgauge report</title>"
            f"<style>{CSS}</style></head><body>{body}</body></html>")


def write_report(a: Analysis, path: str | Path, gold=None) -> Path:
    path = Path(path)
    from ..outputs import atomic_write_text

    atomic_write_text(path, render(a, gold))
    return path


def _gold_html(gold) -> str:
    """The gold slice: corrected means beside the judges-only and gold-only ones, each configuration's agreement,
    and the error the judges share (the terminal's tables, :func:`evalgauge.report.terminal.print_gold`)."""
    means = _table(["group", "method", "estimate", "interval", "SE", "gold / units"],
                   [[e.group or "all units", e.method, _num(e.estimate), f"[{_num(e.low)}, {_num(e.high)}]",
                     _num(e.se), f"{e.n_gold} / {e.n_units}"] for e in gold.estimates])
    frame = gold.agreement
    from ..gold import AGREEMENT_COLUMNS

    columns = [c for c in AGREEMENT_COLUMNS if c in frame]
    agree = _table(columns, [[str(r[c]) if c in ("facet", "level", "units") else _num(r.get(c)) for c in columns]
                             for r in frame.to_dict(orient="records")])
    error = ""
    if gold.error_components is not None:
        shares = ", ".join(f"{c.name} {_num(c.variance)}" for c in gold.error_components.components)
        error = (f"<p>The judges' error (score - gold) on the gold units: {escape(shares)}; the gold scores' variance "
                 f"{_num(gold.gold_variance)}. The units' term is the error every judge, variant and replicate "
                 "shares: more of them cannot remove it, the gold correction does.</p>")
    notes = "".join(f"<p class='muted'>{escape(n)}</p>" for n in gold.notes)
    return ("<h2>Gold labels</h2><p>Means corrected by the gold labels (PPI++: prediction-powered inference with "
            "power tuning; DSL: the design-based pseudo-outcome), beside what the judges alone and the gold alone "
            f"say.</p>{means}<p>Agreement with the gold, per configuration (bias: prediction - gold).</p>{agree}"
            f"{error}{notes}")


def _adaptive_section(path: dict) -> str:
    """The path an adaptive run took: each stage's design, calls, spend and the precision after it."""
    target = path.get("target", {})
    names = {"mdd95": "MDD", "erho2": "E rho^2", "se": "SE"}
    what = names.get(target.get("quantity"), str(target.get("quantity")))
    rows = []
    for st in path.get("stages", []):
        d = st["design"]
        rows.append([st["name"], f"{d['items']} items x {len(d['judges'])} judge(s) x {len(d['variants'])} "
                     f"variant(s) x {d['replicates']} replicate(s)", str(st["calls_sent"]), f"${st['spent_usd']:.4f}",
                     _num(st.get("achieved")), (st.get("plan") or {}).get("message", "")])
    return (f"<h2>How the data were collected</h2><p>An adaptive run to {escape(what)} "
            f"{'&ge;' if target.get('quantity') == 'erho2' else '&le;'} {_num(target.get('value'))}: a pilot, a fit, "
            f"the cheapest design reaching the target, then only the missing calls. Outcome: "
            f"{escape(str(path.get('outcome')))}.</p>"
            + _table(["stage", "design", "calls sent", "spent (all stages)", what + " after it", "plan"], rows)
            + "<p class='muted'>The final sample size depended on the pilot's estimates (an internal pilot); "
            "see the README on the coverage of intervals after adapting.</p>")


def _effects_section(a: Analysis, figs: dict) -> str:
    """The facets' levels as the fit sees them (TEE C.6): modes with intervals, the items judged most apart, and
    the Q-Q plot of every term's modes."""
    if a.effects is None:
        return ""
    said = a.effects.to_dict()
    exclude = a.components.object if a.comparison is not None else None
    rows = effects_rows(said, exclude)
    out = "<h2>Effects: who scores high, who low</h2>"
    if rows:
        out += ("<p>Conditional modes (BLUPs) of each level with a 95% interval (mode +- 1.96 conditional SD, as "
                "lme4's ranef(condVar = TRUE)); a positive mode scores higher than the average level.</p>"
                + _table(["term", "level", "mode", "95% interval"], rows))
    sentence = disagreed_sentence(said)
    if sentence:
        out += f"<p>{escape(sentence)}</p>"
    if "qq" in figs:
        out += f"<img alt='Q-Q plot of the conditional modes' src='data:image/png;base64,{figs['qq']}'>"
    if "residuals" in figs:
        out += f"<img alt='residuals against fitted values' src='data:image/png;base64,{figs['residuals']}'>"
    return out
