"""Untrusted inputs: no pickle code runs, no name from an input becomes a path outside ``--out``, nothing
ckptgeo did not write is deleted or adopted, and every bad input gets one line of error."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from ckptgeo.errors import CorruptCheckpointError, UnsafeFileError
from ckptgeo.training.trainer import TrainConfig, train
from tests.test_train import one_thread  # noqa: F401  (autouse here too: one intra-op thread)


def _config(out, **kw) -> TrainConfig:
    base = dict(tasks=("copy",), levels=(1,), out=str(out), n_steps=2, batch_size=4, warmup_steps=1,
                n_checkpoints=3, n_heldout=8, device="cpu")
    base.update(kw)
    return TrainConfig(**base)


class _MakesFolder:
    """A pickle that, when loaded unsafely, runs ``os.mkdir(path)``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return os.mkdir, (self.path,)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    return train(_config(tmp_path_factory.mktemp("run") / "run"))


def _unfinished_copy(run: Path, dest: Path) -> Path:
    """A copy of a finished run marked unfinished, as a run killed after step 1 looks (minus its state)."""
    import shutil

    shutil.copytree(run, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["complete"] = False
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


# ---------------------------------------------------------------------------------- 1. train_state.pt

def test_resuming_never_runs_the_pickle_in_train_state(finished_run, tmp_path, capsys):
    import torch

    from ckptgeo.cli import main

    out = _unfinished_copy(finished_run, tmp_path / "run")
    sentinel = tmp_path / "code-ran"
    torch.save({"step": 1, "optimizer": {}, "scheduler": {}, "x": _MakesFolder(sentinel)}, out / "train_state.pt")
    with pytest.raises(UnsafeFileError, match="cannot be loaded safely") as err:
        train(_config(out))
    assert not sentinel.exists() and err.value.path == str(out / "train_state.pt")
    assert "posix.mkdir" in str(err.value)
    rc = main(["train", "--task", "copy", "--steps", "2", "--batch-size", "4", "--warmup", "1",
               "--checkpoints", "3", "--heldout", "8", "--device", "cpu", "--out", str(out)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 4 and not sentinel.exists()
    assert lines[0].startswith(f"ckptgeo: error: {out / 'train_state.pt'} cannot be loaded safely"), lines
    assert "Traceback" not in "\n".join(lines) and len(lines) == 2, lines  # the error, then the debug hint


@pytest.mark.parametrize("content,match", [
    ({"step": 1, "optimizer": {}, "scheduler": {}}, "does not fit this run's optimiser"),  # was KeyError 'param_groups'
    ({"optimizer": {}}, "does not hold a step, an optimiser and a scheduler state"),
    ([1, 2, 3], "does not hold a step"),
    (b"not a torch file", "cannot be loaded safely"),  # the safe loader refuses it: say so
    ("truncated", "is damaged \\(truncated or corrupt"),
])
def test_a_foreign_train_state_is_a_one_line_error_naming_it(finished_run, tmp_path, content, match):
    import torch

    out = _unfinished_copy(finished_run, tmp_path / "run")
    if isinstance(content, bytes):
        (out / "train_state.pt").write_bytes(content)
    elif content == "truncated":
        torch.save({"step": 1, "t": torch.zeros(100)}, out / "train_state.pt")
        data = (out / "train_state.pt").read_bytes()
        (out / "train_state.pt").write_bytes(data[:len(data) // 2])
    else:
        torch.save(content, out / "train_state.pt")
    with pytest.raises(CorruptCheckpointError, match=match) as err:
        train(_config(out))
    assert err.value.path == str(out / "train_state.pt") and str(out / "train_state.pt") in str(err.value)
    assert "\n" not in str(err.value) and "new --out folder" in str(err.value)


def test_a_real_train_state_loads_under_the_safe_loader(tmp_path):
    """What ckptgeo writes (a step, AdamW's and LambdaLR's state) passes the weights-only loader."""
    import torch

    from ckptgeo._io import load_torch_safely
    from ckptgeo.training.runfolder import save_state
    from ckptgeo.training.schedule import build_optimizer

    model = torch.nn.Linear(3, 2)
    opt, sched = build_optimizer(model, _config(tmp_path), torch)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    sched.step()
    save_state(tmp_path / "train_state.pt", 1, opt, sched, torch)
    state = load_torch_safely(tmp_path / "train_state.pt")
    assert state["step"] == 1 and len(state["optimizer"]["param_groups"]) == 2
    assert state["scheduler"]["last_epoch"] == 1 and state["optimizer"]["state"][0]["exp_avg"].shape == (2, 3)


# ---------------------------------------------------------------------------- 2. names inside --out

_HOSTILE = ["..", ".", "../../x", "../../../../escaped", "/abs/path/model", "a/b", "a\\b", "a\0b", ".hidden",
            ".x.tmp-1-deadbeef", "x" * 300, "é" * 200, "step1000/../../..", "a@step1000"]


@pytest.mark.parametrize("name", _HOSTILE)
def test_safe_name_keeps_every_name_one_component_inside_its_folder(tmp_path, name):
    from ckptgeo._io import NAME_MAX_BYTES, _temp_name, safe_name

    slug = safe_name(name, what="suite name")
    assert not {"/", "\\", "\0"} & set(slug) and not slug.startswith(".") and slug not in ("", ".", "..")
    assert len(slug.encode()) <= NAME_MAX_BYTES == 80
    target = tmp_path / f"{slug}.safetensors"
    assert target.resolve().parent == tmp_path.resolve()
    tmp = _temp_name(target)                     # the longest name ckptgeo makes from it: its temporary file
    tmp.write_bytes(b"x")                        # (over 255 bytes this would be ENAMETOOLONG)
    assert tmp.parent == tmp_path and len(tmp.name.encode()) <= 255


def test_safe_name_leaves_plain_names_and_keeps_long_ones_distinct():
    from ckptgeo._io import safe_name
    from ckptgeo.errors import InvalidParameterError

    for plain in ("step1000", "pythia-160m", "copy-L1", "stage2-ingredient1-step1000-tokens5B", "model.v2"):
        assert safe_name(plain) == plain
    assert safe_name("x" * 300) != safe_name("x" * 299 + "y") and safe_name("x" * 300)[:71] == "x" * 71
    with pytest.raises(InvalidParameterError, match="suite name must be a non-empty string"):
        safe_name("", what="suite name")


def test_part_names_of_long_names_fit_a_file_name(tmp_path):
    from ckptgeo.store.dataset import Dataset, part_name

    name = part_name("m" * 250, "r" * 250, "0123456789ab")
    assert len(name.encode()) < 200 and "/" not in name
    ds = Dataset(tmp_path / "ds")
    ds.write_part("revisions", name, [])
    assert [p.name for p in (tmp_path / "ds" / "revisions").iterdir()] == [name]


def test_revision_names_alike_once_made_safe_get_distinct_parts_and_old_parts_are_still_found(tmp_path):
    """Part names are one-to-one in the revision name (`a/b`, `a_b`, `a@b` apart; a safe name unchanged); a
    dataset written before, whose part of `m@step1` is named `m_step1`, resumes from that part, and a part
    named alike that holds another revision's rows is not taken as this one's."""
    from ckptgeo.store.dataset import Dataset, part_name

    names = {part_name("m", r, "h") for r in ("a/b", "a_b", "a@b", "a b")}
    assert len(names) == 4 and "m--a_b--h.parquet" in names and part_name("m", "step1", "h") == "m--step1--h.parquet"
    ds = Dataset(tmp_path / "ds")
    row = {"model": "m", "revision": "m@step1", "step": 1, "status": "ok", "commit": "c1", "config_hash": "h"}
    ds.write_part("revisions", "m--m_step1--h.parquet", [row])   # the name an older ckptgeo gave it
    assert ds.part_of("m", "m@step1", "h") == "m--m_step1--h.parquet"
    assert ds.is_done(ds.part_of("m", "m@step1", "h"), commit="c1", revision="m@step1")
    assert ds.part_of("m", "m_step1", "h") == "m--m_step1--h.parquet"   # a safe name's part name never changes
    assert not ds.is_done("m--m_step1--h.parquet", commit="c1", revision="m_step1"), "another revision's part"
    assert ds.part_of("m", "x/step1", "h") == part_name("m", "x/step1", "h")   # no old part: the new name


def _suite_file(path: Path, name: str, n: int = 4) -> Path:
    """A copy of the bundled logical_deduction suite's first ``n`` items under the header name ``name``."""
    from ckptgeo.suites.items import diagnostics_dir

    lines = (diagnostics_dir() / "logical_deduction.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    header["suite_header"]["name"] = name
    items = [json.loads(line) for line in lines[1:n + 1]]
    for it in items:
        it["suite"] = name
    path.write_text("\n".join(json.dumps(o) for o in [header, *items]) + "\n")
    return path


def test_suite_names_from_a_file_never_write_outside_out(tmp_path):
    """--save-states with suites named ``../../../../escaped`` and ``/abs/.../victim/model``: each states file
    lies in out/states/<part>/, and the user's own ``victim/model.safetensors`` is untouched."""
    from tests._checkpoints import make_checkpoints
    from tests._faults import quiet_scan

    ck = make_checkpoints(tmp_path / "ck", steps=(0,))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "model.safetensors").write_bytes(b"the user's weights")
    suites = (str(_suite_file(tmp_path / "a.jsonl", "../../../../escaped")),
              str(_suite_file(tmp_path / "b.jsonl", str(victim / "model"))))
    out = tmp_path / "deep" / "er" / "out"
    res = quiet_scan(ck, out, suites=suites, save_states=True, metrics=("rankme",))
    assert res.measured == ["step0"], res.failed
    assert (victim / "model.safetensors").read_bytes() == b"the user's weights"
    outside = [p for p in tmp_path.rglob("*") if p.is_file() and out not in p.parents
               and ck not in p.parents and p.parent != tmp_path and p != victim / "model.safetensors"]
    assert outside == []
    from ckptgeo._io import safe_name

    part = next((out / "states").iterdir()).name
    states = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.safetensors"))
    assert states == sorted([f"states/{part}/___.._.._.._escaped.safetensors",
                             f"states/{part}/{safe_name(str(victim / 'model'))}.safetensors"])


def test_a_hub_branch_name_never_writes_outside_the_cache_refs(tmp_path):
    from ckptgeo.sources.hub import _remember_ref

    snapshot = tmp_path / "hub" / "models--org--m" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    _remember_ref(snapshot, "../../../escaped", "abc")  # would be tmp_path/escaped
    _remember_ref(snapshot, "stage1/step1000", "abc")
    assert not list(tmp_path.rglob("escaped"))
    assert (tmp_path / "hub" / "models--org--m" / "refs" / "stage1" / "step1000").read_text() == "abc"


# ------------------------------------------------------------- 3. only ckptgeo's own run folders, own files

def test_a_folder_ckptgeo_did_not_make_is_neither_adopted_nor_cleaned(tmp_path):
    """Only ``suites/`` and dot files: the user's folder, not a run. Nothing in it is read, written or deleted."""
    from ckptgeo.errors import RunMismatchError

    out = tmp_path / "mine"
    (out / "suites").mkdir(parents=True)
    (out / "suites" / "copy-L1.jsonl").write_text('{"prompt": "my own", "target": "suite"}\n')
    (out / ".draft.tmp-1").write_text("my draft")
    (out / ".step2.tmp-1-0123abcd").write_text("looks like ckptgeo's, but the folder is not")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(RunMismatchError, match="was not made by ckptgeo train \\(no ckptgeo-run.json\\)"):
        train(_config(out))
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    (out / "suites" / "copy-L1.jsonl").unlink()
    (out / "suites").rmdir()
    (out / ".step2.tmp-1-0123abcd").unlink()
    with pytest.raises(RunMismatchError, match="not made by ckptgeo train"):  # a dot file alone is not nothing
        train(_config(out))
    assert (out / ".draft.tmp-1").read_text() == "my draft"


def test_resume_removes_only_the_temporary_files_ckptgeo_named(finished_run, tmp_path):
    out = _unfinished_copy(finished_run, tmp_path / "run")
    assert (out / "ckptgeo-run.json").is_file()
    (out / ".draft.tmp-1").write_text("the user's")                     # not ckptgeo's temporary name
    (out / ".notes.txt.tmp-4242-0a1b2c3d").write_text("the user's")     # the form, but not a run file
    (out / ".step2.tmp-4242-0a1b2c3d").mkdir()                          # a kill mid-write of step2
    (out / ".manifest.json.tmp-4242-0a1b2c3d").write_text("{")          # ... of the manifest
    assert train(_config(out)) == out
    assert (out / ".draft.tmp-1").read_text() == (out / ".notes.txt.tmp-4242-0a1b2c3d").read_text() == "the user's"
    assert not (out / ".step2.tmp-4242-0a1b2c3d").exists() and not (out / ".manifest.json.tmp-4242-0a1b2c3d").exists()
    assert json.loads((out / "manifest.json").read_text())["complete"]


def test_a_run_from_before_the_marker_still_resumes(finished_run, tmp_path):
    import shutil

    out = tmp_path / "old"
    shutil.copytree(finished_run, out)
    (out / "ckptgeo-run.json").unlink()
    assert train(_config(out)) == out                                   # complete: nothing to do
    assert not (out / "ckptgeo-run.json").exists()


def test_grid_never_counts_a_foreign_folder_as_a_finished_run(tmp_path):
    from ckptgeo.errors import RunMismatchError
    from ckptgeo.training.grid import train_grid

    foreign = tmp_path / "grid" / "copy-L1-tiny-s0"
    foreign.mkdir(parents=True)
    (foreign / "manifest.json").write_text(json.dumps({"complete": True}))
    with pytest.raises(RunMismatchError, match="not made by ckptgeo train"):
        train_grid(["copy"], [1], ["tiny"], out=tmp_path / "grid", template=_config(tmp_path))


# ------------------------------------------------------------------------- 4. one line, never a traceback

@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    from tests._checkpoints import make_checkpoints

    return make_checkpoints(tmp_path_factory.mktemp("ck") / "tiny", steps=(0, 1))


def _scan_cli(source, out, *extra) -> list[str]:
    return ["scan", str(source), "--out", str(out), "--suite", "logical_deduction", "--n-samples", "8",
            "--metrics", "rankme", *extra]


def test_another_tools_parquet_in_a_table_folder_is_named_and_left_alone(ckpts, tmp_path, capsys):
    from ckptgeo.cli import main

    out = tmp_path / "ds"
    assert main(_scan_cli(ckpts, out, "--revisions", "step0")) == 0
    for table in ("revisions", "geometry"):
        foreign = out / table / "notes.parquet"
        foreign.write_text("another tool's file, not Parquet")
        if table == "revisions":  # a scan reads its own model's parts only: it finishes and leaves the file alone
            assert main(_scan_cli(ckpts, out)) == 0
        capsys.readouterr()
        rc = main(["analyze", str(out)])
        err = capsys.readouterr().err
        assert rc == 6 and "Traceback" not in err, err
        first = err.splitlines()[0]
        assert first.startswith(f"ckptgeo: error: {foreign} is not a Parquet table ckptgeo can read (ArrowInvalid: ")
        assert first.endswith(f"ckptgeo reads every *.parquet in {foreign.parent}: move that file out of the folder "
                              f"(ckptgeo leaves it as it is) and rerun.") and "magic bytes" in first
        assert foreign.read_text() == "another tool's file, not Parquet"
        foreign.unlink()
    # a valid Parquet file of another tool: named too, not silently joined to the table
    import pandas as pd

    foreign = out / "geometry" / "export.parquet"
    pd.DataFrame({"layer": [1], "value": [2.0]}).to_parquet(foreign)
    before = foreign.read_bytes()
    capsys.readouterr()
    assert main(["analyze", str(out)]) == 6
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith(f"ckptgeo: error: {foreign} is not a part of ckptgeo's geometry table (it has no model, "
                            "step columns)"), first
    assert foreign.read_bytes() == before


def _full_disk_available(tmp_path) -> bool:
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {tmp_path}"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_keeps_the_finished_revisions(ckpts, tmp_path):
    """A real full disk: a 1 MB tmpfs in a user namespace, filled after step0 is measured."""
    import subprocess
    import sys

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if not _full_disk_available(mnt):
        pytest.skip("no user namespace with tmpfs here (unshare -rm)")
    code = (
        "import os, sys\n"
        "from ckptgeo.cli import main\n"
        f"args = {_scan_cli(ckpts, mnt / 'ds')!r}\n"
        "assert main(args + ['--revisions', 'step0']) == 0\n"
        "sys.stderr.write('--- full ---\\n')\n"
        f"with open({str(mnt / 'filler')!r}, 'wb', buffering=0) as f:\n"
        "    try:\n"
        "        while True:\n"
        "            f.write(bytes(4096))\n"
        "    except OSError:\n"
        "        pass\n"
        "print('rc=%d' % main(args))\n"
        f"print(sorted(os.listdir({str(mnt / 'ds' / 'revisions')!r})))\n")
    res = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {mnt} && "
                          f"exec {sys.executable} -c \"$0\"", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1],
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
                              "CKPTGEO_NO_PROGRESS": "1"})
    stderr = res.stderr.partition("--- full ---\n")[2]
    lines = [line for line in stderr.splitlines() if "Writing model shards" not in line]
    assert "Traceback" not in stderr and "rc=5" in res.stdout, (res.stdout, res.stderr)
    errors = [line for line in lines if line.startswith("ckptgeo: error:")]
    # the disk is full before the second scan starts, so it may stop at its first write (the dataset's claim
    # file) or at step1's parts: either way one line that names the file and says finished work is kept
    assert len(errors) == 1 and "disk full while writing " + str(tmp_path) in errors[0], errors
    assert errors[0].endswith("finished work is kept"), errors
    assert [line for line in lines if line.startswith("WARNING")] == [
        line for line in lines if "could not record the failure of step1" in line]   # at most one line about it
    assert "tiny--step0--" in res.stdout and "tiny--step1--" not in res.stdout        # step0 kept, step1 not done


def _with_config(ckpts, dest: Path, **fields) -> Path:
    import shutil

    shutil.copytree(ckpts, dest)
    for step in ("step0", "step1"):
        path = dest / step / "config.json"
        config = json.loads(path.read_text())
        config.update(fields)
        path.write_text(json.dumps(config))
        (dest / step / "configuration_x.py").write_text(f"import os\nos.mkdir({str(dest / 'code-ran')!r})\n")
    return dest


def test_a_repository_that_needs_its_own_code_is_named_never_prompted(ckpts, tmp_path, capsys):
    from tests._faults import quiet_scan

    ck = _with_config(ckpts, tmp_path / "ck", model_type="x-custom",
                      auto_map={"AutoConfig": "configuration_x.XConfig", "AutoModelForCausalLM": "modeling_x.XLM"})
    res = quiet_scan(ck, tmp_path / "ds", metrics=("rankme",))
    assert sorted(res.failed) == ["step0", "step1"] and not (ck / "code-ran").exists()
    assert res.failed["step1"] == ("UnsafeFileError: step1: the repository needs its own code (config.json auto_map: "
                                   "configuration_x.XConfig), which ckptgeo does not run; only architectures built "
                                   "into transformers can be measured")
    assert "[y/N]" not in capsys.readouterr().out


def test_a_tokenizer_that_needs_its_own_code_is_one_line(ckpts, tmp_path, capsys):
    import shutil

    from ckptgeo.cli import main

    ck = tmp_path / "ck"
    shutil.copytree(ckpts, ck)
    path = ck / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config.update(tokenizer_class="XTokenizer", auto_map={"AutoTokenizer": ["tokenization_x.XTokenizer", None]})
    path.write_text(json.dumps(config))
    assert main(_scan_cli(ck, tmp_path / "ds")) == 4
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0] == (
        f"ckptgeo: error: cannot load the tokenizer from {ck}: the repository needs its own code "
        f"(tokenizer_config.json auto_map: tokenization_x.XTokenizer), which ckptgeo does not run; nothing was "
        f"measured.")
    assert "[y/N]" not in captured.out + captured.err


def test_a_weight_pickle_refused_by_the_safe_loader_says_so(ckpts, tmp_path):
    import shutil

    import torch
    from safetensors.torch import load_file

    from tests._faults import quiet_scan

    ck = tmp_path / "ck"
    shutil.copytree(ckpts, ck)
    weights = ck / "step1" / "model.safetensors"
    state = {**load_file(weights), "x": _MakesFolder(tmp_path / "code-ran")}
    weights.unlink()
    torch.save(state, ck / "step1" / "pytorch_model.bin")
    res = quiet_scan(ck, tmp_path / "ds", metrics=("rankme",))
    assert res.measured == ["step0"] and not (tmp_path / "code-ran").exists()
    msg = res.failed["step1"]
    assert msg.startswith(f"UnsafeFileError: step1: weight file {ck / 'step1' / 'pytorch_model.bin'} cannot be "
                          f"loaded safely: torch's weights-only loader") and "posix.mkdir" in msg
    assert "damaged" not in msg


# ------------------------------------------------------------------------------ 5. offline says so

def test_offline_says_how_many_revisions_came_from_the_cache(local_hub, tmp_path, monkeypatch, capsys, caplog):
    import huggingface_hub.constants as hc
    from huggingface_hub import hf_hub_download

    from ckptgeo.cli import main

    repo = local_hub.repo_id
    assert main(["fetch", repo, "--revisions", "step1000,step2000"]) == 0
    hf_hub_download(repo, "config.json", revision="step3000")   # the cache now names step3000, without weights
    capsys.readouterr()
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    with caplog.at_level("WARNING"):
        assert main(_scan_cli(repo, tmp_path / "ds", "--revisions", "1000:4000")) == 0
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("offline:")]
    assert said == [f"offline: 2 revisions from the local cache (HF_HUB_OFFLINE=1); revisions of {repo} not in the "
                    f"cache could not be known (the cache names step3000 without weights); run `ckptgeo fetch {repo} "
                    f"--revisions '1000:4000'` where the Hub is reachable to add them"]
    assert "measured 2" in capsys.readouterr().out
    assert main(["revisions", repo]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"offline: 2 revisions from the local cache (HF_HUB_OFFLINE=1); revisions of {repo} not in "
                        f"the cache could not be known (the cache names step3000 without weights); run `ckptgeo "
                        f"fetch {repo}` where the Hub is reachable to add them")
    assert lines[-2] == "2 revisions" and lines[1].startswith("revision")
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", False)
    assert main(["revisions", repo]) == 0 and "offline" not in capsys.readouterr().out   # online: nothing added


# ------------------------------------------------------------------------ 6. family revisions by name

def test_a_plain_revision_name_selects_it_in_every_member_of_a_family(local_hub, capsys):
    from ckptgeo.cli import main
    from ckptgeo.errors import RevisionNotFoundError
    from ckptgeo.sources.family import FamilySource
    from ckptgeo.sources.revisions import select_revisions

    for k in (1, 2, 3):   # the same repos as test_suites_hub's polypythia fixture (built once per session)
        local_hub.add_repo(f"pythia-tiny-seed{k}", steps=(0, 1000, 2000), seed=k)
    spec = "testorg/pythia-tiny-seed1,testorg/pythia-tiny-seed2"
    revs = FamilySource.from_spec(spec).revisions()
    assert [r.name for r in select_revisions(revs, "step1000")] == ["pythia-tiny-seed1@step1000",
                                                                   "pythia-tiny-seed2@step1000"]
    assert [r.name for r in select_revisions(revs, "step0,pythia-tiny-seed2@step2000")] == [
        "pythia-tiny-seed1@step0", "pythia-tiny-seed2@step0", "pythia-tiny-seed2@step2000"]
    with pytest.raises(RevisionNotFoundError, match="'step3000' not found"):
        select_revisions(revs, "step3000")
    assert main(["revisions", "testorg/pythia-tiny-seed{1..3}", "--revisions", "step2000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:-2]] == [f"pythia-tiny-seed{k}@step2000" for k in (1, 2, 3)]
    assert lines[-2:] == ["3 revisions", "next: ckptgeo scan 'testorg/pythia-tiny-seed{1..3}' --revisions step2000"]


def test_a_suite_name_with_control_characters_is_refused_and_names_are_inert_in_report_md(tmp_path):
    """A shared suite file whose header names it with an escape sequence would clear a terminal and land in
    report.md, runs.csv and runs.tex; a name carrying markdown or HTML would add a link, image or tag to report.md."""
    from ckptgeo.analysis.report import markdown_text
    from ckptgeo.errors import SuiteFormatError
    from ckptgeo.suites.items import load_suite

    bad = _suite_file(tmp_path / "esc.jsonl", "x\x1b[2Jy")
    with pytest.raises(SuiteFormatError, match=r"control characters"):
        load_suite(bad)
    assert load_suite(_suite_file(tmp_path / "ok.jsonl", "my-suite")).name == "my-suite"
    assert markdown_text("x|y ![t](http://a.example/p.png) <img src=x onerror=1>\x07") == \
        "x\\|y ![t\\](http://a.example/p.png) &lt;img src=x onerror=1>\\x07"


def test_a_scan_that_measured_nothing_does_not_point_at_analyze(tmp_path, capsys):
    from ckptgeo.cli import main
    from tests._checkpoints import make_checkpoints

    ck = make_checkpoints(tmp_path / "ck" / "tiny", steps=(0, 1))
    for folder in ck.iterdir():
        for f in folder.glob("*.safetensors"):
            f.write_bytes(b"not a safetensors file")
    assert main(_scan_cli(ck, tmp_path / "ds")) == 1
    out, err = capsys.readouterr()
    assert "next: ckptgeo analyze" not in out and "no revision was measured" in err, (out, err)


def test_a_built_in_architecture_whose_config_names_its_own_code_is_measured_and_said_so(tmp_path, caplog):
    import logging

    from ckptgeo.engine.model import _read_config
    from tests._checkpoints import make_checkpoints

    ck = make_checkpoints(tmp_path / "ck" / "tiny", steps=(0,))
    folder = next(p for p in ck.iterdir() if p.is_dir())
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "evil_model.EvilModel"}
    (folder / "config.json").write_text(json.dumps(cfg))
    with caplog.at_level(logging.WARNING, logger="ckptgeo.engine.model"):
        config = _read_config(folder, "step0")
    assert config.model_type == "gpt_neox"
    assert "names its own code (config.json auto_map: evil_model.EvilModel), which ckptgeo does not run" in caplog.text
    from ckptgeo.engine.model import ModelHolder

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ckptgeo.engine.model"):
        holder = ModelHolder()
        holder.build(folder, revision="step0")     # the scan builds from the reference revision, then loads it
        holder.load(folder, revision="step0")
    assert caplog.text.count("names its own code") == 1, caplog.text
