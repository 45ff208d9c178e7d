"""The event rules are declared once (ckptgeo.events.rules.EventRules) and applied in one place (its methods):
the analyze flags, the monitor's options and the tables' metadata come from that declaration."""

import argparse
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from ckptgeo._settings import declared
from ckptgeo.events import detect as ev
from ckptgeo.analysis.config import AnalysisConfig, config_from
from ckptgeo.events.rules import EventRules
from ckptgeo.errors import InvalidParameterError
from ckptgeo.monitor.core import MonitorConfig
from ckptgeo.monitor.live import LiveTracker

ROOT = Path(__file__).resolve().parents[1]
RULES = [f.name for f, _ in declared(EventRules)]

# accuracy acquired at step 70; RankMe falls 20% (40 -> 32) and recovers before it
STEPS = list(range(0, 110, 10))
ACC = [0.0] * 7 + [0.9] * 4
RANKME = [40.0, 36.0, 32.0, 32.0, 36.0, 38.0, 39.0, 40.0, 40.0, 40.0, 40.0]


def _parser():
    from ckptgeo.cli import analyze as cli

    top = argparse.ArgumentParser()
    return cli.add_parser(top.add_subparsers())


def test_every_rule_is_declared_once_with_the_defaults_of_the_events_module():
    assert RULES == ["acc_threshold", "window", "recovery", "collapse_fraction", "min_drop", "resolution_checkpoints"]
    d = EventRules()
    assert (d.window, d.recovery, d.collapse_fraction, d.min_drop, d.resolution_checkpoints) == (
        ev.DEFAULT_WINDOW, ev.DEFAULT_RECOVERY, ev.DEFAULT_COLLAPSE_FRACTION, ev.DEFAULT_MIN_DROP,
        ev.DEFAULT_RESOLUTION_CHECKPOINTS) == (3, 0.1, 0.5, 0.25, 1)
    assert issubclass(AnalysisConfig, EventRules) and issubclass(MonitorConfig, EventRules)


def test_the_analyze_flags_are_the_declared_ones_with_their_defaults():
    p = _parser()
    args = p.parse_args(["DIR"])
    flagged = [f.name for f, s in declared(AnalysisConfig) if s.flag]
    assert args.analysis_settings == flagged
    assert {n: getattr(args, n) for n in flagged} == {n: getattr(AnalysisConfig(), n) for n in flagged}
    assert p.parse_args(["DIR", "--min-drop", "0.4", "--noise-curves", "0"]).min_drop == 0.4
    assert "--min-drop" in p.format_help() and "(default 0.25)" in p.format_help()


def test_the_rules_reach_the_tables_metadata():
    rules = AnalysisConfig(min_drop=0.4).rules()
    assert {n: rules[n] for n in RULES} == {**{n: getattr(EventRules(), n) for n in RULES}, "min_drop": 0.4}
    assert "0.4 of its first value" in rules["collapse_rule"]


def test_config_from_checks_each_setting_against_its_declaration():
    assert config_from({"min_drop": 0.3, "collapse_metrics": ["rankme"]}).collapse_metrics == ("rankme",)
    with pytest.raises(InvalidParameterError, match=r"'min_drop' parameter of analyze must be a float in \[0, 1\)"):
        config_from({"min_drop": 1.5})
    with pytest.raises(InvalidParameterError, match="Did you mean: min_drop"):
        config_from({"min_dorp": 0.3})


@pytest.mark.parametrize("min_drop, collapse", [(0.1, 20), (0.25, None)])
def test_min_drop_means_the_same_in_the_detector_analyze_and_the_monitor(min_drop, collapse):
    """A 20% fall is a collapse at min_drop 0.1 and none at 0.25, by the analysis's detector and the monitor's."""
    rules = EventRules(min_drop=min_drop)
    acq = rules.acquisition(STEPS, ACC)
    assert acq.step == 70
    assert rules.curve_events(STEPS, RANKME, acq).collapse.step == collapse
    tracker = LiveTracker(MonitorConfig(min_drop=min_drop))
    for s, a, r in zip(STEPS, ACC, RANKME):
        tracker.update("copy-L1", s, accuracy=a, rankme={2: r})
    assert [e.step for e in tracker.events if e.kind == "collapse"] == ([collapse] if collapse else [])
    assert LiveTracker(min_drop=min_drop).rules == rules
    with pytest.raises(InvalidParameterError, match="min_drop"):
        LiveTracker(min_drop=-1.0)


def test_no_module_spells_a_rule_out_when_calling_the_events_functions():
    """Only the detector (EventRules' methods) passes a rule's value to ckptgeo.events.detect."""
    call = re.compile(r"\bev\.(curve_events|collapse_point|recovery_onset|precursor_gap|acquisition_at|"
                      r"collapse_onset)\(")
    found = {str(p.relative_to(ROOT)): call.findall(p.read_text()) for p in (ROOT / "ckptgeo").rglob("*.py")
             if p.name != "rules.py" and call.search(p.read_text())}
    assert not found, found
    assert call.search("gap = ev.curve_events(s, v, acq, kind=kind, min_drop=cfg.min_drop)")


def test_a_monitor_config_builds_the_scan_config_without_its_rules():
    from ckptgeo.monitor.core import _scan_config  # noqa: PLC2701  (the function under test)

    cfg = _scan_config(dataclasses.replace(MonitorConfig(), min_drop=0.4))
    assert not hasattr(cfg, "min_drop") and np.isfinite(MonitorConfig(min_drop=0.4).min_drop)
