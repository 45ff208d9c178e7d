"""A real ``transformers.Trainer`` run of the tiny GPT-NeoX on copy level 1 with :class:`MonitorCallback`, and
the scalars its TensorBoard event files hold (shared by the monitor and forecast tests)."""

from __future__ import annotations

import torch

from ckptgeo.suites.tasks import parse_task_level
from ckptgeo.training import build_config, build_tokenizer, generate


def copy_trainer(out, monitor, suite, *, n_steps: int, batch: int, report_to=(), save_on_schedule: bool = False):
    """Train copy-L1 with ``transformers.Trainer`` and ``MonitorCallback(monitor, trainer=...)``; returns the
    trainer after ``train()``. ``report_to`` is the Trainer's (TensorBoard writes under ``out/runs``);
    ``save_on_schedule`` saves ``checkpoint-N`` at every monitored step and the initial weights as
    ``checkpoint-0``."""
    from transformers import GPTNeoXForCausalLM, Trainer, TrainerCallback, TrainingArguments

    from ckptgeo.monitor import MonitorCallback

    tok = build_tokenizer()
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(build_config("tiny", vocab_size=len(tok)))
    held = frozenset(it.prompt for it in suite.items)
    items = generate(*parse_task_level(suite.name), n_steps * batch, seed="train", exclude=held)

    def encode(it):
        prompt, full = tok(it.prompt)["input_ids"], tok(it.prompt + it.target)["input_ids"]
        return {"input_ids": full, "labels": [-100] * len(prompt) + full[len(prompt):]}

    def collate(rows):
        n = max(len(r["input_ids"]) for r in rows)
        return {"input_ids": torch.tensor([r["input_ids"] + [tok.pad_token_id] * (n - len(r["input_ids"]))
                                           for r in rows]),
                "attention_mask": torch.tensor([[1] * len(r["input_ids"]) + [0] * (n - len(r["input_ids"]))
                                                for r in rows]),
                "labels": torch.tensor([r["labels"] + [-100] * (n - len(r["labels"])) for r in rows])}

    class SaveOnSchedule(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if monitor.schedule.due(state.global_step):
                control.should_save = True

    args = TrainingArguments(output_dir=str(out), max_steps=n_steps, per_device_train_batch_size=batch,
                             learning_rate=1e-3, weight_decay=0.1, warmup_steps=min(30, n_steps // 4),
                             lr_scheduler_type="cosine", logging_steps=50, save_strategy="no", save_only_model=True,
                             report_to=list(report_to), use_cpu=True, seed=0,
                             disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=[encode(it) for it in items], data_collator=collate,
                      processing_class=tok, callbacks=[SaveOnSchedule()] if save_on_schedule else [])
    trainer.add_callback(MonitorCallback(monitor, trainer=trainer))
    if save_on_schedule:
        model.save_pretrained(out / "checkpoint-0")
        tok.save_pretrained(out / "checkpoint-0")
    trainer.train()
    return trainer


def tensorboard_scalars(folder) -> dict[str, dict[int, float]]:
    """Every scalar in the TensorBoard event files under ``folder``: tag -> {step: value}, read with
    TensorBoard's own ``EventAccumulator``."""
    from pathlib import Path

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, dict[int, float]] = {}
    for run in sorted({p.parent for p in Path(folder).rglob("events.out.tfevents.*")}):
        acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return out
