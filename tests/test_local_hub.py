"""The loopback Hub (scripts/olah_local.py over scripts/make_test_repo.py) seen by the real clients.

These tests pin down what ckptgeo's Hub source can rely on when run against ``local_hub``: branch
listing, commit resolution, selective downloads, file sizes and sha256 *before* download, the
errors for unknown revisions and files, cache eviction, and the fault branches.
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
from pathlib import Path

import pytest

PROMPT = ("On a shelf, there are three books: a black book, an orange book, and a blue book. "
          "The blue book is to the right of the orange book. The orange book is to the right of the black book.")


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_list_repo_refs_returns_step_branches(local_hub):
    from huggingface_hub import list_repo_refs

    refs = list_repo_refs(local_hub.repo_id)
    branches = {b.name: b.target_commit for b in refs.branches}
    assert set(branches) == {"main"} | {f"step{s}" for s in local_hub.steps}
    assert branches == dict(local_hub.commits)
    assert branches["main"] == branches[f"step{max(local_hub.steps)}"]
    assert len(set(branches.values())) == len(local_hub.steps), "each step has its own commit"


def test_model_info_resolves_revisions(local_hub):
    from huggingface_hub import HfApi

    api = HfApi()
    assert api.model_info(local_hub.repo_id, revision="step1000").sha == local_hub.commits["step1000"]
    assert api.model_info(local_hub.repo_id).sha == local_hub.commits["main"]
    # a commit sha resolves to itself
    sha = local_hub.commits["step8"]
    assert api.model_info(local_hub.repo_id, revision=sha).sha == sha
    siblings = {s.rfilename for s in api.model_info(local_hub.repo_id, revision="step0").siblings}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= siblings


def test_snapshot_download_fetches_only_allowed_files(local_hub, tmp_path):
    from huggingface_hub import constants, snapshot_download

    folder = Path(snapshot_download(local_hub.repo_id, revision="step2",
                                    allow_patterns=["config.json", "*.safetensors"]))
    assert folder.is_relative_to(tmp_path), f"download went to {folder}, outside the per-test cache"
    assert folder.name == local_hub.commits["step2"]
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    assert _sha256(folder / "model.safetensors") == local_hub.repo.weight_sha256["step2"]
    assert Path(constants.HF_HUB_CACHE).is_relative_to(tmp_path)


def test_weights_differ_across_steps_and_match_the_repo(local_hub):
    from huggingface_hub import hf_hub_download

    digests = {}
    for branch in ("step0", "step1", "step3000", "main"):
        path = hf_hub_download(local_hub.repo_id, "model.safetensors", revision=branch)
        digests[branch] = _sha256(path)
        assert digests[branch] == local_hub.repo.weight_sha256[branch]
    assert len({digests["step0"], digests["step1"], digests["step3000"]}) == 3
    assert digests["main"] == digests["step3000"]


def test_from_pretrained_and_tokenizer(local_hub, device):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, info = AutoModelForCausalLM.from_pretrained(local_hub.repo_id, revision="step1000",
                                                       output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert model.config.num_hidden_layers == local_hub.repo.shape.num_hidden_layers
    tok = AutoTokenizer.from_pretrained(local_hub.repo_id, revision="step1000")
    # Pythia declares no pad token; transformers 5 GPTNeoXTokenizer defaults it to <|padding|> (id 1)
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token in (None, "<|padding|>")
    ids = tok(PROMPT, return_tensors="pt").input_ids
    assert 30 <= ids.shape[1] <= 80, f"{ids.shape[1]} tokens for a {len(PROMPT.split())}-word prompt"
    assert tok.decode(ids[0]) == PROMPT
    model = model.to(device).eval()
    with torch.no_grad():
        out = model(ids.to(device), output_hidden_states=True)
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    assert torch.isfinite(out.logits).all()


def test_unknown_revision_and_file_errors(local_hub):
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    api = HfApi()
    with pytest.raises(RevisionNotFoundError):
        api.model_info(local_hub.repo_id, revision="step999")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(local_hub.repo_id, "config.json", revision="step999")
    with pytest.raises(RevisionNotFoundError):
        snapshot_download(local_hub.repo_id, revision="nosuch", allow_patterns=["config.json"])
    with pytest.raises(RevisionNotFoundError):
        api.list_repo_tree(local_hub.repo_id, revision="nosuch").__next__()
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(local_hub.repo_id, "pytorch_model.bin", revision="step0")
    with pytest.raises(RepositoryNotFoundError):
        api.list_repo_refs("testorg/no-such-repo")


def test_sizes_and_sha256_before_download(local_hub, tmp_path):
    """What --dry-run / --max-disk can learn without fetching a byte of weights."""
    from huggingface_hub import HfApi, scan_cache_dir

    api, repo, rev = HfApi(), local_hub.repo, "step64"
    expected_size, expected_sha = repo.weight_bytes[rev], repo.weight_sha256[rev]

    info = api.model_info(local_hub.repo_id, revision=rev, files_metadata=True)
    by_name = {s.rfilename: s for s in info.siblings}
    weights = by_name["model.safetensors"]
    assert weights.size == expected_size and weights.lfs is not None
    assert weights.lfs.sha256 == expected_sha and weights.lfs.size == expected_size
    assert by_name["config.json"].lfs is None and by_name["config.json"].size > 0
    # without files_metadata the Hub sends names only; so does the local server
    assert api.model_info(local_hub.repo_id, revision=rev).siblings[0].size is None

    (paths_info,) = api.get_paths_info(local_hub.repo_id, ["model.safetensors"], revision=rev)
    assert paths_info.size == expected_size and paths_info.lfs.sha256 == expected_sha

    tree = {f.path: f for f in api.list_repo_tree(local_hub.repo_id, revision=rev)}
    assert tree["model.safetensors"].size == expected_size
    assert tree["model.safetensors"].lfs.sha256 == expected_sha

    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    meta = get_hf_file_metadata(hf_hub_url(local_hub.repo_id, "model.safetensors", revision=rev))
    assert (meta.size, meta.etag, meta.commit_hash) == (expected_size, expected_sha, local_hub.commits[rev])

    assert scan_cache_dir().size_on_disk == 0, "metadata calls must not download files"


def test_plain_blobs_give_size_but_no_sha256(local_hub):
    from huggingface_hub import HfApi

    repo = local_hub.add_repo("pythia-tiny-nolfs", steps=(0, 1), lfs=False)
    info = HfApi().model_info(repo.repo_id, revision="step1", files_metadata=True)
    weights = {s.rfilename: s for s in info.siblings}["model.safetensors"]
    assert weights.size == repo.weight_bytes["step1"] and weights.lfs is None
    assert len(weights.blob_id) == 40          # the git blob id, not a sha256


def test_cache_scan_and_delete_revisions(local_hub, tmp_path):
    from huggingface_hub import scan_cache_dir, snapshot_download

    for rev in ("step4", "step16"):
        snapshot_download(local_hub.repo_id, revision=rev, allow_patterns=["config.json", "*.safetensors"])
    cache = scan_cache_dir()
    assert Path(cache.repos and next(iter(cache.repos)).repo_path).is_relative_to(tmp_path)
    (repo_info,) = cache.repos
    assert {r.commit_hash for r in repo_info.revisions} == {local_hub.commits["step4"], local_hub.commits["step16"]}
    before = cache.size_on_disk
    strategy = cache.delete_revisions(local_hub.commits["step4"])
    assert strategy.expected_freed_size >= local_hub.repo.weight_bytes["step4"]
    strategy.execute()
    after = scan_cache_dir()
    (repo_info,) = after.repos
    assert {r.commit_hash for r in repo_info.revisions} == {local_hub.commits["step16"]}
    assert after.size_on_disk == before - strategy.expected_freed_size


def test_fault_branches_are_served_live(local_hub):
    from huggingface_hub import HfApi, hf_hub_download, list_repo_refs

    repo = local_hub.add_repo("pythia-faults", steps=(0, 1000, 2000), duplicate={"step3000": "step2000"},
                              corrupt=("step4000",), arch_changed=("step5000",), config_tweak=("step6000",))
    branches = {b.name: b.target_commit for b in list_repo_refs(repo.repo_id).branches}
    assert branches == dict(repo.commits)
    assert repo.steps == (0, 1000, 2000, 3000, 4000, 5000, 6000)

    api = HfApi()
    sha = {rev: {s.rfilename: s for s in api.model_info(repo.repo_id, revision=rev, files_metadata=True).siblings}
           ["model.safetensors"].lfs.sha256 for rev in ("step2000", "step3000", "step4000")}
    assert sha["step3000"] == sha["step2000"] != sha["step4000"]
    assert branches["step3000"] != branches["step2000"], "a duplicate is its own commit"

    corrupt = hf_hub_download(repo.repo_id, "model.safetensors", revision="step4000")
    assert Path(corrupt).stat().st_size == repo.weight_bytes["step4000"] == repo.weight_bytes["step0"] // 2

    config = json.loads(Path(hf_hub_download(repo.repo_id, "config.json", revision="step5000")).read_text())
    assert config["num_hidden_layers"] == repo.shape.num_hidden_layers + 1
    tweaked = json.loads(Path(hf_hub_download(repo.repo_id, "config.json", revision="step6000")).read_text())
    assert tweaked["use_cache"] is False and tweaked["hidden_size"] == repo.shape.hidden_size


def test_corrupt_weights_fail_to_load(local_hub):
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    repo = local_hub.add_repo("pythia-faults", steps=(0, 1000, 2000), duplicate={"step3000": "step2000"},
                              corrupt=("step4000",), arch_changed=("step5000",), config_tweak=("step6000",))
    with pytest.raises((SafetensorError, OSError, RuntimeError, ValueError)):
        AutoModelForCausalLM.from_pretrained(repo.repo_id, revision="step4000")


def test_range_requests_resume(local_hub):
    url = f"{local_hub.url}/{local_hub.repo_id}/resolve/step0/model.safetensors"
    request = urllib.request.Request(url, headers={"Range": "bytes=8-15"})
    with urllib.request.urlopen(request) as response:
        assert response.status == 206
        assert response.headers["Content-Range"] == f"bytes 8-15/{local_hub.repo.weight_bytes['step0']}"
        assert len(response.read()) == 8


def test_caches_are_per_test(tmp_path):
    import huggingface_hub.constants as constants
    from huggingface_hub import scan_cache_dir

    assert Path(constants.HF_HUB_CACHE).is_relative_to(tmp_path)
    assert Path(constants.HF_XET_CACHE).is_relative_to(tmp_path)
    assert scan_cache_dir().repos == frozenset()


def test_network_beyond_loopback_is_blocked():
    import socket

    with pytest.raises(OSError, match="blocks network access"):
        socket.create_connection(("huggingface.co", 443), timeout=1)
    with pytest.raises(OSError, match="blocks network access"):
        socket.create_connection(("10.255.255.1", 80), timeout=1)
