"""RankMe: the entropy effective rank of a representation matrix (Garrido et al., ICML 2023)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ckptgeo._settings import Boolean, Interval, setting
from ckptgeo.constants import RANKME_EPS
from ckptgeo.errors import InvalidParameterError, NonFiniteActivationsError
from ckptgeo.metrics.registry import register_metric

__all__ = ["RankMeConfig", "rankme", "effective_rank", "entropy_rank_from_spectrum"]


@dataclass(frozen=True)
class RankMeConfig:
    """Settings of RankMe. ``centered``: subtract the column mean first (not Garrido et al.'s
    definition; recorded in every row). ``eps``: added to each normalised singular value."""

    centered: bool = setting(False, admits=(Boolean,))
    eps: float = setting(RANKME_EPS, admits=(Interval(float, 0.0, 1.0),))


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
    if matrix.ndim != 2:
        raise InvalidParameterError(f"expected a 2-D matrix (n_samples, dim); got shape {tuple(matrix.shape)}",
                                    name="hidden_states", value=tuple(matrix.shape))
    z = matrix.detach().to(torch.float64)
    if not torch.isfinite(z).all():
        raise NonFiniteActivationsError("matrix holds NaN or inf")
    if centered:
        z = z - z.mean(dim=0, keepdim=True)
    sigma = torch.linalg.svdvals(z)
    return entropy_rank_from_spectrum(sigma, eps=eps)


@register_metric(name="rankme", needs="hidden_states", cost="cheap", unit="effective dimensions",
                 range=(1.0, float("inf")), config=RankMeConfig,
                 columns={"centered": "centered", "eps": "epsilon"})
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
