"""Which system is better: pair intervals, multiplicity, separable groups and rank confidence sets.

The sizing paper's question is *which* system is better. Every system's mean shares error with the
others (the same items, the same judges), so a reader comparing per-system intervals by eye uses the
wrong test. Here the covariance of the system means is computed exactly under the fitted random
effects model and the observed design (who was scored on what, by whom, how often):

    ybar_s = (1/n_s) sum of y over s's judgments,
    Cov(ybar_s, ybar_t) = sum over random terms T of sigma2_T * sum_l m_sl m_tl / (n_s n_t)   (T without s)
    Var(ybar_s)        += sum over terms T with s of sigma2_T * sum_l m_sl^2 / n_s^2,

with m_sl the number of s's judgments at level l of term T. For two systems scored on the same items
by the same judges the shared terms cancel from their difference and Var(ybar_a - ybar_b) is twice the
relative error sigma2_delta (sizing eq. 2 applied to one pair, what the two systems do not share).
Degrees of freedom are Satterthwaite's from the sampling covariance of the components.

Outputs (a :class:`Comparison`): the leaderboard with each system's own SE (its own cells), marginal
and simultaneous pair intervals (max-|t| over the joint law of all differences, which share items and
judges), Holm-adjusted p-values, a compact letter display of the groups the design cannot tell apart,
rank confidence sets (Mogstad, Romano, Shaikh & Wilhelm, "Inference for Ranks", REStud 2024: marginal
and simultaneous, with the stepdown refinement; :mod:`evalgauge.inference.multiplicity`), the naive item-bootstrap
interval beside each pair, each pair's own G-study of its paired differences, and for adjacent systems
the probability of a rank inversion and the items or judges that would separate them at 80% power.

The package is pure: a judgments frame and fitted components in, a result out. Its parts: ``comparison``
(the steps of :func:`compare`), ``covariance`` (the raw means' covariance), ``gls`` (the adjusted estimates),
``pair_gstudy`` (each pair's own G-study, the naive bootstrap), ``adjacent`` (neighbours in the ranking) and
``estimability`` (what cannot be said, and stated values for what cannot be measured).
"""

from .adjacent import POWER, PRACTICAL_FACTOR
from .comparison import DDF_METHODS, MIN_DF, Comparison, compare, compare_fitted
from .covariance import mean_covariance
from .estimability import confounded_pairs, unmeasured, with_assumed
from .gls import GlsEstimates, adjusted_estimates
from .pair_gstudy import pair_gstudy

__all__ = ["DDF_METHODS", "MIN_DF", "POWER", "PRACTICAL_FACTOR", "Comparison", "GlsEstimates", "adjusted_estimates",
           "compare", "compare_fitted", "confounded_pairs", "mean_covariance", "pair_gstudy", "unmeasured",
           "with_assumed"]
