"""Measures own their options and share their inputs: ``--metric-option`` / ``metric_options`` set a
measure's config (checked, recorded in ``settings``), and per-sample gradients are computed once per
revision and suite for ``grad_rank`` + ``grad_cov_rank``."""

import json

import pandas as pd
import pytest

from ckptgeo.cli import main
from ckptgeo.errors import InvalidParameterError
from ckptgeo.engine.scan import scan
from tests._checkpoints import SUITE, make_checkpoints


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    return make_checkpoints(tmp_path_factory.mktemp("ck") / "tiny", steps=(0, 1))


def _scan_cli(ckpts, out, *extra):
    return main(["scan", str(ckpts), "--out", str(out), "--suite", SUITE, "--n-samples", "8", *extra])


def test_hessian_k_from_the_command_line_writes_k_rows_with_k_in_settings(ckpts, tmp_path):
    out = tmp_path / "ds"
    assert _scan_cli(ckpts, out, "--metrics", "hessian", "--metric-option", "hessian.k=3",
                     "--metric-option", "hessian.tol=0.01") == 0
    g = pd.read_parquet(out / "geometry")
    assert set(g.metric) == {"hessian"} and sorted(g.revision.unique()) == ["step0", "step1"]
    assert g.groupby("revision").size().to_dict() == {"step0": 3, "step1": 3}
    assert sorted(g[g.revision == "step0"]["index"]) == [0, 1, 2]
    settings = [json.loads(s) for s in g.settings]
    assert all(s["k"] == 3 and s["tol"] == 0.01 and s["which"] == "LA" for s in settings), settings[0]
    assert g.value.notna().all() and (g.layer == -1).all()
    # RankMe's settings are not columns of the Hessian's rows
    assert g.centered.isna().all() and g.epsilon.isna().all()
    run = json.loads(next((out / "runs").glob("*.json")).read_text())
    assert run["metrics"]["hessian"]["k"] == 3


@pytest.mark.parametrize("option, message", [
    ("hessian.kk=3", "Unknown option 'kk' of hessian. Did you mean: k? Valid options: k, which, params, tol, max_iter, "
                     "ncv, max_hvp, max_seconds, hutchinson_samples, retain_graph."),
    ("hessian.k=-1", "The 'k' parameter of hessian must be an int in [1, inf). Got -1."),
    ("hessian.k=1.5", "The 'k' parameter of hessian must be an int in [1, inf). Got '1.5'."),
    ("hessian.which=SA", "The 'which' parameter of hessian must be one of ['LA', 'LM']. Got 'SA'."),
    ("hessian.ncv=1", "The 'ncv' parameter of hessian must be an int in [2, inf) or None. Got 1."),
    ("hessian:k=3", "--metric-option 'hessian:k=3' must read METRIC.OPTION=VALUE, e.g. hessian.k=10"),
    ("rankme.eps=0.1", "Options given for metric 'rankme', which is not selected (metrics: hessian); add it to "
                       "--metrics"),
    ("hesian.k=3", "'hesian'. Did you mean: hessian?"),
])
def test_a_bad_metric_option_is_a_one_line_error_before_anything_runs(ckpts, tmp_path, capsys, option, message):
    out = tmp_path / "ds"
    code = _scan_cli(ckpts, out, "--metrics", "hessian", "--metric-option", option)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == InvalidParameterError.exit_code, err
    assert err[0].startswith("ckptgeo: error: ") and message in err[0], err
    assert len(err) == 2 and "CKPTGEO_DEBUG" in err[1], err  # the message, then the pointer to the traceback
    assert not out.exists(), "a refused option must not create the dataset"


def test_python_metric_options_and_the_centered_alias(ckpts, tmp_path):
    out = tmp_path / "ds"
    scan(ckpts, out=out, suites=(SUITE,), n_samples=8, revisions="step0", metrics=("rankme", "probe"),
         metric_options={"probe": {"k": 2, "C": 0.5}}, centered=True, seed=3)
    g = pd.read_parquet(out / "geometry")
    assert g.centered.all() and (g.epsilon == 1e-7).all()
    assert all(json.loads(s) == {"centered": True, "eps": 1e-7, "n_resamples": 50, "confidence": 0.95}
               for s in g.settings)
    p = pd.read_parquet(out / "probes")
    # the probe's seed follows the scan's seed unless its options set one
    assert all(json.loads(s) == {"k": 2, "C": 0.5, "max_iter": 1000, "seed": 3, "blas_threads": 1} for s in p.settings)
    assert "centered" not in p.columns and "epsilon" not in p.columns
    with pytest.raises(InvalidParameterError, match="disagree"):
        scan(ckpts, out=tmp_path / "b", suites=(SUITE,), n_samples=8, centered=True,
             metric_options={"rankme": {"centered": False}})


def test_per_sample_gradients_once_per_revision_and_suite(ckpts, tmp_path, monkeypatch):
    import ckptgeo.metrics.gradients as gmod

    calls = []
    real = gmod.per_sample_gradients
    monkeypatch.setattr(gmod, "per_sample_gradients",
                        lambda ctx, cfg: calls.append((ctx.revision, ctx.suite)) or real(ctx, cfg))
    out = tmp_path / "ds"
    scan(ckpts, out=out, suites=(SUITE,), n_samples=8, metrics=("grad_rank", "grad_cov_rank"),
         metric_options={"grad_rank": {"sketch_dim": 256}, "grad_cov_rank": {"sketch_dim": 256}})
    assert sorted(r for r, _ in calls) == ["step0", "step1"] and len({s for _, s in calls}) == 1, calls
    g = pd.read_parquet(out / "geometry")
    assert g.groupby(["revision", "metric"]).size().to_dict() == {
        ("step0", "grad_cov_rank"): 1, ("step0", "grad_rank"): 1, ("step1", "grad_cov_rank"): 1,
        ("step1", "grad_rank"): 1}
    assert g.value.between(1.0, 8.0).all(), g.value.tolist()
    assert all(json.loads(s)["dim"] == 256 and json.loads(s)["sketched"] for s in g.settings)
    # other settings for one of them: a pass of its own
    calls.clear()
    scan(ckpts, out=tmp_path / "ds2", suites=(SUITE,), n_samples=8, revisions="step0",
         metrics=("grad_rank", "grad_cov_rank"), metric_options={"grad_cov_rank": {"sketch_dim": 128}})
    assert len(calls) == 2, calls
