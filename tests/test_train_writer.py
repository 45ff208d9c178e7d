"""Checkpoint writes off the steps' path (runfolder.BackgroundWriter): the weights, evaluation and training
state a run writes equal those of a plain synchronous loop, and a failed write is raised, not lost."""

from __future__ import annotations

import json

import pytest

from ckptgeo.training.runfolder import BackgroundWriter
from ckptgeo.training.trainer import TrainConfig, checkpoint_steps, evaluate, train


def _reference(cfg: TrainConfig) -> dict:
    """Weights, held-out accuracy and AdamW state at every checkpoint step of a plain loop written without
    the trainer: same seed, batches, optimiser, evaluation, one thread, everything copied synchronously."""
    import torch
    from transformers import GPTNeoXForCausalLM

    from ckptgeo.suites.tasks import heldout_items
    from ckptgeo.suites.vocab import build_tokenizer
    from ckptgeo.training.batches import Batcher, answer_loss
    from ckptgeo.training.schedule import build_optimizer
    from ckptgeo.training.sizes import build_config, get_size

    tok = build_tokenizer()
    task, level = cfg.tasks[0], cfg.levels[0]
    heldout = heldout_items(task, level, cfg.n_heldout, seed=cfg.seed)
    torch.manual_seed(cfg.seed)
    model = GPTNeoXForCausalLM(build_config(get_size(cfg.size), vocab_size=len(tok)))
    model.train()
    opt, sched = build_optimizer(model, cfg, torch)
    exclude = {f"{task}-L{level}": frozenset(i.prompt for i in heldout)}
    batcher = Batcher(cfg, tok.get_vocab(), tok.pad_token_id, exclude)
    schedule, out = set(checkpoint_steps(cfg.n_steps, cfg.n_checkpoints)), {}

    def keep(step):
        out[step] = ({k: v.detach().clone() for k, v in model.state_dict().items()},
                     evaluate(model, tok, heldout), {k: {n: t.clone() for n, t in s.items()}
                                                     for k, s in opt.state_dict()["state"].items()})

    keep(0)
    for step in range(1, cfg.n_steps + 1):
        ids, attn, target = batcher.batch(step)
        loss = answer_loss(model(input_ids=ids, attention_mask=attn).logits, ids, target, torch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        if step in schedule:
            keep(step)
    return out


def test_checkpoints_written_in_the_background_equal_a_synchronous_loop(tmp_path):
    import torch
    from safetensors.torch import load_file

    from ckptgeo._io import load_torch_safely

    # every step a checkpoint: the writer is still busy with one when the next is due
    cfg = TrainConfig(tasks=("copy",), levels=(1,), out=str(tmp_path / "run"), n_steps=8, batch_size=8,
                      warmup_steps=2, n_checkpoints=9, n_heldout=24, device="cpu", threads=1, seed=3)
    from ckptgeo._threads import torch_threads

    with torch_threads(threads=cfg.threads):  # the run's thread count: another changes the float rounding
        ref = _reference(cfg)
    train(cfg)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert [h["step"] for h in manifest["history"]] == sorted(ref) == list(range(9))
    for h in manifest["history"]:
        weights, accuracy, _ = ref[h["step"]]
        saved = load_file(str(tmp_path / "run" / f"step{h['step']}" / "model.safetensors"))
        for name, tensor in saved.items():
            own = weights.get(name, weights.get(name.replace("embed_out", "lm_head")))
            assert own is not None and torch.equal(tensor, own), (h["step"], name)
        assert h["accuracy"] == {"copy-L1": accuracy}
    assert manifest["complete"] is True

    # a run stopped before its end keeps the optimiser state of its newest checkpoint, copied at that step
    cfg2 = TrainConfig(**{**cfg.__dict__, "out": str(tmp_path / "cut"), "n_steps": 8, "n_checkpoints": 9})
    import ckptgeo.training.trainer as trainer_mod

    real, calls = trainer_mod.write_manifest, []

    def stop_after_step4(out, record):
        real(out, record)
        calls.append(record["history"][-1]["step"] if record["history"] else None)
        if calls[-1] == 4:
            raise KeyboardInterrupt

    trainer_mod.write_manifest = stop_after_step4
    try:
        with pytest.raises(KeyboardInterrupt):
            train(cfg2)
    finally:
        trainer_mod.write_manifest = real
    state = load_torch_safely(tmp_path / "cut" / "train_state.pt")
    assert state["step"] == 4
    for k, s in ref[4][2].items():
        for n, t in s.items():
            assert torch.equal(state["optimizer"]["state"][k][n], t), (k, n)


def test_a_failed_write_is_raised_and_stops_the_writes_after_it():
    done = []
    writer = BackgroundWriter()

    def fail():
        raise OSError("disk full")

    writer.submit(done.append, 1)
    writer.submit(fail)
    writer.submit(done.append, 2)
    with pytest.raises(OSError, match="disk full"):
        writer.wait()
    writer.close()
    assert done == [1]
