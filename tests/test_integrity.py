"""Integrity of a trajectory over the loopback Hub: repos built like EleutherAI/pythia#205 (early branches
serving ``main``'s weights, a block serving the last step's, genuine ones between) and #206 (a reused
shard). ``--integrity`` reads metadata only (requests counted on the real client); the analysis uses only
the genuine revisions and says what it left out; ``revisions/`` records seconds per stage."""

from __future__ import annotations

import pandas as pd
import pytest

from ckptgeo.sources.hub import HubSource
from tests._checkpoints import SUITE

#: pythia#205 in small: step0..step2000 serve main's weights (main is not the last step), step8000 and
#: step9000 serve step10000's, step3000..step7000 are genuine
STEPS = (0, 3000, 4000, 5000, 6000, 7000, 10000)
DUPS = {"step1000": "step0", "step2000": "step0", "step8000": "step10000", "step9000": "step10000"}
GENUINE = ["step3000", "step4000", "step5000", "step6000", "step7000"]


@pytest.fixture
def hub205(local_hub):
    return local_hub.add_repo("pythia-205", steps=STEPS, duplicate=DUPS, main="step0")


@pytest.fixture
def hub206(local_hub):
    """Two shards per checkpoint; step3000's first shard is step4000's (pythia#206); step1000 has no weights."""
    return local_hub.add_repo("pythia-206", steps=(0, 1000, 2000, 4000), shards=2, weightless=("step1000",),
                              share_shard={"step3000": "step4000"})


@pytest.fixture
def requests_made():
    """Every HTTP request huggingface_hub's own client makes during the test: (method, path)."""
    import huggingface_hub
    from huggingface_hub.utils._http import default_client_factory

    seen: list[tuple[str, str]] = []

    def factory():
        client = default_client_factory()
        client.event_hooks["request"].append(lambda req: seen.append((req.method, req.url.path)))
        return client

    huggingface_hub.set_client_factory(factory)
    yield seen
    huggingface_hub.set_client_factory(default_client_factory)


def test_integrity_groups_from_metadata_without_downloading(hub205, requests_made, capsys):
    from ckptgeo.cli import main

    assert main(["revisions", hub205.repo_id, "--integrity"]) == 0
    out = capsys.readouterr().out
    print(out)
    print(f"{len(requests_made)} requests: {requests_made}")
    assert "3 revisions step0 … step2000 serve the weights of main" in out
    assert "3 revisions step8000 … step10000 serve the weights of the last step (step10000)" in out
    assert "genuine trajectory: 5 of 11 revisions, steps 3000 … 7000" in out
    assert "= step3000, step4000, step5000, step6000, step7000" in out
    assert not any("/resolve/" in path for _, path in requests_made), "no file is downloaded"
    # one listing of the branches, one file listing per distinct commit (main is step0's commit: reused);
    # the loopback server answers /tree/<sha> with a redirect to /tree/<sha>/, which the client follows
    listings = [p.rstrip("/") for _, p in requests_made]
    assert len(set(listings)) == 1 + len(set(hub205.commits.values())) == 12
    assert len(listings) <= 2 * 12 and sum(p.endswith("/refs") for p in listings) == 1


def test_genuine_selector_is_exactly_the_revisions_in_no_group(hub205, hub206):
    from ckptgeo.engine.plan import plan_scan

    plan = plan_scan(hub205.repo_id, revisions="genuine", suites=(SUITE,))
    assert [r.name for r in plan.selected] == GENUINE
    plan = plan_scan(hub206.repo_id, revisions="genuine", suites=(SUITE,))
    assert [r.name for r in plan.selected] == ["step0", "step2000"]


def test_shared_shard_and_weightless_branch_in_the_report(hub206, capsys):
    from ckptgeo.sources.integrity import check_source

    rep = check_source(HubSource(hub206.repo_id))
    assert [(g.kind, g.revisions, g.files) for g in rep.groups] == [
        ("shared shards", ("step3000", "step4000"), ("model-00001-of-00002.safetensors",))]
    assert rep.weightless == ["step1000"]
    assert "step3000 and step4000 share weight file(s) model-00001-of-00002.safetensors" in rep.text()


def _scan(repo_id, out):
    import warnings

    from ckptgeo.engine.scan import scan

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return scan(repo_id, out=out, revisions="all", suites=(SUITE,), n_samples=8)


def test_scan_keeps_groups_in_revisions_and_the_analysis_leaves_them_out(hub205, tmp_path):
    from ckptgeo.analysis.figures import write_report
    from ckptgeo.analysis.summary import analyze

    out = tmp_path / "ds"
    res = _scan(hub205.repo_id, out)
    assert [g.describe() for g in res.groups] == [
        "3 revisions step0 … step2000 serve the weights of main",
        "3 revisions step8000 … step10000 serve the weights of the last step (step10000)"]
    rv = pd.read_parquet(out / "revisions").set_index("revision")
    assert rv.weight_group.dropna().to_dict() == {"step0": "step0", "step1000": "step0", "step2000": "step0",
                                                  "step8000": "step8000", "step9000": "step8000",
                                                  "step10000": "step8000"}
    assert rv.loc["step1000", "group_note"] == "3 revisions step0 … step2000 serve the weights of main"
    # seconds per stage of a measured revision; a duplicate is neither fetched nor measured
    ok = rv.loc["step3000"]
    for col in ("seconds_download", "seconds_wait", "seconds_verify", "seconds_load", "seconds_write"):
        assert ok[col] >= 0, col
    assert list(ok.measure_names) == ["rankme", "behavior"] or set(ok.measure_names) >= {"rankme"}
    assert len(ok.measure_seconds) == len(ok.measure_names) and min(ok.measure_seconds) >= 0
    assert pd.isna(rv.loc["step1000", "seconds_load"])

    a = analyze(out, window=2, out=tmp_path / "an")
    assert sorted(a.left_out.revision) == ["step0", "step1000", "step10000", "step2000", "step8000", "step9000"]
    assert sorted(a.curves.step.unique()) == [3000, 4000, 5000, 6000, 7000]
    assert sorted(a.accuracy.step.unique()) == [3000, 4000, 5000, 6000, 7000]
    assert (a.events.first_step == 3000).all() and (a.events.last_step == 7000).all()
    report = write_report(out, analysis=a, plots=True).read_text()
    assert "6 revisions left out of events, figures and claims" in report
    assert "step0 … step2000 serve the weights of main" in report

    kept = analyze(out, window=2, write=False, keep_grouped="latest")
    assert sorted(kept.curves.step.unique()) == [2000, 3000, 4000, 5000, 6000, 7000, 10000]
    # step2000 was not measured (a duplicate): it takes step0's rows, at its own step
    g = a.curves  # noqa: F841
    raw = pd.read_parquet(out / "geometry")
    at0 = raw[(raw.revision == "step0") & (raw.metric == "rankme")].sort_values("layer").value.to_numpy()
    at2000 = kept.curves[(kept.curves.step == 2000) & (kept.curves.metric == "rankme")].sort_values("layer")
    assert at2000.value.to_numpy() == pytest.approx(at0)
    named = analyze(out, window=2, write=False, keep_grouped=["step9000"])
    assert 9000 in set(named.curves.step) and 10000 not in set(named.curves.step)
    from ckptgeo.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="step4000: not in any group"):
        analyze(out, write=False, keep_grouped=["step4000"])
    with pytest.raises(InvalidParameterError, match="at most one revision per group"):
        analyze(out, write=False, keep_grouped=["step8000", "step9000"])


def test_older_dataset_without_group_columns_still_leaves_groups_out(hub205, tmp_path):
    """A dataset written before ``weight_group`` and the seconds columns existed: still read, and the groups
    come from the recorded sha256 (main unknown there, so the note names no branch)."""
    import pyarrow.parquet as pq

    from ckptgeo.analysis.summary import analyze
    from ckptgeo.store.schemas import REVISION_GROUP, REVISION_SECONDS

    out = tmp_path / "ds"
    _scan(hub205.repo_id, out)
    for p in (out / "revisions").glob("*.parquet"):
        t = pq.read_table(p)
        pq.write_table(t.drop([c for c, _ in REVISION_GROUP + REVISION_SECONDS]), p)
    a = analyze(out, window=2, write=False)
    assert sorted(a.curves.step.unique()) == [3000, 4000, 5000, 6000, 7000]
    assert len(a.left_out) == 6


def test_shared_shard_revisions_are_left_out(hub206, tmp_path):
    from ckptgeo.analysis.summary import analyze

    out = tmp_path / "ds"
    _scan(hub206.repo_id, out)
    a = analyze(out, window=1, write=False)
    assert sorted(a.curves.step.unique()) == [0, 2000]
    assert sorted(a.left_out.revision) == ["step3000", "step4000"]
    assert a.left_out.reason.str.contains("share weight file").all()
