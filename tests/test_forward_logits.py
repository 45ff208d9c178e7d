"""Generation and minimal pairs get logits only at the positions they score (the output layer on those final
states), with the values of a plain full-logits computation per item."""

from __future__ import annotations

import pytest
import torch

from tests._checkpoints import tiny_config


@pytest.fixture(scope="module")
def tokenizer():
    from tests._checkpoints import train_tokenizer

    return train_tokenizer()


@pytest.fixture(scope="module")
def model():
    from transformers import GPTNeoXForCausalLM

    torch.manual_seed(11)
    return GPTNeoXForCausalLM(tiny_config()).eval()


def _suite(tokenizer):
    from ckptgeo.engine.forward import prepare_suite
    from ckptgeo.suites.items import Item, Suite

    shots = "Q: one two three? A: four. Q: five six seven? A: eight. "   # a shared few-shot prefix
    gen = [Item(id=f"g{i}", suite="s", kind="generation", prompt=shots + f"Q: {w}? A:", target=t)
           for i, (w, t) in enumerate([("red blue", " green."), ("one", " two"), ("the cat sat on", " the mat"),
                                       ("a b c d e f", " g h"), ("up", " down and out")])]
    gen += [Item(id=f"h{i}", suite="s", kind="generation", prompt=p, target=t)
            for i, (p, t) in enumerate([("count to three: one two", " three"), ("hello", " world")])]
    pairs = [Item(id=f"p{i}", suite="s", kind="minimal_pair", good=g, bad=b)
             for i, (g, b) in enumerate([("the dogs run fast", "the dogs runs fast"), ("a cat sleeps", "a cat sleep"),
                                         ("they were here yesterday evening", "they was here yesterday evening")])]
    return prepare_suite(Suite("s", tuple(gen + pairs)), tokenizer, n_samples=None)


@torch.no_grad()
def _plain(model, ps):
    """Per item, one sequence, full logits and log-softmax: (loss, correct) per generation item and the summed
    log-probability of each pair's good and bad sentence."""
    gen, pairs = {}, {}
    for p in ps.items:
        if p.item.kind == "generation":
            seq = torch.tensor([p.prompt + p.conts[0]])
            logits = model(input_ids=seq).logits[0].float()
            n, t = len(p.prompt), len(p.conts[0])
            lp = torch.log_softmax(logits[n - 1:n + t - 1], -1).gather(-1, seq[0, n:, None])[:, 0]
            gen[p.item.id] = (-float(lp.mean()), float(logits[n - 1:n + t - 1].argmax(-1).tolist() == list(p.conts[0])))
        else:
            sums = []
            for s in (p.good, p.bad):
                seq = torch.tensor([s])
                lp = torch.log_softmax(model(input_ids=seq).logits[0, :-1].float(), -1).gather(-1, seq[0, 1:, None])
                sums.append(float(lp.sum()))
            pairs[p.item.id] = sums
    return gen, pairs


def test_output_layer_runs_at_scored_positions_only_with_plain_values(model, tokenizer):
    """Batch 3 (shared prefixes, padding): the output layer sees the scored positions plus one row per
    sequence per model call (transformers' last position), not every position of every batch (the old
    sweep's 300-odd rows); per-item losses within 1e-6 of a plain full-logits run, correct answers equal."""
    from ckptgeo.engine.forward import run_suite

    ps = _suite(tokenizer)
    rows = []
    head = model.get_output_embeddings()
    handle = head.register_forward_hook(lambda mod, inp, out: rows.append(inp[0].numel() // inp[0].shape[-1]))
    try:
        out = run_suite(model, ps, batch_size=3)
    finally:
        handle.remove()
    gen_items = [p for p in ps.items if p.item.kind == "generation"]
    pair_seqs = [s for p in ps.items if p.item.kind == "minimal_pair" for s in (p.good, p.bad)]
    scored = sum(len(p.conts[0]) for p in gen_items) + sum(len(s) - 1 for s in pair_seqs)
    every = sum(len(p.prompt) + len(p.conts[0]) for p in gen_items) + sum(map(len, pair_seqs))
    calls_rows = len(gen_items) + len(pair_seqs) + 3          # a last row per sequence, a prefix pass per batch
    assert scored < sum(rows) <= scored + calls_rows < every
    gen, pairs = _plain(model, ps)
    kinds = [p.item.kind for p in ps.items]
    ids = [p.item.id for p in ps.items if p.item.kind == "generation"]
    ids += [p.item.id for p in ps.items if p.item.kind == "minimal_pair"]
    assert kinds.count("generation") == 7 and len(out.loss) == len(ids) == 10
    for i, item_id in enumerate(ids):
        if item_id in gen:
            assert out.loss[i] == pytest.approx(gen[item_id][0], rel=1e-6, abs=1e-6)
            assert out.correct[i] == gen[item_id][1]
        else:
            good, bad = pairs[item_id]
            assert out.correct[i] == float(good > bad)
            p = next(p for p in ps.items if p.item.id == item_id)
            assert out.loss[i] == pytest.approx(-good / (len(p.good) - 1), rel=1e-6, abs=1e-6)


def test_the_cache_is_passed_and_read_under_the_name_the_installed_transformers_uses(model):
    """transformers 5.25 names a forward's key/value cache ``cache`` (``past_key_values`` is its deprecated alias);
    earlier releases (5.17 on the GPU machine, 2026-12-04) only know ``past_key_values``, and ignore an unknown
    keyword: the shared-prefix pass must use the name the model's forward declares, and read the output's cache
    under either name."""
    import inspect
    from types import SimpleNamespace

    from ckptgeo.engine.forward import _cache_kwarg, _cache_of

    declared = inspect.signature(model.forward).parameters
    assert _cache_kwarg(model) == ("cache" if "cache" in declared else "past_key_values")
    assert _cache_kwarg(model) in declared

    class OlderModel(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs):
            return None

    assert _cache_kwarg(OlderModel()) == "past_key_values"
    marker = object()
    assert _cache_of(SimpleNamespace(past_key_values=marker)) is marker
    assert _cache_of(SimpleNamespace(cache=marker, past_key_values=None)) is marker
    out = model(input_ids=torch.tensor([[3, 4, 5]]), use_cache=True)
    assert _cache_of(out) is not None and _cache_of(out).get_seq_length() == 3


def _mc_suite(tokenizer, n=40):
    from ckptgeo.engine.forward import prepare_suite
    from ckptgeo.suites.items import Item, Suite

    things = ["the red ball", "a small green box", "the old blue car", "one yellow kite on the hill"]
    items = [Item(id=f"m{i}", suite="mc", kind="multiple_choice", prompt=f"Question {i}: which one is it? Answer:",
                  choices=tuple(f" {things[(i + c) % 4]} number {c}" for c in range(3)), answer=i % 3)
             for i in range(n)]
    return prepare_suite(Suite("mc", tuple(items)), tokenizer, n_samples=None)


def test_cpu_logits_come_in_blocks_below_the_bound_with_the_values_of_one_block(model, tokenizer, monkeypatch):
    """On a CPU the output layer's logits are computed in blocks of at most ``CPU_LOGITS_BYTES`` (a larger block is
    over glibc's mmap threshold and was mapped, and faulted in, afresh every batch): with the bound at 64 rows of
    the vocabulary, a batch of 40 items (hundreds of scored choice tokens) runs the output layer on blocks of at
    most 64 rows, and every value (choice log-probabilities, answers, losses, states) is bit for bit that of the
    whole batch in one block."""
    import numpy as np

    import ckptgeo.engine.forward as forward

    ps = _mc_suite(tokenizer)
    rows = []   # the scored tokens' (n, d) final states; transformers' own (B, 1, d) last position is not counted
    head = model.get_output_embeddings()
    handle = head.register_forward_hook(lambda mod, inp, out: rows.append(len(inp[0])) if inp[0].dim() == 2 else None)
    try:
        whole = forward.run_suite(model, ps, batch_size=40)
        assert max(rows) > 64                                   # the batch's scored tokens in one block
        rows.clear()
        monkeypatch.setattr(forward, "CPU_LOGITS_BYTES", 4 * head.weight.shape[0] * 64)
        blocks = forward.run_suite(model, ps, batch_size=40)
    finally:
        handle.remove()
    assert max(rows) == 64 and rows.count(64) >= 2
    assert np.array_equal(whole.extra["choice_logprob"], blocks.extra["choice_logprob"])
    assert np.array_equal(whole.correct, blocks.correct) and np.array_equal(whole.correct_norm, blocks.correct_norm)
    assert np.array_equal(whole.loss, blocks.loss) and torch.equal(whole.states, blocks.states)


def test_states_are_read_layer_by_layer_with_the_values_of_a_stack_of_the_layers():
    """``_read`` takes each layer's rows (or mean over the span) without first stacking every layer's (B, T, d)
    states into one block (over 256 MiB at 160m and batch 64): bit for bit the values of the stacked way."""
    from ckptgeo.engine.forward import _read

    torch.manual_seed(0)
    hidden = tuple(torch.randn(5, 9, 16) for _ in range(4))
    mask = (torch.rand(5, 9) > 0.3).long()
    span = (torch.rand(5, 9) > 0.5).long()
    last = torch.tensor([8, 0, 3, 5, 7])
    h = torch.stack(hidden)
    assert torch.equal(_read(hidden, mask, last, "last"), h[:, torch.arange(5), last])
    for w in (mask, span):
        expected = (h * w.float()[None, :, :, None]).sum(2) / w.sum(1).clamp_min(1)[None, :, None]
        assert torch.equal(_read(hidden, mask, last, "mean", None if w is mask else span), expected)
