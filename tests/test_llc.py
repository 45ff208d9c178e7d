"""LLC: a regular model's known value (d/2), recorded settings, diverging chains, errors."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import asdict

import numpy as np
import pytest
import torch

from ckptgeo.errors import ChainDivergenceWarning, InvalidParameterError, NonFiniteActivationsError
from ckptgeo.metrics.llc import LLCConfig, estimate_llc, llc
from tests._models import single_thread, tiny_context  # noqa: F401

pytestmark = [pytest.mark.usefixtures("single_thread"), pytest.mark.filterwarnings("ignore:Chain failed")]


def _regression(d: int, n: int = 500, seed: int = 0):
    """Linear regression with unit-variance Gaussian noise, at its least-squares fit w*.

    The loss ½ mean (y − xᵀw)² is the per-sample negative log-likelihood up to a constant, and the
    model is regular with d parameters, so its learning coefficient is d/2 (Watanabe 2009).
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = x @ torch.randn(d, 1, generator=g) + torch.randn(n, 1, generator=g)
    model = torch.nn.Linear(d, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.linalg.lstsq(x, y).solution.T)

    def loss_fn(m, idx):
        return 0.5 * ((m(x[idx]) - y[idx]) ** 2).mean()

    return model, loss_fn


# nβ = n / ln n (Lau et al.'s β* = 1/ln n); γ = 1 ≪ nβ ≈ 80 biases λ̂ by about −1 %; ε·nβ = 0.16
# mixes in ~15 steps. Measured: 5.14, 5.07, 5.00 over three data seeds (chain spread ≈ 0.4).
REGULAR = LLCConfig(lr=2e-3, nbeta=500 / math.log(500), localization=1.0, num_chains=4, num_draws=300,
                    num_burnin_steps=50, batch_size=500, max_seconds=None)


def test_regular_model_llc_is_half_its_dimension():
    d = 10
    model, loss_fn = _regression(d)
    est = estimate_llc(model, loss_fn, 500, REGULAR, seed=0)
    # tolerance 12 % of d/2: about 2.5 standard errors of the mean of 4 chains
    assert abs(est.llc_mean - d / 2) < 0.12 * d / 2, f"LLC {est.llc_mean:.3f} vs d/2 = {d / 2} (chains " \
                                                      f"{est.llc_per_chain.round(2).tolist()})"
    assert not est.diverged.any() and est.llc_std > 0
    assert est.nbeta_used == pytest.approx(500 / math.log(500))


def test_model_is_left_unchanged_and_global_rng_restored():
    model, loss_fn = _regression(3, n=64)
    before = model.weight.detach().clone()
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    estimate_llc(model, loss_fn, 64, LLCConfig(num_chains=2, num_draws=10, batch_size=16), seed=5)
    assert torch.equal(model.weight, before)
    assert torch.equal(torch.rand(3), expected_next), "devinterp's seeding leaked into the global RNG"


def test_diverging_chain_is_reported_not_averaged():
    model, base_loss = _regression(3, n=64)
    seen: list[int] = []

    def loss_fn(m, idx):
        # each chain samples its own deep copy: the third model seen is chain 1's
        if id(m) not in seen:
            seen.append(id(m))
        loss = base_loss(m, idx)
        return loss * float("nan") if seen.index(id(m)) == 2 else loss

    cfg = LLCConfig(lr=1e-3, nbeta=10.0, num_chains=3, num_draws=20, batch_size=16)
    with pytest.warns(ChainDivergenceWarning, match=r"1 of 3 SGLD chains diverged.*chains \[1\]"):
        est = estimate_llc(model, loss_fn, 64, cfg, seed=0)
    assert est.diverged.tolist() == [False, True, False]
    assert math.isnan(est.llc_per_chain[1])
    assert est.llc_mean == pytest.approx(est.llc_per_chain[[0, 2]].mean())
    assert len(est.chain_errors) == 1 and "NaN" in est.chain_errors[0]


def test_llc_metric_records_settings_and_all_diverged_reason():
    ctx = tiny_context()
    cfg = LLCConfig(lr=1e-4, num_chains=2, num_draws=15, batch_size=4, localization=50.0)
    [value] = llc(ctx, cfg)
    assert math.isfinite(value.value) and value.reason is None
    extra = value.extra
    for key, setting in asdict(cfg).items():
        assert extra[key] == setting, key
    assert extra["batch_size_used"] == 4 and extra["nbeta_used"] == pytest.approx(4 / math.log(4))
    assert len(extra["llc_per_chain"]) == 2 and extra["n_chains_diverged"] == 0
    assert extra["llc_std"] >= 0 and extra["devinterp_version"] == "2.0.1"
    assert extra["n_sgld_steps"] == 2 * (50 + 15) and "answer tokens" in extra["objective"]  # 50 burn-in steps
    assert extra["converged"] is True and extra["stopped_by"] == "completed" and extra["n_steps_per_chain"] == [15, 15]
    json.dumps(extra, allow_nan=False)
    # a step far too large: every chain blows up
    with pytest.warns(ChainDivergenceWarning):
        [bad] = llc(ctx, LLCConfig(lr=1e6, nbeta=1e6, num_chains=2, num_draws=15, batch_size=4))
    assert math.isnan(bad.value) and "all 2 SGLD chains diverged" in bad.reason
    assert bad.extra["llc_per_chain"] == [None, None] and bad.extra["diverged_chains"] == [0, 1]
    json.dumps(bad.extra, allow_nan=False)


def test_time_budget_is_shared_between_the_chains_and_keeps_their_draws():
    """A fake clock: each SGLD step takes exactly 0.25 s of it, whatever the machine is doing."""
    model, base = _regression(3, n=64)
    now = [100.0]

    def slow(m, idx):  # each loss evaluation advances the clock by 0.25 s (binary-exact: no rounding)
        now[0] += 0.25
        return base(m, idx)

    cfg = LLCConfig(lr=1e-3, nbeta=10.0, num_chains=3, num_draws=100, batch_size=64, max_seconds=6.0,
                    num_burnin_steps=0)
    est = estimate_llc(model, slow, 64, cfg, clock=lambda: now[0])
    assert est.stopped_by == "max_seconds" and not est.converged and not est.diverged.any()
    # chain 1 starts with 6 s left for 3 chains: 2 s = 8 steps of 0.25 s; chain 2 with 4 s for 2: 8 steps;
    # chain 3 with 2 s for 1: 8 steps; the budget is spent exactly, and every chain keeps its draws
    assert list(est.n_steps_per_chain) == [8, 8, 8] and est.seconds == 6.0
    assert np.isfinite(est.llc_per_chain).all() and est.llc_mean == pytest.approx(np.mean(est.llc_per_chain))
    assert est.chain_errors == () and est.llc_std >= 0
    # time a chain leaves unused passes on: steps of the first chain cost nothing on the clock, so it runs
    # its full 100 draws and the two others share all 6 s (3 s = 12 steps each)
    chains = []

    def free_first_chain(m, idx):
        if m is not model and (not chains or chains[-1] is not m):  # each chain samples its own copy
            chains.append(m)
        if len(chains) > 1:
            now[0] += 0.25
        return base(m, idx)

    est = estimate_llc(model, free_first_chain, 64, cfg, clock=lambda: now[0])
    assert list(est.n_steps_per_chain) == [100, 12, 12] and est.seconds == 6.0 and est.stopped_by == "max_seconds"
    # no budget: every chain runs its full length
    full = estimate_llc(model, base, 64, LLCConfig(lr=1e-3, nbeta=10.0, num_chains=2, num_draws=20, batch_size=64,
                                                   max_seconds=None, num_burnin_steps=0))
    assert full.converged and full.stopped_by == "completed" and list(full.n_steps_per_chain) == [20, 20]


def test_metric_records_a_budget_that_ended_sampling_before_any_draw():
    [value] = llc(tiny_context(), LLCConfig(num_chains=2, num_draws=15, batch_size=4, max_seconds=0.0))
    assert math.isnan(value.value) and "budget ended SGLD before the first draw" in value.reason
    extra = value.extra
    assert extra["converged"] is False and extra["stopped_by"] == "max_seconds"
    assert extra["n_steps_per_chain"] == [0, 0] and extra["n_chains_diverged"] == 0
    assert extra["llc_per_chain"] == [None, None] and extra["max_seconds"] == 0.0
    json.dumps(extra, allow_nan=False)


def test_deterministic_under_a_seed_on_a_short_chain():
    cfg = LLCConfig(num_chains=2, num_draws=10, batch_size=4)
    a = llc(tiny_context(seed=3), cfg)[0]
    b = llc(tiny_context(seed=3), cfg)[0]
    assert a.value == b.value and a.extra["llc_per_chain"] == b.extra["llc_per_chain"]
    assert llc(tiny_context(seed=4), cfg)[0].value != a.value


def test_batch_size_is_capped_at_the_number_of_items():
    ctx = tiny_context(n_items=5)
    [value] = llc(ctx, LLCConfig(num_chains=1, num_draws=5, batch_size=32))
    assert value.extra["batch_size_used"] == 5 and value.extra["batch_size"] == 32


def test_errors():
    ctx = tiny_context()
    with pytest.raises(InvalidParameterError, match="'num_chains' parameter of llc must be an int in \\[1, inf\\)"):
        llc(ctx, LLCConfig(num_chains=0))
    with pytest.raises(InvalidParameterError, match="'lr'"):
        llc(ctx, LLCConfig(lr=-1.0))
    with torch.no_grad():
        ctx.model.gpt_neox.embed_in.weight[1, 0] = float("inf")
    with pytest.raises(NonFiniteActivationsError, match="initial weights.*step0"):
        llc(ctx, LLCConfig(num_chains=1, num_draws=5))


class _Quadratic(torch.nn.Module):
    """L(w) = a/2 ‖w − c‖², the same for every item: a loss whose SGLD posterior is known exactly."""

    def __init__(self, start: torch.Tensor):
        super().__init__()
        self.w = torch.nn.Parameter(start.clone())


def _stationary_llc(delta: float, d: int, a: float, nbeta: float, gamma: float, lr: float,
                    t: np.ndarray | None = None) -> float:
    """nβ (E[L] − L(w*)) of the discretised SGLD chain started at w* = c + δ: per dimension the mean moves
    from δ towards γδ/P (P = nβa + γ) by a factor r = 1 − εP/2 per step, the variance towards ε / (1 − r²).
    ``t``: the steps averaged (None: the stationary chain)."""
    p = nbeta * a + gamma
    r = 1 - lr * p / 2
    m_inf = gamma * delta / p
    v_inf = lr / (1 - r ** 2)
    if t is None:
        m2, v = m_inf ** 2, v_inf
    else:
        m = m_inf + (delta - m_inf) * r ** t
        m2, v = float(np.mean(m ** 2)), float(np.mean(v_inf * (1 - r ** (2 * t))))
    return nbeta * (a / 2 * d * (m2 + v) - a / 2 * d * delta ** 2)


#: d = 64 parameters, a = 1, nβ = 10, γ = 100, ε = 4e-3: the chain relaxes by r = 1 − εP/2 = 0.78 per step.
_QUAD = dict(d=64, a=1.0, nbeta=10.0, gamma=100.0, lr=4e-3)


def _quadratic_llc(delta: float, burn_in: int, draws: int = 15):
    q = _QUAD
    c = torch.zeros(q["d"])
    model = _Quadratic(c + delta)

    def loss_fn(m, idx):
        return 0.5 * q["a"] * ((m.w - c) ** 2).sum()

    cfg = LLCConfig(lr=q["lr"], nbeta=q["nbeta"], localization=q["gamma"], num_chains=4, num_draws=draws,
                    num_burnin_steps=burn_in, batch_size=8, max_seconds=None)
    return estimate_llc(model, loss_fn, 16, cfg, seed=0)


def test_at_a_minimum_the_gradient_is_zero_and_llc_matches_the_posterior():
    q = _QUAD
    est = _quadratic_llc(0.0, burn_in=30)
    expected = _stationary_llc(0.0, q["d"], q["a"], q["nbeta"], q["gamma"], q["lr"])  # 3.27
    assert est.grad_norm == 0.0 and est.gradient_bias == 0.0
    assert abs(est.llc_mean - expected) < 0.15 * expected, (est.llc_mean, expected, est.llc_per_chain)


def test_away_from_a_minimum_burn_in_reaches_the_posterior_and_the_gradient_says_why():
    # w* = c + 1: SGLD slides downhill, so λ̂ is negative whatever the geometry: −52.3 for the stationary chain
    # (measured with 30 steps of burn-in: −53.4). Without burn-in the 15 draws include the slide and λ̂ is far
    # less negative (measured −33.1; the mean path of the chain gives −37 to −40). The gradient norm
    # a·δ·√d = 8 and its bias (nβ)²‖g‖²/γ = 64 flag the point as no minimum.
    q = _QUAD
    burned, cold = _quadratic_llc(1.0, burn_in=30), _quadratic_llc(1.0, burn_in=0)
    stationary = _stationary_llc(1.0, q["d"], q["a"], q["nbeta"], q["gamma"], q["lr"])
    assert burned.grad_norm == pytest.approx(q["a"] * math.sqrt(q["d"]), rel=1e-6), burned.grad_norm
    assert burned.gradient_bias == pytest.approx(q["nbeta"] ** 2 * q["a"] ** 2 * q["d"] / q["gamma"], rel=1e-6)
    assert stationary < -50
    assert abs(burned.llc_mean - stationary) < 0.1 * abs(stationary), (burned.llc_mean, stationary)
    assert cold.llc_mean > stationary + 0.25 * abs(stationary), (cold.llc_mean, stationary, cold.llc_per_chain)
    assert burned.gradient_bias > abs(burned.llc_mean)


def test_negative_llc_is_flagged_in_the_row():
    from ckptgeo.metrics.registry import get_metric

    assert get_metric("llc").out_of_range(-1.5) is not None and get_metric("llc").out_of_range(3.0) is None


def test_the_default_budget_counts_sgld_steps_not_seconds():
    """A machine so busy that every SGLD step takes 1000 s of the clock: the defaults run every chain to its end
    and give the estimate an idle machine gives (before: max_seconds=90 cut the chains after their first step)."""
    model, base = _regression(3, n=64)
    cfg = dict(lr=1e-3, nbeta=10.0, num_chains=2, num_draws=20, batch_size=64, num_burnin_steps=5)
    quiet = estimate_llc(model, base, 64, LLCConfig(**cfg), seed=0)
    now = [0.0]

    def slow(m, idx):
        now[0] += 1000.0
        return base(m, idx)

    busy = estimate_llc(model, slow, 64, LLCConfig(**cfg), seed=0, clock=lambda: now[0])
    assert busy.stopped_by == quiet.stopped_by == "completed" and busy.converged
    assert list(busy.n_steps_per_chain) == list(quiet.n_steps_per_chain) == [20, 20]   # draws after burn-in
    assert busy.llc_mean == quiet.llc_mean


def test_the_estimate_starts_where_the_gradient_bias_is_below_the_stated_criterion():
    """``max_gradient_bias``: away from a minimum (bias 64 here) no SGLD runs and the value is NaN with the reason;
    at the minimum (bias 0) the estimate is as without the criterion. Fails on the old code (no such option)."""
    q = _QUAD
    model = _Quadratic(torch.zeros(q["d"]) + 1.0)

    def loss_fn(m, idx):
        return 0.5 * q["a"] * (m.w ** 2).sum()

    cfg = LLCConfig(lr=q["lr"], nbeta=q["nbeta"], localization=q["gamma"], num_chains=2, num_draws=5,
                    num_burnin_steps=5, batch_size=8, max_seconds=None, max_gradient_bias=20.0)
    far = estimate_llc(model, loss_fn, 16, cfg, seed=0)
    assert far.stopped_by == "gradient" and not far.converged and math.isnan(far.llc_mean)
    assert far.gradient_bias == pytest.approx(64.0) and far.n_steps_per_chain == (0, 0) and far.seconds == 0.0
    at_min = _Quadratic(torch.zeros(q["d"]))
    kept = estimate_llc(at_min, loss_fn, 16, cfg, seed=0)
    plain = estimate_llc(at_min, loss_fn, 16, dataclasses.replace(cfg, max_gradient_bias=None), seed=0)
    assert kept.stopped_by == "completed" and kept.llc_mean == plain.llc_mean and math.isfinite(kept.llc_mean)


def test_the_metric_row_says_why_a_checkpoint_was_not_estimated():
    [value] = llc(tiny_context(), LLCConfig(num_chains=1, num_draws=2, num_burnin_steps=0, batch_size=4,
                                            max_gradient_bias=0.0))
    assert math.isnan(value.value) and value.extra["stopped_by"] == "gradient", value.extra
    assert "not near a minimum" in value.reason and "llc.max_gradient_bias 0" in value.reason, value.reason
    assert value.extra["max_gradient_bias"] == 0.0
