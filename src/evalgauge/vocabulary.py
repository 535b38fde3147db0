"""The facet vocabulary: which column names play which role, in one place.

Every default that reads a role from a name (design inference, the D-study's interventions, the
analysis's judge and item, the planner's replicate alias) uses these tuples, so "model" cannot be an
object in one module and a judge in another.
"""

from __future__ import annotations

#: Scores beyond this are refused: past 2^53 (9e15) floats lose integer precision, and the variance
#: algebra (squares of squares in the REML criterion and its derivatives) overflows long before 1e308.
MAX_ABS_SCORE = 1e15
#: Score columns, in order of preference.
SCORE_NAMES = ("score", "parsed_score", "y", "value", "rating", "preference", "score_1to10", "judge_score")
#: The object of measurement (the systems under test).
OBJECT_NAMES = ("system", "model", "sut", "exam_model", "generator_2", "generator_2_model")
#: Items (the benchmark's questions).
ITEM_NAMES = ("item", "question_id", "doc_id", "instruction_id")
#: Judges (raters, annotators, judge models).
JUDGE_NAMES = ("judge", "judge_model", "annotator", "rater")
#: Prompt variants (wordings of the judging prompt).
VARIANT_NAMES = ("variant", "prompt_variant", "prompt", "prompt_type")
#: Facets held fixed by default (chosen levels, not a sample; HELM's perturbations are chosen too).
FIXED_NAMES = ("temperature", "position", "order", "perturbation")
#: Facets whose levels are different measures (SummEval's coherence, consistency, fluency, relevance), not a
#: sample of interchangeable conditions: fixed by default and analysed level by level (`analyze --by`).
CONSTRUCT_NAMES = ("aspect", "dimension", "criterion")
#: The column numbering repeated calls of a cell.
REPLICATE_COLUMNS = ("replicate", "rep", "replication", "run")
#: How a plan's --n names the replicates (when no facet has that name).
REPLICATE_ALIASES = ("rep", "reps", "replicate", "replicates", "r")

FACET_NAMES = (*OBJECT_NAMES, "category", "task", *ITEM_NAMES, *VARIANT_NAMES, "temperature", *JUDGE_NAMES,
               "position", "order", "perturbation", *CONSTRUCT_NAMES)
#: Items nest in these when both are facets.
DEFAULT_NESTS = (("category", "item"), ("task", "item"))

#: The command-line option of each Python parameter a core message names (in backticks: `facets`); the
#: CLI shows the option instead, so a message speaks the language of whoever reads it.
PARAMETER_OPTIONS = {
    "score": "--score", "facets": "--facets", "fixed": "--fixed", "nest": "--nest", "replicate": "--replicate",
    "object": "--object", "terms": "--terms", "max_order": "--max-order", "method": "--method",
    "drop_missing": "--drop-missing", "counts": "--n", "cost": "--price", "n_boot": "--bootstrap",
    "assume": "--assume", "reference": "--reference", "baseline": "--baseline", "human": "--human",
    "sep": "--sep", "encoding": "--encoding", "engine": "--engine",
}

#: role -> the column names that play it (compared case-insensitively): the one table every default that reads
#: a facet's role from its name uses (design inference, the analysis, the D-study's interventions, compare)
ROLE_NAMES = {"object": OBJECT_NAMES, "item": ITEM_NAMES, "judge": JUDGE_NAMES, "variant": VARIANT_NAMES,
              "replicate": REPLICATE_COLUMNS}


def role_of(name: str) -> str | None:
    """The role a facet plays by its name (object, item, judge, variant, replicate), or None."""
    lowered = str(name).lower()
    return next((role for role, names in ROLE_NAMES.items() if lowered in names), None)


def facet_with_role(role: str, names, exclude=()) -> str | None:
    """The first of ``names`` (in their own order) that plays ``role`` by its name, other than ``exclude``."""
    return next((n for n in names if n not in exclude and role_of(n) == role), None)


#: Below one Satterthwaite degree of freedom an interval is not a result: the t quantile grows without bound
#: (t_0.975 is 12.7 at 1 df and 160 at 0.5), so its width reflects the df approximation, not the data.
MIN_DF = 1.0
#: The residual component's name (within-cell variation, or what is confounded with the top interaction)
RESIDUAL = "residual"
#: How a projected design draws the children of a nested facet (`--sampling`): from the whole pool (TEE eq. 3),
#: C' parents drawn (Brennan's i:c), or every parent kept as a fixed stratum
SAMPLINGS = ("pooled", "categories", "strata")
#: What a projection's error is about (`--estimand`): the domain the items were drawn from, or the benchmark's own
#: items (TEE C.2)
ESTIMANDS = ("domain", "finite")
#: Estimation methods (`--method`).
METHODS = ("auto", "anova", "reml")
#: Where rows are reduced to cells (`--engine`): in memory, on DuckDB over the files, on Spark (a cluster, or
#: local), or chosen by the input's size (auto: DuckDB above a size)
ENGINES = ("auto", "pandas", "duckdb", "spark")
#: denominator degrees of freedom of the comparisons: lmerTest's Satterthwaite (default) or pbkrtest's Kenward-Roger
DDF_METHODS = ("satterthwaite", "kenward-roger")
#: The sizing paper's published item sets (`evalgauge audit --preset NAME`, evalgauge.audit.published).
AUDIT_PRESETS = ("mt-bench", "arena-hard", "alpacaeval2", "screened", "pairwise")
#: The simulation presets (`evalgauge simulate NAME`): TEE's Table 8 and the sizing paper's design.
PRESET_NAMES = ("sizing", "tee")
