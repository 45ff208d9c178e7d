"""RankMe: the entropy effective rank of a representation matrix (Garrido et al., ICML 2023), and its
measurement error over the items (:func:`rankme_interval`).

A layer's RankMe at one checkpoint is measured on n items; another draw of n items would give another
value. :func:`rankme_interval` estimates that spread from the items at hand by the Bayesian bootstrap
(Rubin 1981) taken to first order in the weights: each resample reweights the n items by Dirichlet(1, ..., 1)
weights (times n), and each squared singular value σ_k² moves to σ_k² Σ_i w_i u_ik² (u_k the item-space
singular vector: item i's share of direction k). Drawing items with replacement instead repeats about a third
of them, and a matrix with 0.63 n distinct rows has a lower rank than one with n, so those resamples measure
the duplication; even the exact reweighted spectrum errs wide where n is small against d_model. Against the
spread of RankMe over 30 fresh draws of n items (spectrum 1/k), the standard deviations were (fresh, exact
reweighting, first order): d = 64: n = 32: 0.33, 0.76, 0.40; n = 100: 0.40, 0.69, 0.49; n = 400: 0.21, 0.23,
0.23; d = 512: n = 32: 0.18, 0.87, 0.34; n = 200: 0.65, 1.87, 0.73; n = 400: 0.72, 2.16, 0.88. The first-order
version is close and on the wide side, and costs one SVD with singular vectors and a (resamples × n) by
(n × rank) product, about 1.6 times RankMe itself at 200 × 512 (28 ms and 44 ms; the exact one took 475 ms).
The interval is the value plus and minus z times the resamples' standard deviation.

Cost in a scan: ``scripts/bench_rankme_interval.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import torch

from ckptgeo._settings import Boolean, Interval, setting, validate_params
from ckptgeo.constants import RANKME_EPS
from ckptgeo.errors import InvalidParameterError, NonFiniteActivationsError
from ckptgeo.metrics.registry import register_metric

__all__ = ["RankMeConfig", "RankMeInterval", "rankme", "rankme_interval", "effective_rank",
           "entropy_rank_from_spectrum", "DEFAULT_N_RESAMPLES"]

#: Bayesian-bootstrap resamples of the items per layer and checkpoint for RankMe's interval.
DEFAULT_N_RESAMPLES = 50


@dataclass(frozen=True)
class RankMeConfig:
    """Settings of RankMe.

    Attributes
    ----------
    centered : bool, default=False
        Subtract the column mean first (not Garrido et al.'s definition; recorded in every row).
    eps : float, default=1e-7
        Added to each normalised singular value.
    n_resamples : int, default=50
        Resamples of the items for the interval (:func:`rankme_interval`); 0: no interval (the
        ``value_low`` / ``value_high`` columns stay null).
    confidence : float, default=0.95
        Two-sided coverage of that interval (normal quantile times the resamples' standard deviation).
    """

    centered: bool = setting(False, admits=(Boolean,))
    eps: float = setting(RANKME_EPS, admits=(Interval(float, 0.0, 1.0),))
    n_resamples: int = setting(DEFAULT_N_RESAMPLES, admits=(Interval(int, 0, None),))
    confidence: float = setting(0.95, admits=(Interval(float, 0.0, 1.0, closed="neither"),))
    #: added after datasets existed; they change no value, so at their defaults they stay out of the config hash
    _hashed_when_not_default = ("n_resamples", "confidence")


@dataclass(frozen=True)
class RankMeInterval:
    """RankMe with its measurement error over the items (:func:`rankme_interval`).

    ``value``: RankMe of all n items. ``low``, ``high``: ``value ∓ z · sd`` (z the normal quantile of
    ``confidence``). ``sd``: standard deviation of the resampled values. ``n_resamples``, ``confidence``:
    as used. ``low``, ``high`` and ``sd`` are NaN when ``n_resamples`` is 0 or the value is NaN.
    """

    value: float
    low: float
    high: float
    sd: float
    n_resamples: int
    confidence: float


def entropy_rank_from_spectrum(values: torch.Tensor, *, eps: float = RANKME_EPS) -> float:
    """exp(entropy) of a non-negative spectrum ``values`` of shape ``(k,)`` normalised to sum 1.

    Returns NaN when the spectrum sums to zero (no rank is defined). Computed in float64.

    Raises
    ------
    NonFiniteActivationsError
        ``values`` holds NaN or inf.

    Examples
    --------
    >>> round(entropy_rank_from_spectrum(torch.ones(4)), 6)
    4.000001
    """
    s = values.detach().to(torch.float64).flatten()
    if not torch.isfinite(s).all():
        raise NonFiniteActivationsError("spectrum holds NaN or inf")
    total = s.clamp_min(0).sum()
    if total.item() == 0.0:
        return math.nan
    p = s.clamp_min(0) / total + eps
    return float(torch.exp(-(p * torch.log(p)).sum()))


def effective_rank(matrix: torch.Tensor, *, eps: float = RANKME_EPS, centered: bool = False) -> float:
    """RankMe of a matrix of shape ``(n_samples, dim)``: exp(−Σ p_k log p_k), p_k = σ_k / Σσ + eps.

    Singular values are computed in float64 on every device (half precision and float32 are upcast).
    Returns NaN for an all-zero matrix. Range about 1..min(n_samples, dim).

    Raises
    ------
    InvalidParameterError
        ``matrix`` is not 2-D.
    NonFiniteActivationsError
        ``matrix`` holds NaN or inf.
    """
    sigma = torch.linalg.svdvals(_checked(matrix, centered))
    return entropy_rank_from_spectrum(sigma, eps=eps)


def _checked(matrix: torch.Tensor, centered: bool) -> torch.Tensor:
    """``matrix`` in float64, centred when asked, after the checks :func:`effective_rank` documents."""
    if matrix.ndim != 2:
        raise InvalidParameterError(f"expected a 2-D matrix (n_samples, dim); got shape {tuple(matrix.shape)}",
                                    name="hidden_states", value=tuple(matrix.shape))
    z = matrix.detach().to(torch.float64)
    if not torch.isfinite(z).all():
        raise NonFiniteActivationsError("matrix holds NaN or inf")
    return z - z.mean(dim=0, keepdim=True) if centered else z


def _entropy_ranks(spectra: torch.Tensor, eps: float) -> torch.Tensor:
    """:func:`entropy_rank_from_spectrum` of each row of ``spectra`` (shape (r, k)), NaN for a zero row."""
    s = spectra.clamp_min(0)
    total = s.sum(dim=1, keepdim=True)
    p = s / total + eps
    out = torch.exp(-(p * torch.log(p)).sum(dim=1))
    return torch.where(total[:, 0] > 0, out, torch.full_like(out, math.nan))


def rankme_interval(hidden_states: torch.Tensor, config: RankMeConfig | None = None, *,
                    seed: int = 0) -> RankMeInterval:
    """RankMe of one layer's hidden states with an interval from resampling the items.

    Parameters
    ----------
    hidden_states : Tensor of shape (n_samples, d_model)
    config : RankMeConfig, optional
        ``centered``, ``eps``, ``n_resamples`` (50) and ``confidence`` (0.95).
    seed : int, default=0
        Seed of the resampling weights (same seed, same interval on any machine).

    Returns
    -------
    RankMeInterval
        ``value`` equals :func:`rankme` on the same states; ``low < value < high`` unless the spread is 0.

    Raises
    ------
    InvalidParameterError
        ``hidden_states`` is not 2-D, or a setting is out of range.
    NonFiniteActivationsError
        NaN or inf in ``hidden_states``.

    Notes
    -----
    With ``Z = U diag(σ) Vᵀ`` (centred first when ``centered``), resample r weights item i by ``w_ri = n · D_ri``,
    ``D_r ~ Dirichlet(1, ..., 1)`` (the Bayesian bootstrap), and its spectrum is, to first order in the weights,
    ``σ_rk² = σ_k² Σ_i w_ri U_ik²`` (the weighted mean's shift is of second order). ``sd`` is the standard
    deviation of the r RankMe values and the interval ``value ± Φ⁻¹((1 + confidence) / 2) · sd``. It is an
    interval for the value another draw of n items of the same kind would give, not for RankMe at infinitely
    many items (RankMe of n items grows with n where d_model > n).

    References
    ----------
    Rubin. "The Bayesian Bootstrap." Annals of Statistics 9(1), 1981.
    Garrido, Balestriero, Najman, LeCun. "RankMe." ICML 2023, Eq. 1.

    Examples
    --------
    >>> z = torch.randn(100, 8, generator=torch.Generator().manual_seed(0))
    >>> est = rankme_interval(z)
    >>> est.low < est.value < est.high, abs(est.value - rankme(z)) < 1e-9
    (True, True)
    """
    config = config or RankMeConfig()
    validate_params(config, owner="rankme")
    n_res = int(config.n_resamples)
    z = _checked(hidden_states, config.centered)
    # the value from svdvals, as rankme() computes it: the full SVD's singular values can differ in the last bit
    # (LAPACK takes another path), and value must equal rankme() on the same states
    value = entropy_rank_from_spectrum(torch.linalg.svdvals(z), eps=config.eps)
    if n_res == 0 or not math.isfinite(value):
        return RankMeInterval(value, math.nan, math.nan, math.nan, n_res, float(config.confidence))
    u, sigma, _ = torch.linalg.svd(z, full_matrices=False)
    n = z.shape[0]
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    # normalised Exp(1) draws are Dirichlet(1, ..., 1)
    weights = torch.empty((n_res, n), dtype=torch.float64).exponential_(generator=gen)
    weights = (weights / weights.sum(dim=1, keepdim=True) * n).to(z.device)
    squared = (weights @ u.pow(2)) * sigma.pow(2)
    vals = _entropy_ranks(squared.clamp_min(0).sqrt(), config.eps)
    vals = vals[torch.isfinite(vals)]
    sd = float(vals.std(unbiased=True)) if vals.numel() > 1 else math.nan
    half = NormalDist().inv_cdf(0.5 + float(config.confidence) / 2) * sd
    return RankMeInterval(value, value - half, value + half, sd, n_res, float(config.confidence))


def _interval(hidden_states: torch.Tensor, config: RankMeConfig | None, seed: int) -> tuple[float, float]:
    """The registry's interval hook: ``(low, high)`` of :func:`rankme_interval`."""
    est = rankme_interval(hidden_states, config, seed=seed)
    return est.low, est.high


@register_metric(name="rankme", needs="hidden_states", cost="cheap", unit="effective dimensions",
                 range=(1.0, float("inf")), config=RankMeConfig,
                 columns={"centered": "centered", "eps": "epsilon"}, interval=_interval, preferred={"centered": False},
                 higher_is_better=True, collapse="falls")
def rankme(hidden_states: torch.Tensor, config: RankMeConfig | None = None) -> float:
    """RankMe of one layer's hidden states.

    Parameters
    ----------
    hidden_states : Tensor of shape (n_samples, d_model)
        One row per item, read at the position the scan chose (last prompt token by default).
    config : RankMeConfig, optional
        ``centered`` (default False, as Garrido et al.) and ``eps`` (default 1e-7).

    Returns
    -------
    float
        exp(−Σ_k p_k log p_k) with p_k = σ_k / Σ_j σ_j + eps; NaN for an all-zero matrix.

    Raises
    ------
    NonFiniteActivationsError
        NaN or inf in ``hidden_states``.

    Notes
    -----
    Uncentred by default: a collapse onto one input-independent direction then shows as RankMe → 1.

    References
    ----------
    Garrido, Balestriero, Najman, LeCun. "RankMe: Assessing the downstream performance of pretrained
    self-supervised representations by their rank." ICML 2023, Eq. 1.

    Examples
    --------
    >>> round(rankme(torch.eye(5)), 4)
    5.0
    """
    config = config or RankMeConfig()
    return effective_rank(hidden_states, eps=config.eps, centered=config.centered)
