"""Public checkpoint suites as the Hub has them, over the loopback Hub (tests/conftest.py: local_hub):
repos named and shaped like OLMo-2, SmolLM2, PolyPythia, MultiBERTs, a Trainer push and a Pythia repo with
a weightless branch and a shared shard. Each is listed, scanned once, resumed, with a bounded cache."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ckptgeo.engine.scan import scan
from ckptgeo.errors import EmptySelectionError
from ckptgeo.sources.hub import HubSource
from ckptgeo.sources.revisions import select_revisions
from tests._checkpoints import SUITE, cache_bytes, record_fetch_peaks

#: OLMo-2: stage 1, then two stage-2 ingredients whose steps restart at 0 (overlapping step numbers)
OLMO = ("stage1-step0-tokens0B", "stage1-step1000-tokens5B", "stage1-step2000-tokens9B",
        "stage2-ingredient1-step0-tokens9B", "stage2-ingredient1-step1000-tokens14B",
        "stage2-ingredient2-step0-tokens9B", "stage2-ingredient2-step1000-tokens14B")
SMOL = ("step-0", "step-2000", "step-4000")


def quiet(source, out, **kw):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return scan(source, out=out, **{"suites": (SUITE,), "n_samples": 8, **kw})


@pytest.fixture
def olmo(local_hub):
    return local_hub.add_repo("OLMo-2-tiny", branches=OLMO)


def test_olmo2_branches_carry_stage_step_and_tokens(olmo):
    revs = HubSource(olmo.repo_id).revisions()
    assert [(r.stage, r.step, r.tokens) for r in revs] == [
        ("stage1", 0, 0), ("stage1", 1000, 5 * 10**9), ("stage1", 2000, 9 * 10**9),
        ("stage2-ingredient1", 0, 9 * 10**9), ("stage2-ingredient1", 1000, 14 * 10**9),
        ("stage2-ingredient2", 0, 9 * 10**9), ("stage2-ingredient2", 1000, 14 * 10**9)]
    assert all(r.commit == olmo.commits[r.name] for r in revs)
    one = select_revisions(revs, "stage2-ingredient1:*")
    assert [r.name for r in one] == ["stage2-ingredient1-step0-tokens9B", "stage2-ingredient1-step1000-tokens14B"]
    assert [r.name for r in select_revisions(revs, "stage2-*:final")] == ["stage2-ingredient2-step1000-tokens14B"]
    assert [r.stage for r in select_revisions(revs, "1000")] == ["stage1", "stage2-ingredient1", "stage2-ingredient2"]
    assert [r.step for r in select_revisions(revs, "stage1:every-2000")] == [0, 2000]
    with pytest.raises(EmptySelectionError, match="stage3.*stage1, stage2-ingredient1"):
        select_revisions(revs, "stage3:*")


def test_cli_revisions_shows_stage_step_tokens(olmo, capsys):
    from ckptgeo.cli import main

    assert main(["revisions", olmo.repo_id]) == 0
    out = capsys.readouterr().out
    print(out)
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["revision", "stage", "step", "tokens"]
    row = next(line for line in lines if line.startswith("stage2-ingredient2-step1000-tokens14B"))
    assert row.split()[1:4] == ["stage2-ingredient2", "1000", "14B"]
    assert lines[-2] == "7 revisions"


def test_olmo2_scan_measures_each_stage_once_and_resumes(olmo, tmp_path):
    out = tmp_path / "ds"
    res = quiet(olmo.repo_id, out, revisions="all")
    assert sorted(res.measured) == sorted(OLMO)
    assert cache_bytes() < 100_000, "measured revisions are evicted"
    g = pd.read_parquet(out / "geometry")
    # same step, different stage: two revisions, not one
    at0 = g[(g.step == 0) & (g.layer == 2)].set_index("stage").value
    assert sorted(at0.index) == ["stage1", "stage2-ingredient1", "stage2-ingredient2"] and at0.nunique() == 3
    assert dict(zip(g.revision, g.tokens))["stage2-ingredient1-step1000-tokens14B"] == 14 * 10**9
    rv = pd.read_parquet(out / "revisions")
    assert len(rv) == 7 and set(rv.status) == {"ok"} and rv.stage.notna().all()
    res2 = quiet(olmo.repo_id, out, revisions="all")
    assert res2.measured == [] and len(res2.skipped) == 7
    assert len(pd.read_parquet(out / "geometry")) == len(g)
    from ckptgeo.analysis.pipeline import analyze

    analyze(out)  # the analysis reads stages as separate curves
    ev = pd.read_parquet(out / "events")
    assert sorted(set(ev.model)) == [f"testorg/OLMo-2-tiny@{s}" for s in ("stage1", "stage2-ingredient1", "stage2-ingredient2")]


def test_smollm2_step_dash_names(local_hub, tmp_path):
    repo = local_hub.add_repo("SmolLM2-tiny", branches=SMOL)
    revs = HubSource(repo.repo_id).revisions()
    assert [(r.name, r.step, r.stage, r.tokens) for r in revs] == [(n, int(n[5:]), None, None) for n in SMOL]
    res = quiet(repo.repo_id, tmp_path / "ds", revisions="every-2000")
    assert res.measured == list(SMOL)
    g = pd.read_parquet(tmp_path / "ds" / "geometry")
    assert sorted(set(g.step)) == [0, 2000, 4000] and g.stage.isna().all()
    assert quiet(repo.repo_id, tmp_path / "ds", revisions="every-2000").measured == []
    assert cache_bytes() < 100_000


@pytest.fixture
def pythia_hazards(local_hub):
    """Pythia-shaped, two shards per checkpoint; step1000 has no weight file (pythia#107); step3000's first
    shard is step2000's (pythia#206)."""
    return local_hub.add_repo("pythia-hazards", steps=(0, 1000, 2000, 3000), shards=2, weightless=("step1000",),
                              share_shard={"step3000": "step2000"})


def test_weightless_branch_fails_alone_and_shared_shard_is_flagged(pythia_hazards, tmp_path, caplog):
    from ckptgeo.errors import DuplicateWeightsWarning

    out = tmp_path / "ds"
    caplog.set_level("INFO", logger="ckptgeo.progress")
    with pytest.warns(DuplicateWeightsWarning, match=r"step3000 has model-00001-of-00002\.safetensors of step2000"):
        res = scan(pythia_hazards.repo_id, out=out, revisions="all", suites=(SUITE,), n_samples=8,
                   on_error="skip")
    assert res.measured == ["step0", "step2000", "step3000"]
    assert list(res.failed) == ["step1000"] and "no weight files" in res.failed["step1000"]
    said = [r.getMessage().split(": ", 1)[1].split(";")[0] for r in caplog.records if r.name == "ckptgeo.progress"]
    assert said[2] == "step1000 failed (the warning above says why) (2/4, 50%)", said   # before: "finished"
    assert said[1].startswith("step0 finished (1/4, 25%)"), said
    rv = pd.read_parquet(out / "revisions").set_index("revision").sort_values("step")
    print(rv[["step", "status", "error", "files", "duplicate_of", "shared_shards_with"]].to_string())
    assert rv.status.to_dict() == {"step0": "ok", "step1000": "failed", "step2000": "ok", "step3000": "ok"}
    assert "has no weight files" in rv.loc["step1000", "error"]
    assert list(rv.loc["step3000", "shared_shards_with"]) == ["step2000"]
    assert rv.loc[["step0", "step2000"], "shared_shards_with"].isna().all()
    assert rv.duplicate_of.isna().all(), "a shared shard is not a whole duplicate"
    first = {r: rv.loc[r, "sha256"][list(rv.loc[r, "files"]).index("model-00001-of-00002.safetensors")]
             for r in ("step2000", "step3000")}
    assert first["step2000"] == first["step3000"]
    g = pd.read_parquet(out / "geometry")
    assert sorted(set(g.revision)) == ["step0", "step2000", "step3000"]
    assert g[g.layer == 2].value.nunique() == 3, "step3000's second shard is its own: different values"
    # a rerun measures only what failed, and it fails again the same way
    res2 = quiet(pythia_hazards.repo_id, out, revisions="all")
    assert res2.measured == [] and list(res2.failed) == ["step1000"] and len(res2.skipped) == 3
    assert cache_bytes() < 100_000


def test_weightless_branch_with_on_error_raise_stops_there(pythia_hazards, tmp_path):
    from ckptgeo.errors import CorruptCheckpointError

    with pytest.raises(CorruptCheckpointError, match="step1000 has no weight files"):
        quiet(pythia_hazards.repo_id, tmp_path / "ds", revisions="all", on_error="raise")
    rv = pd.read_parquet(tmp_path / "ds" / "revisions").set_index("revision")
    assert rv.status.to_dict() == {"step0": "ok", "step1000": "failed"}


# ------------------------------------------------------------------------------------------------
# offline: fetch on a "login node", scan with HF_HUB_OFFLINE=1 on a "compute node"
# ------------------------------------------------------------------------------------------------
def test_fetch_then_offline_scan_and_uncached_revision_fails_without_network(local_hub, tmp_path, monkeypatch,
                                                                               capsys):
    import time

    import huggingface_hub.constants as hc

    from ckptgeo.cli import main
    from ckptgeo.errors import RevisionNotFoundError
    from tests._faults import FaultProxy

    repo = local_hub.repo_id
    one = local_hub.repo.weight_bytes["step0"]
    assert main(["fetch", repo, "--revisions", "step1000,step2000", "--max-disk", str(one)]) == 5  # DiskSpaceError
    assert "need" in capsys.readouterr().err and cache_bytes() < 50_000, "refused before downloading"
    assert main(["fetch", repo, "--revisions", "step1000,step2000", "--max-disk", str(3 * one)]) == 0
    assert "fetched 2 revisions" in capsys.readouterr().out
    with FaultProxy(local_hub.url) as proxy:  # any request the offline code makes would show up here
        monkeypatch.setattr(hc, "ENDPOINT", proxy.url)
        monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
        src = HubSource(repo)
        assert [(r.name, r.commit) for r in src.revisions()] == [
            (n, local_hub.commits[n]) for n in ("step1000", "step2000")]
        assert main(["revisions", repo]) == 0 and "2 revisions" in capsys.readouterr().out
        res = quiet(repo, tmp_path / "ds", revisions="all")
        assert res.measured == ["step1000", "step2000"] and not res.failed
        rv = pd.read_parquet(tmp_path / "ds" / "revisions").set_index("revision")
        assert rv.loc["step2000", "sha256"][0] == local_hub.repo.weight_sha256["step2000"]
        t0 = time.perf_counter()
        with pytest.raises(RevisionNotFoundError, match=r"'step3000' not found .*HF_HUB_OFFLINE=1.*local cache"):
            quiet(repo, tmp_path / "ds2", revisions="step3000")
        print(f"uncached revision refused offline in {time.perf_counter() - t0:.3f} s")
        assert proxy.log == [], "offline: no HTTP request at all"
    assert cache_bytes() > 2 * one, "the scan kept the fetched revisions (the user's own cache)"


def test_offline_cli_in_a_fresh_process(local_hub, tmp_path):
    """HF_HUB_OFFLINE=1 from the environment, as on a compute node (huggingface_hub reads it at import)."""
    import os
    import subprocess
    import sys

    import huggingface_hub.constants as hc

    from ckptgeo.cli import main

    assert main(["fetch", local_hub.repo_id, "--revisions", "step4"]) == 0
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_CACHE": hc.HF_HUB_CACHE}
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = str(root)

    def run(*args):
        return subprocess.run([sys.executable, "-m", "ckptgeo", *args], cwd=root, env=env, capture_output=True,
                              text=True, timeout=120)

    ok = run("revisions", local_hub.repo_id)
    assert ok.returncode == 0 and ok.stdout.splitlines()[-2].split() == ["1", "revision"], ok.stderr
    bad = run("revisions", local_hub.repo_id, "--revisions", "step8")
    assert bad.returncode != 0 and "'step8' not found" in bad.stderr and "local cache" in bad.stderr


# ------------------------------------------------------------------------------------------------
# a Trainer push: checkpoint-N/ folders in one commit
# ------------------------------------------------------------------------------------------------
def test_trainer_subfolders_are_revisions_fetched_one_at_a_time(local_hub, tmp_path):
    repo = local_hub.add_repo("trainer-tiny", subfolders=("checkpoint-100", "checkpoint-200", "checkpoint-300"))
    revs = HubSource(repo.repo_id).revisions()
    assert [(r.name, r.step, r.subfolder, r.commit) for r in revs] == [
        (f"checkpoint-{s}", s, f"checkpoint-{s}", repo.commits["main"]) for s in (100, 200, 300)]
    mp = pytest.MonkeyPatch()
    peaks = record_fetch_peaks(mp)
    try:
        res = quiet(repo.repo_id, tmp_path / "ds", revisions="all", prefetch=0)
    finally:
        mp.undo()
    assert res.measured == ["checkpoint-100", "checkpoint-200", "checkpoint-300"]
    one = max(repo.weight_bytes.values())
    assert max(peaks) < 1.5 * one, ("one folder at a time", peaks, one)
    assert cache_bytes() < 100_000, "each folder is evicted after it is measured"
    rv = pd.read_parquet(tmp_path / "ds" / "revisions").set_index("revision")
    assert all(rv.loc[n, "sha256"][0] == repo.weight_sha256[n] for n in rv.index)
    g = pd.read_parquet(tmp_path / "ds" / "geometry")
    assert g[g.layer == 2].value.nunique() == 3
    assert quiet(repo.repo_id, tmp_path / "ds", revisions="all").measured == []


# ------------------------------------------------------------------------------------------------
# families of repos
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def polypythia(local_hub):
    """Three seeds of one run, one repo each, branches step0, step1000, step2000 (PolyPythia's shape)."""
    return [local_hub.add_repo(f"pythia-tiny-seed{k}", steps=(0, 1000, 2000), seed=k) for k in (1, 2, 3)]


@pytest.fixture
def multiberts(local_hub):
    """One repo per (seed, checkpoint), the checkpoint in main (MultiBERTs' shape)."""
    return {(s, k): local_hub.add_repo(f"multiberts-tiny-seed_{s}-step_{k}k", branches=("final",), seed=10 * s + k)
            for s in (0, 1) for k in (20, 40)}


def test_polypythia_seed_family_lists_scans_and_resumes(polypythia, tmp_path, capsys):
    from ckptgeo.cli import main

    spec = "testorg/pythia-tiny-seed{1..3}"
    assert main(["revisions", spec]) == 0
    out = capsys.readouterr().out
    print(out)
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["revision", "stage", "step", "tokens", "seed"] and lines[-2] == "9 revisions"
    row = next(line for line in lines if line.startswith("pythia-tiny-seed2@step1000"))
    assert row.split()[2:5] == ["1000", "2.1B", "2"]  # the pythia scheme: 2,097,152 tokens a step, 3 significant digits
    assert polypythia[1].commits["step1000"] in row
    res = quiet(spec, tmp_path / "ds", revisions="every-1000")
    assert len(res.measured) == 9 and not res.failed
    g = pd.read_parquet(tmp_path / "ds" / "geometry")
    assert sorted(set(zip(g.model, g.run_seed))) == [(f"testorg/pythia-tiny-seed{k}", k) for k in (1, 2, 3)]
    top = g[(g.layer == 2) & (g.step == 1000)]
    assert top.value.nunique() == 3, "each seed's own weights"
    assert cache_bytes() < 100_000
    assert quiet(spec, tmp_path / "ds", revisions="every-1000").measured == []
    assert len(pd.read_parquet(tmp_path / "ds" / "geometry")) == len(g)


def test_a_family_fetches_each_shared_file_once(local_hub, polypythia, tmp_path):
    """The members of a family (and the branches of each) hold one config.json and one tokenizer: each is
    fetched from the Hub once per member repo (the tokenizer once in all), not again for every revision after
    the previous one was evicted; the cache is still emptied at the end. Counted by the loopback server."""
    spec = "testorg/pythia-tiny-seed{1..3}"
    members = [f"testorg/pythia-tiny-seed{k}" for k in (1, 2, 3)]
    before = {m: local_hub.served_bytes(m) for m in members}
    res = quiet(spec, tmp_path / "ds", revisions="step0,step1000,step2000")
    assert len(res.measured) == 9 and not res.failed

    def served(member: str, path: str) -> dict[str, int]:   # revision -> bytes served by this scan
        now = local_hub.served_bytes(member)
        return {rev: n - before[member].get((rev, p), 0) for (rev, p), n in now.items()
                if p == path and n > before[member].get((rev, p), 0)}

    configs = {m: served(m, "config.json") for m in members}
    assert all(len(c) == 1 for c in configs.values()), configs   # before: one per revision (3 per member)
    assert len({n for c in configs.values() for n in c.values()}) == 1, "each one whole config, once"
    assert sum(len(served(m, "tokenizer.json")) for m in members) == 1
    assert sum(len(served(m, "model.safetensors")) for m in members) == 9
    assert cache_bytes() < 100_000, "measured revisions and the kept small files are evicted by the end"


def test_multiberts_repo_per_checkpoint_family(multiberts, tmp_path, capsys):
    from ckptgeo.cli import main

    spec = "testorg/multiberts-tiny-seed_{0,1}-step_{20,40}k"
    assert main(["revisions", spec]) == 0
    out = capsys.readouterr().out
    print(out)
    assert out.splitlines()[-2:] == ["4 revisions", f"next: ckptgeo scan '{spec}'"]
    from ckptgeo.sources.registry import open_source

    fam = open_source(spec)
    assert [(r.name, r.step, r.seed, r.model, r.commit) for r in fam.revisions()] == [
        (f"multiberts-tiny-seed_{s}-step_{k}k", 1000 * k, s, f"testorg/multiberts-tiny-seed_{s}",
         multiberts[(s, k)].commits["main"]) for k in (20, 40) for s in (0, 1)]
    res = quiet(spec, tmp_path / "ds")
    assert len(res.measured) == 4
    rv = pd.read_parquet(tmp_path / "ds" / "revisions")
    assert sorted(zip(rv.model, rv.step, rv.run_seed)) == [
        (f"testorg/multiberts-tiny-seed_{s}", 1000 * k, s) for s in (0, 1) for k in (20, 40)]
    assert all(rv.sha256.map(lambda x: x[0]).values == [multiberts[(s, k // 1000)].weight_sha256["main"]
                                                        for s, k in zip(rv.run_seed, rv.step)])
    assert quiet(spec, tmp_path / "ds").measured == [] and cache_bytes() < 100_000


def test_offline_trainer_folders_and_seed_family(local_hub, polypythia, tmp_path, monkeypatch):
    """What `ckptgeo fetch` put in the cache scans offline for the other shapes too: one folder of a
    Trainer push, one step of each seed of a family."""
    import huggingface_hub.constants as hc

    from ckptgeo.cli import main
    from ckptgeo.errors import RevisionNotFoundError

    trainer = local_hub.add_repo("trainer-tiny", subfolders=("checkpoint-100", "checkpoint-200", "checkpoint-300"))
    family = "testorg/pythia-tiny-seed{1..3}"
    assert main(["fetch", trainer.repo_id, "--revisions", "checkpoint-200"]) == 0
    assert main(["fetch", family, "--revisions", "1000"]) == 0
    monkeypatch.setattr(hc, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    assert [r.name for r in HubSource(trainer.repo_id).revisions()] == ["checkpoint-200"]
    res = quiet(trainer.repo_id, tmp_path / "t", revisions="all")
    assert res.measured == ["checkpoint-200"]
    rv = pd.read_parquet(tmp_path / "t" / "revisions")
    assert rv.sha256[0][0] == trainer.weight_sha256["checkpoint-200"]
    with pytest.raises(RevisionNotFoundError, match="checkpoint-300.*local cache"):
        quiet(trainer.repo_id, tmp_path / "t2", revisions="checkpoint-300")
    res = quiet(family, tmp_path / "f", revisions="all")
    assert sorted(res.measured) == [f"pythia-tiny-seed{k}@step1000" for k in (1, 2, 3)]
    g = pd.read_parquet(tmp_path / "f" / "geometry")
    assert sorted(set(g.run_seed)) == [1, 2, 3] and set(g.step) == {1000}


def test_analysis_keeps_stages_apart():
    """Same step in two stages: two curves, not one averaged point (tables.clean_geometry)."""
    from ckptgeo.analysis.inputs import clean_geometry

    rows = [{"model": "OLMo-2", "suite": "s", "config_hash": "h", "metric": "rankme", "layer": 0, "step": step,
             "stage": stage, "value": value}
            for stage, step, value in (("stage1", 0, 1.0), ("stage1", 1000, 2.0), ("stage2-ingredient1", 0, 5.0),
                                       ("stage2-ingredient1", 1000, 7.0))]
    curves = clean_geometry(pd.DataFrame(rows))
    got = {(m, s): v for m, s, v in zip(curves.model, curves.step, curves.value)}
    assert got == {("OLMo-2@stage1", 0): 1.0, ("OLMo-2@stage1", 1000): 2.0,
                   ("OLMo-2@stage2-ingredient1", 0): 5.0, ("OLMo-2@stage2-ingredient1", 1000): 7.0}
