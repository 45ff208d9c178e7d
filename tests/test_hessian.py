"""Hessian eigenvalues: exact quadratics with a known spectrum, and a tiny GPT-NeoX against its dense Hessian."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from torch.func import functional_call

from ckptgeo.errors import InvalidParameterError, NegativeCurvatureWarning, NonFiniteActivationsError
from ckptgeo.metrics.hessian import (HessianConfig, HessianVectorProduct, hessian, hessian_eigenvalues,
                                     hutchinson_trace)
from ckptgeo.metrics.registry import ModelContext
from tests._models import single_thread, tiny_context  # noqa: F401

pytestmark = pytest.mark.usefixtures("single_thread")

SPECTRUM = torch.tensor([9.0, 5.0, 4.0, 2.5, 1.0, 0.5, 0.1, 0.0, -0.3, -6.0], dtype=torch.float64)


def _symmetric_with_spectrum(lam: torch.Tensor, seed: int = 0) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(len(lam), len(lam), generator=torch.Generator().manual_seed(seed),
                                       dtype=torch.float64))
    return q @ torch.diag(lam) @ q.T


class QuadraticModel(torch.nn.Module):
    """loss(w) = ½ wᵀAw + bᵀw, split over two parameter tensors: its Hessian is exactly A."""

    def __init__(self, a: torch.Tensor):
        super().__init__()
        self.a = a
        self.b = torch.linspace(-1, 1, len(a), dtype=a.dtype)
        self.w1 = torch.nn.Parameter(torch.randn(4, dtype=a.dtype))
        self.w2 = torch.nn.Parameter(torch.randn(len(a) - 4, dtype=a.dtype))

    def forward(self) -> torch.Tensor:
        w = torch.cat([self.w1, self.w2])
        return 0.5 * w @ self.a @ w + self.b @ w


class QuadraticContext(ModelContext):
    """A ModelContext whose loss is the quadratic model's output (so the metric runs end to end)."""

    def loss(self, model=None, batch=None):
        return (model or self.model)()


def _quadratic_context(lam=SPECTRUM, seed=0):
    model = QuadraticModel(_symmetric_with_spectrum(lam, seed))
    return QuadraticContext(model=model, batch={}, device=torch.device("cpu"), seed=seed, revision="step7", suite="quad")


def test_largest_algebraic_eigenvalues_of_a_quadratic():
    ctx = _quadratic_context()
    rows = hessian(ctx, HessianConfig(k=3, which="LA", tol=0))
    assert [r.index for r in rows] == [0, 1, 2]
    np.testing.assert_allclose([r.value for r in rows], [9.0, 5.0, 4.0], rtol=1e-8)
    assert rows[0].extra["n_params"] == 10 and rows[0].extra["converged"] is True
    assert rows[0].extra["which"] == "LA" and rows[0].extra["n_hvp"] > 0


def test_largest_magnitude_ordering_includes_negative_curvature_and_warns():
    ctx = _quadratic_context()
    with pytest.warns(NegativeCurvatureWarning, match=r"-6\.0"):
        rows = hessian(ctx, HessianConfig(k=3, which="LM", tol=0))
    np.testing.assert_allclose([r.value for r in rows], [9.0, -6.0, 5.0], rtol=1e-8)


def test_no_warning_when_top_k_are_positive():
    with warnings.catch_warnings():
        warnings.simplefilter("error", NegativeCurvatureWarning)
        hessian(_quadratic_context(), HessianConfig(k=5, which="LA", tol=0))


def test_hutchinson_trace_of_a_quadratic():
    ctx = _quadratic_context()
    rows = hessian(ctx, HessianConfig(k=1, hutchinson_samples=400))
    trace = rows[-1]
    assert trace.index is None and trace.extra["quantity"] == "trace"
    truth = float(SPECTRUM.sum())
    se = trace.extra["std_error"]
    assert abs(trace.value - truth) < 4 * se, f"trace {trace.value} ± {se} vs {truth}"
    # a diagonal Hessian: every Rademacher probe gives the trace exactly
    w = torch.zeros(5, requires_grad=True)
    op = HessianVectorProduct(lambda: (torch.arange(1.0, 6.0) * w * w).sum(), [w])
    assert hutchinson_trace(op, n_samples=3, seed=1) == (30.0, 0.0)


def test_dense_hessian_agreement_on_tiny_gpt_neox():
    ctx = tiny_context()
    # the accuracy of Lanczos run to convergence (no budget), not of the budgeted defaults
    rows = hessian(ctx, HessianConfig(k=5, tol=1e-6, ncv=20, max_hvp=None, max_seconds=None))
    model = ctx.model
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    def loss_of(x):
        params, offset = {}, 0
        for name, shape in zip(names, shapes):
            params[name] = x[offset:offset + shape.numel()].view(shape)
            offset += shape.numel()
        return ctx.loss(model=lambda **kw: functional_call(model, params, (), kw))

    model.set_attn_implementation("eager")
    dense = torch.autograd.functional.hessian(loss_of, flat)
    model.set_attn_implementation("sdpa")
    top = torch.linalg.eigvalsh(dense.double()).flip(0)[:5]
    np.testing.assert_allclose([r.value for r in rows], top.numpy(), rtol=1e-4)
    assert rows[0].extra["n_params"] == flat.numel()


def test_parameter_subset_matches_dense_block():
    ctx = tiny_context()
    pattern = "gpt_neox.layers.0.mlp.*"
    with pytest.warns(NegativeCurvatureWarning):  # random weights: a saddle
        rows = hessian(ctx, HessianConfig(k=2, which="LM", params=pattern, tol=1e-6, max_hvp=None, max_seconds=None))
    named = {n: p for n, p in ctx.model.named_parameters() if n.startswith("gpt_neox.layers.0.mlp.")}
    names = list(named)
    flat = torch.cat([named[n].detach().reshape(-1) for n in names])

    def loss_of(x):
        params, offset = {}, 0
        for n in names:
            params[n] = x[offset:offset + named[n].numel()].view_as(named[n])
            offset += named[n].numel()
        return ctx.loss(model=lambda **kw: functional_call(ctx.model, params, (), kw))

    dense = torch.autograd.functional.hessian(loss_of, flat).double()  # the MLP needs no double-backward SDPA
    ev = torch.linalg.eigvalsh(dense)
    top = ev[ev.abs().argsort(descending=True)][:2]
    np.testing.assert_allclose([r.value for r in rows], top.numpy(), rtol=1e-4)
    assert ctx.model.config._attn_implementation == "sdpa", "attention implementation not restored"


def test_unconverged_eigenvalues_are_ritz_estimates_with_a_reason():
    lam = torch.linspace(1.0, 1.001, 300, dtype=torch.float64)  # clustered: Lanczos cannot separate them
    rows = hessian(_quadratic_context(lam), HessianConfig(k=4, tol=1e-14, max_iter=1, ncv=6))
    bad = [r for r in rows if not r.extra["converged"]]
    assert bad, [r.value for r in rows]
    assert all("did not converge" in r.reason and "max_iter" in r.reason for r in bad)
    assert all("--metric-option hessian.max_iter=N" in r.reason for r in bad), "names the option to raise"
    assert all(1.0 <= r.value <= 1.001 + 1e-9 for r in rows), [r.value for r in rows]  # Ritz values lie inside
    assert rows[0].extra["stopped_by"] == "max_iter" and rows[0].extra["n_hvp"] == 12


def test_budget_of_products_or_seconds_ends_the_work_and_is_recorded(caplog):
    lam = torch.cat([torch.tensor([9.0, 5.0]), torch.linspace(0.0, 4.0, 200)]).double()
    with caplog.at_level("WARNING", logger="ckptgeo.metrics.hessian"):
        rows = hessian(_quadratic_context(lam), HessianConfig(k=2, tol=0, max_hvp=3))
    assert any("--metric-option hessian.max_hvp=N" in r.getMessage() for r in caplog.records), caplog.text
    assert rows[0].extra["n_hvp"] == 3 and rows[0].extra["stopped_by"] == "max_hvp"
    assert rows[0].extra["converged"] is False and rows[0].value < 9.0 + 1e-9
    rows = hessian(_quadratic_context(lam), HessianConfig(k=2, tol=0, max_seconds=0.0))
    assert rows[0].extra["n_hvp"] == 1 and rows[0].extra["stopped_by"] == "max_seconds"
    full = hessian(_quadratic_context(lam), HessianConfig(k=2, tol=1e-8, max_hvp=None))
    assert full[0].extra["stopped_by"] == "converged" and full[0].extra["converged"] is True
    np.testing.assert_allclose([r.value for r in full], [9.0, 5.0], rtol=1e-7)


def test_layer_glob_selects_a_subset_and_the_loss_is_the_task_loss():
    ctx = tiny_context(layers=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NegativeCurvatureWarning)
        rows = hessian(ctx, HessianConfig(k=1, params="layers.1.*", tol=1e-3))
    n = sum(p.numel() for name, p in ctx.model.named_parameters() if name.startswith("gpt_neox.layers.1."))
    assert rows[0].extra["n_params"] == n and "answer tokens" in rows[0].extra["objective"]


def test_errors():
    ctx = _quadratic_context()
    with pytest.raises(InvalidParameterError, match="fewer than the 10 parameters"):
        hessian(ctx, HessianConfig(k=10))
    with pytest.raises(InvalidParameterError, match="'which' parameter of hessian"):
        hessian(ctx, HessianConfig(which="SA"))
    with torch.no_grad():
        ctx.model.w1[0] = float("nan")
    with pytest.raises(NonFiniteActivationsError, match="step7, suite quad") as info:
        hessian(ctx)
    assert info.value.revision == "step7" and info.value.layer == -1


def test_seeded_start_vector_makes_it_deterministic():
    a = hessian(_quadratic_context(), HessianConfig(k=3, tol=1e-2))
    b = hessian(_quadratic_context(), HessianConfig(k=3, tol=1e-2))
    assert [r.value for r in a] == [r.value for r in b]
    model = _quadratic_context().model
    spec = hessian_eigenvalues(HessianVectorProduct(model, list(model.parameters())), k=2, tol=0)
    np.testing.assert_allclose(spec.eigenvalues, [9.0, 5.0], rtol=1e-8)


def test_refuses_a_lanczos_basis_larger_than_host_memory(monkeypatch):
    from ckptgeo.metrics import hessian as hmod

    monkeypatch.setattr(hmod, "_available_host_bytes", lambda: 1000)
    with pytest.raises(InvalidParameterError, match="host memory.*'params'"):
        hessian(_quadratic_context(), HessianConfig(k=2))


def test_loss_in_parts_of_items_gives_the_whole_batch_hessian():
    from ckptgeo.metrics._autodiff import eager_attention, gradients_on
    from ckptgeo.metrics.hessian import _ITEMS_PER_PART, _loss_parts

    ctx = tiny_context(n_items=2 * _ITEMS_PER_PART + 3)  # three parts, the last one short
    params = list(ctx.model.parameters())
    parts = _loss_parts(ctx)
    assert len(parts) == 3
    v = torch.randn(sum(p.numel() for p in params), generator=torch.Generator().manual_seed(1))
    with eager_attention(ctx.model), gradients_on(params):
        split = HessianVectorProduct(parts, params)
        whole = HessianVectorProduct(lambda: ctx.loss(), params)
        assert split.loss == pytest.approx(whole.loss, rel=1e-6)
        np.testing.assert_allclose(split.apply(v).numpy(), whole.apply(v).numpy(), rtol=1e-5, atol=1e-6)
        # no graph kept between products: each product rebuilds it, same Hv, twice in a row
        rebuilt = HessianVectorProduct(parts, params, retain_graph=False)
        assert rebuilt.loss == pytest.approx(split.loss, rel=1e-7)
        for _ in range(2):
            np.testing.assert_allclose(rebuilt.apply(v).numpy(), split.apply(v).numpy(), rtol=1e-5, atol=1e-6)
    assert len(_loss_parts(tiny_context(n_items=_ITEMS_PER_PART))) == 1


def test_batch_task_loss_on_answer_rows_equals_the_tail_loss():
    from ckptgeo.metrics._autodiff import task_loss, task_token_losses

    ctx = tiny_context(n_items=5)
    tok, mask = task_token_losses(ctx.model, ctx.batch, ctx.batch["labels"].shape[1])  # logits everywhere
    with torch.no_grad():
        rows = task_loss(ctx.model, ctx.batch)
        fallback = task_loss(lambda **kw: ctx.model(**{k: v for k, v in kw.items() if k != "logits_to_keep"}),
                             ctx.batch)  # a model without logits_to_keep: full logits, the tail's way
    assert float(rows) == pytest.approx(float(tok.sum() / mask.sum()), rel=1e-6)
    assert float(fallback) == pytest.approx(float(rows), rel=1e-6)


def test_a_budget_inside_a_restarted_cycle_keeps_the_better_lower_bounds():
    lam = torch.cat([torch.tensor([9.0, 5.0]), torch.linspace(0.0, 4.0, 200)]).double()
    first = hessian(_quadratic_context(lam), HessianConfig(k=2, tol=0, ncv=4, max_hvp=4))  # one full cycle
    for budget in (5, 6, 7):  # stopped 1, 2, 3 products into the restarted cycle
        rows = hessian(_quadratic_context(lam), HessianConfig(k=2, tol=0, ncv=4, max_hvp=budget))
        assert rows[0].extra["stopped_by"] == "max_hvp" and rows[0].extra["n_hvp"] == budget
        values = [r.value for r in rows]
        assert all(np.isfinite(values)), values
        # Ritz values of "LA" are lower bounds: never below the first cycle's, never above the truth
        assert all(v >= f.value - 1e-12 for v, f in zip(values, first)), (values, [f.value for f in first])
        assert values[0] <= 9.0 + 1e-9 and values[1] <= 5.0 + 1e-9 and values[0] >= values[1]


def test_a_basis_beyond_host_memory_is_refused_before_any_download(local_hub, tmp_path, monkeypatch, capsys):
    """The `--metrics ...,hessian` example (docs/scan.md) on pythia-160m (162M parameters: an 8-vector basis of
    7.3 GiB) on a machine with 14.3 GiB free: each revision was downloaded and measured (rankme, behaviour,
    probes), then failed as a whole at the Hessian, its other rows lost, and the next revision did the same. Now
    the check runs on the model built from config.json, before a weight file is fetched: one line, nothing
    downloaded. (Free memory is set small here so that the tiny repo's basis does not fit.)"""
    import ckptgeo.metrics.hessian as hmod
    from ckptgeo.cli import main
    from tests._checkpoints import SUITE

    monkeypatch.setattr(hmod, "_available_host_bytes", lambda: 100_000)
    before = local_hub.served_bytes(local_hub.repo_id)
    code = main(["scan", local_hub.repo_id, "--revisions", "step0,step1000", "--suite", SUITE, "--n-samples", "8",
                 "--metrics", "rankme,hessian", "--out", str(tmp_path / "ds")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    line = next(e for e in err if e.startswith("ckptgeo: error:"))
    assert line.startswith("ckptgeo: error: hessian needs about") and "more than half of the" in line, err
    assert "hessian.params=layers.5.*" in line
    fetched = {k: v for k, v in local_hub.served_bytes(local_hub.repo_id).items() if before.get(k) != v}
    assert not any(path.endswith(".safetensors") for _, path in fetched), fetched
    assert not (tmp_path / "ds" / "revisions").exists()


def test_the_default_budget_counts_products_not_seconds(monkeypatch):
    """A machine so busy that every product takes 1000 s gives the same eigenvalues under the defaults."""
    import time as _time

    from ckptgeo.metrics.llc import LLCConfig

    lam = torch.cat([torch.tensor([9.0, 5.0]), torch.linspace(0.0, 4.0, 200)]).double()
    quiet = hessian(_quadratic_context(lam), HessianConfig(k=2))
    clock = iter(range(0, 10**9, 1000))
    monkeypatch.setattr(_time, "perf_counter", lambda: float(next(clock)))
    busy = hessian(_quadratic_context(lam), HessianConfig(k=2))
    assert [r.value for r in busy] == [r.value for r in quiet]
    assert busy[0].extra["stopped_by"] == quiet[0].extra["stopped_by"] != "max_seconds"
    assert HessianConfig().max_seconds is None and LLCConfig().max_seconds is None
