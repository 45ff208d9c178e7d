"""`ckptgeo probe`: parser, call into the scan engine, and the Hub-unreachable message."""

from __future__ import annotations

import argparse
import sys
import types

import pytest

from ckptgeo.errors import HubUnreachableError, InvalidParameterError
from ckptgeo.probing import add_probe_parser, probe_checkpoints


@pytest.fixture
def fake_scan(monkeypatch):
    calls = []
    module = types.ModuleType("ckptgeo.scan")

    def scan(source, *, revisions, suites, metrics, out):
        calls.append(dict(source=source, revisions=revisions, suites=suites, metrics=metrics, out=out))
        if source == "unreachable/model":
            raise HubUnreachableError("connection refused")
        return "done"

    module.scan = scan
    monkeypatch.setitem(sys.modules, "ckptgeo.scan", module)
    return calls


def _parser():
    parser = argparse.ArgumentParser(prog="ckptgeo")
    add_probe_parser(parser.add_subparsers(dest="command"))
    return parser


def test_defaults_and_handler(fake_scan, tmp_path):
    args = _parser().parse_args(["probe", "--suite", "logic", "--out", str(tmp_path)])
    assert args.source == "EleutherAI/pythia-160m" and args.revisions == "every-1000"
    assert args.func(args) == 0
    assert fake_scan == [dict(source="EleutherAI/pythia-160m", revisions="every-1000", suites=["logic"],
                              metrics=["behavior", "probe"], out=tmp_path)]


def test_source_and_several_suites(fake_scan, tmp_path):
    args = _parser().parse_args(["probe", "./run", "--suite", "logic", "--suite", "syntax", "--revisions", "all",
                                 "--out", str(tmp_path)])
    args.func(args)
    assert fake_scan[0]["source"] == "./run" and fake_scan[0]["suites"] == ["logic", "syntax"]


def test_unknown_suite_fails_before_scan(fake_scan, tmp_path):
    with pytest.raises(InvalidParameterError, match="logik"):
        probe_checkpoints(suites=["logik"], out=tmp_path)
    assert fake_scan == []


def test_unreachable_hub_message(fake_scan, tmp_path):
    with pytest.raises(HubUnreachableError, match="HF_ENDPOINT") as info:
        probe_checkpoints("unreachable/model", suites="logic", out=tmp_path)
    assert "local" in str(info.value) and isinstance(info.value.__cause__, HubUnreachableError)


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["probe", "--help"])
    out = capsys.readouterr().out
    assert "ckptgeo probe --suite logic" in out and "HF_ENDPOINT" in out
