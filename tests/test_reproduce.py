"""`ckptgeo reproduce`: the claim table on synthetic grids with known answers, the plan, the CLI, a tiny study."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from ckptgeo.analysis import analyze
from ckptgeo.cli import build_parser, main
from ckptgeo.errors import InvalidParameterError
from ckptgeo.studies.claims import claim_table, parse_run, runs_table
from ckptgeo.studies.reproduce import PRESETS, Preset, checkpoint_subset, plan_study, run_reproduce

STEPS = list(range(0, 201, 10))
TASKS = ("copy", "sort", "compare", "reverse", "parity", "addition", "modular", "multiplication")
LAYERS = {"tiny": 2, "mini": 4}
_COMMON = dict(commit=None, tokens=None, ckptgeo_version="0.1.0", n_samples=200, position="last", centered=False,
               dtype="float32", epsilon=1e-7, seed=0)


def _rankme(n_layers, floor, recover_at, *, top_down=True):
    """Layer k falls from 20 to ``floor`` at step 10 (n_layers + 1 - k) (top-down; bottom-up: 10 k) and is
    back at 15 from ``recover_at``; layer 0 is constant."""
    out = {0: [1.0] * len(STEPS)}
    for k in range(1, n_layers + 1):
        onset = 10 * (n_layers + 1 - k) if top_down else 10 * k
        out[k] = [20.0 if s < onset else (floor if s < recover_at else 15.0) for s in STEPS]
    return out


def _grid(root, spec):
    """spec: {size: {task: dict(acq=step or None, floor=..., recover=step, top_down=bool, llc_at=step,
    probe_at=step or None, probe_nan=bool)}} -> a dataset folder with geometry, behavior and probes."""
    geo, beh, probes = [], [], []
    for size, tasks in spec.items():
        for task, t in tasks.items():
            model, suite = f"{task}-L1-{size}-s0", f"{task}-L1"
            chance = 0.5 if task in ("parity", "compare") else 0.01
            acc = [0.0 if (t["acq"] is None or s < t["acq"]) else 0.95 for s in STEPS]
            ranks = _rankme(LAYERS[size], t["floor"], t["recover"], top_down=t.get("top_down", True))
            for i, s in enumerate(STEPS):
                row = dict(model=model, revision=f"step{s}", step=s, suite=suite, **_COMMON)
                beh.append(row | dict(config_hash="b", metric="accuracy", value=acc[i], n_items=200, chance=chance,
                                      kind="generation"))
                for layer, vals in ranks.items():
                    geo.append(row | dict(config_hash="g", layer=layer, metric="rankme", index=None, value=vals[i],
                                          reason=None, settings="{}", seconds=0.0))
                if "llc_at" in t:
                    for metric in ("llc", "hessian"):
                        geo.append(row | dict(config_hash="m", layer=-1, metric=metric, index=0, reason=None,
                                              value=1.0 if s < t["llc_at"] else 5.0, settings="{}", seconds=0.0))
                if "probe_at" in t:
                    nan = t.get("probe_nan", False)
                    good = t["probe_at"] is not None and s >= t["probe_at"]
                    probes.append(row | dict(config_hash="p", layer=LAYERS[size], chance=0.1, control_accuracy=
                                             float("nan") if nan else 0.1, accuracy=float("nan") if nan else
                                             (0.9 if good else 0.12), accuracy_std=0.02, n=200, k=5,
                                             p_value=float("nan") if nan else (0.001 if good else 0.4),
                                             reason="class 3 has a single member" if nan else None, settings="{}"))
    for table, rows in (("geometry", geo), ("behavior", beh), ("probes", probes)):
        if rows:
            (root / table).mkdir(parents=True)
            pd.DataFrame(rows).to_parquet(root / table / "part.parquet")
    return root


# acquisition steps by task: median 90 at both sizes, so parity .. multiplication are hard (>= median)
ACQ = {"copy": 60, "sort": 60, "compare": 80, "reverse": 80, "parity": 100, "addition": 140, "modular": 160,
       "multiplication": 160}
FLOORS = {"copy": 3.0, "sort": 4.0, "compare": 5.0, "reverse": 6.0, "parity": 7.0, "addition": 8.0, "modular": 2.0}


def _verdicts(root):
    a = analyze(root, write=False)
    table = claim_table(a.events, a.top_down, a.probe_lead)
    return table.set_index("id")


def test_claims_reproduced(tmp_path):
    spec = {}
    for size, mul_floor in (("tiny", 3.0), ("mini", 5.0)):
        spec[size] = {task: dict(acq=ACQ[task], floor=FLOORS.get(task, mul_floor),
                                 recover=ACQ[task] - 30 if ACQ[task] >= 90 else ACQ[task],  # hard: precursor
                                 llc_at=ACQ[task], probe_at=ACQ[task] - 40) for task in TASKS}
    t = _verdicts(_grid(tmp_path / "ds", spec))
    expected = {"order": "reproduced", "precursor_hard": "reproduced", "precursor_easy": "reproduced",
                # 2-layer models: one block below the final norm, nothing for Kendall's tau to order (issue 19)
                "top_down": "inconclusive", "llc": "reproduced", "hessian": "reproduced",
                "floor_modular": "reproduced", "floor_multiplication": "reproduced",
                "across_sizes_collapse_floor": "reproduced", "across_sizes_acquisition_step": "reproduced",
                "probe_lead": "reproduced", "pythia_deduction": "inconclusive"}
    assert t["verdict"].to_dict() == expected, t[["verdict", "measured", "reason"]].to_string()
    assert t.loc["precursor_hard", "measured"].startswith("8/8 (100%) hard runs; median gap 30 steps (")
    assert t.loc["precursor_easy", "measured"].startswith("0/8 (0%)")
    assert t.loc["top_down", "measured"] == "0/0 runs top-down"
    assert t.loc["floor_modular", "measured"] == "median floor by size: tiny 2.00, mini 2.00"
    assert t.loc["floor_multiplication", "measured"] == "median floor by size: tiny 3.00, mini 5.00"
    assert "28/32" in t.loc["top_down", "paper"] and "0/24" in t.loc["llc", "paper"]


def test_claims_not_reproduced(tmp_path):
    spec = {}
    for size, mul_floor in (("tiny", 5.0), ("mini", 7.0)):  # mini: 10 - floor (reversed), so 3.0
        spec[size] = {}
        for task in TASKS:
            acq = ACQ[task] if size == "tiny" else 230 - ACQ[task]  # mini acquires in the reverse order
            hard = acq >= (90 if size == "tiny" else 140)  # the medians
            floor = 4.0 if task == "modular" else FLOORS.get(task, mul_floor)
            spec[size][task] = dict(acq=acq, floor=floor if size == "tiny" else 10.0 - floor,
                                    recover=acq + 20 if hard else acq - 20,  # hard lags, easy precedes
                                    top_down=False, llc_at=acq - 30, probe_at=None)
    t = _verdicts(_grid(tmp_path / "ds", spec))
    for claim in ("order", "precursor_hard", "precursor_easy", "llc", "hessian", "floor_modular",
                  "floor_multiplication", "across_sizes_collapse_floor", "across_sizes_acquisition_step",
                  "probe_lead"):
        assert t.loc[claim, "verdict"] == "not reproduced", (claim, t.loc[claim].to_dict())
    # 2-layer models cannot show an order of layers (Kendall over one block; issue 19): no verdict either way
    assert t.loc["top_down", "verdict"] == "inconclusive"
    assert t.loc["order", "measured"] == "8/16 (50%) acquired runs"
    assert "rho -" in t.loc["across_sizes_acquisition_step", "measured"]


def test_claims_inconclusive(tmp_path):
    spec = {"tiny": {"copy": dict(acq=60, floor=3.0, recover=60, probe_at=None, probe_nan=True),
                     "modular": dict(acq=160, floor=2.0, recover=130, probe_at=None, probe_nan=True)}}
    t = _verdicts(_grid(tmp_path / "ds", spec))
    assert set(t["verdict"]) == {"inconclusive"}, t[["verdict", "reason"]].to_string()
    assert "only 2 case(s)" in t.loc["order", "reason"] and "only 1 case(s)" in t.loc["precursor_hard", "reason"]
    assert t.loc["llc", "measured"] == "not measured"
    assert "at 1 size(s)" in t.loc["floor_modular", "reason"]
    assert "2 acquired run(s) not measured" in t.loc["probe_lead", "reason"]


def test_probe_readable_at_the_first_checkpoint_is_no_lead(tmp_path):
    """Probes that beat their baseline from step 0 on (the inputs carry the label) are left out, not leads."""
    spec = {"tiny": {task: dict(acq=ACQ[task], floor=3.0, recover=ACQ[task],
                                probe_at=0 if task in ("copy", "sort", "compare", "reverse") else ACQ[task] + 20)
                     for task in TASKS}}
    t = _verdicts(_grid(tmp_path / "ds", spec))
    # four runs readable at start are left out; the four others' probes lag: 0 of 4 lead
    assert t.loc["probe_lead", "measured"].startswith("0/4 (0%)"), t.loc["probe_lead"].to_dict()
    assert t.loc["probe_lead", "verdict"] == "not reproduced"
    assert "4 acquired run(s) left out" in t.loc["probe_lead", "reason"]
    spec = {"tiny": {task: dict(acq=ACQ[task], floor=3.0, recover=ACQ[task], probe_at=0) for task in TASKS}}
    t = _verdicts(_grid(tmp_path / "ds2", spec))
    assert t.loc["probe_lead", "verdict"] == "inconclusive" and "8 acquired run(s) left out" in t.loc[
        "probe_lead", "reason"]


def test_claims_of_an_empty_or_foreign_dataset_are_inconclusive():
    t = claim_table(pd.DataFrame(columns=["model", "metric", "layer", "status"]))
    assert len(t) == 12 and set(t["verdict"]) == {"inconclusive"}
    assert parse_run("EleutherAI/pythia-160m") is None and runs_table(None).empty


def test_hard_is_relative_to_each_size():
    ev = pd.DataFrame([dict(model=f"{t}-L1-{size}-s0", metric="rankme", layer=2, centered=False, acquisition_step=a,
                            acquisition_status="acquired", collapse_step=1, collapse_floor=2.0, onset_step=1,
                            gap_steps=a - 1, resolution_steps=10, status="precursor")
                       for size, steps in (("tiny", (10, 20, 30, 40)), ("mini", (100, 200, 300, 400)))
                       for t, a in zip(("copy", "sort", "parity", "modular"), steps)])
    r = runs_table(ev).set_index("model")
    assert r["hard"].to_dict() == {"copy-L1-tiny-s0": False, "sort-L1-tiny-s0": False, "parity-L1-tiny-s0": True,
                                   "modular-L1-tiny-s0": True, "copy-L1-mini-s0": False, "sort-L1-mini-s0": False,
                                   "parity-L1-mini-s0": True, "modular-L1-mini-s0": True}


# --------------------------------------------------------------------------------------------- the plan

def test_presets_cover_the_grid():
    cpu = plan_study("cpu", "out")
    assert len(cpu) == 24 and {r.size for r in cpu} == {"tiny", "mini"} and {r.level for r in cpu} == {1, 2}
    assert {r.task for r in cpu} == set(TASKS) and {r.level for r in cpu if r.size == "mini"} == {1}
    assert sum(1 for r in cpu if r.model_metrics) == 3
    # two processes: every run once, the mini modular and multiplication runs (the longest) apart
    from ckptgeo.studies.reproduce import assign

    a, b = assign(cpu, 2)
    assert sorted(r.name for r in a + b) == sorted(r.name for r in cpu)
    assert {r.name for r in a[:1] + b[:1]} == {"modular-L1-mini-s0", "multiplication-L1-mini-s0"}
    paper = plan_study("paper", "out")
    assert len(paper) == 8 * 3 * 6 * 2 and all(r.model_metrics for r in paper)
    with pytest.raises(InvalidParameterError, match="Unknown preset"):
        plan_study("gpu", "out")


def test_checkpoint_subset():
    assert checkpoint_subset([0, 5, 10], 5) == [0, 5, 10]
    sub = checkpoint_subset(list(range(0, 400, 10)), 10)
    assert len(sub) == 10 and sub[0] == 0 and sub[-1] == 390


def test_cli_parser_and_dry_run(capsys, monkeypatch):
    args = build_parser().parse_args(["reproduce", "--preset", "paper", "--dry-run"])
    assert (args.preset, args.dry_run, args.out) == ("paper", True, "results/reproduce")
    import ckptgeo.studies.reproduce as rp

    fake = {s: {"size": s, "device": "cpu", "step_s": 0.5, "forward_s": 0.1, "rankme_probe_per_layer_s": 0.2,
                "n_layers": 3, "steps_per_s": 2.0} for s in PRESETS["paper"].sizes}
    real = rp.estimate
    monkeypatch.setattr(rp, "estimate", lambda preset, device="cpu": real(preset, device=device, bench=fake))
    assert main(["reproduce", "--preset", "paper", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "288 runs" in out and "device-hours" in out
    # 288 runs: 96 each of 10000, 20000, 30000 steps at 0.5 s per step
    assert f"training {288 / 3 * 60000 * 0.5 / 3600:.2f} h" in out


def test_estimate_measures_steps_per_second():
    from ckptgeo.studies.reproduce import estimate

    small = Preset("t", ("copy",), (1,), ("tiny",), (0,), {"copy": {1: 100}}, n_checkpoints=10, n_samples=16,
                   probe_checkpoints=2)
    est = estimate(small)
    b = est["bench"]["tiny"]
    assert b["steps_per_s"] > 0 and b["n_layers"] == 3
    assert est["train_hours"] == pytest.approx(100 * b["step_s"] / 3600)


@pytest.mark.slow
def test_a_tiny_study_end_to_end_and_resumes(tmp_path, caplog):
    """Two runs (copy and sort at level 1 on tiny), every stage, then a rerun that redoes nothing."""
    import logging

    import torch

    torch.set_num_threads(1)
    caplog.set_level(logging.INFO, logger="ckptgeo.studies")
    preset = Preset("t", ("copy", "sort"), (1,), ("tiny",), (0,), {"copy": {1: 200}, "sort": {1: 200}},
                    n_checkpoints=16, n_samples=60, probe_checkpoints=4)
    res = run_reproduce(preset, tmp_path / "study")
    assert res.analysed and res.report.is_file() and (tmp_path / "study" / "figures" / "grid.png").is_file()
    text = res.report.read_text()
    assert "| collapse -> recovery -> acquisition" in text and "## Recipe" in text
    assert set(res.claims["verdict"]) <= {"reproduced", "not reproduced", "inconclusive"} and len(res.claims) == 12
    manifest = json.loads((tmp_path / "study" / "runs" / "copy-L1-tiny-s0" / "manifest.json").read_text())
    assert manifest["recipe"]["schedule_horizon"] == 400 and manifest["complete"]
    # no terminal here, so no bar: one progress line per stage, with an ETA
    lines = [r.getMessage() for r in caplog.records if r.name == "ckptgeo.studies.reproduce"]
    assert any("trained copy-L1-tiny-s0 (stage 1/5" in m and "ETA" in m for m in lines), lines
    assert sum("scanned" in m for m in lines) == 2, lines
    probes = pd.read_parquet(tmp_path / "study" / "dataset" / "probes")
    assert probes["accuracy"].notna().all() and probes["revision"].nunique() == 4
    before = sorted(p.name for p in (tmp_path / "study" / "dataset" / "revisions").iterdir())
    again = run_reproduce(preset, tmp_path / "study")
    assert sorted(p.name for p in (tmp_path / "study" / "dataset" / "revisions").iterdir()) == before
    assert again.seconds["train"] < res.seconds["train"]
    assert np.isfinite(pd.read_parquet(tmp_path / "study" / "dataset" / "geometry")["tokens"]).all()


def test_the_last_process_to_finish_analyses(tmp_path):
    from ckptgeo.studies.reproduce import _wait_for_others

    assert not _wait_for_others(tmp_path, "k", 1, 3) and not _wait_for_others(tmp_path, "k", 0, 3)
    assert not _wait_for_others(tmp_path, "other-study", 2, 3)  # another plan's marker does not count
    assert _wait_for_others(tmp_path, "k", 2, 3)
    assert not list((tmp_path / ".done").glob("rank*-of-3")) or all(
        p.read_text() != "k" for p in (tmp_path / ".done").glob("rank*-of-3"))
    assert _wait_for_others(tmp_path, "k", 0, 1) and _wait_for_others(tmp_path, "k", 0, 1)  # reruns analyse again


def test_scans_of_a_study_are_not_split_again_under_a_launcher(monkeypatch):
    """Under torchrun the study splits runs between processes; each run's scan then measures all its revisions
    (a scan alone would measure only its rank's share)."""
    import torch

    from ckptgeo.engine.plan import rank_device
    from ckptgeo.engine.scan import shard
    from ckptgeo.studies.reproduce import _one_process

    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the mapping only; nothing runs on it
    assert shard() == (3, 4) and rank_device("cuda") == "cuda:3" and rank_device("cpu") == "cpu"
    with _one_process():
        assert shard() == (0, 1)
    assert shard() == (3, 4)
