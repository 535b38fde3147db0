"""Facets, their roles, nesting, the model's effects, and the balance report: ``types`` (facets, effects, the
design and its inference from the columns), ``coding`` (the judgments coded for a fit), ``balance`` (how far they
are from a complete design).

Vocabulary (Brennan 2001; TEE section 3 and Table 2; sizing paper section 3):

* a *facet* is a column whose levels index the observation (system, item,
  prompt variant, temperature, judge, position...);
* the *object of measurement* is the facet whose universe score is wanted: the
  system in the sizing paper, the item in TEE;
* a *random* facet's levels are exchangeable draws (item, variant, judge in the
  sizing paper); a *fixed* facet's levels were chosen (temperature, a judge
  panel in TEE, presentation position);
* a facet may be *nested* in another (item within category): its levels are
  distinct within each level of its parent;
* replicates are repeated calls with identical inputs, nested in the cell.

An *effect* is a set of facets closed under nesting (an effect that contains
``item`` contains ``category``). Its *primary* facets are those not serving as
a parent to another facet in the set; its *order* is the number of primary
facets (``category:item`` is a main effect, order 1).
"""

from .balance import BalanceReport, balance_report
from .coding import MAX_GRID_CELLS, MAX_GRID_PER_ROW, CodedData, balance_of_cells, code_data, one_level_error
from .types import (
    DEFAULT_NESTS,
    FACET_NAMES,
    FIXED_NAMES,
    OBJECT_NAMES,
    RESIDUAL,
    ROLES,
    SCORE_NAMES,
    Design,
    Effect,
    Facet,
    infer_design,
    parse_nest,
)

__all__ = ["DEFAULT_NESTS", "FACET_NAMES", "FIXED_NAMES", "MAX_GRID_CELLS", "MAX_GRID_PER_ROW", "OBJECT_NAMES",
           "RESIDUAL", "ROLES", "SCORE_NAMES", "BalanceReport", "CodedData", "Design", "Effect", "Facet",
           "balance_of_cells", "balance_report", "code_data", "infer_design", "one_level_error", "parse_nest"]
