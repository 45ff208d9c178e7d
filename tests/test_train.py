"""The trainer: schedule, batches, evaluator, run folder layout, resume, grid, CLI, and acquisition."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from ckptgeo.training import trainer as train_mod
from ckptgeo.errors import InvalidParameterError, RunMismatchError
from ckptgeo.suites.items import load_suite
from ckptgeo.training import build_tokenizer, generate
from ckptgeo.training.trainer import TrainConfig, checkpoint_steps, evaluate, exact_match, train, training_history
from ckptgeo.cli.train import add_parser as add_train_parser
from ckptgeo.training.grid import GridReport, train_grid


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a shared 2-core machine it is many times faster than two."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _config(out, **kw) -> TrainConfig:
    base = dict(tasks=("copy",), levels=(1,), out=str(out), n_steps=6, batch_size=8, warmup_steps=2,
                n_checkpoints=5, n_heldout=16, device="cpu")
    base.update(kw)
    return TrainConfig(**base)


# ------------------------------------------------------------------------------------------------ schedule

@pytest.mark.parametrize("n_steps,k", [(1, 2), (10, 100), (100, 12), (1000, 100), (5000, 64), (143000, 154)])
def test_checkpoint_schedule(n_steps, k):
    steps = checkpoint_steps(n_steps, k)
    assert steps[0] == 0 and steps[-1] == n_steps and len(steps) <= k
    assert list(steps) == sorted(set(steps))
    gaps = [b - a for a, b in zip(steps, steps[1:])]
    assert max(gaps) <= 2 * min(gaps[len(gaps) // 2:])  # regular after the log-spaced start
    if n_steps >= k:
        assert len(steps) >= k * 0.8, len(steps)
        assert steps[1:4] == (1, 2, 4)  # log-spaced early


def test_checkpoint_schedule_rejects_bad_counts():
    with pytest.raises(InvalidParameterError, match="n_checkpoints"):
        checkpoint_steps(100, 1)
    with pytest.raises(InvalidParameterError, match="n_steps"):
        checkpoint_steps(0, 10)


# -------------------------------------------------------------------------------------------- batches, eval

def test_batches_match_tokenizer_and_exclude_heldout():
    import torch

    tok = build_tokenizer()
    cfg = _config("unused", tasks=("copy", "modular"), levels=(1, 1), batch_size=64)
    held = {"copy-L1": frozenset(), "modular-L1": frozenset(it.prompt for it in generate("modular", 1, 4000))}
    batcher = train_mod.Batcher(cfg, tok.get_vocab(), tok.pad_token_id, held)
    items = batcher.items(3)
    assert items == batcher.items(3) and items != batcher.items(4)
    assert {it.suite for it in items} == {"copy-L1", "modular-L1"}
    assert not held["modular-L1"] & {it.prompt for it in items}
    ids, attn, target = batcher.batch(3)
    for i, it in enumerate(items):
        want = tok(it.prompt + it.target)["input_ids"]
        n = int(attn[i].sum())
        assert ids[i, :n].tolist() == want and ids[i, n:].eq(tok.pad_token_id).all()
        assert ids[i][target[i]].tolist() == tok(it.target)["input_ids"]
    assert target.dtype == torch.bool


class _Oracle:
    """A stand-in causal LM whose logits put all mass on the true next token (or, if wrong, on pad)."""

    def __init__(self, wrong: bool = False):
        import torch

        self.training, self.wrong, self.p = True, wrong, torch.nn.Parameter(torch.zeros(1))

    def parameters(self):
        return iter([self.p])

    def eval(self):
        self.training = False

    def train(self, mode=True):
        self.training = mode

    def get_output_embeddings(self):
        import torch

        return torch.nn.Identity()   # the final "state" is already the one-hot logits

    def __call__(self, input_ids, attention_mask, output_hidden_states=False, **unused):
        import torch

        nxt = torch.roll(input_ids, -1, dims=1)
        if self.wrong:
            nxt = torch.zeros_like(nxt)
        logits = torch.nn.functional.one_hot(nxt, 146).float()
        # one "layer" of hidden states (the scan's scoring reads them too, and scores from the last)
        return SimpleNamespace(logits=logits, hidden_states=(logits,) if output_hidden_states else None)


def test_exact_match_is_teacher_forced_greedy():
    tok = build_tokenizer()
    items = generate("reverse", 3, 20) + generate("modular", 1, 20)
    oracle = _Oracle()
    assert evaluate(oracle, tok, items, batch_size=7) == 1.0
    assert oracle.training  # mode restored
    assert evaluate(_Oracle(wrong=True), tok, items) == 0.0
    assert exact_match(oracle, tok, items).shape == (40,)


# ---------------------------------------------------------------------------------------------- one run

def test_train_writes_a_scannable_run(tmp_path):
    from transformers import AutoTokenizer, GPTNeoXForCausalLM

    out = train(_config(tmp_path / "run"))
    steps = sorted(int(p.name[4:]) for p in out.glob("step*"))
    assert steps == list(checkpoint_steps(6, 5)) == [0, 1, 2, 4, 6]
    assert not list(out.glob(".tmp*")) and not (out / "train_state.pt").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and manifest["tasks"] == ["copy"] and manifest["levels"] == [1]
    assert manifest["size"] == "tiny" and manifest["seed"] == 0 and manifest["steps"] == 6
    assert manifest["schedule"] == steps and manifest["model"]["n_parameters"] == 434_176
    assert set(manifest["versions"]) >= {"torch", "transformers", "ckptgeo"}
    assert manifest["suites"] == {"copy-L1": "suites/copy-L1.jsonl"}
    assert [h["step"] for h in manifest["history"]] == steps
    suite = load_suite(out / "suites" / "copy-L1.jsonl")
    assert suite.name == "copy-L1" and len(suite) == 16 and suite.kinds == {"generation"}
    assert suite.header["chance"] == pytest.approx(1e-5) and suite.header["difficulty"] == 1
    assert {"task", "level"} <= set(suite.header)
    step = out / "step6"
    assert (step / "model.safetensors").is_file()
    model = GPTNeoXForCausalLM.from_pretrained(step)
    tok = AutoTokenizer.from_pretrained(step)
    acc = evaluate(model, tok, suite.items)
    assert acc == pytest.approx(manifest["history"][-1]["accuracy"]["copy-L1"])
    hist = training_history(out)
    assert list(hist.columns) == ["step", "suite", "accuracy", "loss", "lr", "seconds"] and len(hist) == 5
    assert hist["loss"].iloc[1:].notna().all()
    # the recipe, and tokens per step: batch 8 x (7 prompt + 5 answer tokens) of copy-L1
    recipe = manifest["recipe"]
    assert (recipe["lr"], recipe["batch_size"], recipe["warmup_steps"], recipe["schedule_horizon"]) == (1e-3, 8, 2, 6)
    assert recipe["threads"] == 1 and manifest["tokens_per_step"] == recipe["tokens_per_step"] == 8 * 12
    assert [h["tokens"] for h in manifest["history"]] == [96 * s for s in steps]


def test_schedule_horizon_holds_the_learning_rate(tmp_path):
    """A horizon past n_steps keeps the rate near its peak; the manifest says which horizon was used."""
    import math

    from ckptgeo.training.trainer import lr_factor

    c = _config(tmp_path, n_steps=1000, warmup_steps=100)
    assert lr_factor(c, 0) == pytest.approx(0.01) and lr_factor(c, 99) == pytest.approx(1.0)
    assert lr_factor(c, 999) == pytest.approx(0.1, abs=1e-4)  # the whole cosine inside the run
    held = dataclasses.replace(c, schedule_steps=4000)
    assert lr_factor(held, 999) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 899 / 3900)))
    assert lr_factor(held, 999) > 0.87 and lr_factor(held, 3999) == pytest.approx(0.1, abs=1e-4)
    with pytest.raises(InvalidParameterError, match="schedule_steps"):
        train(_config(tmp_path / "bad", warmup_steps=4, schedule_steps=3))
    out = train(_config(tmp_path / "run", schedule_steps=24))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["recipe"]["schedule_horizon"] == 24 and manifest["config"]["schedule_steps"] == 24
    lrs = [h["lr"] for h in manifest["history"]]
    assert lrs[-1] > 0.9 * 1e-3  # 6 of 24 steps: still near the peak


def test_scan_of_a_trained_run_fills_tokens(tmp_path):
    import pandas as pd

    from ckptgeo.engine.scan import scan

    out = train(_config(tmp_path / "run"))
    scan(out, out=tmp_path / "ds", metrics=("rankme", "behavior"), n_samples=16)
    geo = pd.read_parquet(tmp_path / "ds" / "geometry")
    assert (geo["tokens"] == geo["step"] * 96).all() and geo["step"].max() == 6


def test_rerun_skips_other_settings_refused(tmp_path):
    cfg = _config(tmp_path / "run", n_steps=3, n_checkpoints=2)
    out = train(cfg)
    stamp = (out / "step3" / "model.safetensors").stat().st_mtime_ns
    assert train(dataclasses.replace(cfg, device="cpu")) == out
    assert (out / "step3" / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(RunMismatchError, match="lr: recorded 0.001, asked 0.002") as err:
        train(dataclasses.replace(cfg, lr=2e-3))
    assert err.value.differences == (("lr", 0.001, 0.002),)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("x")
    with pytest.raises(RunMismatchError, match="not a ckptgeo training run"):
        train(dataclasses.replace(cfg, out=str(tmp_path / "junk")))


def test_resume_after_a_kill_gives_the_same_weights(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    cfg = _config(tmp_path / "a", n_steps=8, n_checkpoints=6)
    ref = train(cfg)
    real_save = train_mod.save_checkpoint

    def dying_save(model, tokenizer, out, step):
        if step == 6:
            (out / ".step6.tmp-1-0123abcd").mkdir()  # what a kill mid-write leaves (ckptgeo._io names)
            raise KeyboardInterrupt
        return real_save(model, tokenizer, out, step)

    killed = dataclasses.replace(cfg, out=str(tmp_path / "b"))
    monkeypatch.setattr(train_mod, "save_checkpoint", dying_save)
    with pytest.raises(KeyboardInterrupt):
        train(killed)
    monkeypatch.setattr(train_mod, "save_checkpoint", real_save)
    out = Path(killed.out)
    assert not json.loads((out / "manifest.json").read_text())["complete"]
    assert (out / "train_state.pt").is_file() and not (out / "step6").exists()
    train(killed)
    assert not (out / ".step6.tmp-1-0123abcd").exists()
    assert sorted(p.name for p in out.glob("step*")) == sorted(p.name for p in ref.glob("step*"))
    a, b = load_file(ref / "step8" / "model.safetensors"), load_file(out / "step8" / "model.safetensors")
    for name in a:
        assert (a[name] - b[name]).abs().max().item() < 1e-5, name
    hist = json.loads((out / "manifest.json").read_text())["history"]
    assert [h["step"] for h in hist] == list(checkpoint_steps(8, 6))


@pytest.mark.parametrize("field,value,match", [
    ("n_steps", 0, "'n_steps' parameter of TrainConfig must be an int in \\[1, inf\\). Got 0"),
    ("lr", 0.0, "'lr' parameter"), ("levels", (1, 2), "one level per task"), ("tasks", "copy", "tuple of task"),
    ("size", "giant", "Unknown model size"), ("levels", (5,), "must be 1, 2 or 3"),
    ("warmup_steps", 10, "exceeds 'n_steps'"), ("min_lr_ratio", 2.0, "min_lr_ratio")])
def test_config_validation(tmp_path, field, value, match):
    with pytest.raises(InvalidParameterError, match=match):
        train(dataclasses.replace(_config(tmp_path / "x"), **{field: value}))
    assert not (tmp_path / "x").exists()


def test_mixture_writes_one_suite_per_task(tmp_path):
    out = train(_config(tmp_path / "mix", tasks=("parity", "compare"), levels=(1, 2), n_steps=2, n_checkpoints=2))
    assert sorted(p.name for p in (out / "suites").iterdir()) == ["compare-L2.jsonl", "parity-L1.jsonl"]
    acc = json.loads((out / "manifest.json").read_text())["history"][-1]["accuracy"]
    assert set(acc) == {"parity-L1", "compare-L2"}


# --------------------------------------------------------------------------------------------------- grid

def test_grid_splits_by_rank_and_resumes(tmp_path, monkeypatch):
    template = _config(tmp_path, n_steps=2, n_checkpoints=2)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    report = train_grid(["copy", "sort"], [1], ["tiny"], out=tmp_path / "grid", template=template)
    assert isinstance(report, GridReport) and (report.rank, report.world_size) == (1, 2)
    assert [p.name for p in report.trained] == ["sort-L1-tiny-s0"]
    assert sorted(p.name for p in (tmp_path / "grid").iterdir()) == ["sort-L1-tiny-s0"]
    both = train_grid(["copy", "sort"], [1], ["tiny"], out=tmp_path / "grid", template=template, rank=0,
                      world_size=1)
    assert [p.name for p in both.trained] == ["copy-L1-tiny-s0"]
    assert [p.name for p in both.skipped] == ["sort-L1-tiny-s0"]
    with pytest.raises(InvalidParameterError, match="Rank 3"):
        train_grid(["copy"], [1], ["tiny"], out=tmp_path / "grid", rank=3, world_size=2)


# ---------------------------------------------------------------------------------------------------- CLI

def _parser():
    parser = argparse.ArgumentParser(prog="ckptgeo")
    add_train_parser(parser.add_subparsers(dest="command"))
    return parser


def test_cli_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["train", "--help"])
    text = capsys.readouterr().out
    assert "ckptgeo train --task modular --level 1 --size tiny" in text and "--grid" in text


def test_cli_runs_single_and_grid(tmp_path, capsys):
    args = _parser().parse_args(["train", "--task", "sort", "--steps", "2", "--out", str(tmp_path / "one"),
                                 "--batch-size", "4", "--checkpoints", "2", "--heldout", "8", "--device", "cpu"])
    assert args.func(args) == 0
    assert (tmp_path / "one" / "step2").is_dir()
    args = _parser().parse_args(["train", "--grid", "--tasks", "copy,reverse", "--levels", "1", "--steps", "2",
                                 "--out", str(tmp_path / "grid"), "--batch-size", "4", "--checkpoints", "2",
                                 "--heldout", "8", "--device", "cpu"])
    assert args.func(args) == 0
    assert sorted(os.listdir(tmp_path / "grid")) == ["copy-L1-tiny-s0", "reverse-L1-tiny-s0"]
    assert "2 trained" in capsys.readouterr().out
    bad = _parser().parse_args(["train", "--task", "copy", "--tasks", "sort", "--out", str(tmp_path / "x")])
    with pytest.raises(InvalidParameterError, match="not both"):
        bad.func(bad)


# ----------------------------------------------------------------------------------------------- slow

def _acquisition_step(history, chance, window=3):
    threshold = 0.5 if chance < 0.5 else (1 + chance) / 2
    run = 0
    for i, h in enumerate(history):
        run = run + 1 if h["accuracy"] > threshold else 0
        if run == window:
            return history[i - window + 1]["step"]
    return None


@pytest.mark.slow
def test_tiny_model_acquires_a_level_one_task(tmp_path):
    """The smallest model learns copy (level 1) to exact-match accuracy within 300 steps on a CPU."""
    out = train(TrainConfig(tasks=("copy",), levels=(1,), out=str(tmp_path / "copy"), n_steps=300,
                            n_checkpoints=40, device="cpu"))
    manifest = json.loads((out / "manifest.json").read_text())
    history = [{"step": h["step"], "accuracy": h["accuracy"]["copy-L1"]} for h in manifest["history"]]
    step = _acquisition_step(history, manifest["chance"]["copy-L1"])
    assert step is not None and 0 < step <= 250, history
    assert history[0]["accuracy"] < 0.05 and history[-1]["accuracy"] > 0.95, history
    from ckptgeo.cli.train import summary_line

    assert f"(acquired at step {step} on the checkpoints' grid, threshold 0.5)" in summary_line(out)


def test_cli_errors_name_the_flag(capsys, tmp_path):
    from ckptgeo.cli import main

    assert main(["train", "--task", "copy", "--steps", "0", "--out", str(tmp_path / "r")]) == 2
    assert "--steps 0 is not valid" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_modular_level_one_acquires_within_the_cpu_budget(tmp_path):
    """The canonical hard task: (a + b) mod 97 on the smallest model, under the cpu preset's recipe and step
    budget, passes 0.5 exact match for three checkpoints (near step 1500-2200; ~2-3 CPU-minutes)."""
    from ckptgeo.studies.plan import StudyRun, train_template
    from ckptgeo.studies.presets import PRESETS

    preset = PRESETS["cpu"]
    budget = preset.steps["modular"][1]
    run = StudyRun("modular", 1, "tiny", 0, budget, tmp_path / "modular-L1-tiny-s0")
    out = train(dataclasses.replace(train_template(run, preset, "cpu"), n_checkpoints=30))
    manifest = json.loads((out / "manifest.json").read_text())
    history = [{"step": h["step"], "accuracy": h["accuracy"]["modular-L1"]} for h in manifest["history"]]
    step = _acquisition_step(history, manifest["chance"]["modular-L1"])
    assert step is not None and step < budget, history
    assert history[0]["accuracy"] < 0.05, history
    assert manifest["recipe"]["schedule_horizon"] == 2 * budget and 0.5e-3 < manifest["recipe"]["lr_at_last_step"] < 0.6e-3


def test_a_run_recorded_before_a_setting_existed_still_resumes(tmp_path):
    """A manifest written before ``schedule_steps`` existed holds no such key; its default (None) is assumed."""
    out = train(_config(tmp_path / "run"))
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["config"]["schedule_steps"]
    path.write_text(json.dumps(manifest))
    assert train(_config(tmp_path / "run")) == out
    with pytest.raises(RunMismatchError, match="schedule_steps"):
        train(_config(tmp_path / "run", schedule_steps=12))


def test_each_train_setting_is_declared_once_in_trainconfig():
    """The flags' defaults, the flags' help and the study recipe come from TrainConfig's fields; a flag whose
    default drifts (``set_defaults``, a second declaration) or a docstring default that drifts fails here."""
    import ast
    import re

    from ckptgeo.cli.train import config_from_args
    from ckptgeo.studies.reproduce import RECIPE
    from ckptgeo.training.config import cli_settings, field_defaults

    parser = argparse.ArgumentParser()
    add_train_parser(parser.add_subparsers())
    args = parser.parse_args(["train", "--task", "copy", "--out", "x"])
    assert config_from_args(args, ["copy"]) == TrainConfig(tasks=("copy",), levels=(1,), out="x")
    defaults = field_defaults()
    flags = {name: flag for name, flag, _ in cli_settings()}
    assert set(defaults) - set(flags) == {"min_lr_ratio", "grad_clip"}  # no flag: the study's recipe only
    actions = {a.option_strings[0]: a for a in parser._subparsers._group_actions[0].choices["train"]._actions
               if a.option_strings}
    for name, flag in flags.items():
        assert actions[flag].default == defaults[name], (flag, actions[flag].default, defaults[name])
        shown = f"{defaults[name]:g}" if isinstance(defaults[name], float) else str(defaults[name])
        text = actions[flag].help % vars(actions[flag])   # as argparse shows it
        assert defaults[name] is None or shown in text, (flag, text)
    assert RECIPE == {k: defaults[k] for k in ("batch_size", "lr", "weight_decay", "warmup_steps", "min_lr_ratio",
                                               "grad_clip")}
    documented = dict(re.findall(r"^    (\w+) : [^\n]*, default=([^\n]+)$", TrainConfig.__doc__, re.M))
    assert set(documented) == set(defaults)
    assert {k: ast.literal_eval(v.strip('"')) if v != '"auto"' and v != '"tiny"' else v.strip('"')
            for k, v in documented.items()} == defaults


def test_step_folders_without_weights_are_not_checkpoints(tmp_path, capsys):
    """A folder holding a copied ckptgeo-run.json and weightless step5/, step6/: today's main counted them as
    checkpoints and wrote complete: true. They are refused with one line, and nothing is deleted."""
    from ckptgeo.cli import main
    from ckptgeo.training.runfolder import RUN_MARKER

    out = tmp_path / "copied"
    out.mkdir()
    (out / RUN_MARKER).write_text(json.dumps({"format": "ckptgeo-train", "writer": "0.1.0"}))
    for step in (5, 6):
        (out / f"step{step}").mkdir()
        (out / f"step{step}" / "config.json").write_text("{}")
    with pytest.raises(RunMismatchError, match=r"without model\.safetensors \(step5, step6\)"):
        train(_config(out))
    assert main(["train", "--task", "copy", "--steps", "6", "--checkpoints", "5", "--batch-size", "8",
                 "--heldout", "16", "--device", "cpu", "--out", str(out)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("ckptgeo: error:") and "step5, step6" in err[0] and "Traceback" not in "".join(err), err
    assert sorted(p.name for p in out.iterdir()) == [RUN_MARKER, "step5", "step6"]
    assert (out / "step5" / "config.json").read_text() == "{}"
