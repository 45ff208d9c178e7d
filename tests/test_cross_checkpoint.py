"""Cross-checkpoint measures (CKA, weight distance): the formulas, and their rows through a scan, a sharded
scan, a resumed scan and ``analyze``; and the ``revisions`` option every measure takes."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from ckptgeo.errors import EmptySelectionError, RevisionNotFoundError
from ckptgeo.metrics.cka import CKAConfig, cka_artifact, compare_cka, linear_cka
from ckptgeo.metrics.weight_distance import WeightDistanceConfig, compare_weights, weight_artifact
from tests._checkpoints import SUITE, make_checkpoints

STEPS = (0, 1, 2, 4)


def hsic_cka(x, y):
    """CKA written plainly from HSIC (Gretton et al.): K = X X^T, L = Y Y^T, H = I - 11^T/n,
    HSIC(K, L) = tr(K H L H) / (n - 1)^2, CKA = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L))."""
    n = x.shape[0]
    h = np.eye(n) - np.ones((n, n)) / n
    k, l = x @ x.T, y @ y.T
    hsic = lambda a, b: np.trace(a @ h @ b @ h) / (n - 1) ** 2  # noqa: E731
    return hsic(k, l) / math.sqrt(hsic(k, k) * hsic(l, l))


def test_cka_of_a_representation_with_itself_is_one():
    x = np.random.default_rng(0).normal(size=(40, 7))
    assert linear_cka(x, x) == pytest.approx(1.0, abs=1e-12)


def test_cka_is_invariant_to_orthogonal_transforms_and_isotropic_scaling():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(60, 10)), rng.normal(size=(60, 12))
    q, _ = np.linalg.qr(rng.normal(size=(10, 10)))
    base = linear_cka(x, y)
    assert 0.05 < base < 0.95
    assert linear_cka(x @ q, y) == pytest.approx(base, rel=1e-10)
    assert linear_cka(7.5 * x, 0.01 * y) == pytest.approx(base, rel=1e-10)
    # not invariant to an arbitrary invertible map: the check can fail
    a = np.diag(np.linspace(0.1, 10, 10))
    assert abs(linear_cka(x @ a, y) - base) > 1e-3


@pytest.mark.parametrize("n,d1,d2", [(30, 5, 8), (20, 40, 25), (25, 6, 60)])
def test_cka_matches_the_hsic_formula_through_stored_artifacts(n, d1, d2):
    """Both stored forms (centred states when d < n, centred Gram matrix otherwise) give the HSIC value."""
    rng = np.random.default_rng(n + d1 + d2)
    x = rng.normal(size=(n, d1))
    y = x[:, :1] @ rng.normal(size=(1, d2)) + rng.normal(size=(n, d2))   # partly shared structure
    expected = hsic_cka(x, y)
    assert linear_cka(x, y) == pytest.approx(expected, rel=1e-10)
    cfg = CKAConfig()
    a = {f"s/3/{k}": v for k, v in cka_artifact(torch.tensor(x, dtype=torch.float64), cfg).items()}
    b = {f"s/3/{k}": v for k, v in cka_artifact(torch.tensor(y, dtype=torch.float64), cfg).items()}
    assert next(iter(a)).endswith("/x" if d1 < n else "/gram")
    [v] = compare_cka(a, b, cfg)
    assert (v.suite, v.layer, v.n_rows) == ("s", 3, n)
    assert v.value == pytest.approx(expected, rel=1e-10)


def test_cka_of_a_constant_representation_is_nan_with_a_reason():
    a = {f"s/0/{k}": v for k, v in cka_artifact(torch.ones(10, 4), CKAConfig()).items()}
    b = {f"s/0/{k}": v for k, v in cka_artifact(torch.randn(10, 4), CKAConfig()).items()}
    [v] = compare_cka(a, b, CKAConfig())
    assert math.isnan(v.value) and "constant" in v.reason


def test_weight_distance_sketch_estimates_the_exact_distance():
    from transformers import GPTNeoXForCausalLM

    from tests._checkpoints import tiny_config

    torch.manual_seed(0)
    m0 = GPTNeoXForCausalLM(tiny_config())
    m1 = GPTNeoXForCausalLM(tiny_config())
    with torch.no_grad():
        for p0, p1 in zip(m0.parameters(), m1.parameters()):
            p1.copy_(p0 + 0.1 * torch.randn_like(p0))
    exact = {v.block: v for v in compare_weights(weight_artifact(m1, WeightDistanceConfig(mode="exact")),
                                                 weight_artifact(m0, WeightDistanceConfig(mode="exact")),
                                                 WeightDistanceConfig())}
    cfg = WeightDistanceConfig(mode="sketch", sketch_dim=4096)
    sketch = {v.block: v for v in compare_weights(weight_artifact(m1, cfg), weight_artifact(m0, cfg), cfg)}
    assert sketch["model"].extra == {"stored": "sketch"} and exact["model"].extra == {"stored": "exact"}
    # whole model: relative sd of the distance about sqrt(1/4096) = 1.6%, for the large blocks too
    assert sketch["model"].value == pytest.approx(exact["model"].value, rel=0.05)
    assert sketch["gpt_neox.layers.0"].value == pytest.approx(exact["gpt_neox.layers.0"].value, rel=0.05)
    assert sketch["model"].partner_norm == pytest.approx(exact["model"].partner_norm, rel=1e-9)   # norms are exact
    direct = math.sqrt(sum(float(((p1 - p0) ** 2).sum()) for p0, p1 in zip(m0.state_dict().values(),
                                                                          m1.state_dict().values())))
    assert exact["model"].distance == pytest.approx(direct, rel=1e-6)


# ------------------------------------------------------------------------------------------ through a scan

@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    return make_checkpoints(tmp_path_factory.mktemp("cc") / "tiny", steps=STEPS)


def run(ckpts, out, **kw):
    from ckptgeo import scan

    kw.setdefault("suites", (SUITE,))
    kw.setdefault("n_samples", 24)
    kw.setdefault("metrics", ("rankme", "cka", "weight_distance"))
    # a fixed batch: on the CPU each process otherwise times 16 and 24 items per batch and may pick either, and
    # the states then differ by float rounding (1e-7; tests/test_batch_size.py bounds RankMe across batches)
    kw.setdefault("batch_size", 16)
    return scan(ckpts, out=out, **kw)


def compare_table(out):
    from ckptgeo import read_table

    c = read_table(out, "compare")
    keys = ["metric", "revision", "against", "suite", "layer", "block"]
    return c.sort_values(keys, na_position="first", ignore_index=True)


def test_scan_writes_cka_and_weight_distance_rows(ckpts, tmp_path):
    from safetensors.numpy import load_file

    out = tmp_path / "ds"
    run(ckpts, out)
    c = compare_table(out)
    cka = c[c.metric == "cka"]
    # 4 revisions x 3 layers: previous for 3 of them, reference (the last, step4) for all 4
    assert len(cka) == (3 + 4) * 3 and set(cka.partner[cka.against == "reference"]) == {"step4"}
    prev = cka[cka.against == "previous"].set_index(["revision", "layer"])
    assert prev.loc[("step2", 1), "partner"] == "step1" and prev.loc[("step2", 1), "partner_step"] == 1
    ref_self = cka[(cka.against == "reference") & (cka.revision == "step4") & (cka.layer > 0)]
    assert np.allclose(ref_self.value, 1.0)
    layer0 = cka[cka.layer == 0]   # every prompt ends with ".": one embedding row repeated, CKA undefined
    assert layer0.value.isna().all() and layer0.reason.str.contains("constant").all()
    assert cka[cka.layer > 0].value.between(0, 1 + 1e-12).all() and (cka.n_rows == 24).all()
    # CKA between two revisions equals the plain formula on the states (saved by a scan of the same items)
    states = tmp_path / "states"
    run(ckpts, states, metrics=("rankme",), save_states=True, revisions="step1,step2")
    h1, h2 = (load_file(str(next((states / "states").glob(f"tiny--step{s}--*")) / f"{SUITE}.safetensors"))["states"]
              for s in (1, 2))
    for layer in (1, 2):
        assert prev.loc[("step2", layer), "value"] == pytest.approx(hsic_cka(_c(h2[layer]), _c(h1[layer])), rel=1e-7)

    wd = c[c.metric == "weight_distance"]
    w = {s: load_file(str(ckpts / f"step{s}" / "model.safetensors")) for s in STEPS}

    def rel(a, b, keys):
        num = sum(float(((w[a][k].astype(np.float64) - w[b][k]) ** 2).sum()) for k in keys)
        return math.sqrt(num / sum(float((w[b][k].astype(np.float64) ** 2).sum()) for k in keys))

    every = list(w[0])
    layer1 = [k for k in every if k.startswith("gpt_neox.layers.1.")]
    for rev, against, partner in [("step2", "first", 0), ("step4", "previous", 2), ("step1", "previous", 0)]:
        r = wd[(wd.revision == rev) & (wd.against == against)].set_index("block")
        assert r.loc["model", "value"] == pytest.approx(rel(int(rev[4:]), partner, every), rel=1e-6)
        assert r.loc["gpt_neox.layers.1", "value"] == pytest.approx(rel(int(rev[4:]), partner, layer1), rel=1e-6)
        assert r.loc["gpt_neox.layers.1", "layer"] == 2 and r.loc["model", "layer"] == -1
    first0 = wd[(wd.revision == "step0") & (wd.against == "first")]
    assert (first0.value == 0).all()
    assert json.loads(wd.settings.iloc[0])["stored"] == "exact"
    assert wd.suite.isna().all()


def _c(x):
    x = np.asarray(x, dtype=np.float64)
    return x - x.mean(axis=0)


def test_sharded_and_resumed_scans_give_the_values_of_one_process(ckpts, tmp_path, monkeypatch):
    one = tmp_path / "one"
    run(ckpts, one)
    expected = compare_table(one)

    sharded = tmp_path / "sharded"   # two ranks, each measuring half; each partner measured by the other
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        res = run(ckpts, sharded)
        assert len(res.measured) == 2
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("RANK")

    resumed = tmp_path / "resumed"   # a first run with a gap (step1 missing), then the rest
    run(ckpts, resumed, revisions="step0,step2")
    partial = compare_table(resumed)
    assert set(partial[(partial.metric == "cka") & (partial.against == "previous")].partner) == {"step0"}
    assert run(ckpts, resumed).measured == ["step1", "step4"]

    cols = ["metric", "revision", "against", "partner", "suite", "layer", "block", "n_rows", "reason"]
    for other in (sharded, resumed):
        got = compare_table(other)
        assert len(got) == len(expected) > 0
        pd.testing.assert_frame_equal(got[cols], expected[cols])
        np.testing.assert_allclose(got.value, expected.value, rtol=1e-9, equal_nan=True)


@pytest.mark.slow
def test_two_concurrent_processes_give_the_values_of_one(ckpts, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    one, two = tmp_path / "one", tmp_path / "two"
    run(ckpts, one)
    code = ("from ckptgeo import scan; "
            f"scan({str(ckpts)!r}, out={str(two)!r}, suites=({SUITE!r},), n_samples=24, "
            "metrics=('rankme', 'cka', 'weight_distance'), batch_size=16)")   # the batch run() fixes
    root = Path(__file__).resolve().parents[1]
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=root,
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2", "CKPTGEO_NO_PROGRESS": "1"})
             for r in range(2)]
    assert [p.wait(300) for p in procs] == [0, 0]
    a, b = compare_table(one), compare_table(two)
    cols = ["metric", "revision", "against", "partner", "suite", "layer", "block"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    np.testing.assert_allclose(a.value, b.value, rtol=1e-9, equal_nan=True)


def test_a_named_reference_and_analyze_runs_the_combine_step(ckpts, tmp_path):
    from ckptgeo import analyze, combine
    from ckptgeo.store.dataset import Dataset

    out = tmp_path / "ds"
    run(ckpts, out, metrics=("rankme", "cka"), metric_options={"cka": {"reference": "step1"}})
    c = compare_table(out)
    ref = c[c.against == "reference"]
    assert set(ref.partner) == {"step1"} and np.allclose(ref[(ref.revision == "step1") & (ref.layer > 0)].value, 1)
    assert json.loads(ref.settings.iloc[0])["reference"] == "step1"
    # combine's override, without writing
    other = combine(Dataset(out), reference="step0", write=False)
    assert set(other[other.against == "reference"].partner) == {"step0"}
    # analyze writes the compare table next to its events
    an = analyze(out, out=tmp_path / "an")
    assert tmp_path / "an" / "compare" / "compare.parquet" in an.written
    again = pd.read_parquet(tmp_path / "an" / "compare" / "compare.parquet")
    assert len(again) == len(c) and set(again.against) == {"previous", "reference"}


def test_rows_against_a_reference_without_an_artifact_say_so(ckpts, tmp_path):
    out = tmp_path / "ds"
    res = run(ckpts, out, metrics=("cka",), metric_options={"cka": {"reference": "step3"}})
    c = compare_table(out)   # step3 does not exist: rows against it say so
    ref = c[c.against == "reference"]
    assert res.measured and ref.value.isna().all() and ref.reason.str.contains("step3").all()


# ------------------------------------------------------------------------- a measure at some revisions

def test_a_measure_runs_only_at_the_revisions_it_is_asked_for(ckpts, tmp_path):
    out = tmp_path / "ds"
    run(ckpts, out, metrics=("rankme", "cka"),
        metric_options={"rankme": {"revisions": "step0,step4"}, "cka": {"revisions": "every-2"}})
    from ckptgeo import read_table

    g = read_table(out, "geometry")
    assert sorted(set(g.revision)) == ["step0", "step4"]
    assert json.loads(g.settings.iloc[0])["revisions"] == "step0,step4"
    assert sorted(set(read_table(out, "revisions").revision)) == ["step0", "step1", "step2", "step4"]
    c = compare_table(out)
    assert sorted(set(c.revision)) == ["step0", "step2", "step4"]      # every-2 of the selection
    prev = c[c.against == "previous"]
    assert dict(zip(prev.revision, prev.partner)) == {"step2": "step0", "step4": "step2"}


def test_a_revisions_option_naming_a_missing_revision_is_refused(ckpts, tmp_path):
    with pytest.raises(RevisionNotFoundError, match=r"rankme.revisions=step3: 'step3' is not among the scan's 4"):
        run(ckpts, tmp_path / "ds", metric_options={"rankme": {"revisions": "step3"}})
    with pytest.raises(EmptySelectionError, match=r"rankme.revisions=100:200 selects none"):
        run(ckpts, tmp_path / "ds", metric_options={"rankme": {"revisions": "100:200"}})
    assert not (tmp_path / "ds" / "geometry").exists()


def test_the_command_line_reads_the_revisions_option_as_text():
    from ckptgeo.cli._options import parse_metric_options

    assert parse_metric_options(["hessian.revisions=step100,step200", "hessian.k=3"]) == {
        "hessian": {"revisions": "step100,step200", "k": 3}}
