"""Statistics that tell an event from chance, with no knowledge of curves or events (the kernel's bottom).

* :mod:`~ckptgeo.stats.results`: the result records (:class:`Rate`, :class:`PermutationResult`,
  :class:`BootstrapResult`, :class:`KendallResult`), the default budgets and the parameter checks;
* :mod:`~ckptgeo.stats.intervals`: a count of runs with its binomial interval (:func:`binomial_interval`);
* :mod:`~ckptgeo.stats.permutation`: relabelling tests (:func:`permutation_test`, :func:`circular_shift_test`,
  :func:`kendall_tau`, :func:`p_value`, :func:`slope`);
* :mod:`~ckptgeo.stats.bootstrap`: :func:`hierarchical_bootstrap` over (task, seed) groups;
* :mod:`~ckptgeo.stats.noise`: how often a rule fires on curves without an event (:func:`noise_curves`,
  :func:`false_positive_rate`, :func:`robust_noise_sd`, the three noise models of a curve and their pooled rates).

The public names of every module are also names of this package (``import ckptgeo.stats as st;
st.permutation_test(...)``). Everything is seeded, budgets are counts, nothing reads or writes files.
"""

from ckptgeo.stats.results import (DEFAULT_CONFIDENCE, DEFAULT_N_NOISE_CURVES, DEFAULT_N_PERMUTATIONS,  # noqa: I001
                                   DEFAULT_N_RESAMPLES, BootstrapResult, KendallResult, PermutationResult, Rate)
from ckptgeo.stats.intervals import binomial_interval
from ckptgeo.stats.permutation import circular_shift_test, kendall_tau, p_value, permutation_test, slope
from ckptgeo.stats.bootstrap import hierarchical_bootstrap
from ckptgeo.stats.noise import false_positive_rate, noise_curves, robust_noise_sd

__all__ = ["Rate", "PermutationResult", "BootstrapResult", "KendallResult", "binomial_interval", "permutation_test",
           "circular_shift_test", "noise_curves", "false_positive_rate", "hierarchical_bootstrap", "kendall_tau", "slope",
           "robust_noise_sd", "p_value", "DEFAULT_CONFIDENCE", "DEFAULT_N_PERMUTATIONS", "DEFAULT_N_RESAMPLES",
           "DEFAULT_N_NOISE_CURVES"]
