"""Linear probes: can a logistic regression read an item's label from one layer's hidden states?

The probe is scikit-learn's :class:`~sklearn.linear_model.LogisticRegression` on standardised states
(a :class:`~sklearn.preprocessing.StandardScaler` fitted on each fold's training part only, then the
classifier), scored by stratified k-fold
cross-validation. Each result carries the chance level (the majority class's rate), a
shuffled-label control (the same cross-validation, on the same folds, of labels permuted with the same
seed, which estimates what the probe reaches by fitting noise; Hewitt & Liang 2019 argue for such
controls), and a one-sided p-value that the probe beats the *better* of the two (a corrected paired
t-test over the folds, see :func:`probe`).

A label set that cannot be probed (one class; a class with a single member, which stratified
cross-validation cannot place in both a training and a test fold) gives a result with NaN accuracy
and the ``reason``, not an error, so one bad suite does not stop a scan.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ckptgeo._settings import Interval, setting, validate_params
from ckptgeo.errors import InvalidParameterError, NonFiniteActivationsError, ProbeConvergenceWarning
from ckptgeo.metrics.registry import register_metric

__all__ = ["ProbeConfig", "ProbeResult", "probe", "fold_test"]


@dataclass(frozen=True)
class ProbeConfig:
    """Settings of a linear probe.

    ``k``: folds of stratified cross-validation (lowered to the rarest class's count when smaller);
    ``C``: inverse L2 regularisation strength; ``max_iter``: L-BFGS iterations; ``seed``: seeds the
    fold split and the control's label permutation; ``blas_threads``: BLAS threads for the fits (1: the
    matrices are items x d_model, too small to gain from threads, and on a busy machine extra threads
    made a revision of the 0.4M model several times slower; see ``scripts/bench_probe.py``).
    """

    k: int = setting(5, admits=(Interval(int, 2, None),))
    C: float = setting(1.0, admits=(Interval(float, 0.0, None, closed="neither"),))
    max_iter: int = setting(1000, admits=(Interval(int, 1, None),))
    seed: int = setting(0, admits=(Interval(int, 0, None),))
    blas_threads: int = setting(1, admits=(Interval(int, 1, None),))


@dataclass(frozen=True)
class ProbeResult:
    """One probe's scores (a row of the ``probes`` table, less the columns the engine adds).

    ``accuracy`` and ``accuracy_std``: mean and standard deviation over the ``k`` test folds;
    ``chance``: the majority class's rate; ``control_accuracy``: the same probe on shuffled labels;
    ``n``: items; ``k``: folds used (0 when not probed); ``seed``; ``reason``: why the accuracies are
    NaN, else None; ``p_value``: one-sided p-value of "the probe beats max(chance, control)" over the
    folds (NaN when not probed).
    """

    accuracy: float
    accuracy_std: float
    chance: float
    control_accuracy: float
    n: int
    k: int
    seed: int
    reason: str | None = None
    p_value: float = math.nan


def _as_float64(states) -> np.ndarray:
    if hasattr(states, "detach"):  # a torch tensor
        states = states.detach().to("cpu").double().numpy()
    return np.asarray(states, dtype=np.float64)


def _fold_accuracies(x: np.ndarray, label_sets: list[np.ndarray], folds: list, config: ProbeConfig) -> np.ndarray:
    """Test accuracy of the probe for each label set (rows) on each fold (columns).

    Per fold, the scaler is fitted on the training rows once and shared by the label sets (it does not
    see the labels), then one L-BFGS fit per label set, under ``config.blas_threads`` BLAS threads: the
    matrices are small (items x d_model), so more threads only contend for the cores. This is the
    computation of ``cross_val_score`` over a ``make_pipeline(StandardScaler(), LogisticRegression())``,
    without the per-fit clone and scorer overhead. A training part with a single class (possible for
    the shuffled labels of a rare class) scores NaN, as a failed fit does there.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    out = np.full((len(label_sets), len(folds)), np.nan)
    with threadpool_limits(limits=config.blas_threads):
        for f, (train, test) in enumerate(folds):
            scaler = StandardScaler().fit(x[train])
            x_train, x_test = scaler.transform(x[train]), scaler.transform(x[test])
            for i, y in enumerate(label_sets):
                if np.unique(y[train]).size < 2:
                    continue
                model = LogisticRegression(C=config.C, max_iter=config.max_iter).fit(x_train, y[train])
                out[i, f] = float(np.mean(model.predict(x_test) == y[test]))
    return out


def fold_test(scores: np.ndarray, baseline: np.ndarray, n_test: np.ndarray, n: int) -> float:
    """One-sided p-value that ``scores`` exceed ``baseline``, paired over cross-validation folds.

    The Nadeau & Bengio (2003) corrected resampled t-test: with d_f = scores_f - baseline_f over k folds,
    t = mean(d) / sqrt((1/k + n_test/n_train) var(d)), compared with Student's t on k - 1 degrees of
    freedom. The correction widens the variance for the overlap of the folds' training sets, which the
    plain paired t-test ignores (and so fires too often). Folds that all differ by the same amount give
    0 (a positive difference) or 1.

    Parameters
    ----------
    scores, baseline : ndarray of shape (k,)
        Per-fold accuracy of the probe and of what it must beat.
    n_test : ndarray of shape (k,)
        Test items per fold.
    n : int
        Items in all.

    Returns
    -------
    float
        In [0, 1].

    Examples
    --------
    >>> fold_test(np.array([0.9, 0.8, 0.9]), np.array([0.5, 0.5, 0.5]), np.array([10, 10, 10]), 30) < 0.05
    True
    >>> fold_test(np.array([0.5, 0.6]), np.array([0.5, 0.6]), np.array([5, 5]), 10)
    1.0
    """
    from scipy.stats import t as student_t

    d = np.asarray(scores, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    k = d.size
    mean = float(d.mean())
    var = float(d.var(ddof=1)) if k > 1 else 0.0
    if var <= 1e-15:
        return 0.0 if mean > 1e-12 else 1.0
    ratio = float(np.mean(n_test)) / max(n - float(np.mean(n_test)), 1.0)
    t = mean / math.sqrt((1.0 / k + ratio) * var)
    return float(student_t.sf(t, df=k - 1))


@register_metric(name="probe", needs="probe_states", cost="expensive", unit="fraction correct", range=(0.0, 1.0),
                 config=ProbeConfig, table="probes", higher_is_better=True)
def probe(states, labels, config: ProbeConfig | None = None) -> ProbeResult:
    """Cross-validated accuracy of a linear probe predicting ``labels`` from ``states``.

    Parameters
    ----------
    states : ndarray or Tensor of shape (n_samples, d_model)
        One layer's hidden states, one row per item; cast to float64.
    labels : sequence of shape (n_samples,)
        The class of each item (any hashable values: ``"valid"``/``"invalid"``, answer indices ...).
    config : ProbeConfig, optional
        Folds, regularisation, iterations, seed; defaults to ``ProbeConfig()``.

    Returns
    -------
    ProbeResult
        Accuracy (mean over folds), its standard deviation, chance (majority rate), the
        shuffled-label control, ``n``, ``k``, ``seed`` and ``p_value``. With one class, or a class of a
        single member, the accuracies are NaN, ``k`` is 0 and ``reason`` says why.

    Raises
    ------
    InvalidParameterError
        ``states`` is not 2-D, ``labels`` has a different length, or ``config.k`` is below 2.
    NonFiniteActivationsError
        ``states`` holds NaN or inf.

    Warns
    -----
    ProbeConvergenceWarning
        The solver stopped at ``max_iter`` in some fold (the accuracy is still reported).

    Notes
    -----
    k = min(config.k, n_rarest); folds come from ``StratifiedKFold(k, shuffle=True,
    random_state=seed)`` on the true labels; the control permutes the labels with
    ``numpy.random.default_rng(seed)`` and is scored on the same folds. Chance = max_c n_c / n.
    ``p_value`` = :func:`fold_test` of the per-fold accuracies against max(chance, control accuracy of
    that fold): the probe must beat the *better* of the two, since a control can score below chance
    (a probe fitted to shuffled labels predicts them worse than the majority class does).

    References
    ----------
    Nadeau & Bengio, "Inference for the Generalization Error", Machine Learning 52, 2003.
    Alain & Bengio, "Understanding intermediate layers using linear classifier probes", 2016.
    Hewitt & Liang, "Designing and Interpreting Probes with Control Tasks", EMNLP 2019.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = np.repeat([0, 1], 20)
    >>> x = rng.normal(size=(40, 3)) + 4.0 * y[:, None]
    >>> r = probe(x, y)
    >>> r.accuracy, r.chance, r.k, r.p_value < 0.01
    (1.0, 0.5, 5, True)
    >>> probe(x, np.zeros(40)).reason
    'one class (0.0): nothing to probe'
    """
    config = config or ProbeConfig()
    validate_params(config, owner="probe")
    x = _as_float64(states)
    if x.ndim != 2:
        raise InvalidParameterError(f"states must be 2-D (n_samples, d_model); got shape {x.shape}",
                                    name="states", value=x.shape)
    label_list = labels.tolist() if hasattr(labels, "tolist") else list(labels)  # numpy/torch -> Python scalars
    y = np.empty(len(label_list), dtype=object)
    y[:] = label_list
    if len(y) != x.shape[0]:
        raise InvalidParameterError(f"labels has {len(y)} entries but states has {x.shape[0]} rows",
                                    name="labels", value=len(y))
    if not np.isfinite(x).all():
        raise NonFiniteActivationsError(f"probe states hold {int((~np.isfinite(x)).sum())} NaN or inf values")
    n = int(x.shape[0])
    counts = Counter(y.tolist())
    chance = max(counts.values()) / n if n else math.nan
    nan = math.nan

    def unprobed(reason: str) -> ProbeResult:
        return ProbeResult(nan, nan, chance, nan, n, 0, config.seed, reason, nan)

    if n == 0:
        return unprobed("no items")
    if len(counts) < 2:
        return unprobed(f"one class ({next(iter(counts))!r}): nothing to probe")
    singles = sorted((str(c) for c, m in counts.items() if m < 2))
    if singles:
        return unprobed(f"class {', '.join(singles)} has a single member; stratified k-fold needs two per class")
    k = min(config.k, min(counts.values()))
    from sklearn.model_selection import StratifiedKFold

    _, y_codes = np.unique(y.astype(str), return_inverse=True)
    y_control = np.random.default_rng(config.seed).permutation(y_codes)
    folds = list(StratifiedKFold(n_splits=k, shuffle=True, random_state=config.seed).split(x, y_codes))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scores, control = _fold_accuracies(x, [y_codes, y_control], folds, config)
    n_conv = sum(1 for w in caught if w.category.__name__ == "ConvergenceWarning")
    for w in caught:
        if w.category.__name__ != "ConvergenceWarning":
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if n_conv:
        warnings.warn(f"the probe's solver did not converge in {n_conv} of {2 * k} fits (max_iter="
                      f"{config.max_iter}); raise max_iter or C", ProbeConvergenceWarning, stacklevel=2)
    n_test = np.array([len(test) for _, test in folds])
    p_value = fold_test(scores, np.maximum(control, chance), n_test, n)
    return ProbeResult(accuracy=float(np.mean(scores)), accuracy_std=float(np.std(scores)), chance=float(chance),
                       control_accuracy=float(np.mean(control)), n=n, k=int(k), seed=config.seed,
                       p_value=p_value)
