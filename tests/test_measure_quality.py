"""What the analysis does with a value's quality (issue 32): unconverged and negative estimates left out and
counted, an onset scale one spike cannot set, RankMe's interval deciding what is a collapse."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ckptgeo.events import detect as ev

GRID = list(range(0, 200, 10))            # 20 checkpoints
ACQ = 100                                 # accuracy crosses 0.5 at step 100 for good


def _dataset(root, curves: dict[str, list[dict]], loss: list[float] | None = None):
    """A dataset of one run: accuracy acquired at ACQ, geometry rows ``curves[metric]`` (one dict per step) and,
    when given, the task loss per step as the scan records it (behaviour rows, metric "loss")."""
    common = dict(model="toy-s0", commit="0" * 40, tokens=None, ckptgeo_version="0", n_samples=64,
                  position="last", dtype="float32", seed=0, config_hash="c1", suite="add-L2")
    beh = [common | dict(revision=f"step{s}", step=s, metric="accuracy", value=0.02 if s < ACQ else 0.95,
                         n_items=64, chance=0.01, kind="generation") for s in GRID]
    beh += [common | dict(revision=f"step{s}", step=s, metric="loss", value=v, n_items=64, chance=None,
                          kind="generation") for s, v in zip(GRID, loss or [])]
    geo = [common | dict(revision=f"step{r['step']}", reason=None, settings="{}", seconds=0.0, index=None,
                         centered=False, epsilon=1e-7) | r for rows in curves.values() for r in rows]
    (root / "geometry").mkdir(parents=True)
    (root / "behavior").mkdir()
    pd.DataFrame(geo).to_parquet(root / "geometry" / "p.parquet")
    pd.DataFrame(beh).to_parquet(root / "behavior" / "p.parquet")
    return root


def _analyze(root):
    from ckptgeo.analysis import analyze

    return analyze(root, n_noise_curves=0, n_permutations=19).events


def _whole_model(metric: str, values, converged=None) -> list[dict]:
    return [dict(step=s, layer=-1, metric=metric, index=0, value=float(v),
                 converged=None if converged is None else bool(converged[i])) for i, (s, v) in enumerate(zip(GRID, values))]


def test_an_unconverged_hessian_value_is_left_out_and_counted(tmp_path):
    # the top eigenvalue rises from step 40 (an onset well before acquisition); at step 20 a budget cut Lanczos
    # short at a Ritz value of 900: used, it would be the onset (and set the scale); left out, the onset is 40
    vals = [10.0, 10.0, 900.0, 10.0, 30.0, 50.0, 60.0, 60.0] + [60.0] * 12
    conv = [True] * 20
    conv[2] = False
    e = _analyze(_dataset(tmp_path / "d", {"hessian": _whole_model("hessian", vals, conv)}))
    row = e[e["metric"] == "hessian"].iloc[0]
    assert row["n_unconverged"] == 1 and row["n_checkpoints"] == 19
    assert row["onset_step"] == 40 and row["status"] == "precursor", row[["onset_step", "status"]]
    # the same values all marked converged: the 900 is the onset
    e = _analyze(_dataset(tmp_path / "c", {"hessian": _whole_model("hessian", vals, [True] * 20)}))
    assert e[e["metric"] == "hessian"].iloc[0]["onset_step"] == 20


def test_negative_llc_estimates_are_left_out_and_counted(tmp_path):
    # SGLD far from a minimum at the first checkpoints: -4.3, -1.5; left in, the climb from -4.3 is the "onset"
    vals = [-4.3, -1.5, 20.0, 20.5, 20.0, 20.4, 20.1, 20.3, 40.0, 45.0] + [45.0] * 10
    e = _analyze(_dataset(tmp_path / "d", {"llc": _whole_model("llc", vals)}))
    row = e[e["metric"] == "llc"].iloc[0]
    assert row["n_negative"] == 2 and row["first_value"] == 20.0
    assert row["onset_step"] == 80, row["onset_step"]


def test_one_spike_cannot_set_the_onset_scale():
    # the shape: the eigenvalue rises 10 -> 40 before acquisition, one spike of 14,006 after it (a loss
    # spike). With the spike as the scale the onset (10% of 14,000) comes at the spike: "lagging".
    steps = GRID
    vals = [10.0, 10.0, 10.0, 20.0, 30.0, 40.0, 40.0, 40.0, 40.0, 40.0, 40.0, 40.0, 14006.0] + [40.0] * 7
    acq = ev.acquisition_step(steps, [0.0 if s < ACQ else 1.0 for s in steps])
    ce = ev.curve_events(steps, vals, acq, kind="change")
    assert ce.onset.step == 30 and ce.gap.status == "precursor", (ce.onset, ce.gap)
    from ckptgeo.events.onsets import held_departure

    assert held_departure(np.array([0.0, 1.0, 5.0, 1.0])).tolist() == [0.0, 1.0, 1.0, 1.0]


def test_a_collapse_within_rankme_interval_is_no_collapse(tmp_path):
    # RankMe dips 40 -> 28 (30%, past min_drop) and recovers before acquisition; measured on few items its
    # interval is +-7 at every checkpoint: the dip is within the two intervals (7 + 7 > 12): no collapse
    vals = [40.0, 36.0, 28.0, 30.0, 38.0, 40.0] + [40.0] * 14

    def rows(half):
        return [dict(step=s, layer=2, metric="rankme", value=v, value_low=v - half, value_high=v + half)
                for s, v in zip(GRID, vals)]

    wide = _analyze(_dataset(tmp_path / "w", {"rankme": rows(7.0)})).iloc[0]
    narrow = _analyze(_dataset(tmp_path / "n", {"rankme": rows(0.5)})).iloc[0]
    assert pd.isna(wide["collapse_step"]) and wide["status"] == "no_onset", wide[["collapse_step", "status"]]
    assert narrow["collapse_step"] == 20 and narrow["onset_step"] == 30, narrow[["collapse_step", "onset_step"]]
    # the rules on their own: a recovery smaller than the two errors is no onset
    col = ev.collapse_point(GRID[:6], vals[:6], error=[1.0] * 6)
    assert ev.recovery_onset(GRID[:6], vals[:6], col, error=[5.0] * 6).step == 50   # 38 - 28 is not > 5 + 5
    assert ev.onset_of_change([0, 1, 2, 3], [1.0, 1.5, 2.0, 2.0]).step == 1
    assert ev.onset_of_change([0, 1, 2, 3], [1.0, 1.5, 2.0, 2.0], error=[0.4] * 4).step == 2   # 0.5 < 0.4 + 0.4


def test_the_task_loss_gets_onsets_by_the_same_rule(tmp_path):
    # the loss falls from step 60 (4 checkpoints before acquisition at 100); the Hessian rises from 30: it leads
    # acquisition and the loss too. A row of its own holds the loss's onset and gap.
    loss = [4.6, 4.6, 4.6, 4.6, 4.6, 4.6, 3.0, 1.0, 0.5, 0.2] + [0.1] * 10
    hess = [10.0, 10.0, 10.0, 30.0, 40.0, 40.0] + [40.0] * 14
    e = _analyze(_dataset(tmp_path / "d", {"hessian": _whole_model("hessian", hess)}, loss=loss))
    lrow = e[e["metric"] == "loss"].iloc[0]
    assert (lrow["layer"], lrow["onset_step"], lrow["gap_steps"], lrow["status"]) == (-1, 60, 40, "precursor")
    h = e[e["metric"] == "hessian"].iloc[0]
    assert (h["onset_step"], h["loss_onset_step"], h["gap_loss_onset_steps"], h["status_loss_onset"]) == \
        (30, 60, 30, "precursor")
    # without loss rows (datasets written before they were recorded) the columns are null
    e = _analyze(_dataset(tmp_path / "n", {"hessian": _whole_model("hessian", hess)}))
    assert "loss" not in set(e["metric"]) and e["loss_onset_step"].isna().all()


@pytest.mark.parametrize("suite", ["logical_deduction", "syntax", "copy-L1"])   # choice, minimal pair, generation
def test_the_scan_loss_is_the_task_loss_of_each_item(tmp_path, suite):
    # the loss the forward sweep records per item equals the whole-model measures' task loss (autodiff) on the
    # same items: one definition of "the loss" (answer tokens only)
    import torch
    from transformers import AutoTokenizer, GPTNeoXForCausalLM

    from ckptgeo.engine.forward import model_batch, prepare_suite, run_suite
    from ckptgeo.metrics._autodiff import task_token_losses
    from ckptgeo.suites.tasks import load_suite_or_task
    from tests._checkpoints import make_checkpoints

    root = make_checkpoints(tmp_path / "ck", steps=(0,))
    model = GPTNeoXForCausalLM.from_pretrained(root / "step0").eval()
    ps = prepare_suite(load_suite_or_task(suite), AutoTokenizer.from_pretrained(root), n_samples=6, seed=0)
    out = run_suite(model, ps, batch_size=4, position="last", device="cpu", revision="step0", with_probes=False)
    with torch.no_grad():
        tl, mask = task_token_losses(model, model_batch(ps, 6, "cpu"))
    expected = ((tl * mask).sum(1) / mask.sum(1)).numpy()
    assert out.loss == pytest.approx(expected, rel=1e-5), (out.loss, expected)
