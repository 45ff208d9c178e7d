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
    from ckptgeo.errors import UnsafeFileError

    _save(tmp_path / "a", 1, bin_file=True)
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    with open(tmp_path / "a" / "pytorch_model.bin", "wb") as f:
        pickle.dump({"x": Evil()}, f)
    with pytest.raises(UnsafeFileError, match=r"pytorch_model\.bin cannot be loaded safely"):
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
    from ckptgeo.engine.plan import plan_scan

    plan = plan_scan(shared_repo.repo_id, revisions="all", suites=(SUITE,), out=tmp_path / "plan")
    listed = [f for r in source.revisions() for f in source.weight_files(r)]   # index files included
    shared = next(f for f in source.weight_files(source.revisions()[-1]) if f.sha256 and
                  f.sha256 in {g.sha256 for g in source.weight_files(source.revisions()[0])})
    assert plan.bytes_to_fetch == sum(f.size for f in listed) - shared.size
    assert sum(served.values()) == sum(size for _, size in files) < every
    cache = Path(huggingface_hub.constants.HF_HUB_CACHE) / ("models--" + shared_repo.repo_id.replace("/", "--"))
    assert not (cache / "blobs").exists() or not [p for p in (cache / "blobs").iterdir() if p.stat().st_size > 10_000]
    assert set(res.seconds) == set(res.measured)
    assert all(s["load_bytes"] > 0 and s["load"] > 0 for s in res.seconds.values())


# ------------------------------------------------------------------------------------ forward passes
def test_a_ref_is_written_under_the_cache_lock_so_an_eviction_never_reads_it_half_written(shared_repo, tmp_path,
                                                                                           monkeypatch):
    """The test above failed once on a loaded machine with a blob left in the cache: an eviction scans the cache
    (``scan_cache_dir``) while the prefetch thread writes a ``refs/`` entry; the atomic write's temp file, read as a
    ref to no commit, makes the whole repo 'corrupted', so the revision was not evicted. The ref is now written
    while the cache lock is held, as the download is."""
    from huggingface_hub import scan_cache_dir

    import ckptgeo.sources.hub as hub
    from ckptgeo.sources.hub import HubSource

    source = HubSource(shared_repo.repo_id, cache_dir=tmp_path / "cache")
    held, real = [], hub._remember_ref
    monkeypatch.setattr(hub, "_remember_ref", lambda *a: (held.append(source._cache_lock.locked()), real(*a))[1])
    folder = source.config_folder(source.revisions()[0])
    assert held == [True]
    refs = folder.parents[1] / "refs"
    assert len(scan_cache_dir(tmp_path / "cache").repos) == 1
    (refs / ".step1000.tmp").write_text("")   # what a scan meeting a half-written ref reads
    info = scan_cache_dir(tmp_path / "cache")
    assert not info.repos and "missing commit" in str(info.warnings[0])


@pytest.fixture(scope="module")
def tokenizer():
    from tests._checkpoints import train_tokenizer

    return train_tokenizer()


@pytest.fixture(scope="module")
def model():
    from transformers import GPTNeoXForCausalLM

    torch.manual_seed(3)
    return GPTNeoXForCausalLM(tiny_config()).eval()


def _pairs_suite(name: str, sentences: list[tuple[str, str]]):
    from ckptgeo.suites.items import Item, Suite

    return Suite(name, tuple(Item(id=str(i), suite=name, kind="minimal_pair", good=g, bad=b)
                             for i, (g, b) in enumerate(sentences)))


def test_padding_is_counted_per_batch(model, tokenizer):
    """Minimal pairs, length-sorted, batch size 2: the padding counted equals the hand count over the
    batches the sort makes (each batch as long as its longest sentence)."""
    from ckptgeo.engine.forward import prepare_suite, run_suite

    suite = _pairs_suite("p", [("the fox", "fox the"), ("the quick brown fox jumps", "quick the brown fox jumps"),
                               ("the dog", "dog the dog"), ("the lazy dog jumps over", "lazy the dog")])
    ps = prepare_suite(suite, tokenizer, n_samples=None)
    lengths = sorted((len(s) for p in ps.items for s in (p.good, p.bad)), reverse=True)
    batches = [lengths[i:i + 2] for i in range(0, len(lengths), 2)]
    slots = sum(max(b) * len(b) for b in batches)
    out = run_suite(model, ps, batch_size=2)
    pad = out.extra["padding"]
    assert (pad.slots, pad.pad) == (slots, slots - sum(lengths))
    assert 0 < pad.share < 0.5 and out.extra["batch_size"] == 2


def test_suites_with_the_same_items_run_one_forward_sweep(model, tokenizer):
    """Two suites of the same tokens under other names: one sweep (forward calls counted with a hook on the
    real model), equal rows, each under its own suite name; a third, different suite runs its own."""
    from ckptgeo.engine.config import ScanConfig
    from ckptgeo.engine.forward import prepare_suite
    from ckptgeo.engine.measure import configure_metrics, measure_revision

    same = [("the fox", "fox the"), ("the quick brown fox", "quick the brown fox"), ("the dog", "dog the")]
    suites = [_pairs_suite("a", same), _pairs_suite("b", same), _pairs_suite("c", same[:2])]
    prepared = [prepare_suite(s, tokenizer, n_samples=None) for s in suites]
    config = ScanConfig(metrics=("rankme", "behavior"), batch_size=4)
    calls = []
    handle = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        rows = measure_revision(model, prepared, configure_metrics(config), config, {}, revision="r")
    finally:
        handle.remove()
    assert len(calls) == 2 + 1          # a: 6 sentences in 2 batches of 4; b: none; c: 4 sentences in 1
    geo = {s: [r["value"] for r in rows["geometry"] if r["suite"] == s] for s in "abc"}
    assert geo["a"] == geo["b"] and len(geo["a"]) == 3 and geo["c"] != geo["a"]
    acc = {r["suite"]: r["value"] for r in rows["behavior"] if r["metric"] == "accuracy"}
    assert acc["a"] == acc["b"]


def test_batch_size_from_free_memory(model, tokenizer):
    """More free memory, larger batches, capped at the suite's items; 16 on the CPU; at least 1."""
    from ckptgeo.engine.forward import auto_batch_size, batch_bytes_per_item, prepare_suite

    suite = _pairs_suite("p", [("the quick brown fox jumps over the lazy dog", "dog the")] * 50)
    ps = prepare_suite(suite, tokenizer, n_samples=None)
    longest = max(len(p.good) for p in ps.items)
    per_item = batch_bytes_per_item(model.config, longest, 1, 4)
    assert per_item > 4 * longest * model.config.vocab_size          # the log-softmax over the vocabulary
    assert auto_batch_size(model, ps, "cuda", free_bytes=2 * per_item * 7) == 7
    assert auto_batch_size(model, ps, "cuda", free_bytes=per_item // 3) == 1
    assert auto_batch_size(model, ps, "cuda", free_bytes=10 ** 15) == 50
    assert auto_batch_size(model, ps, "cpu") == 16


def test_auto_dtype_is_float32_on_the_cpu_and_for_whole_model_measures():
    from ckptgeo.engine.config import ScanConfig
    from ckptgeo.engine.plan import forward_dtype

    assert forward_dtype(ScanConfig(dtype="auto")).dtype == "float32"
    assert forward_dtype(ScanConfig(dtype="float16")).dtype == "float16"


@pytest.mark.gpu
def test_auto_dtype_on_a_gpu_is_half_unless_a_whole_model_measure_runs():
    from ckptgeo.engine.config import ScanConfig
    from ckptgeo.engine.plan import forward_dtype

    assert forward_dtype(ScanConfig(dtype="auto", device="cuda")).dtype in ("bfloat16", "float16")
    assert forward_dtype(ScanConfig(dtype="auto", device="cuda", metrics=("rankme", "hessian"))).dtype == "float32"


@pytest.mark.gpu
def test_rankme_svd_runs_in_float64_on_a_gpu():
    """A matrix whose float32 SVD loses the small singular values: the GPU value equals the CPU float64 one."""
    from ckptgeo.metrics.rankme import effective_rank

    torch.manual_seed(0)
    m = torch.randn(200, 64, dtype=torch.float64) * torch.logspace(0, -9, 64, dtype=torch.float64)
    assert effective_rank(m.cuda()) == pytest.approx(effective_rank(m), rel=1e-12)


@pytest.mark.gpu
def test_streamed_load_goes_straight_to_the_gpu(tmp_path):
    from ckptgeo.engine.model import ModelHolder

    state = _save(tmp_path / "a", 1, dtype=torch.float16)
    model = ModelHolder(device="cuda").load(tmp_path / "a", revision="a")
    own = model.state_dict()
    for key, tensor in state.items():
        if key in own:
            assert own[key].device.type == "cuda"
            assert torch.equal(own[key].cpu(), tensor.float()), key


def test_transfer_backend_names_what_is_installed():
    from importlib.util import find_spec

    from ckptgeo.sources.hub import transfer_backend

    text = transfer_backend()
    assert ("hf_xet" in text) == (find_spec("hf_xet") is not None) and "HTTP" in text


def test_the_first_revision_is_fetched_before_the_one_prefetched_after_it(tmp_path):
    """With one download at a time (prefetch 1), the scan's first revision must not wait behind the next one's
    download: the pool takes revision i before i+1 (it took step1 before step0, so the first revision waited for
    two downloads)."""
    from ckptgeo.engine.prefetch import Prefetcher
    from ckptgeo.sources.local import LocalSource
    from ckptgeo.sources.protocol import Revision

    order = []

    class Recording(LocalSource):
        def fetch(self, revision):
            order.append(revision.name)
            return super().fetch(revision)

    for name in ("step0", "step1", "step2"):
        (tmp_path / name).mkdir()
    todo = [Revision(step=s, name=f"step{s}") for s in (0, 1, 2)]
    pre = Prefetcher(Recording(tmp_path), todo, 1, lambda rev: True)
    try:
        pre.ahead(0)
        assert pre.get(0).path == tmp_path / "step0"
        pre.ahead(1)
        assert pre.get(1).path == tmp_path / "step1"
    finally:
        pre.close()
    assert order[:2] == ["step0", "step1"], order
