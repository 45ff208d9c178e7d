"""Top-k eigenvalues of the loss Hessian on a fixed batch, by Lanczos over Hessian-vector products.

The Hessian H (P × P) of the batch's task loss (mean token cross-entropy over the answer tokens, the
output head applied only there) is never formed: Lanczos only needs ``v ↦ Hv``, which autograd gives
by a double backward, ``Hv = ∂(∇L · v)/∂θ``. The Lanczos basis lives next to the model (on the GPU
when the model is there) in the parameters' dtype, is fully reorthogonalised, and restarts explicitly
from the wanted Ritz vectors when full; the work stops when the top k have converged or a budget
(Hessian-vector products, seconds) is spent, and records which. Optionally the trace is estimated by
Hutchinson's method.

Defaults and cost
-----------------
Each Hessian-vector product is one double backward through the retained graph of the task loss:
on a pythia-14m-shaped model (P = 14.1M) with 32 BIG-bench items about 3-16 s on 2 CPU cores
(the second figure on a machine with several other CPU-bound processes), and the graph takes about
2 GB. The basis holds ``ncv`` vectors of P values (pythia-14m, float32: 56 MB each), so ARPACK-style
defaults (``ncv = max(2k + 1, 20)``, 200 products) meant 1.1 GB of basis and 10-50 minutes. The
defaults here are ``ncv = max(k + 3, 8)`` (0.45 GB there), at most 40 products (no time limit unless asked):
the top eigenvalue is usually within ``tol`` after 10-20 products, the k-th later; what the budget
leaves unconverged is its Ritz estimate (a lower bound on the true eigenvalue for "LA"), flagged
``converged=False`` with ``stopped_by`` and its residual bound. Raise ``max_hvp``
(``--metric-option hessian.max_hvp=200``) where all k must converge.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ckptgeo.errors import InvalidParameterError, NegativeCurvatureWarning, NonFiniteActivationsError
from ckptgeo.metrics._autodiff import (TASK_LOSS, available_host_bytes, check_host_memory, eager_attention, eval_mode,
                                       gradients_on, location, progress, select_parameters, where)
from ckptgeo._settings import Boolean, Interval, NonEmptyStr, Options, setting, validate_params
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
        Relative tolerance on each Ritz value: converged when the residual bound ``|β_m s_mi|`` is at
        most ``tol · |θ_i|`` (0 = to machine precision).
    max_iter : int, default=100
        Restarts at most (each fills the basis again: up to ``ncv`` Hessian-vector products).
    ncv : int or None, default=None
        Lanczos basis size; None = ``max(k + 3, 8)`` capped at P. Memory: ``ncv × P`` values.
    max_hvp : int or None, default=40
        Budget: stop after this many Hessian-vector products (None: no limit).
    max_seconds : float or None, default=None
        Budget: stop after this many seconds of Lanczos (None: no limit). Off by default: a time budget makes
        which values converge depend on how busy the machine is; ``max_hvp`` bounds the work instead.
    hutchinson_samples : int, default=0
        When > 0, also estimate tr(H) from this many Rademacher probes (one extra row).
    retain_graph : bool, default=False
        Keep each part's gradient graph between products (one double backward per part and product).
        False rebuilds it for every product: a forward and a backward more per part, with one part's
        graph in memory instead of all of them. On a pythia-14m shape with 32 items
        (``scripts/bench_lm_metrics.py``, 40 products) the Hessian took 85 s instead of 64 s, the same
        eigenvalues, and the scan's peak RSS fell from 3.08 to 1.97 GiB.
    """

    k: int = setting(5, admits=(Interval(int, 1, None),))
    which: str = setting("LA", admits=(Options("LA", "LM"),))
    params: str = setting("all", admits=(NonEmptyStr,))
    tol: float = setting(1e-3, admits=(Interval(float, 0.0, 1.0),))
    max_iter: int = setting(100, admits=(Interval(int, 1, None),))
    ncv: int | None = setting(None, admits=(Interval(int, 2, None), None))
    max_hvp: int | None = setting(40, admits=(Interval(int, 1, None), None))
    max_seconds: float | None = setting(None, admits=(Interval(float, 0.0, None), None))
    hutchinson_samples: int = setting(0, admits=(Interval(int, 0, None),))
    retain_graph: bool = setting(False, admits=(Boolean,))

    def item_passes(self, n_items: int, share: float = 1.0) -> float:
        """The work of one run (one revision and suite), at most, for a scan's ``--dry-run`` estimate: in
        forward-and-backward passes of one item through the whole model, over a batch of ``n_items`` items.

        What :func:`hessian` does: the gradient of the loss once (a forward pass, a third of a pass, and a
        backward to the parameters spanned, two thirds of a pass times ``share``), then each product (``max_hvp``,
        else ``max_iter`` restarts of ``ncv``; plus ``hutchinson_samples``) a double backward through that
        gradient, about 2.5 passes times ``share`` (measured on a 5M-parameter GPT-NeoX: 2.6), after the gradient
        is built again unless ``retain_graph``. ``share``: the fraction of the model's parameters ``params``
        spans (1 for ``"all"``; a subset low in the model costs more, as the backward runs through every
        layer above it). At ``share`` 1 a product is 3.5 passes (measured 3.6), with ``params="layers.11.*"`` on
        pythia-160m (share 0.044) 0.47: mostly the forward. ``max_seconds`` is not counted here (the estimate
        caps the time by it)."""
        products = self.max_hvp if self.max_hvp is not None else self.max_iter * (self.ncv or max(self.k + 3, 8))
        gradient = 1 / 3 + 2 / 3 * share
        product = 2.5 * share + (0.0 if self.retain_graph else gradient)
        return n_items * (gradient + (products + self.hutchinson_samples) * product)


@dataclass(frozen=True)
class HessianSpectrum:
    """Result of :func:`hessian_eigenvalues`.

    ``eigenvalues``: ndarray of shape (k,), float64, ordered as ``which`` asks (largest first): the
    Ritz values (NaN only where fewer than k exist). ``converged_each``: (k,) bool. ``residuals``: (k,)
    residual bounds. ``n_hvp``: Hessian-vector products used. ``converged``: all k converged.
    ``stopped_by``: "converged", "max_hvp", "max_seconds" or "max_iter". ``n_params``: P.
    """

    eigenvalues: np.ndarray
    n_hvp: int
    converged: bool
    n_params: int
    converged_each: np.ndarray | None = None
    residuals: np.ndarray | None = None
    stopped_by: str = "converged"
    seconds: float = 0.0


class HessianVectorProduct:
    """``v ↦ Hv`` for the Hessian of ``loss_fn()`` w.r.t. ``params``, as float64 NumPy vectors.

    The loss and its gradient (with ``create_graph=True``) are computed once; each product is one
    backward pass through that graph (``retain_graph=True``), about twice a plain backward. A loss
    given as a sum of parts (a list of callables, e.g. one per chunk of items) keeps one graph per
    part and runs the product part by part: the retained graphs take the same memory in all, but
    the double backward's temporaries are one part's (on pythia-14m with 32 items, 4 parts of 8
    items: about 0.3 GB instead of 1.1 GB at the peak), and Hv is the sum of the parts' products.
    With ``retain_graph=False`` no graph is kept: each product rebuilds one part's graph at a time (a
    forward and a backward more per part), so only one part's graph is ever in memory.

    Parameters
    ----------
    loss_fn : callable () -> Tensor of shape (), or list of them
        The scalar loss, differentiable in ``params`` (or its parts, summed).
    params : list of Tensor
        Parameters spanning the Hessian; P = Σ numel.
    context : str, default=""
        Appended to error messages (" at step3000, suite logic").
    retain_graph : bool, default=True
        Keep every part's gradient graph between products (False: rebuild it per product).

    Raises
    ------
    NonFiniteActivationsError
        The loss or its gradient is NaN or inf (at construction), or a product is (on call).
    """

    def __init__(self, loss_fn: Callable[[], torch.Tensor], params: list[torch.Tensor], *, context: str = "",
                 error_fields: dict | None = None, retain_graph: bool = True):
        self.params = params
        self.n_params = sum(p.numel() for p in params)
        self.n_calls = 0
        self._context = context
        self._fields = error_fields or {}
        self.loss = 0.0
        self._retain = retain_graph
        # per part: (the part, indices of parameters with a live gradient, those gradients or None)
        self._parts = []
        for part in (loss_fn if isinstance(loss_fn, (list, tuple)) else [loss_fn]):
            loss, live, grads = self._gradient(part, check=True)
            self.loss += float(loss.detach())
            if live:
                self._parts.append((part, live, grads if retain_graph else None))
        self._sizes = [p.numel() for p in params]
        self._offsets = np.cumsum([0] + self._sizes)

    def _gradient(self, part, *, check: bool = False):
        """(loss, live, gradients with their graph) of one part of the loss."""
        loss = part()
        if check and not torch.isfinite(loss).all():
            raise NonFiniteActivationsError(f"loss is {float(loss.detach())}{self._context}; no Hessian", **self._fields)
        grads = torch.autograd.grad(loss, self.params, create_graph=True, allow_unused=True)
        if check:
            for g in grads:
                if g is not None and not torch.isfinite(g).all():
                    raise NonFiniteActivationsError(f"NaN or inf in the loss gradient{self._context}; no Hessian",
                                                    **self._fields)
        # a gradient that does not depend on the parameters contributes a zero block to H
        live = [i for i, g in enumerate(grads) if g is not None and g.requires_grad]
        return loss, live, [grads[i] for i in live]

    @property
    def dtype(self) -> torch.dtype:
        """The widest parameter dtype (the Lanczos basis is kept in it)."""
        return torch.float64 if any(p.dtype == torch.float64 for p in self.params) else torch.float32

    @property
    def device(self) -> torch.device:
        return self.params[0].device

    def apply(self, v: torch.Tensor) -> torch.Tensor:
        """Hv for a flat tensor ``v`` of shape (P,) on the parameters' device; returns shape (P,), ``v``'s dtype."""
        self.n_calls += 1
        out = torch.zeros_like(v)
        for part, live, grads in self._parts:
            if grads is None:  # not kept: rebuild this part's gradient graph for this product
                _, live, grads = self._gradient(part)
            vs = [v[self._offsets[i]:self._offsets[i + 1]].to(self.params[i].dtype).view_as(self.params[i])
                  for i in live]
            hv = torch.autograd.grad(grads, self.params, grad_outputs=vs, retain_graph=self._retain,
                                     allow_unused=True)
            for i, h in enumerate(hv):
                if h is not None:
                    out[self._offsets[i]:self._offsets[i + 1]] += h.detach().reshape(-1)
            del hv, grads
        if not torch.isfinite(out).all():
            raise NonFiniteActivationsError(f"NaN or inf in a Hessian-vector product{self._context}", **self._fields)
        return out

    def __call__(self, v: np.ndarray) -> np.ndarray:
        """Hv for ``v`` of shape (P,) (or (P, 1)); returns float64 of shape (P,)."""
        v = torch.from_numpy(np.asarray(v, dtype=np.float64).reshape(-1)).to(device=self.device, dtype=self.dtype)
        return self.apply(v).double().cpu().numpy()


def hessian_eigenvalues(hvp: HessianVectorProduct, *, k: int = 5, which: str = "LA", tol: float = 1e-3,
                        max_iter: int = 100, ncv: int | None = None, seed: int = 0, max_hvp: int | None = None,
                        max_seconds: float | None = None, on_step: Callable[[int], None] | None = None
                        ) -> HessianSpectrum:
    """Top-k eigenvalues of a Hessian given as a product operator, by restarted Lanczos.

    Parameters
    ----------
    hvp : HessianVectorProduct
        The operator ``v ↦ Hv`` over P parameters.
    k : int, default=5
        Number of eigenvalues; must be < P.
    which : {"LA", "LM"}, default="LA"
        Largest algebraic, or largest magnitude.
    tol : float, default=1e-3
        Relative accuracy of each eigenvalue (residual bound ≤ tol · |θ|; 0 = machine precision).
    max_iter : int, default=100
        Restarts at most.
    ncv : int, optional
        Lanczos basis size (default ``max(k + 3, 8)``, capped at P).
    seed : int, default=0
        Seeds the starting vector.
    max_hvp : int, optional
        Stop after this many Hessian-vector products.
    max_seconds : float, optional
        Stop after this many seconds.
    on_step : callable (n_hvp) -> None, optional
        Called after each product (a progress bar).

    Returns
    -------
    HessianSpectrum
        ``eigenvalues`` of shape (k,) in units of nats per (parameter unit)², largest first
        (by value for "LA", by magnitude for "LM"): the Ritz values, converged or not
        (``converged_each``, ``residuals``, ``stopped_by`` say which and why).

    Raises
    ------
    InvalidParameterError
        ``k`` ≥ P, ``which`` not "LA"/"LM", or the Lanczos basis (ncv × P values in the parameters'
        dtype, on their device) would take more than half the free host memory on a CPU
        (Pythia-2.8B in full: ~210 GiB; use a parameter subset).
    NonFiniteActivationsError
        A Hessian-vector product is NaN or inf.

    Notes
    -----
    H is symmetric, so Lanczos applies: ``H V_m = V_m T_m + β_m v_{m+1} e_mᵀ`` builds an orthonormal
    basis of span{v0, Hv0, H²v0, ...} (here reorthogonalised in full, twice per step) and the
    eigenvalues θ_i of the tridiagonal ``T_m`` (Ritz values) approach H's extreme eigenvalues, with
    residual ``‖H y_i − θ_i y_i‖ = |β_m s_{m,i}|`` read off ``T_m``'s eigenvectors s. When the basis
    is full before the top k converge, it restarts from the sum of their Ritz vectors (an explicit
    restart, Saad 2011 §4.3), keeping memory at ``ncv`` vectors.

    References
    ----------
    Lanczos. "An iteration method for the solution of the eigenvalue problem of linear differential
    and integral operators." J. Res. NBS 1950. Saad. "Numerical Methods for Large Eigenvalue
    Problems." SIAM 2011, ch. 6. Pearlmutter. "Fast exact multiplication by the Hessian." Neural
    Computation 1994. Ghorbani, Krishnan, Xiao. "An investigation into neural net optimization via
    Hessian eigenvalue density." ICML 2019.

    Examples
    --------
    >>> w = torch.zeros(4, requires_grad=True)
    >>> a = torch.tensor([4.0, 3.0, 2.0, 1.0])
    >>> op = HessianVectorProduct(lambda: 0.5 * (a * w * w).sum() + (w ** 3).sum(), [w])
    >>> np.round(hessian_eigenvalues(op, k=2, tol=0).eigenvalues, 5).tolist()
    [4.0, 3.0]
    """
    import time

    from scipy.linalg import eigh_tridiagonal

    if which not in ("LA", "LM"):
        raise InvalidParameterError(f"The 'which' parameter of hessian must be one of ['LA', 'LM']. Got {which!r}.",
                                    name="which", value=which)
    n = hvp.n_params
    if not isinstance(k, int) or k < 1 or k >= n:
        raise InvalidParameterError(f"The 'k' parameter of hessian must be an int in [1, {n - 1}] (fewer than the "
                                    f"{n} parameters). Got {k!r}.", name="k", value=k)
    basis = min(max(ncv if ncv is not None else max(k + 3, 8), k + 1), n)
    dtype, device = hvp.dtype, hvp.device
    if device.type == "cpu":
        _check_basis(basis, n, torch.finfo(dtype).bits // 8)
    V = torch.empty(basis, n, dtype=dtype, device=device)
    v = torch.from_numpy(np.random.default_rng(seed).standard_normal(n)).to(device=device, dtype=dtype)
    v /= v.norm()
    start, t0, restarts, stop, previous = hvp.n_calls, time.perf_counter(), 0, None, None
    exact = tol == 0
    while stop is None:
        alpha: list[float] = []
        beta: list[float] = []
        V[0] = v
        for j in range(basis):
            w = hvp.apply(V[j])
            a = float(w @ V[j])
            w -= a * V[j]
            if j:
                w -= beta[-1] * V[j - 1]
            for _ in range(2):  # full reorthogonalisation ("twice is enough")
                w -= V[:j + 1].T @ (V[:j + 1] @ w)
            b = float(w.norm())
            alpha.append(a)
            beta.append(b)
            vals, vecs = eigh_tridiagonal(np.array(alpha), np.array(beta[:-1])) if j else (np.array([a]),
                                                                                          np.ones((1, 1)))
            order = np.argsort(-vals) if which == "LA" else np.argsort(-np.abs(vals))
            idx = order[:k]
            theta = np.full(k, np.nan)
            resid = np.full(k, np.inf)
            theta[:len(idx)] = vals[idx]
            resid[:len(idx)] = np.abs(b * vecs[-1, idx])
            if b <= 1e3 * np.finfo(np.float64 if dtype == torch.float64 else np.float32).eps * max(
                    1.0, float(np.abs(vals).max())):
                resid[:len(idx)] = 0.0  # an invariant subspace: its Ritz values are exact
            bound = np.abs(theta) * (1e3 * np.finfo(np.float64).eps if exact else tol)
            done = np.nan_to_num(resid, nan=np.inf) <= bound
            if on_step is not None:
                on_step(hvp.n_calls - start)
            if len(idx) == k and done.all() or (resid[:len(idx)] == 0).all() and len(idx) < k:
                stop = "converged"
            elif max_hvp is not None and hvp.n_calls - start >= max_hvp:
                stop = "max_hvp"
            elif max_seconds is not None and time.perf_counter() - t0 >= max_seconds:
                stop = "max_seconds"
            elif j == basis - 1 and restarts >= max_iter:
                stop = "max_iter"
            if stop is not None or j == basis - 1:
                break
            V[j + 1] = w / b
        if stop is None:  # explicit restart from the wanted Ritz vectors
            restarts += 1
            previous = (theta, resid, done)
            v = V[:len(alpha)].T @ torch.from_numpy(vecs[:, idx].sum(1)).to(device=device, dtype=dtype)
            v /= v.norm()
    del V
    if previous is not None and stop != "converged":
        # a budget ended a restarted cycle early. Its Ritz values come from a smaller Krylov space;
        # with fewer than k of them, the last full cycle's estimates stand. For "LA" each Ritz value
        # is a lower bound on its eigenvalue (Cauchy interlacing), so per rank the larger of the two
        # cycles' estimates is the better one.
        p_theta, p_resid, p_done = previous
        if len(idx) < k:
            theta, resid, done = p_theta, p_resid, p_done
        elif which == "LA":
            take = np.nan_to_num(p_theta, nan=-np.inf) > np.nan_to_num(theta, nan=-np.inf)
            theta, resid, done = (np.where(take, p_theta, theta), np.where(take, p_resid, resid),
                                  np.where(take, p_done, done))
        idx = np.arange(k)
    converged = bool(done.all()) and len(idx) == k
    if not converged:
        logger.warning("Lanczos converged on %d of %d Hessian eigenvalues (stopped by %s after %d products)%s",
                       int(done[:len(idx)].sum()), k, stop, hvp.n_calls - start, _raise_hint(stop))
    return HessianSpectrum(eigenvalues=theta, n_hvp=hvp.n_calls - start, converged=converged, n_params=n,
                           converged_each=done, residuals=resid, stopped_by=stop,
                           seconds=time.perf_counter() - t0)


#: items per part of the loss whose Hessian-vector products run one after the other (see HessianVectorProduct)
_ITEMS_PER_PART = 8


def _raise_hint(stopped_by: str) -> str:
    """``"; raise it: ... --metric-option hessian.max_hvp=N ..."`` (scan, Python, a reproduce preset) for a budget
    that ended the work, else ``""``."""
    if stopped_by not in ("max_hvp", "max_seconds", "max_iter"):
        return ""
    return (f"; raise it: `ckptgeo scan ... --metric-option hessian.{stopped_by}=N`, metric_options="
            f"{{'hessian': {{'{stopped_by}': N}}}} in Python, or in a reproduce study the preset's metric_options "
            f"(a --preset JSON file)")


def _loss_parts(ctx: ModelContext):
    """The task loss as a sum of parts of ``_ITEMS_PER_PART`` items, each its token-weighted share:
    ``L = Σ_c (n_c / n) L_c`` with ``n_c`` the scored tokens of chunk c, so the Hessian is the sum of
    theirs. A context without labelled items gets one part, ``ctx.loss``."""
    labels = ctx.batch.get("labels") if isinstance(ctx.batch, dict) else None
    if labels is None or labels.shape[0] <= _ITEMS_PER_PART:
        return [lambda: ctx.loss()]
    counts = (labels[:, 1:] != -100).sum(1)
    total = max(1, int(counts.sum()))
    parts = []
    for start in range(0, labels.shape[0], _ITEMS_PER_PART):
        sl = slice(start, start + _ITEMS_PER_PART)
        share = int(counts[sl].sum()) / total
        if share == 0:
            continue
        chunk = {k: (v[sl] if isinstance(v, torch.Tensor) and v.shape[:1] == labels.shape[:1] else v)
                 for k, v in ctx.batch.items()}
        parts.append(lambda chunk=chunk, share=share: ctx.loss(batch=chunk) * share)
    return parts


def _check_basis(basis: int, n: int, itemsize: int) -> None:
    """Refuse a Lanczos basis of ``basis`` vectors over ``n`` parameters (and 4 work vectors) of ``itemsize``
    bytes that would take more than half the free host memory (:func:`check_host_memory`)."""
    check_host_memory((basis + 4) * n * itemsize, metric="hessian", free=_available_host_bytes(),
                      what=f"a Lanczos basis of {basis} vectors over {n:,} parameters")


def hessian_preflight(model, config: HessianConfig, device: str) -> None:
    """The host-memory check of :func:`hessian_eigenvalues` on ``model`` as built from its config (no weights),
    before a scan downloads any: the parameters ``config.params`` selects, the basis size ``ncv`` (default
    ``max(k + 3, 8)``) and the model's dtype; nothing to check on a GPU (``device`` not "cpu").

    Raises
    ------
    InvalidParameterError
        The basis would take more than half the free host memory (choose a subset with ``params``), or
        ``params`` selects nothing.
    """
    if not str(device).startswith("cpu"):
        return
    chosen = [p for _, p in select_parameters(model, config.params, metric="hessian")]
    n = sum(p.numel() for p in chosen)
    if n > config.k:
        basis = min(max(config.ncv if config.ncv is not None else max(config.k + 3, 8), config.k + 1), n)
        _check_basis(basis, n, torch.finfo(chosen[0].dtype).bits // 8)


def _available_host_bytes() -> int | None:
    return available_host_bytes()


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
                 range=(float("-inf"), float("inf")), config=HessianConfig, preflight=hessian_preflight)
def hessian(ctx: ModelContext, config: HessianConfig | None = None) -> list[MetricValue]:
    """Top-k eigenvalues of the Hessian of the batch loss (and optionally its trace).

    Parameters
    ----------
    ctx : ModelContext
        Model, fixed batch (labels −100 where unscored), device, seed (seeds Lanczos' start vector
        and the Hutchinson probes). The loss is ``ctx.loss()``: the task loss, mean token
        cross-entropy in nats over the answer tokens only, logits computed only there.
    config : HessianConfig, optional
        ``k`` (5), ``which`` ("LA"), ``params`` ("all"), ``tol`` (1e-3), ``max_iter`` (100),
        ``ncv`` (None: ``max(k + 3, 8)``), ``max_hvp`` (40), ``max_seconds`` (None), ``hutchinson_samples`` (0);
        see the module docstring for why.

    Returns
    -------
    list of MetricValue
        k values, ``index`` = rank (0 = largest; by value for "LA", by |λ| for "LM"); a value Lanczos
        did not converge on (its budget ran out) is its Ritz estimate with a reason and
        ``extra["converged"] = False``; ``extra``: which, n_params, n_hvp, converged, residual,
        stopped_by ("converged", "max_hvp", "max_seconds", "max_iter"), seconds_lanczos, loss (nats),
        objective (the task loss, as recorded).
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
    ∇²L where L is the token-weighted mean cross-entropy (nats) over the scored answer positions (the
    task loss, never the language-modelling loss). The host-memory check of the Lanczos basis runs
    before any product; a progress bar counts products on a terminal.

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
    validate_params(config, owner="hessian")
    model = ctx.model
    chosen = [p for _, p in select_parameters(model, config.params, metric="hessian")]
    bar = progress(config.max_hvp, f"Hessian-vector products{where(ctx)}", "hvp")
    with eval_mode(model), eager_attention(model), gradients_on(chosen), bar:
        op = HessianVectorProduct(_loss_parts(ctx), chosen, context=where(ctx), error_fields=location(ctx),
                                  retain_graph=config.retain_graph)
        spec = hessian_eigenvalues(op, k=config.k, which=config.which, tol=config.tol, max_iter=config.max_iter,
                                   ncv=config.ncv, seed=ctx.seed, max_hvp=config.max_hvp,
                                   max_seconds=config.max_seconds, on_step=lambda n: bar.update(n - bar.n))
        trace = hutchinson_trace(op, n_samples=config.hutchinson_samples, seed=ctx.seed) \
            if config.hutchinson_samples > 0 else None
    extra = {"which": config.which, "n_params": int(spec.n_params), "n_hvp": int(spec.n_hvp),
             "converged": bool(spec.converged), "stopped_by": spec.stopped_by, "seconds_lanczos": spec.seconds,
             "loss": op.loss, "objective": TASK_LOSS}
    finite = spec.eigenvalues[np.isfinite(spec.eigenvalues)]
    if (finite < 0).any():
        warnings.warn(f"Hessian has negative eigenvalues among the top {config.k} ({config.which}){where(ctx)}: "
                      f"{np.round(finite[finite < 0], 6).tolist()}", NegativeCurvatureWarning, stacklevel=2)
    rows = []
    for i, v in enumerate(spec.eigenvalues):
        ok = bool(spec.converged_each[i])
        reason = None if ok else (f"Lanczos did not converge (stopped by {spec.stopped_by} after {spec.n_hvp} "
                                  f"products): a Ritz estimate{_raise_hint(spec.stopped_by)}" if np.isfinite(v)
                                  else "fewer Ritz values than k")
        rows.append(MetricValue(value=float(v), index=i, reason=reason,
                                extra={**extra, "converged": ok, "residual": float(spec.residuals[i])}))
    if trace is not None:
        rows.append(MetricValue(value=trace[0], index=None,
                                extra={**extra, "quantity": "trace", "std_error": trace[1],
                                       "n_hvp": config.hutchinson_samples}))
    return rows
