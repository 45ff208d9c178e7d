"""The shared-prefix forward pass against the plain way (one full sequence per prompt-choice pair)."""

import numpy as np
import pytest
import torch

from ckptgeo.engine.forward import model_batch, prepare_suite, run_suite
from ckptgeo.suites.items import Item, Suite, load_suite
from ckptgeo.metrics.registry import ModelContext

from tests._checkpoints import BIGBENCH, SUITE, tiny_config, train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer()


@pytest.fixture(scope="module")
def model():
    from transformers import GPTNeoXForCausalLM

    torch.manual_seed(3)
    return GPTNeoXForCausalLM(tiny_config()).eval()


def naive_logprob(model, ctx, cont):
    ids = torch.tensor([list(ctx) + list(cont)])
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0].double(), -1)
    return sum(lp[len(ctx) - 1 + i, t].item() for i, t in enumerate(cont))


@pytest.mark.public_data("bigbench")
def test_multiple_choice_matches_plain_scoring(model, tokenizer):
    suite = load_suite(BIGBENCH / "three_objects.json")
    ps = prepare_suite(suite, tokenizer, n_samples=12, seed=1)
    out = run_suite(model, ps, batch_size=5)
    expected, states = [], []
    for p in ps.items:
        scores = [naive_logprob(model, p.prompt, c) for c in p.conts]
        expected.append(float(int(np.argmax(scores)) == p.item.answer))
        with torch.no_grad():
            hs = model(torch.tensor([p.prompt]), output_hidden_states=True).hidden_states
        states.append(torch.stack([h[0, -1] for h in hs]))
    assert out.correct.tolist() == expected
    ref = torch.stack(states, 1)
    assert out.states.shape == (3, 12, 32)
    torch.testing.assert_close(out.states, ref, atol=1e-4, rtol=1e-4)
    # no label: probe rows are prompt+choice, labelled correct / incorrect
    assert out.probe_states.shape[1] == 36 and sorted(set(out.probe_labels)) == ["0", "1"]
    assert (out.probe_labels == "1").sum() == 12
    assert out.chance == pytest.approx(1 / 3)


def test_generation_exact_match_equals_greedy_generate(model, tokenizer):
    items = tuple(Item(id=str(i), suite="g", kind="generation", prompt=f"The {w} book is", target=t)
                  for i, (w, t) in enumerate([("red", " the"), ("blue", " to the"), ("green", " left"),
                                              ("owl", " the leftmost")]))
    ps = prepare_suite(Suite("g", items), tokenizer, n_samples=None)
    out = run_suite(model, ps, batch_size=3)
    for k, p in enumerate(ps.items):
        with torch.no_grad():
            gen = model.generate(torch.tensor([p.prompt]), max_new_tokens=len(p.conts[0]), do_sample=False,
                                 pad_token_id=0)
        greedy = gen[0, len(p.prompt):].tolist()
        assert out.correct[k] == float(greedy == list(p.conts[0]))
    # force one match: make the target the model's own greedy continuation
    p0 = ps.items[0]
    with torch.no_grad():
        gen = model.generate(torch.tensor([p0.prompt]), max_new_tokens=2, do_sample=False, pad_token_id=0)
    target = tokenizer.decode(gen[0, len(p0.prompt):])
    items2 = (Item(id="x", suite="g", kind="generation", prompt=p0.item.prompt, target=target),)
    ps2 = prepare_suite(Suite("g", items2), tokenizer, n_samples=None)
    if list(ps2.items[0].conts[0]) == gen[0, len(p0.prompt):].tolist():
        assert run_suite(model, ps2).correct.tolist() == [1.0]


def test_minimal_pairs_match_whole_sentence_logprob(model, tokenizer):
    pairs = [("The blue book is leftmost.", "The blue book are leftmost."),
             ("A red owl sat.", "A red owl sit."), ("Three books.", "Three book.")]
    items = tuple(Item(id=str(i), suite="p", kind="minimal_pair", good=g, bad=b) for i, (g, b) in enumerate(pairs))
    ps = prepare_suite(Suite("p", items), tokenizer, n_samples=None)
    out = run_suite(model, ps, batch_size=4)
    for k, p in enumerate(ps.items):
        good = naive_logprob(model, p.good[:1], p.good[1:])
        bad = naive_logprob(model, p.bad[:1], p.bad[1:])
        assert out.correct[k] == float(good > bad)
    assert out.states.shape == (3, 6, 32)
    assert list(out.probe_labels) == ["good", "bad"] * 3


def test_mean_position_averages_prompt_tokens(model, tokenizer):
    suite = load_suite(SUITE)
    ps = prepare_suite(suite, tokenizer, n_samples=4)
    out = run_suite(model, ps, position="mean", batch_size=4)
    p = ps.items[0]
    with torch.no_grad():
        hs = model(torch.tensor([p.prompt]), output_hidden_states=True).hidden_states
    torch.testing.assert_close(out.states[:, 0], torch.stack([h[0].mean(0) for h in hs]), atol=1e-4, rtol=1e-4)


def test_model_batch_scores_answer_tokens_only(model, tokenizer):
    suite = load_suite(SUITE)
    ps = prepare_suite(suite, tokenizer, n_samples=3)
    batch = model_batch(ps, 3)
    ctx = ModelContext(model=model, batch=batch, device=torch.device("cpu"))
    per_item = ctx.per_sample_loss()
    for k, p in enumerate(ps.items):
        cont = p.conts[p.item.answer]
        nll = -naive_logprob(model, p.prompt, cont) / len(cont)
        assert per_item[k].item() == pytest.approx(nll, rel=1e-4)


def _tokens_run(model, fn):
    """(result of fn(), input tokens the model embedded while it ran)."""
    seen = []
    handle = model.gpt_neox.embed_in.register_forward_hook(lambda m, args, out: seen.append(args[0].numel()))
    try:
        return fn(), sum(seen)
    finally:
        handle.remove()


def _close(a, b, rtol=1e-5):
    a, b = torch.as_tensor(np.asarray(a, dtype=np.float64)), torch.as_tensor(np.asarray(b, dtype=np.float64))
    torch.testing.assert_close(a, b, rtol=rtol, atol=rtol * float(b.abs().max()))


@pytest.mark.parametrize("position", ["last", "mean"])
def test_shared_task_prefix_runs_once_and_equals_the_unshared_way(model, tokenizer, position):
    from ckptgeo.engine.forward import shared_prefix_length

    suite = load_suite(SUITE)  # every prompt starts with the same instructions
    ps = prepare_suite(suite, tokenizer, n_samples=12, seed=1)
    k = shared_prefix_length([p.prompt for p in ps.items])
    assert k >= 20, k
    shared, n_shared = _tokens_run(model, lambda: run_suite(model, ps, batch_size=6, position=position))
    plain, n_plain = _tokens_run(model, lambda: run_suite(model, ps, batch_size=6, position=position,
                                                          share_prefix=False))
    assert n_plain - n_shared >= 2 * 5 * k, (n_plain, n_shared, k)  # two batches of six: five prefixes saved each
    _close(shared.states, plain.states)
    _close(shared.probe_states, plain.probe_states)
    _close(shared.extra["choice_logprob"], plain.extra["choice_logprob"])
    assert shared.correct.tolist() == plain.correct.tolist()
    assert shared.correct_norm.tolist() == plain.correct_norm.tolist()
    # and the plain way is the reference scoring, one full sequence per prompt + choice
    naive = [naive_logprob(model, p.prompt, c) for p in ps.items for c in p.conts]
    _close(shared.extra["choice_logprob"], naive, rtol=1e-4)


def test_shared_few_shot_context_in_generation_equals_the_unshared_way(model, tokenizer):
    shots = "The red book is leftmost. The blue book is rightmost. The green book is in the middle. "
    items = tuple(Item(id=str(i), suite="g", kind="generation", prompt=shots + q, target=t)
                  for i, (q, t) in enumerate([("The owl is", " the"), ("The black book is", " to the left"),
                                              ("Which book", " is"), ("The orange", " book is")]))
    ps = prepare_suite(Suite("g", items), tokenizer, n_samples=None)
    for position in ("last", "mean"):
        shared, n_shared = _tokens_run(model, lambda: run_suite(model, ps, batch_size=4, position=position))
        plain, n_plain = _tokens_run(model, lambda: run_suite(model, ps, batch_size=4, position=position,
                                                              share_prefix=False))
        assert n_shared < n_plain
        _close(shared.states, plain.states)
        assert shared.correct.tolist() == plain.correct.tolist()


def test_task_loss_reads_logits_at_the_answer_positions_only(model, tokenizer):
    from ckptgeo.metrics._autodiff import task_token_losses

    suite = load_suite(SUITE)
    ps = prepare_suite(suite, tokenizer, n_samples=6)
    batch = model_batch(ps, 6)
    # left-padded: every item's answer ends at the last column
    assert (batch["labels"][:, -1] != -100).all() and (batch["attention_mask"][:, -1] == 1).all()
    ctx = ModelContext(model=model, batch=batch, device=torch.device("cpu"))
    keep = ctx.logits_to_keep()
    longest = max(len(p.conts[p.item.answer]) for p in ps.items)
    assert keep == longest + 1 and keep < batch["input_ids"].shape[1] // 4
    shapes = []
    handle = model.get_output_embeddings().register_forward_hook(lambda m, a, out: shapes.append(tuple(out.shape)))
    try:
        loss = ctx.loss()  # the batch loss: the head only at the rows that predict an answer token
        per_item = ctx.per_sample_loss()  # per item (vmap-able): the head at the last `keep` positions
    finally:
        handle.remove()
    n_answer = sum(len(p.conts[p.item.answer]) for p in ps.items)
    assert shapes == [(n_answer, model.config.vocab_size), (6, keep, model.config.vocab_size)]
    tok, mask = task_token_losses(model, batch, batch["input_ids"].shape[1])  # logits everywhere
    assert loss.item() == pytest.approx((tok.sum() / mask.sum()).item(), rel=1e-6)
    assert per_item.tolist() == pytest.approx((tok.sum(1) / mask.sum(1)).tolist(), rel=1e-6)
    assert int(mask.sum()) == n_answer
