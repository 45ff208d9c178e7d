"""Gradient ranks: constructed gradient sets of known spectrum, CountSketch, per-sample gradients."""

from __future__ import annotations

import math

import pytest
import torch

from ckptgeo.errors import InvalidParameterError, NonFiniteActivationsError
from ckptgeo.metrics import gradients as gmod
from ckptgeo.metrics.gradients import (GradientRankConfig, count_sketch, grad_cov_rank, grad_rank,
                                       gradient_covariance_rank, gradient_effective_rank, per_sample_gradients)
from tests._models import single_thread, tiny_context  # noqa: F401

pytestmark = pytest.mark.usefixtures("single_thread")


def _entropy_rank(values: torch.Tensor, eps: float = 1e-7) -> float:
    p = values.double() / values.double().sum() + eps
    return float(torch.exp(-(p * p.log()).sum()))


def _matrix_with_spectrum(s: torch.Tensor, n_cols: int, *, centered: bool, seed: int = 0) -> torch.Tensor:
    """U diag(s) Vᵀ of shape (n, n_cols), n = len(s) + 1; U's columns orthogonal to 1 when centered."""
    g = torch.Generator().manual_seed(seed)
    n = len(s) + 1
    a = torch.randn(n, len(s), generator=g, dtype=torch.float64)
    if centered:
        a = a - a.mean(0, keepdim=True)
    u, _ = torch.linalg.qr(a)
    v, _ = torch.linalg.qr(torch.randn(n_cols, len(s), generator=g, dtype=torch.float64))
    return u @ torch.diag(s.double()) @ v.T


def test_effective_rank_of_known_spectrum():
    s = torch.tensor([5.0, 3.0, 1.0, 0.5, 0.1])
    g = _matrix_with_spectrum(s, 40, centered=False)
    # g has len(s) + 1 rows: one more singular value, zero (it still carries the eps)
    assert gradient_effective_rank(g) == pytest.approx(_entropy_rank(torch.cat([s, torch.zeros(1)])), rel=1e-9)


def test_effective_rank_of_rank_r_matrix_with_equal_singular_values_is_r():
    for r in (1, 3, 7):
        g = _matrix_with_spectrum(torch.ones(r), 50, centered=False, seed=r)
        got = gradient_effective_rank(g)
        assert got == pytest.approx(r, rel=1e-5), f"rank {r}: got {got}"


def test_covariance_rank_uses_eigenvalues_of_centered_covariance():
    s = torch.tensor([4.0, 2.0, 1.0, 1.0])
    g = _matrix_with_spectrum(s, 30, centered=True)
    # eigenvalues of the covariance are s² / (n − 1): the entropy rank of s²
    expected = _entropy_rank(torch.cat([s ** 2, torch.zeros(1)]) / (g.shape[0] - 1))
    assert gradient_covariance_rank(g) == pytest.approx(expected, rel=1e-9)
    # a shared mean gradient changes the uncentered rank but not the covariance rank
    shifted = g + torch.linspace(0, 3, 30, dtype=torch.float64)
    assert gradient_covariance_rank(shifted) == pytest.approx(expected, rel=1e-9)
    assert gradient_effective_rank(shifted) != pytest.approx(gradient_effective_rank(g), rel=1e-3)


def test_covariance_rank_of_identical_gradients_is_nan_and_needs_two_rows():
    assert math.isnan(gradient_covariance_rank(torch.ones(4, 5)))
    with pytest.raises(InvalidParameterError, match="at least 2 samples"):
        gradient_covariance_rank(torch.ones(1, 5))


@pytest.mark.parametrize("fn", [gradient_effective_rank, gradient_covariance_rank])
def test_rank_rejects_nan_and_bad_shape(fn):
    g = torch.randn(5, 6)
    g[2, 3] = float("nan")
    with pytest.raises(NonFiniteActivationsError, match="NaN"):
        fn(g)
    with pytest.raises(InvalidParameterError, match="shape"):
        fn(torch.randn(5))


def test_count_sketch_maps_each_coordinate_to_one_signed_bucket():
    p, d = 3000, 64
    s = count_sketch(torch.eye(p), d, seed=3)
    assert s.shape == (p, d)
    assert torch.equal((s != 0).sum(1), torch.ones(p, dtype=torch.long))
    assert set(s[s != 0].unique().tolist()) == {-1.0, 1.0}
    per_bucket = (s != 0).sum(0).double()
    assert per_bucket.min() > 0.5 * p / d, f"bucket loads {per_bucket.tolist()}"
    frac_plus = float((s == 1).sum()) / p
    assert 0.45 < frac_plus < 0.55, f"fraction of + signs {frac_plus}"


def test_count_sketch_is_seeded_and_blockwise_additive():
    x = torch.randn(4, 500)
    assert torch.equal(count_sketch(x, 32, seed=1), count_sketch(x, 32, seed=1))
    assert not torch.equal(count_sketch(x, 32, seed=1), count_sketch(x, 32, seed=2))
    acc = torch.zeros(4, 32)
    count_sketch(x[:, :200], 32, seed=5, block=0, out=acc)
    count_sketch(x[:, 200:], 32, seed=5, block=1, out=acc)
    expected = count_sketch(x[:, :200], 32, seed=5, block=0) + count_sketch(x[:, 200:], 32, seed=5, block=1)
    torch.testing.assert_close(acc, expected)


def test_count_sketch_preserves_norms_in_expectation():
    x = torch.randn(1, 2000, dtype=torch.float64)
    norms = torch.tensor([float(count_sketch(x, 50, seed=s).double().square().sum()) for s in range(300)])
    truth = float(x.square().sum())
    assert norms.mean() == pytest.approx(truth, rel=0.03), f"mean {float(norms.mean())} vs {truth}"


def test_count_sketch_preserves_effective_rank_of_few_rows():
    s = torch.tensor([6.0, 3.0, 2.0, 1.0, 0.5])
    g = _matrix_with_spectrum(s, 20000, centered=False).float()
    sketched = count_sketch(g, 2048, seed=0)
    assert gradient_effective_rank(sketched) == pytest.approx(gradient_effective_rank(g), rel=0.03)
    sv = torch.linalg.svdvals(sketched.double())
    torch.testing.assert_close(sv[:5], s.double(), rtol=0.1, atol=0.0)


def _manual_grads(ctx, names):
    params = dict(ctx.model.named_parameters())
    rows = []
    for i in range(ctx.batch["input_ids"].shape[0]):
        one = {k: v[i:i + 1] for k, v in ctx.batch.items()}
        loss = ctx.per_sample_loss(batch=one)[0]
        gs = torch.autograd.grad(loss, [params[n] for n in names])
        rows.append(torch.cat([g.reshape(-1) for g in gs]))
    return torch.stack(rows)


def test_vmap_and_loop_match_autograd_per_item():
    ctx = tiny_context()
    names = [n for n, _ in ctx.model.named_parameters()]
    with torch.enable_grad():
        ctx.model.set_attn_implementation("eager")
        expected = _manual_grads(ctx, names)
        ctx.model.set_attn_implementation("sdpa")
    for method in ("vmap", "loop"):
        got = per_sample_gradients(ctx, GradientRankConfig(method=method, sketch_dim=None, chunk_size=4))
        assert got.method == method
        torch.testing.assert_close(got.grads, expected, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(got.losses, ctx.per_sample_loss().detach(), rtol=1e-5, atol=1e-6)
    assert ctx.model.config._attn_implementation == "sdpa", "attention implementation not restored"


def test_named_subset_and_its_sketch_is_its_share_of_the_full_sketch():
    ctx = tiny_context()
    attn = "gpt_neox.layers.*.attention.*"
    sub = per_sample_gradients(ctx, GradientRankConfig(params=attn, sketch_dim=None))
    n_attn = sum(p.numel() for n, p in ctx.model.named_parameters() if ".attention." in n)
    assert sub.n_params == n_attn and sub.grads.shape == (6, n_attn) and not sub.sketched
    full = per_sample_gradients(ctx, GradientRankConfig(sketch_dim=128))
    part = per_sample_gradients(ctx, GradientRankConfig(params=attn, sketch_dim=128))
    rest = per_sample_gradients(ctx, GradientRankConfig(params=r"re:^(?!.*\.attention\.)", sketch_dim=128))
    assert full.sketched and part.sketched and rest.sketched
    torch.testing.assert_close(part.grads + rest.grads, full.grads, rtol=1e-4, atol=1e-5)


def test_metrics_on_tiny_model_record_settings_and_share_one_pass(monkeypatch):
    ctx = tiny_context()
    calls = []
    real = gmod.per_sample_gradients
    monkeypatch.setattr(gmod, "per_sample_gradients", lambda c, cfg: calls.append(1) or real(c, cfg))
    cfg = GradientRankConfig(sketch_dim=256)
    [r] = grad_rank(ctx, cfg)
    [c] = grad_cov_rank(ctx, cfg)
    assert len(calls) == 1, "grad_cov_rank recomputed the per-sample gradients"
    assert 1.0 <= r.value <= 6.0 and 1.0 <= c.value <= 5.0, (r.value, c.value)
    assert r.extra["n_params"] == sum(p.numel() for p in ctx.model.parameters())
    assert r.extra["sketched"] is True and r.extra["dim"] == 256 and r.extra["n_samples"] == 6
    with torch.no_grad():
        next(ctx.model.parameters()).mul_(1.5)  # weights swapped in place: the cache must miss
    grad_rank(ctx, cfg)
    assert len(calls) == 2


def test_nan_weights_raise_with_location():
    ctx = tiny_context()
    with torch.no_grad():
        ctx.model.get_output_embeddings().weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteActivationsError, match="step0") as info:
        grad_rank(ctx)
    assert info.value.revision == "step0" and info.value.suite == "tiny"


def test_bad_config_is_rejected():
    ctx = tiny_context()
    with pytest.raises(InvalidParameterError, match="matches no parameter"):
        grad_rank(ctx, GradientRankConfig(params="nothing.*"))
    with pytest.raises(InvalidParameterError, match="'method' parameter of grad_rank"):
        grad_rank(ctx, GradientRankConfig(method="fast"))
    with pytest.raises(InvalidParameterError, match="'sketch_dim'.*Got 0"):
        grad_rank(ctx, GradientRankConfig(sketch_dim=0))


def test_refuses_an_unsketched_matrix_too_large(monkeypatch):
    monkeypatch.setattr(gmod, "_MAX_UNSKETCHED_FLOATS", 1000)
    with pytest.raises(InvalidParameterError, match="set sketch_dim"):
        grad_rank(tiny_context(), GradientRankConfig(sketch_dim=None))


def test_automatic_chunk_size_bounds_memory(monkeypatch):
    monkeypatch.setattr(gmod, "_CHUNK_FLOATS", 2500)  # about two items' gradients of the tiny model
    out = per_sample_gradients(tiny_context(), GradientRankConfig(sketch_dim=None))
    assert out.chunk_size == 2
    ref = per_sample_gradients(tiny_context(), GradientRankConfig(sketch_dim=None, chunk_size=6))
    torch.testing.assert_close(out.grads, ref.grads, rtol=1e-5, atol=1e-7)


def test_host_memory_is_checked_before_any_work(monkeypatch):
    from ckptgeo.metrics import _autodiff

    monkeypatch.setattr(_autodiff, "available_host_bytes", lambda: 1000)
    with pytest.raises(InvalidParameterError, match="host memory.*grad_rank.params=layers.5"):
        per_sample_gradients(tiny_context(), GradientRankConfig())


def test_records_the_task_loss():
    out = grad_rank(tiny_context())[0]
    assert "answer tokens" in out.extra["objective"]
