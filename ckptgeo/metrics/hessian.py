"""Top-k eigenvalues of the loss Hessian on a fixed batch, by Lanczos over Hessian-vector products.

The Hessian H (P × P) of the batch's mean token cross-entropy is never formed: ARPACK's implicitly
restarted Lanczos (``scipy.sparse.linalg.eigsh``) only needs ``v ↦ Hv``, which autograd gives by a
double backward, ``Hv = ∂(∇L · v)/∂θ``. Optionally the trace is estimated by Hutchinson's method.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ckptgeo.errors import InvalidParameterError, NegativeCurvatureWarning, NonFiniteActivationsError
from ckptgeo.metrics._autodiff import eager_attention, eval_mode, gradients_on, location, select_parameters, where
from ckptgeo._params import check_config
from ckptgeo.metrics.registry import MetricValue, ModelContext, register_metric

__all__ = ["HessianConfig", "HessianSpectrum", "HessianVectorProduct", "hessian_eigenvalues", "hutchinson_trace",
           "hessian"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HessianConfig:
    """Settings of the ``hessian`` metric.

    Attributes
    ----------
    k : int, default=5
        Number of eigenvalues (one row each, ``index`` 0 = first).
    which : {"LA", "LM"}, default="LA"
        ``"LA"``: the k largest (algebraic) eigenvalues, ordered from the largest: the sharpest
        directions. ``"LM"``: the k of largest magnitude, ordered by |λ| — includes large negative
        curvature where there is some.
    params : str, default="all"
        Parameters spanning the Hessian: ``"all"``, comma-separated globs or ``"re:<regex>"``.
    tol : float, default=1e-3
        ARPACK's relative tolerance on each Ritz value (0 = machine precision).
    max_iter : int, default=100
        ARPACK restarts at most (each costs up to ``ncv − k`` Hessian-vector products).
    ncv : int or None, default=None
        Lanczos basis size; None = scipy's default ``max(2k + 1, 20)`` capped at P.
    hutchinson_samples : int, default=0
        When > 0, also estimate tr(H) from this many Rademacher probes (one extra row).
    """

    k: int = 5
    which: str = "LA"
    params: str = "all"
    tol: float = 1e-3
    max_iter: int = 100
    ncv: int | None = None
    hutchinson_samples: int = 0


_CONSTRAINTS = {
    "k": ("int", 1, math.inf),
    "which": ("choice", ("LA", "LM")),
    "params": ("str", None, None),
    "tol": ("float", 0.0, 1.0),
    "max_iter": ("int", 1, math.inf),
    "ncv": ("int", 2, math.inf, "optional"),
    "hutchinson_samples": ("int", 0, math.inf),
}


@dataclass(frozen=True)
class HessianSpectrum:
    """Result of :func:`hessian_eigenvalues`.

    ``eigenvalues``: ndarray of shape (k,), float64, ordered as ``which`` asks (largest first);
    NaN where Lanczos did not converge. ``n_hvp``: Hessian-vector products used. ``converged``:
    all k converged. ``n_params``: P.
    """

    eigenvalues: np.ndarray
    n_hvp: int
    converged: bool
    n_params: int


class HessianVectorProduct:
    """``v ↦ Hv`` for the Hessian of ``loss_fn()`` w.r.t. ``params``, as float64 NumPy vectors.

    The loss and its gradient (with ``create_graph=True``) are computed once; each product is one
    backward pass through that graph (``retain_graph=True``), about twice a plain backward.

    Parameters
    ----------
    loss_fn : callable () -> Tensor of shape ()
        The scalar loss, differentiable in ``params``.
    params : list of Tensor
        Parameters spanning the Hessian; P = Σ numel.
    context : str, default=""
        Appended to error messages (" at step3000, suite logic").

    Raises
    ------
    NonFiniteActivationsError
        The loss or its gradient is NaN or inf (at construction), or a product is (on call).
    """

    def __init__(self, loss_fn: Callable[[], torch.Tensor], params: list[torch.Tensor], *, context: str = "",
                 error_fields: dict | None = None):
        self.params = params
        self.n_params = sum(p.numel() for p in params)
        self.n_calls = 0
        self._context = context
        self._fields = error_fields or {}
        loss = loss_fn()
        if not torch.isfinite(loss).all():
            raise NonFiniteActivationsError(f"loss is {float(loss.detach())}{context}; no Hessian", **self._fields)
        self.loss = float(loss.detach())
        grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
        for g in grads:
            if g is not None and not torch.isfinite(g).all():
                raise NonFiniteActivationsError(f"NaN or inf in the loss gradient{context}; no Hessian", **self._fields)
        # a gradient that does not depend on the parameters contributes a zero block to H
        self._live = [i for i, g in enumerate(grads) if g is not None and g.requires_grad]
        self._grads = [grads[i] for i in self._live]
        self._sizes = [p.numel() for p in params]
        self._offsets = np.cumsum([0] + self._sizes)

    def __call__(self, v: np.ndarray) -> np.ndarray:
        """Hv for ``v`` of shape (P,) (or (P, 1)); returns float64 of shape (P,)."""
        v = np.asarray(v, dtype=np.float64).reshape(-1)
        self.n_calls += 1
        out = np.zeros(self.n_params, dtype=np.float64)
        if not self._live:
            return out
        vs = []
        for i in self._live:
            p = self.params[i]
            piece = v[self._offsets[i]:self._offsets[i + 1]]
            vs.append(torch.from_numpy(piece).to(device=p.device, dtype=p.dtype).view_as(p))
        hv = torch.autograd.grad(self._grads, [self.params[i] for i in range(len(self.params))],
                                 grad_outputs=vs, retain_graph=True, allow_unused=True)
        for i, h in enumerate(hv):
            if h is not None:
                out[self._offsets[i]:self._offsets[i + 1]] = h.detach().reshape(-1).double().cpu().numpy()
        if not np.isfinite(out).all():
            raise NonFiniteActivationsError(f"NaN or inf in a Hessian-vector product{self._context}", **self._fields)
        return out


def hessian_eigenvalues(hvp: HessianVectorProduct, *, k: int = 5, which: str = "LA", tol: float = 1e-3,
                        max_iter: int = 100, ncv: int | None = None, seed: int = 0) -> HessianSpectrum:
    """Top-k eigenvalues of a Hessian given as a product operator, by Lanczos (ARPACK).

    Parameters
    ----------
    hvp : HessianVectorProduct
        The operator ``v ↦ Hv`` over P parameters.
    k : int, default=5
        Number of eigenvalues; must be < P.
    which : {"LA", "LM"}, default="LA"
        Largest algebraic, or largest magnitude.
    tol : float, default=1e-3
        Relative accuracy of each eigenvalue.
    max_iter : int, default=100
        ARPACK restarts at most.
    ncv : int, optional
        Lanczos basis size (default scipy's).
    seed : int, default=0
        Seeds the starting vector (ARPACK's own would be unseeded).

    Returns
    -------
    HessianSpectrum
        ``eigenvalues`` of shape (k,) in units of nats per (parameter unit)², largest first
        (by value for "LA", by magnitude for "LM"); NaN for those not converged.

    Raises
    ------
    InvalidParameterError
        ``k`` ≥ P, ``which`` not "LA"/"LM", or the Lanczos basis ((ncv + 4) × P float64) would take
        more than half the free host memory (Pythia-2.8B in full: ~540 GiB; use a parameter subset).
    NonFiniteActivationsError
        A Hessian-vector product is NaN or inf.

    Notes
    -----
    H is symmetric, so Lanczos applies: eigsh builds a Krylov basis of span{v0, Hv0, H²v0, ...}
    and returns the Ritz values of the tridiagonal projection, restarting implicitly.

    References
    ----------
    Lehoucq, Sorensen, Yang. "ARPACK Users' Guide." SIAM 1998 (implicitly restarted Lanczos).
    Pearlmutter. "Fast exact multiplication by the Hessian." Neural Computation 1994.
    Ghorbani, Krishnan, Xiao. "An investigation into neural net optimization via Hessian
    eigenvalue density." ICML 2019.

    Examples
    --------
    >>> w = torch.zeros(4, requires_grad=True)
    >>> a = torch.tensor([4.0, 3.0, 2.0, 1.0])
    >>> op = HessianVectorProduct(lambda: 0.5 * (a * w * w).sum() + (w ** 3).sum(), [w])
    >>> np.round(hessian_eigenvalues(op, k=2, tol=0).eigenvalues, 6).tolist()
    [4.0, 3.0]
    """
    from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

    if which not in ("LA", "LM"):
        raise InvalidParameterError(f"The 'which' parameter of hessian must be one of ['LA', 'LM']. Got {which!r}.",
                                    name="which", value=which)
    n = hvp.n_params
    if not isinstance(k, int) or k < 1 or k >= n:
        raise InvalidParameterError(f"The 'k' parameter of hessian must be an int in [1, {n - 1}] (fewer than the "
                                    f"{n} parameters). Got {k!r}.", name="k", value=k)
    if ncv is not None:
        ncv = min(max(ncv, k + 1), n)
    basis = ncv if ncv is not None else min(n, max(2 * k + 1, 20))
    need = (basis + 4) * n * 8  # ARPACK keeps the Lanczos basis, plus work vectors, in float64 on the host
    free = _available_host_bytes()
    if free is not None and need > free // 2:
        raise InvalidParameterError(f"Lanczos over {n:,} parameters needs about {need / 2**30:.1f} GiB of host memory "
                                    f"for its {basis} basis vectors (float64); {free / 2**30:.1f} GiB is free. Choose "
                                    f"a parameter subset with 'params' (e.g. one layer) or a smaller 'ncv'.",
                                    name="params", value=n)
    op = LinearOperator((n, n), matvec=hvp, dtype=np.float64)
    v0 = np.random.default_rng(seed).standard_normal(n)
    start = hvp.n_calls
    try:
        vals = eigsh(op, k=k, which=which, tol=tol, maxiter=max_iter, ncv=ncv, v0=v0, return_eigenvectors=False)
        converged = True
    except ArpackNoConvergence as err:
        vals = np.asarray(err.eigenvalues, dtype=np.float64)
        converged = False
        logger.warning("Lanczos converged on %d of %d Hessian eigenvalues in %d restarts", len(vals), k, max_iter)
    vals = np.asarray(vals, dtype=np.float64)
    order = np.argsort(-vals) if which == "LA" else np.argsort(-np.abs(vals))
    vals = vals[order]
    if len(vals) < k:
        vals = np.concatenate([vals, np.full(k - len(vals), np.nan)])
    return HessianSpectrum(eigenvalues=vals, n_hvp=hvp.n_calls - start, converged=converged, n_params=n)


def _available_host_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not Linux
        return None


def hutchinson_trace(hvp: HessianVectorProduct, *, n_samples: int, seed: int = 0) -> tuple[float, float]:
    """Hutchinson's estimate of tr(H) from Rademacher probes.

    Parameters
    ----------
    hvp : HessianVectorProduct
        The operator over P parameters.
    n_samples : int
        Number of probes z (each one Hessian-vector product).
    seed : int, default=0
        Seeds the probes.

    Returns
    -------
    (float, float)
        The mean of zᵀHz (an unbiased estimate of tr H) and its standard error (NaN for one probe).

    Raises
    ------
    InvalidParameterError
        ``n_samples`` < 1.
    NonFiniteActivationsError
        A Hessian-vector product is NaN or inf.

    Notes
    -----
    E[zᵀHz] = tr H for z with independent ±1 entries; Var = 2 Σ_{i≠j} H_ij².

    References
    ----------
    Hutchinson. "A stochastic estimator of the trace of the influence matrix for Laplacian
    smoothing splines." Comm. Statist. Simulation Comput. 1990.

    Examples
    --------
    >>> w = torch.zeros(3, requires_grad=True)
    >>> op = HessianVectorProduct(lambda: (torch.tensor([1.0, 2.0, 3.0]) * w * w).sum(), [w])
    >>> hutchinson_trace(op, n_samples=4)[0]  # diagonal H: exact
    12.0
    """
    if not isinstance(n_samples, int) or n_samples < 1:
        raise InvalidParameterError(f"The 'n_samples' parameter of hutchinson_trace must be an int in [1, inf). "
                                    f"Got {n_samples!r}.", name="n_samples", value=n_samples)
    rng = np.random.default_rng([seed, 1])
    est = np.empty(n_samples)
    for i in range(n_samples):
        z = rng.integers(0, 2, hvp.n_params).astype(np.float64) * 2.0 - 1.0
        est[i] = float(z @ hvp(z))
    se = float(est.std(ddof=1) / math.sqrt(n_samples)) if n_samples > 1 else math.nan
    return float(est.mean()), se


@register_metric(name="hessian", needs="model", cost="expensive", unit="nats per squared parameter unit",
                 range=(float("-inf"), float("inf")), config=HessianConfig)
def hessian(ctx: ModelContext, config: HessianConfig | None = None) -> list[MetricValue]:
    """Top-k eigenvalues of the Hessian of the batch loss (and optionally its trace).

    Parameters
    ----------
    ctx : ModelContext
        Model, fixed batch (labels −100 where unscored), device, seed (seeds Lanczos' start vector
        and the Hutchinson probes). The loss is ``ctx.loss()``: mean token cross-entropy in nats.
    config : HessianConfig, optional
        ``k`` (5), ``which`` ("LA"), ``params`` ("all"), ``tol`` (1e-3), ``max_iter`` (100),
        ``ncv`` (None), ``hutchinson_samples`` (0).

    Returns
    -------
    list of MetricValue
        k values, ``index`` = rank (0 = largest; by value for "LA", by |λ| for "LM"), NaN with a
        reason where Lanczos did not converge; ``extra``: which, n_params, n_hvp, converged, loss.
        With ``hutchinson_samples`` > 0, one more value with ``index=None`` and
        ``extra["quantity"] = "trace"`` (and its standard error).

    Raises
    ------
    InvalidParameterError
        Bad config, ``params`` matches nothing, ``k`` ≥ the number of parameters, or the Lanczos
        basis would not fit in host memory (choose a subset with ``params``).
    NonFiniteActivationsError
        NaN or inf in the loss, its gradient or a Hessian-vector product.

    Warns
    -----
    NegativeCurvatureWarning
        A returned eigenvalue is negative (with "LA": fewer than k positive eigenvalues).

    Notes
    -----
    ``Hv = ∂/∂θ (∇_θ L(θ) · v)`` by double backward; the model runs in eval mode on eager
    attention, as SDPA's fused CPU kernel has no double backward in torch 2.x. Eigenvalues are of
    ∇²L where L is the token-weighted mean cross-entropy (nats) over scored positions.

    References
    ----------
    Pearlmutter. Neural Computation 1994 (exact Hessian-vector products). Lehoucq, Sorensen, Yang.
    ARPACK Users' Guide 1998. Ghorbani, Krishnan, Xiao. ICML 2019 (Hessian spectra of networks).

    Examples
    --------
    >>> from tests._models import tiny_context  # doctest: +SKIP
    >>> [v.value for v in hessian(tiny_context())]  # doctest: +SKIP
    [3.1..., 1.9..., ...]
    """
    config = config or HessianConfig()
    check_config(config, _CONSTRAINTS, metric="hessian")
    model = ctx.model
    chosen = [p for _, p in select_parameters(model, config.params, metric="hessian")]
    with eval_mode(model), eager_attention(model), gradients_on(chosen):
        op = HessianVectorProduct(lambda: ctx.loss(), chosen, context=where(ctx), error_fields=location(ctx))
        spec = hessian_eigenvalues(op, k=config.k, which=config.which, tol=config.tol, max_iter=config.max_iter,
                                   ncv=config.ncv, seed=ctx.seed)
        trace = hutchinson_trace(op, n_samples=config.hutchinson_samples, seed=ctx.seed) \
            if config.hutchinson_samples > 0 else None
    extra = {"which": config.which, "n_params": int(spec.n_params), "n_hvp": int(spec.n_hvp),
             "converged": bool(spec.converged), "loss": op.loss}
    finite = spec.eigenvalues[np.isfinite(spec.eigenvalues)]
    if (finite < 0).any():
        warnings.warn(f"Hessian has negative eigenvalues among the top {config.k} ({config.which}){where(ctx)}: "
                      f"{np.round(finite[finite < 0], 6).tolist()}", NegativeCurvatureWarning, stacklevel=2)
    rows = [MetricValue(value=float(v), index=i,
                        reason=None if np.isfinite(v) else f"Lanczos did not converge in {config.max_iter} restarts",
                        extra=dict(extra)) for i, v in enumerate(spec.eigenvalues)]
    if trace is not None:
        rows.append(MetricValue(value=trace[0], index=None,
                                extra={**extra, "quantity": "trace", "std_error": trace[1],
                                       "n_hvp": config.hutchinson_samples}))
    return rows
