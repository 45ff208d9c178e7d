"""Local Learning Coefficient (LLC), estimated by SGLD with the ``devinterp`` library (2.0.1).

devinterp 2.x samples language models only: its dataset is rows of ``input_ids`` and its loss is a
per-token loss of ``(model, input_ids)``. This module adapts any model and loss to it: the dataset
rows are item *indices* (``input_ids = [i, i]``), and the loss closure looks the items up, so the
sampler, its seeding, localisation and bookkeeping are devinterp's own. From the per-step losses it
records, the estimate per chain is

    λ̂_c = nβ · ( mean_{t ≥ burn-in} L_t^{(c)} − L_n(w*) )

and chains whose loss went NaN/inf are reported and left out of the mean.

Where the estimate can be trusted
---------------------------------
λ̂ estimates the LLC at a local minimum w* of the loss. Away from one, SGLD descends the gradient, the
sampled losses fall below L_n(w*) and λ̂ turns small or negative whatever the geometry (at a randomly
initialised checkpoint: −4.3, −1.5, −1.9 on the smoke study). Two things guard against it:

* **Burn-in** (``num_burnin_steps``, default 50): the first steps of each chain, while it moves from w*
  into the localised posterior, are dropped, so the draws are from the posterior, not the transient.
* **The gradient at w*** is recorded: ``grad_norm`` = ‖∇L_n(w*)‖ over the parameters that move (a
  geometry column) and ``gradient_bias`` = (nβ)² ‖∇L_n(w*)‖² / γ, how far the gradient alone lowers λ̂ when
  the localisation γ dominates the curvature (for a quadratic loss the drop is exactly
  (nβ)² ‖g‖² (nβa + 2γ) / (2 (nβa + γ)²)). A value whose ``gradient_bias`` is not small against λ̂ was
  not taken near a minimum. A negative λ̂ is flagged in the row's ``reason`` (the declared range is
  [0, inf)) and the analysis leaves it out of onsets.

Defaults and cost
-----------------
Each SGLD step is one forward and backward of the task loss on a minibatch, so the cost is
``num_chains × (num_burnin_steps + num_draws × num_steps_bw_draws)`` such passes: on a pythia-14m-shaped
model with 32 BIG-bench items about 1-3 s each on 2 CPU cores. devinterp's own defaults (4 chains × 200
draws) are 800 passes, 20-40 minutes there. The defaults here are 2 chains × 50 draws (100 passes;
two chains still give a spread, ``llc_std``) after 50 burn-in steps per chain (100 more passes): a budget
in work, so the estimate does not depend on how busy the machine is. An optional wall-clock budget
``max_seconds`` (off by default) is shared out between the chains: a chain that starts with r seconds left and
k chains to go runs for r / k seconds
(its draws so far count when it has at least one; time a chain leaves unused passes on), and
``converged`` is recorded False with ``stopped_by="max_seconds"``. Fewer draws make λ̂ noisier, not
biased in a known direction; raise ``num_draws`` / ``num_chains`` (and ``max_seconds``) where the
estimate matters (``--metric-option llc.num_draws=200``).
"""

from __future__ import annotations

import logging
import math
import random
import tempfile
import time
import warnings
import contextlib
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

import ckptgeo.constants as constants
from ckptgeo.errors import ChainDivergenceWarning, InvalidParameterError, NonFiniteActivationsError
from ckptgeo.metrics._autodiff import TASK_LOSS, check_host_memory, gradients_on, location, select_parameters, where
from ckptgeo._settings import Interval, NonEmptyStr, setting, validate_params
from ckptgeo.metrics.registry import MetricValue, ModelContext, register_metric

__all__ = ["LLCConfig", "LLCEstimate", "estimate_llc", "llc"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LLCConfig:
    """SGLD settings of the LLC estimate (Lau et al. 2023, Algorithm 1; devinterp's names).

    Attributes
    ----------
    lr : float, default=1e-4
        SGLD step size ε.
    nbeta : float or None, default=None
        Inverse temperature nβ; None = ``m / ln m`` for SGLD batch size m (devinterp's
        ``default_nbeta``). The value used is recorded as ``nbeta_used``.
    localization : float, default=100.0
        Strength γ of the pull back to the initial weights w*.
    num_chains : int, default=2
        Independent chains (seeds ``seed + chain``). devinterp's default is 4; see the module
        docstring for the cost.
    num_draws : int, default=50
        SGLD steps per chain after burn-in that enter the estimate (devinterp's default: 200).
    num_burnin_steps : int, default=50
        Steps per chain discarded before the draws (the chain's move from w* into the posterior; module
        docstring).
    num_steps_bw_draws : int, default=1
        Steps between draws.
    batch_size : int, default=32
        Items per SGLD step (capped at the number of items; the cap is recorded as
        ``batch_size_used``).
    params : str, default="all"
        Parameters that move: ``"all"``, globs or ``"re:<regex>"`` (others are frozen: a
        restricted LLC).
    max_seconds : float or None, default=None
        Budget: wall-clock seconds of SGLD over all chains, from the first step, shared out between the
        chains (None: no limit). Where it cuts chains short, the estimate uses the draws made so far and
        records ``converged=False``.
    """

    lr: float = setting(1e-4, admits=(Interval(float, 0.0, None, closed="neither"),))
    nbeta: float | None = setting(None, admits=(Interval(float, 0.0, None, closed="neither"), None))
    localization: float = setting(100.0, admits=(Interval(float, 0.0, None),))
    num_chains: int = setting(2, admits=(Interval(int, 1, None),))
    num_draws: int = setting(50, admits=(Interval(int, 1, None),))
    num_burnin_steps: int = setting(50, admits=(Interval(int, 0, None),))
    num_steps_bw_draws: int = setting(1, admits=(Interval(int, 1, None),))
    batch_size: int = setting(32, admits=(Interval(int, 1, None),))
    params: str = setting("all", admits=(NonEmptyStr,))
    max_seconds: float | None = setting(None, admits=(Interval(float, 0.0, None), None))

    def item_passes(self, n_items: int, share: float = 1.0) -> float:
        """The work of one run (one revision and suite), for a scan's ``--dry-run`` estimate: forward-and-backward
        passes of one item through the whole model (each SGLD step is a forward, a third of a pass, and a backward
        to the parameters that move, two thirds times ``share``, their fraction of the model's parameters, over a
        minibatch of ``min(batch_size, n_items)`` items; steps: ``num_chains`` x (``num_burnin_steps`` +
        ``num_draws`` x ``num_steps_bw_draws``)). ``max_seconds`` is not counted here (the estimate caps the time
        by it)."""
        steps = self.num_chains * (self.num_burnin_steps + self.num_draws * self.num_steps_bw_draws)
        return float(steps * min(self.batch_size, n_items) * (1 / 3 + 2 / 3 * share))


@dataclass(frozen=True)
class LLCEstimate:
    """Result of :func:`estimate_llc`.

    ``llc_mean`` / ``llc_std``: mean and standard deviation (ddof=0) over healthy chains, NaN when
    none is. ``llc_per_chain``: shape (num_chains,), NaN for a diverged chain. ``diverged``: one
    flag per chain. ``init_loss``: L_n(w*) in nats, as devinterp measured it. ``nbeta_used``,
    ``batch_size_used``: resolved settings. ``chain_errors``: devinterp's message per failed chain.
    ``stopped_by``: "completed" or "max_seconds" (the budget ended the sampling); ``converged`` is
    True when every chain ran its full length. ``n_steps_per_chain``: SGLD steps after burn-in that
    entered each chain's estimate (0 for a chain the budget cut before its first draw). ``seconds``: wall time of SGLD.
    ``grad_norm``: ‖∇L_n(w*)‖ over the parameters that move; ``gradient_bias``: (nβ)² ‖∇L_n(w*)‖² / γ (inf for
    γ = 0), the drop of λ̂ the gradient alone causes (module docstring).
    """

    llc_mean: float
    llc_std: float
    llc_per_chain: np.ndarray
    diverged: np.ndarray
    init_loss: float
    nbeta_used: float
    batch_size_used: int
    chain_errors: tuple[str, ...] = ()
    stopped_by: str = "completed"
    n_steps_per_chain: tuple[int, ...] = ()
    seconds: float = 0.0
    grad_norm: float = math.nan
    gradient_bias: float = math.nan

    @property
    def converged(self) -> bool:
        """Every chain ran its full length (no budget cut it short)."""
        return self.stopped_by == "completed"


class _IndexDataset(torch.utils.data.Dataset):
    """Rows ``{"input_ids": [i, i]}``: devinterp needs sequences of length ≥ 2; the loss reads i."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": torch.tensor([i, i], dtype=torch.long)}


class _rng_preserved:
    """devinterp seeds the global torch/NumPy/random generators; restore them afterwards."""

    def __enter__(self):
        self._np = np.random.get_state()
        self._py = random.getstate()
        self._torch = torch.random.get_rng_state()
        self._cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        return self

    def __exit__(self, *exc):
        np.random.set_state(self._np)
        random.setstate(self._py)
        torch.random.set_rng_state(self._torch)
        if self._cuda is not None:
            torch.cuda.set_rng_state_all(self._cuda)
        return False


def estimate_llc(model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor],
                 n_samples: int, config: LLCConfig | None = None, *, seed: int = 0,
                 device: str | torch.device = "cpu", context: str = "", error_fields: dict | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> LLCEstimate:
    """LLC of ``model`` at its current weights w*, by devinterp's SGLD sampler.

    Parameters
    ----------
    model : torch.nn.Module
        The model at w* (left unchanged: each chain samples a deep copy).
    loss_fn : callable (model, indices) -> Tensor of shape ()
        Mean loss (nats) of the items ``indices`` (LongTensor of shape (b,), on ``device``) under
        ``model``; differentiable in its parameters. It must be a negative log-likelihood for λ̂
        to be the LLC.
    n_samples : int
        Number of items n (indices 0 … n−1).
    config : LLCConfig, optional
        SGLD settings.
    seed : int, default=0
        devinterp's ``init_seed``: chain c's noise uses ``seed + c``; the minibatch order uses seed.
    device : str or torch.device, default="cpu"
        Where devinterp runs the chains.
    context, error_fields
        Appended to / attached to error messages (``where`` / ``location`` of a ModelContext).
    clock : callable () -> float, default=time.perf_counter
        Seconds, read once per SGLD step for ``config.max_seconds`` and for ``seconds``; a test passes a
        fake clock so that the budget logic never depends on how busy the machine is.

    Returns
    -------
    LLCEstimate
        Mean and spread over healthy chains, per-chain values, divergence flags, init loss.

    Raises
    ------
    InvalidParameterError
        Bad config, ``n_samples`` < 1, or ``params`` matches nothing.
    NonFiniteActivationsError
        The loss at w* is NaN or inf (no chain is started).

    Warns
    -----
    ChainDivergenceWarning
        A chain's loss went NaN/inf; it is left out of the mean.

    Notes
    -----
    SGLD step (devinterp ``SGLD``): ``Δw = −ε/2 · (nβ ∇L_m(w) + γ (w − w*)) + N(0, ε)``, with L_m
    the minibatch loss. Then ``λ̂ = nβ (E_t[L_t] − L_n(w*))``: devinterp 2.0.1's ``compute_llc``
    averages burn-in steps in too; here burn-in steps are left out (Lau et al.). Before sampling, one
    forward and backward of all n items gives ``grad_norm`` (how far w* is from a minimum). The sampler runs the model in ``train()`` mode (dropout
    on where the model has any; Pythia has none). Memory: one deep copy of the model per chain,
    sequentially.

    References
    ----------
    Lau, Furman, Wang, Murfet, Wei. "The Local Learning Coefficient: A Singularity-Aware
    Complexity Measure." AISTATS 2025 (arXiv:2308.12108), Eq. 9 and Algorithm 1.
    Watanabe. "Algebraic Geometry and Statistical Learning Theory." 2009 (λ = d/2 for regular
    models). Welling, Teh. "Bayesian learning via stochastic gradient Langevin dynamics." ICML 2011.

    Examples
    --------
    >>> lin = torch.nn.Linear(2, 1, bias=False)
    >>> x = torch.randn(200, 2); y = x @ torch.tensor([[1.0], [-1.0]]) + torch.randn(200, 1)
    >>> est = estimate_llc(lin, lambda m, i: 0.5 * ((m(x[i]) - y[i]) ** 2).mean(), 200,
    ...                    LLCConfig(num_chains=1, num_draws=5))  # doctest: +SKIP
    """
    config = config or LLCConfig()
    validate_params(config, owner="llc")
    if not isinstance(n_samples, int) or n_samples < 1:
        raise InvalidParameterError(f"The 'n_samples' parameter of llc must be an int in [1, inf). Got {n_samples!r}.",
                                    name="n_samples", value=n_samples)
    chosen = select_parameters(model, config.params, metric="llc")
    device = torch.device(device)
    batch_size = min(config.batch_size, n_samples)
    nbeta = config.nbeta if config.nbeta is not None else (batch_size / math.log(batch_size) if batch_size > 1 else 1.0)
    fields = error_fields or {}
    if device.type == "cpu":  # devinterp samples a deep copy of the model per chain, with its gradients
        model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        check_host_memory(3 * model_bytes, metric="llc", what="a copy of the model and its gradients per SGLD chain")

    init, grad_norm = _loss_and_gradient_norm(model, loss_fn, n_samples, [p for _, p in chosen], device)
    if not math.isfinite(init):
        raise NonFiniteActivationsError(f"loss at the initial weights is {init}{context}; no LLC", **fields)
    gradient_bias = (nbeta ** 2 * grad_norm ** 2 / config.localization if config.localization > 0
                     else (0.0 if grad_norm == 0 else math.inf))

    from devinterp.slt.sampler import ChainHealthError

    # The budget: devinterp has no time limit, but ends a chain (keeping its draws so far) when the
    # loss raises ChainHealthError, and goes on with the next chain. Each chain samples its own deep copy,
    # so a new model object marks a new chain; devinterp's initial losses are computed on ``model`` itself.
    # A chain that starts with r seconds of the budget left and k chains to go (itself included) may run
    # r / k seconds: every chain gets its share, time one leaves unused passes on, and a spread is measured.
    budget = {"model": None, "chain": -1, "cut": set(), "deadline": math.inf, "t0": 0.0}

    def devinterp_loss(m: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
        if m is not model:
            now = clock()
            if budget["chain"] < 0:  # the first SGLD step starts the clock
                budget["t0"] = now
            if m is not budget["model"]:
                budget["model"], budget["chain"] = m, budget["chain"] + 1
                if config.max_seconds is not None:
                    left = max(budget["t0"] + config.max_seconds - now, 0.0)
                    budget["deadline"] = now + left / (config.num_chains - budget["chain"])
            if budget["chain"] in budget["cut"] or now >= budget["deadline"]:
                budget["cut"].add(budget["chain"])
                raise ChainHealthError(f"{_BUDGET}: {config.max_seconds} s")
        loss = loss_fn(m, input_ids[:, 0])
        # devinterp wants a per-token loss of shape (batch, seq − 1) = (b, 1); its mean is our loss
        return loss.float().reshape(1, 1).expand(input_ids.shape[0], 1)

    from devinterp.slt.sampling import sample

    with _rng_preserved(), tempfile.TemporaryDirectory(prefix="ckptgeo-llc-") as tmp, \
            warnings.catch_warnings(record=True) as caught, _chain_bars(show=_show_progress()):
        warnings.simplefilter("always")
        tree = sample(model, _IndexDataset(n_samples), {}, lr=config.lr, n_beta=nbeta,
                      param_masks={name: None for name, _ in chosen}, num_chains=config.num_chains,
                      num_draws=config.num_draws, batch_size=batch_size, num_burnin_steps=config.num_burnin_steps,
                      num_steps_bw_draws=config.num_steps_bw_draws,
                      num_init_loss_batches=max(1, n_samples // batch_size), init_seed=seed,
                      localization=config.localization, device=str(device), output_path=Path(tmp) / "samples.zarr",
                      loss_fn=devinterp_loss)
        seconds = clock() - budget["t0"] if budget["chain"] >= 0 else 0.0
        ds = tree.dataset
        trace = ds.sampling_loss_micro.mean(dim=["batch_sampling", "token_pos"]).values.astype(np.float64)
        init_loss = float(np.asarray(ds.init_loss.values, dtype=np.float64).mean())
    errors = tuple(str(w.message) for w in caught if "Chain failed" in str(w.message) and _BUDGET not in str(w.message))
    for w in caught:
        if "Chain failed" not in str(w.message):
            logger.debug("devinterp: %s", w.message)

    # trace: (chain, step); a diverged chain has a NaN/inf step and NaN (never written) after it; a
    # chain the budget cut has finite steps then NaN (never written), none at all if cut before its first
    kept = trace[:, config.num_burnin_steps:]
    n_draws = np.isfinite(kept).sum(axis=1)
    cut = np.zeros(config.num_chains, dtype=bool)
    cut[sorted(budget["cut"])] = True
    diverged = ~np.isfinite(trace).all(axis=1) & ~cut
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of a chain with no draws
        per_chain = nbeta * (np.nanmean(np.where(np.isfinite(kept), kept, np.nan), axis=1) - init_loss)
    per_chain[diverged | (n_draws == 0)] = np.nan
    n_draws[diverged] = 0
    healthy = per_chain[np.isfinite(per_chain)]
    if cut.any():
        logger.warning("LLC: the %s s budget cut SGLD chains %s of %d short (draws per chain %s)%s",
                       config.max_seconds, (np.flatnonzero(cut) + 1).tolist(), config.num_chains, n_draws.tolist(),
                       context)
    if diverged.any():
        warnings.warn(f"{int(diverged.sum())} of {config.num_chains} SGLD chains diverged (NaN/inf loss){context} "
                      f"and are left out of the LLC (chains {np.flatnonzero(diverged).tolist()}); lower lr "
                      f"({config.lr}) or raise localization ({config.localization})", ChainDivergenceWarning,
                      stacklevel=2)
    mean = float(healthy.mean()) if healthy.size else math.nan
    std = float(healthy.std()) if healthy.size else math.nan
    return LLCEstimate(llc_mean=mean, llc_std=std, llc_per_chain=per_chain, diverged=diverged, init_loss=init_loss,
                       nbeta_used=float(nbeta), batch_size_used=int(batch_size), chain_errors=errors,
                       stopped_by="max_seconds" if cut.any() else "completed",
                       n_steps_per_chain=tuple(int(v) for v in n_draws), seconds=seconds, grad_norm=grad_norm,
                       gradient_bias=gradient_bias)


def _loss_and_gradient_norm(model, loss_fn, n_samples: int, params: list, device) -> tuple[float, float]:
    """L_n(w*) over all n items and the norm of its gradient in ``params`` (float64 sum of squares)."""
    with gradients_on(params):
        loss = loss_fn(model, torch.arange(n_samples, device=device))
        if not torch.isfinite(loss).all():
            return float(loss.detach()), math.nan
        grads = torch.autograd.grad(loss, params, allow_unused=True)
    sq = sum(float(g.detach().to(torch.float64).pow(2).sum()) for g in grads if g is not None)
    return float(loss.detach()), math.sqrt(sq)


_BUDGET = "ckptgeo LLC time budget spent"


def _devinterp_version() -> str:
    try:
        from importlib.metadata import version

        return version("devinterp")
    except Exception:  # pragma: no cover - metadata missing
        return "unknown"


def _show_progress() -> bool:
    return not constants.NO_PROGRESS and sys.stderr.isatty()


@contextlib.contextmanager
def _chain_bars(*, show: bool):
    """devinterp draws one progress bar per SGLD chain and has no switch for it: hide them unless
    progress is wanted on a terminal (``CKPTGEO_NO_PROGRESS`` unset)."""
    import devinterp.slt.sampler as sampler

    original = sampler.trange
    if not show:
        sampler.trange = lambda *a, **k: original(*a, **{**k, "disable": True})
    try:
        yield
    finally:
        sampler.trange = original


@register_metric(name="llc", needs="model", cost="expensive", unit="nats (dimensionless coefficient)",
                 range=(0.0, float("inf")), config=LLCConfig)
def llc(ctx: ModelContext, config: LLCConfig | None = None) -> list[MetricValue]:
    """Local Learning Coefficient of the model at this checkpoint, on the context's batch.

    Parameters
    ----------
    ctx : ModelContext
        Model, fixed batch of n items (labels −100 where unscored), device, seed. The loss of a
        minibatch is ``ctx.loss`` on it: the task loss, mean token cross-entropy (nats) over the
        answer positions only, logits computed only there (never the language-modelling loss).
    config : LLCConfig, optional
        ``lr`` (1e-4), ``nbeta`` (None → m/ln m), ``localization`` (100), ``num_chains`` (2),
        ``num_draws`` (50), ``num_burnin_steps`` (50), ``num_steps_bw_draws`` (1),
        ``batch_size`` (32), ``params`` ("all"), ``max_seconds`` (None).

    Returns
    -------
    list of MetricValue
        One value: the mean λ̂ over healthy chains (about d/2 for a regular model with d
        parameters; smaller for degenerate ones). ``extra``: every setting, ``nbeta_used``,
        ``batch_size_used``, ``n_sgld_steps`` (the budget: chains × (burn-in + draws × steps between
        draws)), ``converged`` (False when ``max_seconds`` cut the sampling short), ``stopped_by``
        ("completed" or "max_seconds"), ``n_steps_per_chain``, ``seconds_sgld``, ``objective`` (the task
        loss), ``llc_std`` (spread over healthy chains), ``llc_per_chain`` (None for a diverged chain or
        one the budget cut before its first draw), ``diverged_chains``, ``n_chains_diverged``, ``init_loss``,
        ``devinterp_version``, ``grad_norm`` (also a geometry column) and ``gradient_bias`` (module docstring).
        NaN with a reason when every chain diverged; a negative value is flagged in the row's ``reason``
        (outside the declared range [0, inf): not taken near a minimum, or too few draws).

    Raises
    ------
    InvalidParameterError
        Bad config or ``params`` matches nothing.
    NonFiniteActivationsError
        The loss at the checkpoint's weights is NaN or inf.

    Warns
    -----
    ChainDivergenceWarning
        Some chain diverged (it is not averaged in).

    Notes
    -----
    ``λ̂ = nβ (E_w[L_n(w)] − L_n(w*))``, the expectation over SGLD draws from the localised tempered
    posterior ∝ exp(−nβ L_n(w) − γ/2 ‖w − w*‖²); see :func:`estimate_llc`.

    References
    ----------
    Lau, Furman, Wang, Murfet, Wei. "The Local Learning Coefficient: A Singularity-Aware
    Complexity Measure." AISTATS 2025 (arXiv:2308.12108), Eq. 9, Algorithm 1.

    Examples
    --------
    >>> from tests._models import tiny_context  # doctest: +SKIP
    >>> llc(tiny_context(), LLCConfig(num_draws=50))[0].extra["nbeta_used"]  # doctest: +SKIP
    2.79...
    """
    config = config or LLCConfig()
    batch = ctx.batch
    n = int(batch["input_ids"].shape[0])
    keys = [k for k in ("input_ids", "attention_mask", "labels") if k in batch]

    def loss_fn(model: torch.nn.Module, idx: torch.Tensor) -> torch.Tensor:
        idx = idx.to(batch["input_ids"].device)
        return ctx.loss(model=model, batch={k: batch[k][idx] for k in keys})

    est = estimate_llc(ctx.model, loss_fn, n, config, seed=ctx.seed, device=ctx.device, context=where(ctx),
                       error_fields=location(ctx))
    n_steps = config.num_chains * (config.num_burnin_steps + config.num_draws * config.num_steps_bw_draws)
    extra = {**asdict(config), "nbeta_used": est.nbeta_used, "batch_size_used": est.batch_size_used,
             "n_sgld_steps": n_steps, "objective": TASK_LOSS, "converged": est.converged,
             "stopped_by": est.stopped_by, "n_steps_per_chain": list(est.n_steps_per_chain),
             "seconds_sgld": est.seconds,
             "llc_std": est.llc_std if math.isfinite(est.llc_std) else None,
             "llc_per_chain": [float(v) if math.isfinite(v) else None for v in est.llc_per_chain],
             "diverged_chains": np.flatnonzero(est.diverged).tolist(), "n_chains_diverged": int(est.diverged.sum()),
             "init_loss": est.init_loss, "devinterp_version": _devinterp_version(),
             "grad_norm": est.grad_norm if math.isfinite(est.grad_norm) else None,
             "gradient_bias": est.gradient_bias if math.isfinite(est.gradient_bias) else None}
    reason = None
    if not math.isfinite(est.llc_mean) and est.stopped_by == "max_seconds" and not est.diverged.any():
        reason = f"the {config.max_seconds} s budget ended SGLD before the first draw; raise llc.max_seconds"
    elif not math.isfinite(est.llc_mean):
        reason = (f"all {config.num_chains} SGLD chains diverged (NaN/inf loss); lower lr ({config.lr}) or raise "
                  f"localization ({config.localization})")
    return [MetricValue(value=est.llc_mean, reason=reason, extra=extra)]
