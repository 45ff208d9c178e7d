"""Scans over real HTTP: the unmodified huggingface_hub / transformers clients against the loopback Hub."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ckptgeo.errors import DiskSpaceError, DuplicateWeightsWarning, RevisionNotFoundError, SourceNotFoundError
from ckptgeo.sources.revisions import select_revisions
from ckptgeo.engine.scan import plan_scan, scan
from ckptgeo.sources.hub import HubSource
from ckptgeo.store.schemas import TIMING_COLUMNS
from tests._checkpoints import SUITE, cache_bytes, record_fetch_peaks

ROOT = Path(__file__).resolve().parents[1]
FIVE = "step0,step1,step2,step4,step8"


def test_listing_matches_the_served_branches(local_hub):
    revs = HubSource(local_hub.repo_id).revisions()
    assert [r.step for r in revs] == sorted(local_hub.steps)
    assert all(r.commit == local_hub.commits[r.name] for r in revs)
    assert "main" not in [r.name for r in revs]


@pytest.mark.parametrize("selector,steps", [
    ("all", [0, 1, 2, 4, 8, 16, 32, 64, 1000, 2000, 3000]), ("every-1000", [0, 1000, 2000, 3000]),
    ("log", [0, 1, 2, 4, 8, 16, 32, 64]), ("4:1000", [4, 8, 16, 32, 64, 1000]), ("0:64:16", [0, 16, 32, 64]),
    ("step2000,16", [16, 2000]), ("main", [3000]), ("final", [3000]),
])
def test_every_selector_form(local_hub, selector, steps):
    assert [r.step for r in select_revisions(HubSource(local_hub.repo_id).revisions(), selector)] == steps


def test_missing_revision_and_repo(local_hub, tmp_path):
    with pytest.raises(RevisionNotFoundError, match="step999") as info:
        scan(local_hub.repo_id, revisions="step999", suites=(SUITE,), out=tmp_path / "a")
    assert info.value.closest[0] == "step1000"
    with pytest.raises(SourceNotFoundError, match="testorg/nope"):
        scan("testorg/nope", suites=(SUITE,), out=tmp_path / "b")


def test_a_misspelled_repo_id_is_a_missing_repository_on_a_mirror_answering_entry_not_found(local_hub, tmp_path,
                                                                                            capsys):
    """Issue 45 item 5: a Hub (an olah mirror) that answers a missing repository's refs with 404 EntryNotFound made
    `scan` and `revisions` say "a file listed for None is missing on the Hub". Now: the repository does not
    exist, with the close known id; probe's default source is answered the same way."""
    from ckptgeo.cli import main
    from scripts.olah_local import STOCK_MISSING_ORG

    repo = f"{STOCK_MISSING_ORG}/pythia-14n"
    for argv in (["scan", repo, "--out", str(tmp_path / "ds"), "--suite", SUITE], ["revisions", repo]):
        assert main(argv) == SourceNotFoundError.exit_code
        err = capsys.readouterr().err
        assert f"Repository '{repo}' does not exist on {local_hub.url}" in err, err
        assert "a file listed for" not in err
    with pytest.raises(SourceNotFoundError, match=r"'EleutherAI/pythia-14n' does not exist .* Did you mean "
                                                  r"EleutherAI/pythia-14m\?"):
        scan("EleutherAI/pythia-14n", suites=(SUITE,), out=tmp_path / "b")
    assert main(["probe", "--suite", "logic", "--out", str(tmp_path / "p")]) == SourceNotFoundError.exit_code
    assert "Repository 'EleutherAI/pythia-160m' does not exist" in capsys.readouterr().err
    assert not (tmp_path / "ds").exists() and not (tmp_path / "p").exists()


def test_scan_five_revisions_resume_and_bounded_cache(local_hub, tmp_path, monkeypatch):
    peaks = record_fetch_peaks(monkeypatch)
    out = tmp_path / "ds"
    res = scan(local_hub.repo_id, revisions=FIVE, suites=(SUITE,), n_samples=16, out=out, prefetch=1)
    assert res.measured == FIVE.split(",")
    g = pd.read_parquet(out / "geometry")
    assert len(g) == 5 * 3 and all(sorted(layers) == [0, 1, 2] for _, layers in g.groupby("revision").layer)
    assert dict(zip(g.revision, g.commit)) == {r: local_hub.commits[r] for r in FIVE.split(",")}
    assert g[g.layer == 2].value.nunique() == 5, "each revision's own weights were measured"
    rv = pd.read_parquet(out / "revisions").set_index("revision")
    assert all(rv.loc[r, "sha256"][0] == local_hub.repo.weight_sha256[r] for r in FIVE.split(","))
    # one revision's weights is ~236 KB; with prefetch 1 at most 2 revisions (+ tokenizer/config) are cached
    one = max(local_hub.repo.weight_bytes.values())
    assert max(peaks) <= 2 * one + 100_000, (peaks, one)
    assert cache_bytes() < 100_000, "measured revisions are evicted"
    res2 = scan(local_hub.repo_id, revisions=FIVE, suites=(SUITE,), n_samples=16, out=out)
    assert res2.measured == [] and len(pd.read_parquet(out / "geometry")) == 15
    assert peaks == peaks[:5], "the rerun fetched nothing"


def test_duplicates_are_skipped_unfetched_and_flagged(local_hub, tmp_path):
    repo = local_hub.add_repo("pythia-dup", steps=(0, 1000, 2000, 3000), duplicate={"step3000": "step1000"})
    with pytest.warns(DuplicateWeightsWarning, match="step3000"):
        res = scan(repo.repo_id, revisions="all", suites=(SUITE,), n_samples=8, out=tmp_path / "ds")
    # issue 45 item 11: the duplicate was counted as measured ("measured 4" of 3 measured + 1 duplicate)
    assert res.measured == ["step0", "step1000", "step2000"] and res.duplicated == ["step3000"]
    rv = pd.read_parquet(tmp_path / "ds" / "revisions").set_index("revision")
    assert rv.loc["step3000", "status"] == "duplicate" and rv.loc["step3000", "duplicate_of"] == "step1000"
    assert set(pd.read_parquet(tmp_path / "ds" / "geometry").revision) == {"step0", "step1000", "step2000"}


def test_keep_cache_and_preexisting_revisions_stay(local_hub, tmp_path):
    from huggingface_hub import scan_cache_dir, snapshot_download

    snapshot_download(local_hub.repo_id, revision="step2")  # the user's own copy
    scan(local_hub.repo_id, revisions="step1,step2,step4", suites=(SUITE,), n_samples=8, out=tmp_path / "ds")
    cached = {r.commit_hash for repo in scan_cache_dir().repos for r in repo.revisions if r.nb_files > 1}
    assert local_hub.commits["step2"] in cached
    assert local_hub.commits["step1"] not in cached and local_hub.commits["step4"] not in cached
    scan(local_hub.repo_id, revisions="step8", suites=(SUITE,), n_samples=8, out=tmp_path / "ds2", keep_cache=True)
    assert local_hub.commits["step8"] in {r.commit_hash for repo in scan_cache_dir().repos for r in repo.revisions}


def test_dry_run_and_max_disk(local_hub, tmp_path):
    plan = plan_scan(local_hub.repo_id, revisions=FIVE, suites=(SUITE,), prefetch=2)
    one = local_hub.repo.weight_bytes["step0"]
    assert plan.bytes_to_fetch == sum(local_hub.repo.weight_bytes[r] for r in FIVE.split(","))
    assert plan.peak_disk == 3 * one
    assert cache_bytes() == 0
    with pytest.raises(DiskSpaceError, match="max-disk") as info:
        scan(local_hub.repo_id, revisions=FIVE, suites=(SUITE,), max_disk=one, out=tmp_path / "ds")
    assert info.value.needed == 2 * one
    assert cache_bytes() < 50_000, "nothing but the plan was fetched"


@pytest.mark.slow
def test_two_processes_equal_one(local_hub, tmp_path):
    one = tmp_path / "one"
    scan(local_hub.repo_id, revisions=FIVE, suites=(SUITE,), n_samples=16, out=one)
    two = tmp_path / "two"
    code = ("from ckptgeo.engine.scan import scan; "
            f"scan({local_hub.repo_id!r}, out={str(two)!r}, suites=({SUITE!r},), n_samples=16, revisions={FIVE!r})")
    env = {**os.environ, "WORLD_SIZE": "2", "CKPTGEO_NO_PROGRESS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env={**env, "RANK": str(r)}) for r in range(2)]
    assert [p.wait(300) for p in procs] == [0, 0]
    keys = {"geometry": ["revision", "layer"], "behavior": ["revision", "metric"], "revisions": ["revision"]}
    for table, key in keys.items():
        a, b = (pd.read_parquet(d / table).drop(columns=list(TIMING_COLUMNS), errors="ignore").sort_values(key)
                .reset_index(drop=True) for d in (one, two))
        pd.testing.assert_frame_equal(a, b)


def test_cli_scan_and_revisions(local_hub, tmp_path, capsys):
    from ckptgeo.cli import main

    assert main(["revisions", local_hub.repo_id, "--revisions", "every-1000", "--sizes"]) == 0
    text = capsys.readouterr().out
    assert local_hub.commits["step2000"] in text and "4 revisions" in text
    assert main(["scan", local_hub.repo_id, "--revisions", "step0,step1", "--suite", SUITE, "--n-samples", "8",
                 "--out", str(tmp_path / "ds")]) == 0
    assert len(pd.read_parquet(tmp_path / "ds" / "geometry")) == 6
    assert main(["scan", local_hub.repo_id, "--revisions", "step5", "--suite", SUITE]) == 3
    assert "closest existing: step4" in capsys.readouterr().err


def test_revisions_prints_a_size_column_only_where_sizes_are_known(local_hub, capsys):
    """`ckptgeo revisions REPO` printed a `size` header over an all-empty column (a Hub listing has no sizes);
    with --sizes the column is there, with each revision's weight bytes."""
    from ckptgeo.cli import main

    assert main(["revisions", local_hub.repo_id, "--revisions", "step0,step1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["revision", "stage", "step", "tokens", "commit"], lines
    assert lines[0] == lines[0].rstrip()
    assert main(["revisions", local_hub.repo_id, "--revisions", "step0,step1", "--sizes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["revision", "stage", "step", "tokens", "commit", "size"], lines
    assert all(line.endswith(" MB") for line in lines[1:3]), lines


def test_probe_logic_end_to_end_over_the_hub(local_hub, tmp_path):
    from ckptgeo.cli import main

    out = tmp_path / "ds"
    assert main(["probe", local_hub.repo_id, "--suite", "logic", "--revisions", "step0,step1000",
                 "--n-samples", "40", "--out", str(out)]) == 0
    p = pd.read_parquet(out / "probes")
    assert len(p) == 2 * 3 and set(p.revision) == {"step0", "step1000"} and (p.n == 40).all()
    assert p.control_accuracy.notna().all() and p.chance.between(0.4, 0.6).all()
    b = pd.read_parquet(out / "behavior")
    assert set(b.suite) == {"logic"} and b[b.metric == "accuracy"].value.between(0, 1).all()


@pytest.mark.public_data("blimp")
def test_blimp_subset_from_a_hub_dataset_repo(local_hub, tmp_path):
    """`--suite hf:ORG/NAME` reads a dataset repo through `datasets` from the loopback Hub."""
    import json
    import subprocess

    from ckptgeo.suites.items import load_suite
    from tests._checkpoints import BLIMP

    work = tmp_path / "w"
    work.mkdir()
    raw = (BLIMP / "anaphor_gender_agreement.jsonl").read_text().splitlines()[:50]
    (work / "anaphor.jsonl").write_text("\n".join(raw) + "\n")
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "t@e.invalid"], ["config", "user.name", "t"],
                 ["add", "-A"], ["commit", "-q", "-m", "data"]):
        subprocess.run(["git", "-C", str(work), *args], check=True, capture_output=True)
    repo = local_hub.mirrors / "datasets" / "testorg" / "blimp-mini"
    repo.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(repo)], check=True, capture_output=True)
    suite = load_suite("hf:testorg/blimp-mini")
    assert len(suite) == 50 and suite.kinds == {"minimal_pair"}
    first = json.loads(raw[0])
    assert (suite.items[0].good, suite.items[0].bad) == (first["sentence_good"], first["sentence_bad"])
    res = scan(local_hub.repo_id, revisions="step0", suites=("hf:testorg/blimp-mini",), n_samples=20,
               out=tmp_path / "ds")
    assert res.measured == ["step0"]
    assert set(pd.read_parquet(tmp_path / "ds" / "behavior").suite) == {"blimp-mini"}


def test_two_revision_names_that_sanitise_alike_get_parts_of_their_own(local_hub, tmp_path):
    """A family's `fam-seed1@step1000` (seed 1's branch) and `fam-seed1_step1000` (a repo of that one
    checkpoint) become the same file-name part once made safe: each must still get its own parts (before, the
    second was skipped as done and its rows never written)."""
    a = local_hub.add_repo("fam-seed1", steps=(1000,), seed=1)
    b = local_hub.add_repo("fam-seed1_step1000", branches=("final",), seed=2)
    spec, out = "testorg/fam-seed1,testorg/fam-seed1_step1000", tmp_path / "ds"
    names = ["fam-seed1@step1000", "fam-seed1_step1000"]
    res = scan(spec, revisions="all", suites=(SUITE,), n_samples=8, out=out)
    assert sorted(res.measured) == names and res.skipped == [] and not res.failed
    rv = pd.read_parquet(out / "revisions")
    assert sorted(rv.revision) == names and set(rv.status) == {"ok"}
    g = pd.read_parquet(out / "geometry")
    assert g.groupby("revision").size().to_dict() == dict.fromkeys(names, 3)
    assert dict(zip(g.revision, g.commit)) == dict(zip(names, (a.commits["step1000"], b.commits["main"])))
    parts = sorted(p.name for p in (out / "revisions").glob("*.parquet"))
    assert len(parts) == 2 and any("--fam-seed1_step1000--" in p for p in parts), parts   # a safe name is kept
    assert scan(spec, revisions="all", suites=(SUITE,), n_samples=8, out=out).measured == []
    assert len(pd.read_parquet(out / "geometry")) == 6, "both found done on resume"


def test_max_disk_counts_the_blobs_kept_for_a_later_revision(local_hub, tmp_path, monkeypatch):
    """step3000's first shard is step1000's (pythia#206): that blob is downloaded once and kept in the cache
    while step2000 is measured, so the peak is step2000's files plus the kept shard, not one revision; with
    keep_cache everything fetched stays. The plan's peak is what the cache really held."""
    repo = local_hub.add_repo("pythia-kept", steps=(1000, 2000, 3000), shards=2, share_shard={"step3000": "step1000"})
    sizes = {r: {f.name: f.size for f in HubSource(repo.repo_id).weight_files(r)}
             for r in select_revisions(HubSource(repo.repo_id).revisions(), "all")}
    by_name = {r.name: v for r, v in sizes.items()}
    shard = by_name["step1000"]["model-00001-of-00002.safetensors"]
    one = sum(by_name["step2000"].values())
    plan = plan_scan(repo.repo_id, revisions="all", suites=(SUITE,), prefetch=0)
    assert plan.peak_disk == one + shard, (plan.peak_disk, one, shard)
    kept = plan_scan(repo.repo_id, revisions="all", suites=(SUITE,), prefetch=0, keep_cache=True)
    assert kept.peak_disk == kept.bytes_to_fetch == sum(sum(v.values()) for v in by_name.values()) - shard
    with pytest.raises(DiskSpaceError, match="max-disk") as info:
        scan(repo.repo_id, revisions="all", suites=(SUITE,), prefetch=0, max_disk=one + shard // 2, out=tmp_path / "a")
    assert info.value.needed == one + shard
    peaks = record_fetch_peaks(monkeypatch)
    res = scan(repo.repo_id, revisions="all", suites=(SUITE,), n_samples=8, prefetch=0, max_disk=one + shard,
               out=tmp_path / "b")
    assert len(res.measured) == 3 and not res.failed
    assert one + shard <= max(peaks) <= one + shard + 100_000, (peaks, one, shard)   # + config and tokenizer
