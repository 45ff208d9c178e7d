"""`ckptgeo probe`: parser defaults, real runs through the scan engine, and the Hub-unreachable message."""

from __future__ import annotations

import pandas as pd
import pytest

from ckptgeo.cli import build_parser, main
from ckptgeo.errors import HubUnreachableError, InvalidParameterError
from ckptgeo.engine.probe import probe_checkpoints
from tests._checkpoints import make_checkpoints


def test_defaults():
    args = build_parser().parse_args(["probe", "--suite", "logic"])
    assert args.source == "EleutherAI/pythia-160m" and args.revisions is None and args.suites == ["logic"]
    assert args.n_samples == 200 and args.out is None


def test_unknown_suite_fails_before_any_source_is_opened(tmp_path):
    with pytest.raises(InvalidParameterError, match="logik"):
        probe_checkpoints(tmp_path / "does-not-exist", suites=["logik"], out=tmp_path / "o")


def test_unreachable_hub_message(monkeypatch, tmp_path):
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(HubUnreachableError, match="HF_ENDPOINT") as info:
        probe_checkpoints("someorg/some-model", suites="logic", out=tmp_path / "o")
    assert "local folder" in str(info.value) and isinstance(info.value.__cause__, HubUnreachableError)


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["probe", "--help"])
    out = capsys.readouterr().out
    assert "ckptgeo probe --suite logic" in out and "HF_ENDPOINT" in out


def test_probe_on_local_checkpoints_writes_probes_per_layer(tmp_path):
    ck = make_checkpoints(tmp_path / "ck", steps=(0, 10))
    out = tmp_path / "ds"
    assert main(["probe", str(ck), "--suite", "logic", "--n-samples", "60", "--out", str(out)]) == 0
    p = pd.read_parquet(out / "probes")
    assert len(p) == 2 * 3 and set(p.layer) == {0, 1, 2}
    assert (p.n == 60).all() and (p.k == 5).all() and p.reason.isna().all()
    assert p.chance.iloc[0] == pytest.approx(0.5, abs=0.1)
    # layer 0 reads one embedding row (every prompt ends in the same token): nothing to separate
    assert p[p.layer == 0].accuracy.max() <= 0.75
    b = pd.read_parquet(out / "behavior")
    assert set(b.suite) == {"logic"} and len(b) == 6   # 2 revisions x accuracy, accuracy_norm, loss
    assert not (out / "geometry").exists()


def test_probe_folds_follow_the_scan_seed(tmp_path):
    import json

    ck = make_checkpoints(tmp_path / "ck", steps=(0,))
    for seed in (0, 3):
        assert main(["probe", str(ck), "--suite", "logic", "--n-samples", "40", "--seed", str(seed),
                     "--out", str(tmp_path / f"ds{seed}")]) == 0
    seeds = [json.loads(pd.read_parquet(tmp_path / f"ds{s}" / "probes").settings.iloc[0])["seed"] for s in (0, 3)]
    assert seeds == [0, 3]


def test_probes_undefined_everywhere_warn_and_analyze_says_not_measured(tmp_path, capsys):
    """A suite whose label has a class of one item (as modular-L1 with the exact answer as label) has no
    defined probe: the command warns, and the analysis calls it "not measured", not "no probe onset"."""
    import dataclasses

    from ckptgeo.analysis import analyze
    from ckptgeo.suites.items import load_suite, write_jsonl

    items = load_suite("logic").items[:40]
    items = [dataclasses.replace(it, label="rare" if i == 0 else f"c{i % 3}") for i, it in enumerate(items)]
    write_jsonl(tmp_path / "relabelled.jsonl", items)
    ck = make_checkpoints(tmp_path / "ck", steps=(0, 10))
    out = tmp_path / "ds"
    assert main(["probe", str(ck), "--suite", str(tmp_path / "relabelled.jsonl"), "--n-samples", "40",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "undefined at every layer in 2 of 2 revision(s)" in err and "single member" in err
    lead = analyze(out, write=False).probe_lead
    assert len(lead) == 3 and set(lead.status) == {"not_measured"}
    assert lead.reason.str.contains("single member").all()
