"""The forward batch size: values do not depend on it, and on a CPU the scan measures it (fake clocks here;
no test asserts wall time)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests._checkpoints import SUITE, make_checkpoints, tiny_config


@pytest.fixture(scope="module")
def tokenizer():
    from tests._checkpoints import train_tokenizer

    return train_tokenizer()


@pytest.fixture(scope="module")
def model():
    from transformers import GPTNeoXForCausalLM

    torch.manual_seed(5)
    return GPTNeoXForCausalLM(tiny_config()).eval()


def _mixed_suite(tokenizer, n=40):
    """Multiple choice (logical deduction), minimal pairs and generation items in one suite."""
    from ckptgeo.engine.forward import prepare_suite
    from ckptgeo.suites.items import Item, Suite, load_suite

    mc = load_suite(SUITE).items[:n]
    words = ["the fox runs", "a dog sleeps in the sun", "birds sing", "the old man reads a long book"]
    pairs = tuple(Item(id=f"p{i}", suite="mixed", kind="minimal_pair", good=w, bad=" ".join(reversed(w.split())))
                  for i, w in enumerate(words * 3))
    gen = tuple(Item(id=f"g{i}", suite="mixed", kind="generation", prompt=f"count: {i} {i + 1}", target=f" {i + 2}")
                for i in range(9))
    return prepare_suite(Suite("mixed", tuple(mc) + pairs + gen), tokenizer, n_samples=None)


def test_rankme_and_accuracy_do_not_depend_on_the_batch_size(model, tokenizer):
    """Batch sizes 1, 3, 16, 32 and 64 (every item in one batch): per-layer RankMe within 1e-5, accuracy,
    normalised accuracy and the per-item choice scores' picks identical, states within float rounding."""
    from ckptgeo.engine.forward import run_suite
    from ckptgeo.metrics.rankme import rankme

    ps = _mixed_suite(tokenizer)
    outs = {b: run_suite(model, ps, batch_size=b) for b in (1, 3, 16, 32, 64)}
    ref = outs[1]
    assert ref.states.shape[1] == len(ps.items) + 12 * 1 and ref.kind == "mixed"   # pairs: good and bad rows
    ranks = {b: [float(rankme(o.states[layer])) for layer in range(o.states.shape[0])] for b, o in outs.items()}
    for b, o in outs.items():
        assert o.extra["batch_size"] == b
        assert ranks[b] == pytest.approx(ranks[1], abs=1e-5), b
        assert (o.correct == ref.correct).all() and (o.correct_norm is None) == (ref.correct_norm is None)
        torch.testing.assert_close(o.states, ref.states, rtol=1e-4, atol=1e-4)
        assert o.loss == pytest.approx(ref.loss, rel=1e-4, abs=1e-5)
    assert 1 < ranks[1][-1] <= ref.states.shape[2]


class _FakeClock:
    """CPU seconds that advance by a set cost per item at the batch size each sweep runs."""

    def __init__(self, per_item: dict[int, float], items: int):
        self.per_item, self.items, self.now, self.calls = per_item, items, 0.0, []

    def sweep(self, b: int):
        self.calls.append(b)
        self.now += self.per_item[b] * self.items

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("per_item, chosen", [
    ({16: 0.10, 32: 0.06, 64: 0.07}, 32),      # the cheapest
    ({16: 0.10, 32: 0.06, 64: 0.058}, 32),     # 64 is cheaper by under 5%: the smaller batch is kept
    ({16: 0.10, 32: 0.08, 64: 0.05}, 64),
    ({16: 0.05, 32: 0.09, 64: 0.20}, 16),
])
def test_the_cheapest_batch_per_item_is_chosen_on_a_fake_clock(per_item, chosen):
    from ckptgeo.engine.batching import measure_batch_size

    clock = _FakeClock(per_item, 64)
    got, costs = measure_batch_size(clock.sweep, (16, 32, 64), 64, clock=clock)
    assert got == chosen
    assert costs == pytest.approx(per_item)
    assert clock.calls == [64, 16, 32, 64]          # an untimed first sweep at the largest, then each once


def test_choose_batch_size_times_the_suites_first_items(model, tokenizer):
    """On the CPU each candidate runs the suite's first 64 items (real sweeps, a fake clock giving each batch
    size its cost); an explicit batch size, too few items or too little memory for more: nothing timed."""
    import dataclasses

    from ckptgeo.engine import forward
    from ckptgeo.engine.batching import choose_batch_size
    from ckptgeo.engine.config import ScanConfig
    from ckptgeo.engine.forward import auto_batch_size, batch_bytes_per_item

    ps = _mixed_suite(tokenizer, n=80)
    seen = []
    real = forward.run_suite

    def counting(model_, ps_, **kw):
        seen.append((len(ps_.items), kw["batch_size"]))
        return real(model_, ps_, **kw)

    costs = {16: 3.0, 32: 1.0, 64: 2.0}   # seconds per sweep of 64 items, by batch size; the first is untimed

    def clock():
        return sum(costs[b] for _, b in seen[1:])

    forward.run_suite = counting
    try:
        choice = choose_batch_size(model, ps, ScanConfig(), revision="step7", clock=clock, free_bytes=10 ** 12)
    finally:
        forward.run_suite = real
    assert seen == [(64, 64), (64, 16), (64, 32), (64, 64)]
    assert choice.chosen_by == "measured" and choice.revision == "step7" and choice.items == 64
    assert set(choice.cpu_seconds_per_item) == {16, 32, 64} and choice.suite == "mixed"
    rec = choice.record()
    assert rec["batch_size"] == choice.batch_size and set(rec["cpu_seconds_per_item"]) == {"16", "32", "64"}
    assert "measured at step7 on 64 items" in choice.describe()

    assert choose_batch_size(model, ps, ScanConfig(batch_size=5)).batch_size == 5
    few = dataclasses.replace(ps, items=ps.items[:12])
    assert (choose_batch_size(model, few, ScanConfig(), free_bytes=10 ** 12).chosen_by,
            choose_batch_size(model, few, ScanConfig(), free_bytes=10 ** 12).batch_size) == ("too few items", 12)
    longest = max(max(len(p.prompt) + max((len(c) for c in p.conts), default=0), len(p.good)) for p in ps.items)
    free = 2 * batch_bytes_per_item(model.config, longest, 7, 4) * 4   # an upper bound per item: 4 or more fit
    fits = auto_batch_size(model, ps, "cpu", free_bytes=free)
    assert 4 <= fits < 16
    small = choose_batch_size(model, ps, ScanConfig(), free_bytes=free)
    assert (small.chosen_by, small.batch_size) == ("available memory", fits)


def test_a_cpu_scan_records_the_measured_batch_size_and_a_resumed_scan_reuses_it(tmp_path, caplog):
    """A scan of 40 items on the CPU measures its batch size at its first revision, logs it, writes it into
    runs/<hash>.json; a second scan of the same settings with more revisions takes it from there."""
    import logging

    from ckptgeo.engine.scan import scan

    ckpts = make_checkpoints(tmp_path / "tiny", steps=(0, 1, 2))
    out = tmp_path / "ds"
    with caplog.at_level(logging.INFO, logger="ckptgeo"):
        res = scan(ckpts, out=out, revisions="step0,step1", suites=(SUITE,), n_samples=40)
    assert res.measured == ["step0", "step1"]
    record = json.loads((out / "runs" / f"{res.config_hash}.json").read_text())
    (choice,) = record["runtime"]["batch_sizes"]
    assert choice["chosen_by"] == "measured" and choice["revision"] == "step0" and choice["items"] == 40
    assert set(choice["cpu_seconds_per_item"]) == {"16", "32", "40"} and choice["batch_size"] in (16, 32, 40)
    assert any("measured at step0 on 40 items" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ckptgeo"):
        res2 = scan(ckpts, out=out, revisions="all", suites=(SUITE,), n_samples=40)
    assert res2.measured == ["step2"] and res2.config_hash == res.config_hash
    assert not any("measured at" in r.getMessage() for r in caplog.records)       # not timed again
    again = json.loads((out / "runs" / f"{res.config_hash}.json").read_text())["runtime"]["batch_sizes"]
    assert again == [choice]
    import pandas as pd

    assert set(pd.read_parquet(out / "revisions").revision) == {"step0", "step1", "step2"}
    assert Path(out / "geometry").exists()
