"""A result is never credited to the wrong model: resume is keyed on the repo id (or folder) and the commit,
and a second monitored run into one folder is refused or kept apart."""

from __future__ import annotations

import logging
import subprocess

import pandas as pd
import pytest
import torch

from ckptgeo.engine.scan import plan_scan, scan
from ckptgeo.errors import RunMismatchError
from tests._checkpoints import make_checkpoints, tiny_config
from tests._models import single_thread  # noqa: F401  (fixture)

SUITE_ARGS = dict(suites=("logic",), n_samples=8)


def _layer2(out, model):
    g = pd.read_parquet(out / "geometry")
    return g[(g.model == model) & (g.layer == 2)].set_index("revision").value


def test_same_name_in_another_org_is_measured_not_credited(local_hub, tmp_path):
    local_hub.add_repo("pythia-tiny", org="otherorg", steps=(0, 1), seed=3)
    out = tmp_path / "ds"
    first = scan(local_hub.repo_id, revisions="step0,step1", out=out, **SUITE_ARGS)
    second = scan("otherorg/pythia-tiny", revisions="step0,step1", out=out, **SUITE_ARGS)
    assert first.measured == second.measured == ["step0", "step1"] and second.skipped == []
    assert sorted(pd.read_parquet(out / "revisions").model) == ["otherorg/pythia-tiny"] * 2 + ["testorg/pythia-tiny"] * 2
    ours, theirs = _layer2(out, "testorg/pythia-tiny"), _layer2(out, "otherorg/pythia-tiny")
    assert ours["step1"] != theirs["step1"], "the other org's weights were measured, not the first repo's values"
    again = scan("otherorg/pythia-tiny", revisions="step0,step1", out=out, **SUITE_ARGS)
    assert again.measured == [] and again.skipped == ["step0", "step1"]


def test_a_branch_moved_to_another_commit_is_measured_again(local_hub, tmp_path, caplog):
    moving = local_hub.add_repo("moving", steps=(0, 1), seed=0, lfs=False)
    source = local_hub.add_repo("moving-src", steps=(0, 1), seed=9, lfs=False)
    out = tmp_path / "ds"
    assert scan("testorg/moving", revisions="step1", out=out, **SUITE_ARGS).measured == ["step1"]
    before = _layer2(out, "testorg/moving")["step1"]
    subprocess.run(["git", "-C", str(local_hub.mirrors / "models" / "testorg" / "moving"), "fetch", "-q",
                    str(local_hub.mirrors / "models" / "testorg" / "moving-src"), "+refs/heads/step1:refs/heads/step1"],
                   check=True, capture_output=True)
    plan = plan_scan("testorg/moving", revisions="step1", out=out, **SUITE_ARGS)
    assert plan.done == [] and plan.moved == {"step1": (moving.commits["step1"], source.commits["step1"])}
    assert "moved to commit" in plan.summary()
    with caplog.at_level(logging.WARNING, logger="ckptgeo.engine.scan"):
        res = scan("testorg/moving", revisions="step1", out=out, **SUITE_ARGS)
    assert res.measured == ["step1"] and any("moved to commit" in r.message for r in caplog.records)
    g = pd.read_parquet(out / "geometry")
    assert set(g.commit) == {source.commits["step1"]} and len(g) == 3, "the old commit's rows are replaced"
    assert _layer2(out, "testorg/moving")["step1"] != before


def test_two_folders_of_one_name_are_kept_apart(tmp_path, single_thread):
    from transformers import GPTNeoXForCausalLM

    a, c = make_checkpoints(tmp_path / "a" / "run", steps=(0, 1)), make_checkpoints(tmp_path / "c" / "run", steps=(0, 1))
    torch.manual_seed(99)
    GPTNeoXForCausalLM(tiny_config()).save_pretrained(c / "step1")   # another run: other weights at step 1
    out = tmp_path / "ds"
    assert scan(a, out=out, suites=("logic",), n_samples=8).measured == ["step0", "step1"]
    res = scan(c, out=out, suites=("logic",), n_samples=8)
    assert res.measured == ["step0", "step1"] and res.skipped == []
    assert sorted(set(pd.read_parquet(out / "geometry").model)) == ["c/run", "run"]
    assert _layer2(out, "run")["step1"] != _layer2(out, "c/run")["step1"]
    assert scan(a, out=out, suites=("logic",), n_samples=8).skipped == ["step0", "step1"]   # still "run"


def _monitor_model(seed):
    from ckptgeo.training import build_config, build_tokenizer

    from transformers import GPTNeoXForCausalLM

    torch.manual_seed(seed)
    return GPTNeoXForCausalLM(build_config("tiny", vocab_size=len(build_tokenizer())))


def test_a_second_monitored_run_is_refused_or_kept_apart(tmp_path, single_thread):
    from ckptgeo.monitor import Monitor, MonitorConfig
    from ckptgeo.training import build_tokenizer

    tok, out = build_tokenizer(), tmp_path / "live"
    cfg = MonitorConfig(n_samples=20)
    first = Monitor(tok, ["copy-L1"], out, schedule=(0, 2), config=cfg)
    one = first.step(_monitor_model(0), 0)
    other = _monitor_model(1)
    with pytest.raises(RunMismatchError, match="already holds monitored run"):
        Monitor(tok, ["copy-L1"], out, schedule=(0, 2), config=cfg).step(other, 0)
    revs = pd.read_parquet(out / "revisions")
    assert len(revs) == 1 and revs.commit.iloc[0] == first.run_id, "the refused run wrote nothing"
    apart = Monitor(tok, ["copy-L1"], out, schedule=(0, 2), config=cfg, model_name="second")
    two = apart.step(other, 0)
    assert two is not None and two.rankme != one.rankme
    g = pd.read_parquet(out / "geometry")
    assert sorted(set(g.model)) == ["live", "second"] and set(g.commit) == {first.run_id, apart.run_id}
    # a resumed run (first measured step above 0) continues the recorded one
    resumed = Monitor(tok, ["copy-L1"], out, schedule=(0, 2), config=cfg)
    assert resumed.step(_monitor_model(0), 2).step == 2 and resumed.run_id == first.run_id
