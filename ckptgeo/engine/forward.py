"""Forward passes: per-layer hidden states at the read positions, behaviour, and probe states.

A suite is tokenized once (:func:`prepare_suite`); each revision then runs :func:`run_suite`.

Layers: index 0 is the embedding output, then one per block as transformers returns them; the last
is after the final layer norm. Positions: ``"last"`` reads the last non-padding token of the prompt
(of the sentence, for minimal pairs); ``"mean"`` averages the prompt's non-padding tokens.

Multiple choice runs the prompt once (left-padded, batched by length) and keeps its key/value cache;
every choice then runs only its own tokens against that cache, and only the choice positions get
logits. Where a batch's prompts share their first tokens (BIG-bench's ``task_prefix``, a few-shot
context; at least :data:`MIN_SHARED_PREFIX` tokens), that prefix runs once and its cache is repeated
for every row, for multiple choice and generation alike; each row then reads ``[prefix][pads][rest]``
with positions counting only its real tokens, so states and scores equal the unshared way up to
float rounding. The prompt's hidden states are read from the first pass, so RankMe costs no extra pass.
Generation items are scored by teacher forcing and minimal pairs by whole-sentence log-probability
(see :mod:`ckptgeo.metrics.behavior` for the conventions).
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from ckptgeo.errors import CkptgeoWarning, InvalidParameterError, NonFiniteActivationsError
from ckptgeo.suites.items import Item, Suite, select_items
from ckptgeo.metrics.behavior import chance_level

__all__ = ["PreparedItem", "PreparedSuite", "SuiteOutputs", "Padding", "prepare_suite", "run_suite", "model_batch",
           "precision",
           "shared_prefix_length", "auto_batch_size", "suite_key", "MIN_SHARED_PREFIX", "CPU_BATCH_SIZE",
           "CPU_LOGITS_BYTES"]


@dataclass(frozen=True)
class PreparedItem:
    """An item with its token ids: ``prompt`` (MC, generation), ``conts`` (one list per choice, or the
    target as the single continuation), ``good``/``bad`` (minimal pair, BOS-prefixed where a BOS exists)."""

    item: Item
    prompt: tuple[int, ...] = ()
    conts: tuple[tuple[int, ...], ...] = ()
    good: tuple[int, ...] = ()
    bad: tuple[int, ...] = ()


@dataclass(frozen=True)
class PreparedSuite:
    """A suite's selected items, tokenized. ``bos`` is the id conditioning a sentence's first token."""

    suite: Suite
    items: tuple[PreparedItem, ...]
    pad_id: int
    bos: int | None


@dataclass
class SuiteOutputs:
    """What one forward sweep over a suite yields at one revision.

    ``states``: (n_layers + 1, n_rows, d_model) float32, the rows RankMe reads.
    ``correct`` / ``correct_norm``: (n_items,) 0/1 per item (``correct_norm`` only for multiple choice).
    ``loss``: (n_items,) the task loss per item, mean cross-entropy (nats) over its answer tokens (the correct
    choice, the target, or the good sentence after its first token).
    ``probe_states``: (n_layers + 1, n_probe, d_model); ``probe_labels``: (n_probe,) as strings.
    """

    suite: str
    states: torch.Tensor
    correct: np.ndarray
    correct_norm: np.ndarray | None
    probe_states: torch.Tensor
    probe_labels: np.ndarray
    chance: float
    kind: str
    extra: dict = field(default_factory=dict)
    loss: np.ndarray | None = None


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _split(tokenizer, context: str, cont: str) -> tuple[list[int], list[int]]:
    """Token ids of ``context`` and of ``cont`` as it tokenizes after the context (lm-eval's rule:
    encode the whole string, the continuation is what follows the context's own encoding)."""
    ctx = _encode(tokenizer, context)
    whole = _encode(tokenizer, context + cont)
    if whole[: len(ctx)] == ctx and len(whole) > len(ctx):
        return ctx, whole[len(ctx):]
    return ctx, _encode(tokenizer, cont)


def prepare_suite(suite: Suite, tokenizer, *, n_samples: int | None, seed: int = 0,
                  max_length: int | None = None) -> PreparedSuite:
    """Select ``n_samples`` items (seeded) and tokenize them once.

    Prompts longer than ``max_length`` minus the longest continuation keep their last tokens.
    """
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (bos if bos is not None else 0)
    out = []
    for it in select_items(suite, n_samples, seed):
        if it.kind == "minimal_pair":
            pre = [bos] if bos is not None else []
            g, b = pre + _encode(tokenizer, it.good), pre + _encode(tokenizer, it.bad)
            if max_length:
                g, b = g[-max_length:], b[-max_length:]
            out.append(PreparedItem(it, good=tuple(g), bad=tuple(b)))
            continue
        conts_text = it.choices if it.kind == "multiple_choice" else (it.target,)
        prompt, conts = None, []
        for c in conts_text:
            p, cont = _split(tokenizer, it.prompt, c)
            prompt = p if prompt is None else prompt
            conts.append(tuple(cont))
        if max_length:
            room = max_length - max(len(c) for c in conts)
            prompt = prompt[-max(room, 1):]
        if not prompt:
            prompt = [bos if bos is not None else pad]
        out.append(PreparedItem(it, prompt=tuple(prompt), conts=tuple(conts)))
    _check_vocabulary(suite.name, out, tokenizer.unk_token_id)
    return PreparedSuite(suite=suite, items=tuple(out), pad_id=pad, bos=bos)


def _check_vocabulary(name: str, items: list[PreparedItem], unk: int | None) -> None:
    """Refuse a suite the tokenizer mostly cannot read (e.g. an English suite on an algorithmic-task
    vocabulary): over half its tokens unknown. Warn above 5%."""
    if unk is None:
        return
    ids = [t for p in items for seq in (p.prompt, *p.conts, p.good, p.bad) for t in seq]
    share = sum(t == unk for t in ids) / max(len(ids), 1)
    msg = (f"suite {name!r}: {share:.0%} of its tokens are unknown to this model's tokenizer "
           f"(its vocabulary does not cover the suite's text)")
    if share > 0.5:
        raise InvalidParameterError(msg + "; measure it on a model whose tokenizer reads it", name="suites",
                                    value=name)
    if share > 0.05:
        warnings.warn(msg + "; results may be meaningless", CkptgeoWarning, stacklevel=3)


def _batches(order: list[int], size: int):
    for i in range(0, len(order), size):
        yield order[i:i + size]


@dataclass
class Padding:
    """Token slots of the forward batches of a sweep: ``slots`` in all, of which ``pad`` were padding
    (length-sorted batches keep this small; a prefix run once counts once)."""

    slots: int = 0
    pad: int = 0

    def add(self, mask: torch.Tensor) -> None:
        self.slots += mask.numel()
        self.pad += mask.numel() - int(mask.sum())

    @property
    def share(self) -> float:
        """Padding slots / all slots (0 for no batch)."""
        return self.pad / self.slots if self.slots else 0.0


def _pad(seqs: list[tuple[int, ...]], pad_id: int, *, left: bool,
         count: Padding | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        if left:
            ids[i, n - len(s):] = torch.tensor(s)
            mask[i, n - len(s):] = 1
        else:
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
    if count is not None:
        count.add(mask)
    return ids, mask


def _read(hidden: tuple[torch.Tensor, ...], mask: torch.Tensor, last_idx: torch.Tensor, position: str,
          span: torch.Tensor | None = None) -> torch.Tensor:
    """(n_layers + 1, B, d) float32 states at ``last_idx`` (position "last") or averaged over ``span``
    (a (B, T) 0/1 mask of the tokens to average; position "mean"). Layer by layer: a stack of every layer's
    (B, T, d) states would be one block of (L+1) B T d values (over 256 MiB at 160m, batch 64), which glibc's
    malloc maps afresh for every batch (:data:`ckptgeo._threads.MALLOC_SETTINGS`)."""
    if position == "last":
        rows = torch.arange(last_idx.shape[0], device=last_idx.device)
        out = torch.stack([h[rows, last_idx] for h in hidden])
    else:
        w = (span if span is not None else mask).to(hidden[0].dtype)
        out = torch.stack([(h * w[:, :, None]).sum(1) for h in hidden]) / w.sum(1).clamp_min(1)[None, :, None]
    return out.float().cpu()


def _check_finite(states: torch.Tensor, *, revision: str, suite: str) -> None:
    bad = ~torch.isfinite(states).all(dim=(1, 2))
    if bad.any():
        layer = int(bad.nonzero()[0, 0])
        raise NonFiniteActivationsError(f"NaN or inf in hidden states at {revision}, layer {layer}, suite {suite}",
                                        revision=revision, layer=layer, suite=suite)


#: a batch's prompts share their first tokens when at least this many agree (a shorter prefix costs
#: more as an extra call than it saves).
MIN_SHARED_PREFIX = 8


def shared_prefix_length(seqs: list[tuple[int, ...]], minimum: int = MIN_SHARED_PREFIX) -> int:
    """Tokens at the start of every sequence in ``seqs`` (at most the shortest length − 1, so each keeps one
    token of its own); 0 below ``minimum`` or for a single sequence.

    >>> shared_prefix_length([(1, 2, 3, 4), (1, 2, 3, 5, 6), (1, 2, 3)], minimum=2)
    2
    """
    if len(seqs) < 2:
        return 0
    longest = min(len(q) for q in seqs) - 1
    first = seqs[0]
    k = 0
    while k < longest and all(q[k] == first[k] for q in seqs):
        k += 1
    return k if k >= minimum else 0


def _cache_kwarg(model) -> str:
    """The forward's keyword for a key/value cache: ``cache`` (transformers 5.25 on; ``past_key_values`` is its
    deprecated alias there) or ``past_key_values`` (before; an unknown keyword would be ignored, silently)."""
    return _cache_kwarg_of(type(model))


@functools.lru_cache(maxsize=None)
def _cache_kwarg_of(model_class) -> str:
    """:func:`_cache_kwarg` of a model class, read from its forward's signature once (not at every batch)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def _cache_of(out):
    """The key/value cache of a forward's output: ``out.cache`` (transformers 5.25 on), else ``out.past_key_values``."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _prefix_cache(model, prefix: tuple[int, ...], n_rows: int, device, *, hidden: bool):
    """Run ``prefix`` once (batch of one); its key/value cache repeated for ``n_rows`` rows, and its
    hidden states (or None)."""
    out = model(input_ids=torch.tensor([prefix], device=device), use_cache=True, output_hidden_states=hidden,
                logits_to_keep=1)
    cache = _cache_of(out)
    cache.batch_repeat_interleave(n_rows)
    return cache, out.hidden_states if hidden else None


def _prompt_pass(model, prompts: list[tuple[int, ...]], pad_id: int, device, position: str, share_prefix: bool,
                 count: Padding | None = None):
    """Prompts, left-padded, in one forward pass that keeps its cache; a prefix every prompt shares runs
    once first (rows then read ``[prefix][pads][rest]``, positions counting the real tokens only).

    Returns the model output (cache, last-position logits), the (B, T) 0/1 mask over everything cached,
    and the read states (n_layers + 1, B, d)."""
    k = shared_prefix_length(prompts) if share_prefix else 0
    cache, pre_hidden = (_prefix_cache(model, prompts[0][:k], len(prompts), device, hidden=position == "mean")
                         if k else (None, None))
    if k and count is not None:
        count.slots += k
    ids, mask = _pad([p[k:] for p in prompts], pad_id, left=True, count=count)
    ids, mask = ids.to(device), mask.to(device)
    pos = k + (mask.cumsum(1) - 1).clamp_min(0)
    if k:
        mask = torch.cat([torch.ones(len(prompts), k, dtype=mask.dtype, device=device), mask], 1)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, output_hidden_states=True,
                logits_to_keep=1, **{_cache_kwarg(model): cache})
    hidden = out.hidden_states
    if pre_hidden is not None:  # "mean" averages the prefix's tokens too
        hidden = tuple(torch.cat([h0.expand(len(prompts), -1, -1), h], 1) for h0, h in zip(pre_hidden, hidden))
    last = torch.full((len(prompts),), hidden[0].shape[1] - 1, device=device)
    return out, mask, _read(hidden, mask if pre_hidden is not None or not k else mask[:, k:], last, position)


#: on a CPU, :func:`_token_logprob` computes the logits of at most this many bytes of float32 at once: a
#: larger block (a batch's choice tokens times the vocabulary: 293 MiB at batch 55 of BIG-bench logical deduction
#: with Pythia's 50,304 tokens) is over glibc's mmap threshold (256 MiB, :data:`ckptgeo._threads.MALLOC_SETTINGS`),
#: so every batch mapped it afresh and the kernel zeroed its pages on first touch (75,000 page faults a block).
CPU_LOGITS_BYTES = 64 << 20


def _token_logprob(model, final: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(n,) log-probabilities of the ``target`` tokens and (n,) greedy predictions, from the (n, d) final states
    that predict them: the output layer on those states only, log p = logit - logsumexp (no log-softmax over
    every position of the batch, no copy of it). On a CPU in blocks of rows of at most :data:`CPU_LOGITS_BYTES`
    of logits (each row's values are those of the whole at once)."""
    head = model.get_output_embeddings()
    n = max(len(final), 1)
    vocab = (getattr(getattr(head, "weight", None), "shape", (0,))[0]
             or getattr(getattr(model, "config", None), "vocab_size", 0))   # 0 (unknown): one block
    rows = max(64, CPU_LOGITS_BYTES // (4 * max(vocab, 1))) if final.device.type == "cpu" else n
    lp, pred = [], []
    for i in range(0, n, rows):
        logits = head(final[i:i + rows]).float()
        lp.append(logits.gather(-1, target[i:i + rows, None])[:, 0] - torch.logsumexp(logits, -1))
        pred.append(logits.argmax(-1))
    return (lp[0], pred[0]) if len(lp) == 1 else (torch.cat(lp), torch.cat(pred))


@torch.no_grad()
def _run_mc(model, items: list[PreparedItem], ps: PreparedSuite, device, batch_size: int, position: str,
            with_probes: bool, share_prefix: bool = True, count: Padding | None = None):
    states, probe_states, correct, correct_norm, labels, scores = [], [], [], [], [], []
    need_choice_states = with_probes and any(p.item.label is None for p in items)
    order = sorted(range(len(items)), key=lambda i: -len(items[i].prompt))
    results: dict[int, tuple] = {}
    for idx in _batches(order, batch_size):
        batch = [items[i] for i in idx]
        out, mask, st = _prompt_pass(model, [p.prompt for p in batch], ps.pad_id, device, position, share_prefix,
                                     count)
        first_lp = torch.log_softmax(out.logits[:, -1].float(), -1)
        rows = [(b, c) for b, p in enumerate(batch) for c in range(len(p.conts))]
        row_item = torch.tensor([b for b, _ in rows], device=device)
        cont_ids, cont_mask = _pad([batch[b].conts[c] for b, c in rows], ps.pad_id, left=False, count=count)
        cont_ids, cont_mask = cont_ids.to(device), cont_mask.to(device)
        cache = _cache_of(out)
        cache.batch_select_indices(row_item)
        plen = mask.sum(1)[row_item]
        pos2 = plen[:, None] + torch.arange(cont_ids.shape[1], device=device)[None]
        mask2 = torch.cat([mask[row_item], cont_mask], dim=1)
        # logits only where a choice token is scored (not at its last token, not at padding): the output layer
        # on those final states, then log p = logit - logsumexp (no full log-softmax tensor, no copy of it)
        out2 = model(input_ids=cont_ids, attention_mask=mask2, position_ids=pos2, output_hidden_states=True,
                     logits_to_keep=1, **{_cache_kwarg(model): cache})
        tok_lp = torch.zeros(cont_ids.shape, device=device)
        tok_lp[:, 0] = first_lp[row_item, cont_ids[:, 0]]
        if cont_ids.shape[1] > 1:
            scored = cont_mask[:, 1:].bool()  # position t predicts choice token t + 1
            tok_lp[:, 1:][scored] = _token_logprob(model, out2.hidden_states[-1][:, :-1][scored],
                                                   cont_ids[:, 1:][scored])[0]
        score = (tok_lp * cont_mask).sum(1).cpu()
        choice_states = None
        if need_choice_states:
            last = cont_mask.sum(1) - 1
            choice_states = _read(out2.hidden_states, cont_mask, last, "last")
        r = 0
        for b, p in enumerate(batch):
            n = len(p.conts)
            s = score[r:r + n]
            nbytes = torch.tensor([len(ch.encode("utf-8")) for ch in p.item.choices], dtype=torch.float32)
            pick, pick_norm = int(torch.argmax(s)), int(torch.argmax(s / nbytes))
            if p.item.label is not None or not need_choice_states:
                pst, plab = st[:, b:b + 1], [str(p.item.label)]
            else:
                pst, plab = choice_states[:, r:r + n], [str(int(c == p.item.answer)) for c in range(n)]
            loss = -float(s[p.item.answer]) / max(len(p.conts[p.item.answer]), 1)
            results[idx[b]] = (st[:, b:b + 1], pst, plab, float(pick == p.item.answer),
                               float(pick_norm == p.item.answer), s.numpy(), loss)
            r += n
    losses = []
    for i in range(len(items)):
        s, pst, plab, c, cn, sc, lo = results[i]
        states.append(s), probe_states.append(pst), labels.extend(plab), correct.append(c), correct_norm.append(cn)
        scores.append(sc), losses.append(lo)
    return (torch.cat(states, 1), torch.cat(probe_states, 1), labels, np.array(correct), np.array(correct_norm),
            np.concatenate(scores), np.array(losses))


@torch.no_grad()
def _run_gen(model, items: list[PreparedItem], ps: PreparedSuite, device, batch_size: int, position: str,
             with_probes: bool, share_prefix: bool = True, count: Padding | None = None):
    states, correct, labels = [None] * len(items), np.zeros(len(items)), [None] * len(items)
    losses = np.zeros(len(items))
    order = sorted(range(len(items)), key=lambda i: -(len(items[i].prompt) + len(items[i].conts[0])))
    for idx in _batches(order, batch_size):
        batch = [items[i] for i in idx]
        k = shared_prefix_length([p.prompt for p in batch]) if share_prefix else 0
        cache, pre_hidden = (_prefix_cache(model, batch[0].prompt[:k], len(batch), device, hidden=position == "mean")
                             if k else (None, None))
        if k and count is not None:
            count.slots += k
        ids, mask = _pad([(p.prompt + p.conts[0])[k:] for p in batch], ps.pad_id, left=False, count=count)
        ids, mask = ids.to(device), mask.to(device)
        full = torch.cat([torch.ones(len(batch), k, dtype=mask.dtype, device=device), mask], 1) if k else mask
        after = {"position_ids": k + torch.arange(ids.shape[1], device=device)[None].expand(len(batch), -1),
                 "cache": cache} if k else {}
        # logits only at the target's positions (the output layer on their final states), as for multiple choice
        out = model(input_ids=ids, attention_mask=full, output_hidden_states=True, logits_to_keep=1, **after)
        plen = torch.tensor([len(p.prompt) for p in batch], device=device)
        hidden, read_mask, offset = out.hidden_states, mask, k
        if pre_hidden is not None:  # "mean" averages the prefix's tokens too
            hidden = tuple(torch.cat([h0.expand(len(batch), -1, -1), h], 1) for h0, h in zip(pre_hidden, hidden))
            read_mask, offset = full, 0
        span = (torch.arange(hidden[0].shape[1], device=device)[None] < (plen - offset)[:, None]).long()
        st = _read(hidden, read_mask, plen - 1 - offset, position, span)
        ends = np.cumsum([0] + [len(p.conts[0]) for p in batch])
        final = torch.cat([out.hidden_states[-1][b, len(p.prompt) - k - 1:len(p.prompt) - k - 1 + len(p.conts[0])]
                           for b, p in enumerate(batch)])  # position n - 1 predicts the target's first token
        target = torch.tensor([tok for p in batch for tok in p.conts[0]], device=device)
        lp, pred = _token_logprob(model, final, target)
        for b, p in enumerate(batch):
            span = slice(ends[b], ends[b + 1])
            correct[idx[b]] = float(bool((pred[span] == target[span]).all()))
            losses[idx[b]] = -float(lp[span].mean())
            states[idx[b]] = st[:, b:b + 1]
            labels[idx[b]] = str(p.item.label if p.item.label is not None else p.conts[0][0])
    st = torch.cat(states, 1)
    return st, st, labels, correct, None, None, losses


@torch.no_grad()
def _run_pairs(model, items: list[PreparedItem], ps: PreparedSuite, device, batch_size: int, position: str,
               with_probes: bool, share_prefix: bool = True, count: Padding | None = None):
    seqs = [s for p in items for s in (p.good, p.bad)]
    lp_sum = np.zeros(len(seqs))
    states = [None] * len(seqs)
    skip = 1 if ps.bos is not None else 0
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
    for idx in _batches(order, batch_size):
        ids, mask = _pad([seqs[i] for i in idx], ps.pad_id, left=False, count=count)
        ids, mask = ids.to(device), mask.to(device)
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, logits_to_keep=1)
        scored = mask[:, 1:].bool()  # position t predicts token t + 1: logits only where that is not padding
        lp = torch.zeros(scored.shape, device=device)
        lp[scored] = _token_logprob(model, out.hidden_states[-1][:, :-1][scored], ids[:, 1:][scored])[0]
        tok_lp = lp.sum(1).cpu().numpy()
        span = mask.clone()
        span[:, :skip] = 0
        st = _read(out.hidden_states, mask, mask.sum(1) - 1, position, span)
        for b, i in enumerate(idx):
            lp_sum[i] = tok_lp[b]
            states[i] = st[:, b:b + 1]
    st = torch.cat(states, 1)
    correct = (lp_sum[0::2] > lp_sum[1::2]).astype(float)
    labels = ["good", "bad"] * len(items)
    losses = -lp_sum[0::2] / np.maximum([len(p.good) - 1 for p in items], 1)
    return st, st, labels, correct, None, None, losses


_RUNNERS = {"multiple_choice": _run_mc, "generation": _run_gen, "minimal_pair": _run_pairs}

#: items per batch when the batch size is left to ckptgeo and the device is not a GPU
CPU_BATCH_SIZE = 16
#: share of the GPU's free memory the forward batches may take (the rest: allocator slack, other tensors)
GPU_MEMORY_SHARE = 0.5


def batch_bytes_per_item(config, seq_len: int, n_choices: int, element_size: int) -> int:
    """Device bytes one item of a forward batch needs at most, in bytes: the hidden states every layer
    returns and the key/value cache (``(2 L + L + 1) T d``), one layer's attention scores (``heads T^2``)
    and MLP activations (``4 d T``), in the model's dtype, plus the float32 log-softmax over the
    vocabulary at each choice token (logits and log-softmax, ``2 n_choices T V``, the largest term for short
    prompts)."""
    d, layers = config.hidden_size, config.num_hidden_layers
    heads, vocab = config.num_attention_heads, config.vocab_size
    ffn = getattr(config, "intermediate_size", 4 * d) or 4 * d
    acts = seq_len * ((3 * layers + 1) * d + heads * seq_len + ffn) * element_size
    return acts + 4 * n_choices * seq_len * vocab * 2


def auto_batch_size(model, ps: PreparedSuite, device, *, free_bytes: int | None = None) -> int:
    """Items per forward batch for ``ps`` on ``device``: on a GPU, as many as :data:`GPU_MEMORY_SHARE` of its
    free memory holds (``torch.cuda.mem_get_info``, or ``free_bytes``) at the suite's longest item
    (:func:`batch_bytes_per_item`), between 1 and the number of items; elsewhere :data:`CPU_BATCH_SIZE`.
    The batch size never changes values, only speed and memory."""
    device = torch.device(device)
    if free_bytes is None:
        if device.type != "cuda":
            return CPU_BATCH_SIZE
        free_bytes = torch.cuda.mem_get_info(device)[0]
    longest = max((max(len(p.prompt) + max((len(c) for c in p.conts), default=0), len(p.good), len(p.bad))
                   for p in ps.items), default=1)
    choices = max((len(p.conts) for p in ps.items), default=1) or 1  # a minimal pair's batch counts sentences
    element = next(model.parameters()).element_size()
    per_item = batch_bytes_per_item(model.config, longest, choices, element)
    return int(max(1, min(len(ps.items) or 1, GPU_MEMORY_SHARE * free_bytes // per_item)))


@contextlib.contextmanager
def precision(kind: str, device="cpu"):
    """The arithmetic of the forward passes run inside (the scan's ``precision`` setting).

    Parameters
    ----------
    kind : {"fp32", "tf32", "bf16"}
        ``"fp32"``: as the model is (TF32 left off, as torch's default); ``"tf32"``: float32 matrix products and
        convolutions on CUDA tensor cores (``torch.backends.cuda.matmul.allow_tf32``, restored after);
        ``"bf16"``: ``torch.autocast(device type, bfloat16)``, which runs linear layers and matrix products in
        bfloat16 and keeps normalisations, softmax and reductions in float32.
    device : str or torch.device
        Where the forward runs (autocast is per device type).
    """
    if kind == "fp32":
        yield
    elif kind == "tf32":
        before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    elif kind == "bf16":
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            yield
    else:
        raise InvalidParameterError(f"Unknown precision {kind!r}; use fp32, tf32 or bf16.", name="precision",
                                    value=kind)


def suite_key(ps: PreparedSuite) -> tuple:
    """What a forward sweep over ``ps`` depends on (its items' tokens, kinds, answers and labels, the pad
    and BOS ids), not its name: two suites with equal keys give equal outputs, so one sweep serves both."""
    return (ps.pad_id, ps.bos, tuple((p.item.kind, p.prompt, p.conts, p.good, p.bad, p.item.answer,
                                       str(p.item.label)) for p in ps.items))


def run_suite(model, ps: PreparedSuite, *, batch_size: int | None = 16, position: str = "last", device="cpu",
              revision: str = "", with_probes: bool = True, share_prefix: bool = True,
              precision_kind: str = "fp32") -> SuiteOutputs:
    """One sweep over a prepared suite.

    ``with_probes=False`` skips the extra states only probes read (multiple-choice items without a
    ``label`` are probed at each prompt + choice); ``probe_states`` then repeats ``states``.
    ``share_prefix=False`` runs every prompt whole, also where a batch's prompts share their first
    :data:`MIN_SHARED_PREFIX` or more tokens (the results agree to float rounding).
    ``extra["choice_logprob"]`` holds each choice's summed log-probability (nats), items in order;
    ``extra["padding"]`` the :class:`Padding` of the sweep's batches; ``extra["batch_size"]`` the batch size
    used (``batch_size=None``: :func:`auto_batch_size`). ``precision_kind``: the arithmetic of its passes
    (:func:`precision`); the states are upcast to float32 either way.

    Raises
    ------
    NonFiniteActivationsError
        NaN or inf in any layer's states (revision, layer and suite named).
    """
    device = torch.device(device)
    if batch_size is None:
        batch_size = auto_batch_size(model, ps, device)
    parts, count = [], Padding()
    with precision(precision_kind, device):
        for kind, runner in _RUNNERS.items():
            items = [p for p in ps.items if p.item.kind == kind]
            if items:
                parts.append((kind, runner(model, items, ps, device, batch_size, position, with_probes,
                                           share_prefix, count)))
    states = torch.cat([p[1][0] for p in parts], 1)
    probe_states = torch.cat([p[1][1] for p in parts], 1)
    labels = np.array([lab for p in parts for lab in p[1][2]], dtype=object)
    correct = np.concatenate([p[1][3] for p in parts])
    loss = np.concatenate([p[1][6] for p in parts])
    norms = [p[1][4] for p in parts if p[1][4] is not None]
    correct_norm = np.concatenate(norms) if len(norms) == len(parts) else None
    name = ps.suite.name
    _check_finite(states, revision=revision, suite=name)
    _check_finite(probe_states, revision=revision, suite=name)
    chance = ps.suite.header.get("chance")
    if chance is None:
        chance = chance_level([(p.item.kind, len(p.conts)) for p in ps.items])
    kind = parts[0][0] if len(parts) == 1 else "mixed"
    extra = {"choice_logprob": p[1][5] for p in parts if p[1][5] is not None}
    extra.update(padding=count, batch_size=batch_size)
    return SuiteOutputs(suite=name, states=states, correct=correct, correct_norm=correct_norm,
                        probe_states=probe_states, probe_labels=labels, chance=float(chance), kind=kind, extra=extra,
                        loss=loss)


def model_batch(ps: PreparedSuite, n_items: int, device="cpu") -> dict:
    """A fixed batch for whole-model metrics: ``input_ids``, ``attention_mask``, ``position_ids``, ``labels``
    of shape (n_items, seq_len), left-padded so that every item ends at the last column; labels are -100
    except on the answer tokens (the correct choice, the target, or the good sentence after its first
    token), so the task loss needs logits only at the last few positions
    (:func:`ckptgeo.metrics._autodiff.scored_tail`). ``position_ids`` count each row's real tokens from 0,
    so a row's values equal those of the row alone."""
    seqs, labs = [], []
    for p in ps.items[:n_items]:
        if p.item.kind == "minimal_pair":
            seq = list(p.good)
            lab = [-100] + seq[1:]
        else:
            cont = p.conts[p.item.answer if p.item.kind == "multiple_choice" else 0]
            seq = list(p.prompt + cont)
            lab = [-100] * len(p.prompt) + list(cont)
        seqs.append(tuple(seq)), labs.append(tuple(lab))
    ids, mask = _pad(seqs, ps.pad_id, left=True)
    labels, _ = _pad(labs, -100, left=True)
    pos = (mask.cumsum(1) - 1).clamp_min(0)
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "position_ids": pos.to(device),
            "labels": labels.to(device)}
