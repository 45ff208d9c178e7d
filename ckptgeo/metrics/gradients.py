"""Effective rank of per-sample loss gradients, and of their centered covariance.

For N scored items and P chosen parameters, ``G`` (N × P) stacks the gradients of each item's
task loss: the mean token cross-entropy (nats) over its answer / continuation tokens only, the
output head applied only at those positions (``_autodiff.task_token_losses``), never the
language-modelling loss over every position. ``grad_rank`` is the RankMe-style
entropy rank of G's singular values; ``grad_cov_rank`` is the entropy rank of the eigenvalues of
the centered covariance ``(G − ḡ)ᵀ(G − ḡ)/(N − 1)``.

P can be billions: where P exceeds ``sketch_dim`` each gradient is projected by a seeded
CountSketch to ``sketch_dim`` coordinates, one parameter tensor (and one block of samples) at a
time, so neither the N × P matrix nor the full hash table is ever materialised.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch

from ckptgeo.constants import RANKME_EPS
from ckptgeo.errors import InvalidParameterError, NonFiniteActivationsError
from ckptgeo.metrics._autodiff import (TASK_LOSS, check_host_memory, eager_attention, eval_mode, location, progress,
                                       select_parameters, where)
from ckptgeo._settings import Interval, NonEmptyStr, Options, setting, validate_params
from ckptgeo.metrics.rankme import effective_rank, entropy_rank_from_spectrum
from ckptgeo.metrics.registry import MetricValue, ModelContext, register_metric

__all__ = ["GradientRankConfig", "count_sketch", "gradient_effective_rank", "gradient_covariance_rank",
           "per_sample_gradients", "shared_gradients", "PerSampleGradients", "grad_rank", "grad_cov_rank"]

logger = logging.getLogger(__name__)

_PRIME = 2_147_483_647  # 2**31 - 1: a*j + b stays below 2**63 for a, b, j < 2**31
_COLUMNS_PER_PASS = 1 << 22  # hash this many coordinates at once (bounds temporary memory)
_MAX_UNSKETCHED_FLOATS = 1 << 31  # refuse an N x P matrix above 8 GiB in float32
_CHUNK_FLOATS = 1 << 26  # automatic chunk size: per-sample gradients of one chunk stay under this


@dataclass(frozen=True)
class GradientRankConfig:
    """Settings of ``grad_rank`` and ``grad_cov_rank``.

    Attributes
    ----------
    params : str, default="all"
        Which parameters: ``"all"``, comma-separated globs over names (``"gpt_neox.layers.0.*"``),
        or ``"re:<regex>"``.
    sketch_dim : int or None, default=4096
        Project each gradient by a seeded CountSketch to this many coordinates when the chosen
        parameters number more; ``None`` never sketches (N × P floats are then held).
    method : {"auto", "vmap", "loop"}, default="auto"
        ``"vmap"``: ``torch.func.vmap(grad)`` over items; ``"loop"``: one backward per item;
        ``"auto"``: vmap, falling back to the loop where the model does not support it.
    chunk_size : int or None, default=None
        Items per vmap call; peak memory is about chunk_size × P floats of per-sample gradients.
        None = as many as fit in 2**26 floats (256 MiB in float32), between 1 and 32: 32 for a
        model under 2M parameters, 4 for pythia-14m, 1 for Pythia-2.8B.
    eps : float, default=1e-7
        Added to each normalised spectrum value, as RankMe.
    """

    params: str = setting("all", admits=(NonEmptyStr,))
    sketch_dim: int | None = setting(4096, admits=(Interval(int, 1, None), None))
    method: str = setting("auto", admits=(Options("auto", "vmap", "loop"),))
    chunk_size: int | None = setting(None, admits=(Interval(int, 1, None), None))
    eps: float = setting(RANKME_EPS, admits=(Interval(float, 0.0, 1.0),))


# ----------------------------------------------------------------------------------------- core


def _hash_coefficients(seed: int, block: int) -> np.ndarray:
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(block)])
    return np.array([rng.integers(1, _PRIME), rng.integers(0, _PRIME),
                     rng.integers(1, _PRIME), rng.integers(0, _PRIME)], dtype=np.int64)


def count_sketch(matrix: torch.Tensor, sketch_dim: int, *, seed: int = 0, block: int = 0,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """CountSketch of the rows of ``matrix``: ``S[:, h(j)] += s(j) · matrix[:, j]``.

    Parameters
    ----------
    matrix : Tensor of shape (n_samples, n_columns)
        Rows to sketch (e.g. per-sample gradients of one parameter tensor, flattened);
        ``n_columns`` < 2**31.
    sketch_dim : int
        Number of buckets D.
    seed : int, default=0
        Seeds the hash functions (with ``block``).
    block : int, default=0
        Which column block this is: blocks get independent hash functions, so a vector split
        into blocks (one per parameter tensor) is sketched as ``Σ_b count_sketch(block b)``.
    out : Tensor of shape (n_samples, sketch_dim), optional
        Accumulate into this tensor (in place) instead of a new float32 one.

    Returns
    -------
    Tensor of shape (n_samples, sketch_dim)
        float32 (or ``out``'s dtype), on ``matrix``'s device.

    Raises
    ------
    InvalidParameterError
        ``matrix`` not 2-D, ``sketch_dim`` < 1, or ≥ 2**31 columns.

    Notes
    -----
    Bucket ``h(j) = ((a·j + b) mod p) mod D`` and sign ``s(j) = ±1`` from the parity of
    ``(a'·j + b') mod p`` (p = 2³¹ − 1; a, b, a', b' drawn from ``seed`` and ``block``): a
    2-universal family, computed from the index so no table of P entries is stored.
    ``E[⟨Sx, Sy⟩] = ⟨x, y⟩``, so singular values of N ≪ D rows are preserved up to
    O(1/√D) relative error.

    References
    ----------
    Charikar, Chen, Farach-Colton. "Finding frequent items in data streams." ICALP 2002.
    Woodruff. "Sketching as a tool for numerical linear algebra." FnT-TCS 2014, §2.1 (CountSketch
    as a subspace embedding).

    Examples
    --------
    >>> x = torch.randn(3, 1000)
    >>> count_sketch(x, 64, seed=1).shape
    torch.Size([3, 64])
    """
    if matrix.ndim != 2:
        raise InvalidParameterError(f"count_sketch expects a 2-D matrix (n_samples, n_columns); got shape "
                                    f"{tuple(matrix.shape)}", name="matrix", value=tuple(matrix.shape))
    if not isinstance(sketch_dim, int) or sketch_dim < 1:
        raise InvalidParameterError(f"The 'sketch_dim' parameter of count_sketch must be an int in [1, inf). "
                                    f"Got {sketch_dim!r}.", name="sketch_dim", value=sketch_dim)
    n, cols = matrix.shape
    if cols >= _PRIME:
        raise InvalidParameterError(f"count_sketch takes fewer than 2**31 columns per block; got {cols}. Split the "
                                    f"matrix into blocks.", name="matrix", value=cols)
    if out is None:
        out = torch.zeros(n, sketch_dim, dtype=torch.float32, device=matrix.device)
    a, b, a2, b2 = (int(v) for v in _hash_coefficients(seed, block))
    for start in range(0, cols, _COLUMNS_PER_PASS):
        stop = min(cols, start + _COLUMNS_PER_PASS)
        j = torch.arange(start, stop, dtype=torch.int64, device=matrix.device)
        bucket = ((a * j + b) % _PRIME) % sketch_dim
        sign = 1.0 - 2.0 * (((a2 * j + b2) % _PRIME) % 2).to(out.dtype)
        out.index_add_(1, bucket, matrix[:, start:stop].to(out.dtype) * sign)
    return out


def _check_matrix(grads: torch.Tensor, name: str) -> torch.Tensor:
    if grads.ndim != 2:
        raise InvalidParameterError(f"{name} expects per-sample gradients of shape (n_samples, n_params); got "
                                    f"{tuple(grads.shape)}", name="grads", value=tuple(grads.shape))
    if not torch.isfinite(grads).all():
        raise NonFiniteActivationsError(f"{name}: per-sample gradients hold NaN or inf")
    return grads


def gradient_effective_rank(grads: torch.Tensor, *, eps: float = RANKME_EPS) -> float:
    """Entropy effective rank of the singular values of the per-sample gradient matrix.

    Parameters
    ----------
    grads : Tensor of shape (n_samples, n_params)
        One gradient per row (or its sketch).
    eps : float, default=1e-7
        Added to each normalised singular value.

    Returns
    -------
    float
        ``exp(−Σ p_k log p_k)``, ``p_k = σ_k / Σ σ + eps``; in about [1, min(n_samples, n_params)];
        NaN when every gradient is zero.

    Raises
    ------
    InvalidParameterError
        ``grads`` is not 2-D.
    NonFiniteActivationsError
        ``grads`` holds NaN or inf.

    References
    ----------
    Roy, Vetterli. "The effective rank: a measure of effective dimensionality." EUSIPCO 2007.
    Garrido et al. "RankMe." ICML 2023, Eq. 1 (the same formula on representations).

    Examples
    --------
    >>> round(gradient_effective_rank(torch.eye(3, 10)), 4)
    3.0
    """
    _check_matrix(grads, "gradient_effective_rank")
    return effective_rank(grads, eps=eps, centered=False)


def gradient_covariance_rank(grads: torch.Tensor, *, eps: float = RANKME_EPS) -> float:
    """Entropy effective rank of the eigenvalues of the centered per-sample gradient covariance.

    Parameters
    ----------
    grads : Tensor of shape (n_samples, n_params)
        One gradient per row (or its sketch); n_samples ≥ 2.
    eps : float, default=1e-7
        Added to each normalised eigenvalue.

    Returns
    -------
    float
        ``exp(−Σ q_k log q_k)``, ``q_k = λ_k / Σ λ + eps`` where λ are the eigenvalues of
        ``C = (G − ḡ)ᵀ(G − ḡ) / (n − 1)`` (computed as squared singular values of the centered
        G); in about [1, n_samples − 1]; NaN when all gradients are equal.

    Raises
    ------
    InvalidParameterError
        ``grads`` is not 2-D or has fewer than 2 rows.
    NonFiniteActivationsError
        ``grads`` holds NaN or inf.

    Notes
    -----
    Eigenvalues of the covariance are σ²/(n − 1): squaring weights large directions more than
    ``gradient_effective_rank``'s σ do, so this rank is never larger than the centered σ-rank.

    References
    ----------
    Roy, Vetterli. EUSIPCO 2007 (effective rank). Spectrum of the gradient covariance (gradient
    noise): Jastrzębski et al. "Three factors influencing minima in SGD." 2017.

    Examples
    --------
    >>> g = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
    >>> round(gradient_covariance_rank(g), 3)  # covariance eigenvalues 8/3 and 2/3
    1.649
    """
    _check_matrix(grads, "gradient_covariance_rank")
    if grads.shape[0] < 2:
        raise InvalidParameterError(f"gradient_covariance_rank needs at least 2 samples; got {grads.shape[0]}",
                                    name="n_samples", value=grads.shape[0])
    dtype = torch.float32 if grads.device.type == "cuda" else torch.float64
    z = grads.detach().to(dtype)
    z = z - z.mean(dim=0, keepdim=True)
    sigma = torch.linalg.svdvals(z)
    return entropy_rank_from_spectrum(sigma.square() / (z.shape[0] - 1), eps=eps)


# ---------------------------------------------------------------------------------- from a model


@dataclass(frozen=True)
class PerSampleGradients:
    """Per-sample gradients of a ModelContext's items.

    ``grads``: Tensor of shape (n_samples, dim), float32; ``dim`` = ``sketch_dim`` when
    ``sketched`` else ``n_params``. ``losses``: shape (n_samples,), nats. ``method``: "vmap" or
    "loop" (the one that ran); ``chunk_size``: items per vmap call used.
    """

    grads: torch.Tensor
    losses: torch.Tensor
    n_params: int
    sketched: bool
    method: str
    chunk_size: int


def _vmap_chunk(ctx: ModelContext, chosen, sl: slice):
    from torch.func import functional_call, grad_and_value, vmap

    model = ctx.model
    batch = ctx.batch

    keys = [k for k in ("input_ids", "attention_mask", "labels", "position_ids") if k in batch]
    keep = ctx.logits_to_keep()  # outside vmap: it reads the labels' values

    def item_loss(p, *row):
        def forward(**kw):
            return functional_call(model, p, (), kw)
        one = {k: v[None] for k, v in zip(keys, row)}
        return ctx.per_sample_loss(model=forward, batch=one, keep=keep)[0]

    params = {n: p.detach() for n, p in chosen}
    grads, losses = vmap(grad_and_value(item_loss), in_dims=(None,) + (0,) * len(keys))(
        params, *(batch[k][sl] for k in keys))
    return [grads[n] for n, _ in chosen], losses.detach()


def _loop_chunk(ctx: ModelContext, chosen, sl: slice):
    tensors = [p for _, p in chosen]
    before = [p.requires_grad for p in tensors]
    rows: list[list[torch.Tensor]] = [[] for _ in tensors]
    losses = []
    try:
        with torch.enable_grad():
            for p in tensors:
                p.requires_grad_(True)
            for i in range(sl.start, sl.stop):
                one = {k: v[i:i + 1] for k, v in ctx.batch.items()
                       if k in ("input_ids", "attention_mask", "labels", "position_ids")}
                loss = ctx.per_sample_loss(batch=one)[0]
                gs = torch.autograd.grad(loss, tensors, allow_unused=True)
                for r, g, p in zip(rows, gs, tensors):
                    r.append(torch.zeros_like(p) if g is None else g.detach())
                losses.append(loss.detach())
    finally:
        for p, flag in zip(tensors, before):
            p.requires_grad_(flag)
    return [torch.stack(r) for r in rows], torch.stack(losses)


def per_sample_gradients(ctx: ModelContext, config: GradientRankConfig | None = None) -> PerSampleGradients:
    """Per-sample loss gradients of ``ctx``'s items over ``config.params``, sketched where large.

    Parameters
    ----------
    ctx : ModelContext
        Model, fixed batch (``n_samples`` items), device, seed (seeds the sketch).
    config : GradientRankConfig, optional
        Parameter subset, sketch size, method, chunk size.

    Returns
    -------
    PerSampleGradients
        ``grads`` of shape (n_samples, sketch_dim or n_params) and the per-item losses.

    Raises
    ------
    InvalidParameterError
        Bad config or a pattern that matches no parameter.
    NonFiniteActivationsError
        An item's loss or gradient is NaN or inf.

    Notes
    -----
    The model runs in eval mode on eager attention (see ``_autodiff.eager_attention``). Each item
    is its own batch of one, so its loss is exactly ``ctx.per_sample_loss`` of that item. Sketch
    block b is the parameter's position in ``model.named_parameters()``, so a named subset's sketch
    is the same as that subset's share of the ``"all"`` sketch.
    """
    config = config or GradientRankConfig()
    validate_params(config, owner="grad_rank")
    model = ctx.model
    chosen = select_parameters(model, config.params, metric="grad_rank")
    block_of = {n: i for i, (n, _) in enumerate(model.named_parameters())}
    n_params = sum(p.numel() for _, p in chosen)
    n = int(ctx.batch["input_ids"].shape[0])
    sketched = config.sketch_dim is not None and n_params > config.sketch_dim
    dim = config.sketch_dim if sketched else n_params
    if n * dim > _MAX_UNSKETCHED_FLOATS:
        raise InvalidParameterError(f"grad_rank would hold {n} x {dim:,} gradient entries ({4 * n * dim / 2**30:.1f} "
                                    f"GiB); set sketch_dim (e.g. 4096) or choose fewer params. Got sketch_dim="
                                    f"{config.sketch_dim!r}.", name="sketch_dim", value=config.sketch_dim)
    method = "vmap" if config.method in ("auto", "vmap") else "loop"
    chunk = config.chunk_size or max(1, min(32, _CHUNK_FLOATS // max(1, n_params)))
    if ctx.device.type == "cpu":  # the sketch, one chunk's per-sample gradients and its sketch buffers
        check_host_memory(4 * (n * dim + 2 * min(chunk, n) * n_params), metric="grad_rank",
                          what=f"{min(chunk, n)} per-sample gradients of {n_params:,} parameters at a time")
    out = torch.zeros(n, dim, dtype=torch.float32, device=ctx.device)
    losses = torch.empty(n, dtype=torch.float32, device=ctx.device)
    bar = progress(n, f"per-sample gradients{where(ctx)}", "item")
    with eval_mode(model), eager_attention(model), bar:
        for start in range(0, n, chunk):
            sl = slice(start, min(n, start + chunk))
            if method == "vmap":
                try:
                    grads, chunk_losses = _vmap_chunk(ctx, chosen, sl)
                except (RuntimeError, NotImplementedError, TypeError) as err:
                    if config.method == "vmap":
                        raise
                    logger.info("vmap over per-sample gradients failed (%s); falling back to a loop", err)
                    method = "loop"
            if method == "loop":
                grads, chunk_losses = _loop_chunk(ctx, chosen, sl)
            if not torch.isfinite(chunk_losses).all():
                bad = sl.start + int(torch.nonzero(~torch.isfinite(chunk_losses))[0])
                raise NonFiniteActivationsError(f"NaN or inf loss on item {bad}{where(ctx)} while computing "
                                                f"per-sample gradients", **location(ctx))
            losses[sl] = chunk_losses.float()
            col = 0
            for (name, _), g in zip(chosen, grads):
                flat = g.reshape(g.shape[0], -1)
                if not torch.isfinite(flat).all():
                    raise NonFiniteActivationsError(f"NaN or inf in per-sample gradients of {name}{where(ctx)}",
                                                    **location(ctx))
                if sketched:
                    count_sketch(flat, dim, seed=ctx.seed, block=block_of[name], out=out[sl])
                else:
                    out[sl, col:col + flat.shape[1]] = flat.float()
                    col += flat.shape[1]
            del grads
            bar.update(sl.stop - sl.start)
    return PerSampleGradients(grads=out, losses=losses, n_params=n_params, sketched=sketched, method=method,
                              chunk_size=chunk)


def shared_gradients(ctx: ModelContext, config: GradientRankConfig) -> PerSampleGradients:
    """The per-sample gradients of ``ctx`` under ``config``'s parameter subset, sketch and method, computed
    once per context and shared by every metric that asks with the same settings (``grad_rank`` and
    ``grad_cov_rank``; their ``eps`` does not enter)."""
    key = ("per_sample_gradients", config.params, config.sketch_dim, config.method, config.chunk_size, ctx.seed)
    return ctx.shared(key, lambda: per_sample_gradients(ctx, config))


def _extra(config: GradientRankConfig, psg: PerSampleGradients) -> dict:
    return {"n_samples": int(psg.grads.shape[0]), "n_params": int(psg.n_params), "sketched": bool(psg.sketched),
            "dim": int(psg.grads.shape[1]), "method": psg.method, "chunk_size": int(psg.chunk_size),
            "mean_loss": float(psg.losses.mean()), "objective": TASK_LOSS}


@register_metric(name="grad_rank", needs="model", cost="expensive", unit="effective dimensions",
                 range=(1.0, float("inf")), config=GradientRankConfig)
def grad_rank(ctx: ModelContext, config: GradientRankConfig | None = None) -> list[MetricValue]:
    """Effective rank of the per-sample loss gradients on ``ctx``'s batch.

    Parameters
    ----------
    ctx : ModelContext
        Model, fixed batch of ``n_samples`` items (labels −100 where unscored), device, seed.
    config : GradientRankConfig, optional
        ``params`` (default "all"), ``sketch_dim`` (4096), ``method`` ("auto"), ``chunk_size`` (None: auto),
        ``eps`` (1e-7).

    Returns
    -------
    list of MetricValue
        One value, in about [1, min(n_samples, dim)]; NaN with a reason when all gradients are zero.
        ``extra``: n_samples, n_params, sketched, dim, method, mean_loss (nats).

    Raises
    ------
    InvalidParameterError
        Bad config, or ``params`` matches no parameter.
    NonFiniteActivationsError
        NaN or inf in an item's loss or gradient.

    Notes
    -----
    ``exp(−Σ p_k log p_k)``, ``p_k = σ_k / Σσ + eps``, σ the singular values of G (N × P, one
    item's gradient of its task loss per row: mean cross-entropy over its answer tokens only, logits
    computed only there; recorded as ``extra["objective"]``), or of its CountSketch when P > ``sketch_dim``.
    A host-memory check runs before any work; a progress bar counts items on a terminal.

    References
    ----------
    Roy, Vetterli. "The effective rank." EUSIPCO 2007; Garrido et al. "RankMe." ICML 2023, Eq. 1.

    Examples
    --------
    >>> from tests._models import tiny_context  # doctest: +SKIP
    >>> grad_rank(tiny_context())[0].value  # doctest: +SKIP
    5.8...
    """
    config = config or GradientRankConfig()
    psg = shared_gradients(ctx, config)
    value = gradient_effective_rank(psg.grads, eps=config.eps)
    reason = "all per-sample gradients are zero" if math.isnan(value) else None
    return [MetricValue(value=value, reason=reason, extra=_extra(config, psg))]


@register_metric(name="grad_cov_rank", needs="model", cost="expensive", unit="effective dimensions",
                 range=(1.0, float("inf")), config=GradientRankConfig)
def grad_cov_rank(ctx: ModelContext, config: GradientRankConfig | None = None) -> list[MetricValue]:
    """Effective rank of the centered covariance of per-sample loss gradients on ``ctx``'s batch.

    Parameters
    ----------
    ctx : ModelContext
        Model, fixed batch of ``n_samples`` items, device, seed.
    config : GradientRankConfig, optional
        As for ``grad_rank``; both share one pass of per-sample gradients on the same context.

    Returns
    -------
    list of MetricValue
        One value in about [1, n_samples − 1]; NaN with a reason for fewer than 2 items or when all
        gradients are equal. ``extra`` as for ``grad_rank``.

    Raises
    ------
    InvalidParameterError
        Bad config, or ``params`` matches no parameter.
    NonFiniteActivationsError
        NaN or inf in an item's loss or gradient.

    Notes
    -----
    ``exp(−Σ q_k log q_k)``, ``q_k = λ_k / Σλ + eps``, λ the eigenvalues of
    ``(G − ḡ)ᵀ(G − ḡ)/(N − 1)``.

    References
    ----------
    Roy, Vetterli. EUSIPCO 2007; Jastrzębski et al. "Three factors influencing minima in SGD." 2017.

    Examples
    --------
    >>> from tests._models import tiny_context  # doctest: +SKIP
    >>> grad_cov_rank(tiny_context())[0].value  # doctest: +SKIP
    4.9...
    """
    config = config or GradientRankConfig()
    psg = shared_gradients(ctx, config)
    if psg.grads.shape[0] < 2:
        return [MetricValue(value=math.nan, reason="fewer than 2 items: no covariance", extra=_extra(config, psg))]
    value = gradient_covariance_rank(psg.grads, eps=config.eps)
    reason = "all per-sample gradients are equal" if math.isnan(value) else None
    return [MetricValue(value=value, reason=reason, extra=_extra(config, psg))]
