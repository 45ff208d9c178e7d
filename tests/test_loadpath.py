"""The load path: weights streamed into the resident model, downloads of shared files once, read-ahead,
and forward passes without wasted work (padding measured, shared suites run once, batch size and dtype
chosen for the device)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests._checkpoints import tiny_config

SUITE = str(Path(__file__).parent / "data" / "bbh_logical_deduction_three_objects.json")


def _save(folder: Path, seed: int, *, bin_file: bool = False, dtype=torch.float32) -> dict[str, torch.Tensor]:
    from transformers import GPTNeoXForCausalLM

    torch.manual_seed(seed)
    model = GPTNeoXForCausalLM(tiny_config()).to(dtype)
    folder.mkdir(parents=True)
    model.config.save_pretrained(folder)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if bin_file:
        torch.save(state, folder / "pytorch_model.bin")
    else:
        from safetensors.torch import save_file

        save_file(state, str(folder / "model.safetensors"))
    return state


@pytest.mark.parametrize("bin_file", [False, True])
@pytest.mark.parametrize("stored", [torch.float32, torch.float16])
def test_streamed_load_equals_the_files(tmp_path, bin_file, stored):
    """Every parameter after the streamed load equals the stored tensor (cast to the model's dtype), for
    safetensors and .bin, and a second revision replaces every one of them."""
    from ckptgeo.engine.model import ModelHolder

    first = _save(tmp_path / "a", 1, bin_file=bin_file, dtype=stored)
    second = _save(tmp_path / "b", 2, bin_file=bin_file, dtype=stored)
    holder = ModelHolder()
    holder.load(tmp_path / "a", revision="a")
    model = holder.load(tmp_path / "b", revision="b")
    own = model.state_dict()
    n = 0
    for key, tensor in second.items():
        name = key if key in own else key.replace("embed_out", "lm_head")
        if name in own:
            assert torch.equal(own[name], tensor.to(own[name].dtype)), name
            n += 1
    assert n == len(own) and n > 10
    assert sum(not torch.equal(first[k], second[k]) for k in second) >= 10   # the random weights differ
    stats = holder.last_load
    assert stats.bytes == sum(f.stat().st_size for f in (tmp_path / "b").iterdir() if f.suffix != ".json")
    assert stats.seconds > 0 and stats.seconds_per_gb > 0


def test_nan_in_a_later_tensor_fails_and_the_next_revision_loads_whole(tmp_path):
    from safetensors.torch import load_file, save_file

    from ckptgeo.engine.model import ModelHolder
    from ckptgeo.errors import CorruptCheckpointError

    _save(tmp_path / "a", 1)
    good = _save(tmp_path / "c", 3)
    bad = load_file(str(tmp_path / "a" / "model.safetensors"))
    last = sorted(bad)[-1]
    bad[last] = torch.full_like(bad[last], float("nan"))
    save_file(bad, str(tmp_path / "a" / "model.safetensors"))
    holder = ModelHolder()
    with pytest.raises(CorruptCheckpointError, match=r"holds NaN or inf"):
        holder.load(tmp_path / "a", revision="a")
    own = holder.load(tmp_path / "c", revision="c").state_dict()
    for key, tensor in good.items():
        if key in own:
            assert torch.equal(own[key], tensor), key


def test_bin_loads_without_running_pickle_code(tmp_path):
    """A .bin whose pickle would run code is refused (weights_only=True), named as damaged."""
    import pickle

    from ckptgeo.engine.model import ModelHolder
    from ckptgeo.errors import CorruptCheckpointError

    _save(tmp_path / "a", 1, bin_file=True)
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    with open(tmp_path / "a" / "pytorch_model.bin", "wb") as f:
        pickle.dump({"x": Evil()}, f)
    with pytest.raises(CorruptCheckpointError, match=r"pytorch_model\.bin is damaged"):
        ModelHolder().load(tmp_path / "a", revision="a")
    assert not marker.exists()


def test_read_ahead_advises_every_weight_file(tmp_path):
    from ckptgeo.engine.model import read_ahead

    _save(tmp_path / "a", 1)
    assert read_ahead(tmp_path / "a") == (tmp_path / "a" / "model.safetensors").stat().st_size
    assert read_ahead(tmp_path / "nowhere") == 0


@pytest.fixture(scope="module")
def shared_repo(local_hub):
    """Branches whose first shard is shared with a branch three revisions earlier (beyond --prefetch 1)."""
    return local_hub.add_repo("pythia-shared", steps=(0, 1000, 2000, 3000), shards=2,
                              share_shard={"step3000": "step0"})


def test_a_file_shared_by_branches_is_downloaded_once(local_hub, shared_repo, tmp_path):
    """Bytes served over loopback for the weight files equal the distinct files' bytes: the shard step3000
    shares with step0 is not fetched a second time, although step0 was evicted in between; nothing of the
    repository is left in the cache at the end."""
    import huggingface_hub

    from ckptgeo.engine.scan import scan
    from ckptgeo.sources.hub import HubSource
    from ckptgeo.sources.weights import is_weight_file

    source = HubSource(shared_repo.repo_id)
    res = scan(source, revisions="all", suites=(SUITE,), n_samples=4, metrics=("rankme",), prefetch=1,
               out=tmp_path / "out", on_error="raise")
    assert res.measured == ["step0", "step1000", "step2000", "step3000"]
    served = {k: v for k, v in local_hub.served_bytes(shared_repo.repo_id).items()
              if is_weight_file(k[1]) and not k[1].endswith(".json")}
    files = {(f.sha256, f.size) for r in source.revisions() for f in source.weight_files(r)
             if not f.name.endswith(".json")}
    every = sum(f.size for r in source.revisions() for f in source.weight_files(r) if not f.name.endswith(".json"))
    assert len(files) == 7                       # 4 revisions x 2 shards, one shared
    assert sum(served.values()) == sum(size for _, size in files) < every
    cache = Path(huggingface_hub.constants.HF_HUB_CACHE) / ("models--" + shared_repo.repo_id.replace("/", "--"))
    assert not (cache / "blobs").exists() or not [p for p in (cache / "blobs").iterdir() if p.stat().st_size > 10_000]
    assert set(res.seconds) == set(res.measured)
    assert all(s["load_bytes"] > 0 and s["load"] > 0 for s in res.seconds.values())
