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
    from ckptgeo.analysis.report import write_report
    from ckptgeo.analysis.pipeline import analyze

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
    from ckptgeo.analysis.inputs import left_out_text

    said = left_out_text(kept.left_out).splitlines()[0]   # no hint to do what was done
    assert "kept on purpose with --keep-grouped: step10000, step2000" in said and "--keep-grouped latest" not in said
    # step2000 was not measured (a duplicate): it takes step0's rows, at its own step
    g = a.curves  # noqa: F841
    raw = pd.read_parquet(out / "geometry")
    at0 = raw[(raw.revision == "step0") & (raw.metric == "rankme")].sort_values("layer").value.to_numpy()
    at2000 = kept.curves[(kept.curves.step == 2000) & (kept.curves.metric == "rankme")].sort_values("layer")
    assert at2000.value.to_numpy() == pytest.approx(at0)
    # the same events in tokens (the pythia scheme's batch: 2,097,152 tokens per step)
    e = a.events
    for c in ("first", "last", "acquisition", "onset"):
        known = e[f"{c}_step"].notna()
        assert (e.loc[known, f"{c}_tokens"] == e.loc[known, f"{c}_step"] * 2_097_152).all(), c
        assert e.loc[~known, f"{c}_tokens"].isna().all()
    assert (e.first_tokens == 3000 * 2_097_152).all()
    ev_path = tmp_path / "an" / "events" / "events.parquet"
    assert {"acquisition_tokens", "gap_tokens"} <= set(pd.read_parquet(ev_path).columns)
    by_tokens = analyze(out, window=2, write=False, x="tokens")
    assert by_tokens.x == "tokens" and sorted(by_tokens.curves.tokens.unique()) == [s * 2_097_152 for s in
                                                                                   (3000, 4000, 5000, 6000, 7000)]
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

    from ckptgeo.analysis.pipeline import analyze
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
    from ckptgeo.analysis.pipeline import analyze

    out = tmp_path / "ds"
    _scan(hub206.repo_id, out)
    a = analyze(out, window=1, write=False)
    assert sorted(a.curves.step.unique()) == [0, 2000]
    assert sorted(a.left_out.revision) == ["step3000", "step4000"]
    assert a.left_out.reason.str.contains("share weight file").all()


def test_x_tokens_without_tokens_is_a_one_line_error(tmp_path):
    from ckptgeo.analysis.pipeline import analyze
    from ckptgeo.errors import InvalidParameterError
    from tests._checkpoints import make_checkpoints

    ck = make_checkpoints(tmp_path / "ck" / "tiny", steps=(0, 1, 2))
    out = tmp_path / "ds"
    _scan_local(ck, out)
    with pytest.raises(InvalidParameterError, match="--x tokens: .* records no training tokens"):
        analyze(out, write=False, x="tokens")


def _scan_local(path, out):
    import warnings

    from ckptgeo.engine.scan import scan

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return scan(path, out=out, suites=(SUITE,), n_samples=8)


def test_with_gaps_breaks_the_line_at_left_out_revisions():
    import numpy as np

    from ckptgeo.analysis.figures import with_gaps

    x, y = with_gaps([3000, 4000, 5000, 7000, 10000], [1, 2, 3, 4, 5], [0, 1000, 6000, 8000, 9000])
    assert list(x) == [3000, 4000, 5000, 6000, 7000, 8000, 10000]
    assert np.isnan(y[3]) and np.isnan(y[5]) and list(y[[0, 1, 2, 4, 6]]) == [1, 2, 3, 4, 5]
    x, y = with_gaps([0, 1], [1, 2], [])
    assert list(x) == [0, 1] and not np.isnan(y).any()


def test_hub_listing_reads_stage_and_tokens_of_smollm3_and_olmo2_names(local_hub):
    smol = local_hub.add_repo("SmolLM3-tiny", branches=("stage1-step-0", "stage1-step-2000", "stage2-step-4000"))
    revs = HubSource(smol.repo_id).revisions()
    assert [(r.stage, r.step, r.tokens) for r in revs] == [("stage1", 0, 0), ("stage1", 2000, 2000 * 2_359_296),
                                                           ("stage2", 4000, 4000 * 2_359_296)]
    olmo = local_hub.add_repo("OLMo-2-noprefix", branches=("step0-tokens0B", "step150-tokens1B",
                                                           "stage2-ingredient1-step0-tokens1B"))
    assert [(r.name, r.stage) for r in HubSource(olmo.repo_id).revisions()] == [
        ("step0-tokens0B", "stage1"), ("step150-tokens1B", "stage1"),
        ("stage2-ingredient1-step0-tokens1B", "stage2-ingredient1")]


def test_one_training_point_under_two_names_is_no_group():
    """OLMo-2's stage-2 ingredients start from stage 1's end: the same weights at the same tokens are one
    training point, not a broken branch; the same weights at different tokens are a group."""
    from ckptgeo.sources.integrity import check_weights
    from ckptgeo.sources.protocol import WeightFile as W
    from ckptgeo.sources.revisions import revision_from_name

    revs = [revision_from_name(n) for n in ("stage1-step0-tokens0B", "stage1-step900-tokens4B",
                                            "stage2-ingredient1-step0-tokens4B", "stage2-ingredient1-step10-tokens5B")]
    files = {r.name: [W("model.safetensors", 1, sha)] for r, sha in zip(revs, "abbc")}
    assert check_weights(revs, files).groups == []
    files["stage2-ingredient1-step10-tokens5B"] = [W("model.safetensors", 1, "b")]
    assert [g.revisions for g in check_weights(revs, files).groups] == [
        ("stage1-step900-tokens4B", "stage2-ingredient1-step0-tokens4B", "stage2-ingredient1-step10-tokens5B")]


def test_integrity_of_a_local_folder_says_it_hashed_the_files(tmp_path):
    """Local folders carry no sha256 in any metadata, but the files are at hand: the report compares their
    hashes, and says so (not 'from metadata')."""
    from ckptgeo.sources.integrity import check_source
    from ckptgeo.sources.registry import open_source
    from tests._checkpoints import make_checkpoints

    ck = make_checkpoints(tmp_path / "ck" / "tiny", steps=(0, 1, 2))
    text = check_source(open_source(str(ck)), label="tiny").text()
    assert text.startswith("tiny: 3 revisions checked by hashing the local files"), text
    assert "no two of the 3 checked revisions serve the same weights" in text and "not checked" not in text, text



def test_cross_checkpoint_partners_are_genuine_revisions_and_say_so(hub205, tmp_path):
    """pythia#205 in small: step0 … step2000 serve main's weights, step8000 … step10000 the last step's.
    Weight distance against ``first`` / ``previous`` and CKA against ``previous`` / ``reference`` take partners
    among the genuine revisions only (step3000 first, step7000 last), in the scan's table and in the one
    ``analyze`` rebuilds; each row records the choice and its own group."""
    import warnings

    from ckptgeo.analysis.pipeline import analyze
    from ckptgeo.engine.scan import scan

    out = tmp_path / "ds"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scan(hub205.repo_id, out=out, revisions="all", suites=(SUITE,), n_samples=8,
             metrics=("rankme", "cka", "weight_distance"))
    a = analyze(out, window=2, out=tmp_path / "an")
    from ckptgeo.analysis.report import write_report

    report = write_report(out, analysis=a, plots=False).read_text()
    section = report.split("## Checkpoint against checkpoint (CKA, weight distance)\n", 1)[1].split("\n## ", 1)[0]
    assert "genuine revisions only" in section and "step0, step8000" in section, section
    row = next(line for line in section.splitlines() if line.startswith("| EleutherAI") or "| step4000 |" in line
               and line.startswith("|"))
    assert "(vs step3000)" in row, row
    for c in (pd.read_parquet(out / "compare" / "compare.parquet"),
              pd.read_parquet(tmp_path / "an" / "compare" / "compare.parquet")):
        assert set(c.partners_from) == {"genuine"}
        assert set(c.partner) <= set(GENUINE), sorted(set(c.partner))
        wd = c[c.metric == "weight_distance"]
        assert set(wd[wd.against == "first"].partner) == {"step3000"}
        prev = wd[wd.against == "previous"].drop_duplicates("revision").set_index("revision")["partner"]
        assert "step3000" not in prev.index and prev["step4000"] == "step3000" and prev["step8000"] == "step7000"
        assert set(c[(c.metric == "cka") & (c.against == "reference")].partner) == {"step7000"}
        own = c.drop_duplicates("revision").set_index("revision")["weight_group"]
        assert own["step0"] == "step0" and pd.isna(own["step3000"])
    kept = analyze(out, window=2, write=False, keep_grouped=["step8000"]).tables["compare"]
    assert set(kept[(kept.metric == "cka") & (kept.against == "reference")].partner) == {"step8000"}   # kept on purpose


def test_a_local_folder_is_checked_by_hashing_its_files(tmp_path, capsys):
    """``revisions DIR --integrity`` on a local folder hashes the files at hand (no sha256 in any metadata):
    a byte copy at another step is a group, and ``--revisions genuine`` leaves it out."""
    from ckptgeo.cli import main
    from ckptgeo.engine.plan import plan_scan
    from ckptgeo.sources.integrity import check_source
    from ckptgeo.sources.local import LocalSource
    from tests._checkpoints import make_checkpoints

    root = make_checkpoints(tmp_path / "run", steps=(0, 1, 2, 4), duplicate={"step4": "step1"})
    report = check_source(LocalSource(root))
    assert [g.revisions for g in report.groups] == [("step1", "step4")]
    assert [r.name for r in report.genuine] == ["step0", "step2"]
    assert main(["revisions", str(root), "--integrity"]) == 0
    assert "step1" in capsys.readouterr().out
    plan = plan_scan(root, revisions="genuine", suites=(SUITE,), out=tmp_path / "ds")
    assert [r.name for r in plan.selected] == ["step0", "step2"]
