"""Each scan setting is declared once (``ckptgeo.engine.config``): the CLI flags, ``scan()``'s keywords and
docstring, the constraints, ``MonitorConfig`` and the config hash derive from it, and drift is caught here."""

import pytest

from ckptgeo.engine.config import ScanConfig
from ckptgeo.engine.measure import configure_metrics
from ckptgeo.engine.plan import config_hash, row_settings, scan_settings
from ckptgeo.suites.tasks import load_suite_or_task


def _hash(**options) -> str:
    config = ScanConfig(**{"suites": ("copy-L1",), **options})
    suites = [load_suite_or_task(s) for s in config.suites]
    return config_hash(scan_settings(config, suites, configure_metrics(config)))


#: the config hashes that name the parts of datasets written before the settings were declared in one table
#: (computed on main at e82fed0): a refactor that changes one would orphan every existing dataset's parts
PINNED = [({}, "63388db6066c"), ({"n_samples": 50}, "fbb5b7bc80b7"), ({"centered": True}, "4c4135cb76b5"),
          ({"epsilon": 1e-6}, "c5c2431652b6"), ({"tokenizer": "runs/x"}, "07d95d1cae41"),
          ({"model_items": 8}, "4292887348b4"), ({"dtype": "float64"}, "44439492b2d1"),
          ({"position": "mean"}, "504097d92535"), ({"seed": 3}, "b3faa7f8cf69"),
          # the Hessian without a wall-clock budget by default (was max_seconds=90: its values depended on the
          # machine's load); the old default's hash stays that of max_seconds=90.0, below
          ({"metrics": ("rankme", "hessian"), "metric_options": {"hessian": {"k": 3}}}, "414e56187f24"),
          ({"suites": ("logic",)}, "58ae0730a51b")]


@pytest.mark.parametrize("options,expected", PINNED)
def test_config_hashes_of_existing_datasets_do_not_change(options, expected):
    assert _hash(**options) == expected
    # settings that do not change values leave it alone
    assert _hash(**options, device="meta", batch_size=3, prefetch=0, keep_cache=True, threads=2,
                 share_prefix=False, on_error="raise", max_disk=10) == expected


def test_a_dataset_measured_with_the_old_whole_model_budget_keeps_its_hash_under_that_setting():
    """Datasets written when the Hessian's and the LLC's max_seconds defaulted to 90 s: their parts carry the hash
    of max_seconds 90.0 (pinned before the default changed), which ``--metric-option hessian.max_seconds=90``
    gives again (so a scan adds to them), while the new default hashes apart (never mixed with them)."""
    from ckptgeo.cli._options import parse_metric_options

    old = parse_metric_options(["hessian.k=3", "hessian.max_seconds=90"])
    assert _hash(metrics=("rankme", "hessian"), metric_options=old) == "2acb9b31015b"
    assert _hash(metrics=("rankme", "hessian"), metric_options={"hessian": {"k": 3}}) != "2acb9b31015b"
    both = parse_metric_options(["llc.max_seconds=90"])
    assert _hash(metrics=("rankme", "llc"), metric_options=both) != _hash(metrics=("rankme", "llc"))


def test_rows_carry_the_same_settings_columns():
    row = row_settings(ScanConfig(n_samples=50, dtype="float64"), "abc")
    assert [k for k in row if k != "ckptgeo_version"] == ["n_samples", "position", "dtype", "seed", "config_hash"]
    assert (row["n_samples"], row["position"], row["dtype"], row["seed"]) == (50, "last", "float64", 0)


# ------------------------------------------------------------------- the declaration and what derives from it
#: a value other than the default for every declared setting (a new setting adds one here)
OTHER = {"revisions": "all", "suites": ("logic",), "metrics": ("rankme",), "metric_options": {"rankme": {"eps": 1e-5}},
         "n_samples": 50, "position": "mean", "centered": True, "dtype": "float64", "epsilon": 1e-6, "seed": 3,
         "batch_size": 3, "device": "meta", "prefetch": 0, "max_disk": 10, "keep_cache": True, "overwrite": True,
         "save_states": True, "on_error": "raise", "step_pattern": r"^s(\d+)$", "model_items": 8, "threads": 2,
         "share_prefix": False, "tokenizer": "runs/x", "source_options": {"cache_dir": "/x"}}
#: flags of ``scan`` / ``probe`` that are not settings
NOT_SETTINGS = {"-h", "--help", "--out", "--dry-run"}


def _signature_drift(fn) -> list[str]:
    """How ``fn``'s keywords (other than source, out, config) differ from the declared settings."""
    import inspect

    from ckptgeo.engine.config import declared

    params = {n: p for n, p in inspect.signature(fn).parameters.items() if n not in ("source", "out", "config")}
    fields = {f.name: f for f, _ in declared()}
    drift = [f"keyword {n} is not a declared setting" for n in params if n not in fields]
    drift += [f"setting {n} is not a keyword" for n in fields if n not in params]
    drift += [f"{n}: default {params[n].default!r}, declared {f.default!r}" for n, f in fields.items()
              if n in params and params[n].default != f.default]
    return drift


def _flag_drift(parser, groups) -> list[str]:
    """How ``parser``'s flags differ from the settings declared for ``groups``: a flag missing, with another
    dest, default, help or choices, or an option that is no declared setting."""
    from ckptgeo._params import Options
    from ckptgeo.engine.config import declared

    actions = {o: a for a in parser._actions for o in a.option_strings}
    drift = []
    for f, s in declared():
        if s.flag is None or s.group not in groups:
            continue
        a = actions.pop(s.flag, None)
        if a is None:
            drift.append(f"{f.name}: no flag {s.flag}")
            continue
        choices = [list(c.options) for c in s.admits if isinstance(c, Options)]
        want_default = False if s.action == "store_true" else None if s.action == "append" else f.default
        for what, got, want in [("dest", a.dest, f.name), ("default", a.default, want_default),
                                ("choices", a.choices, choices[0] if choices else None)]:
            if got != want:
                drift.append(f"{s.flag}: {what} {got!r}, declared {want!r}")
        if "{" not in s.help and a.help != s.help:
            drift.append(f"{s.flag}: help {a.help!r}, declared {s.help!r}")
    drift += [f"{o} is not a declared setting" for o in actions if o not in NOT_SETTINGS]
    return drift


def _subparser(command: str):
    from ckptgeo.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict))
    return sub.choices[command]


def test_scan_keywords_and_defaults_are_the_declared_settings():
    import inspect

    from ckptgeo import scan

    assert _signature_drift(scan) == []
    # the check sees a changed default, a dropped keyword and an undeclared one
    sig = inspect.signature(scan)
    params = [p.replace(default=100) if p.name == "n_samples" else p for p in sig.parameters.values()
              if p.name != "seed"] + [inspect.Parameter("n_sample", inspect.Parameter.KEYWORD_ONLY, default=1)]

    def drifted(*args, **kwargs):
        pass

    drifted.__signature__ = sig.replace(parameters=params)
    assert _signature_drift(drifted) == ["keyword n_sample is not a declared setting", "setting seed is not a keyword",
                                         "n_samples: default 100, declared 200"]


def test_scan_docstring_documents_every_declared_setting():
    import inspect

    from ckptgeo import scan
    from ckptgeo.engine.config import declared

    doc = inspect.getdoc(scan)
    assert 'n_samples : int, default=200\n    Items per suite (seeded selection), at least 2.' in doc
    assert 'position : {"last", "mean"}, default="last"' in doc and "max_disk : int or str, optional" in doc
    for f, s in declared():
        assert f"\n{f.name} : " in doc and " ".join(s.doc.split()[:4]) in " ".join(doc.split())
    assert doc.index("\nout : ") < doc.index("\nrevisions : ") < doc.index("\ntokenizer : ") < doc.index("\nconfig : ")


def test_unknown_keywords_are_refused_in_one_line():
    from ckptgeo import plan_scan, scan

    with pytest.raises(TypeError, match=r"^plan_scan\(\) got unexpected keyword arguments \['n_sample'\]$"):
        plan_scan("no/such-repo", n_sample=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_sample'"):
        scan("no/such-repo", n_sample=3)


@pytest.mark.parametrize("command,groups", [("scan", ("source", "scan", "command")), ("probe", ("source", "scan"))])
def test_every_flag_is_its_declared_setting(command, groups):
    assert _flag_drift(_subparser(command), groups) == []


def test_the_flag_check_sees_a_flag_drift_from_its_declaration():
    import argparse

    from ckptgeo.cli._options import add_scan_options, add_source_options

    p = argparse.ArgumentParser()
    add_source_options(p, source_required=False)
    add_scan_options(p)
    assert _flag_drift(p, ("source", "scan")) == []
    next(a for a in p._actions if a.dest == "prefetch").default = 2
    next(a for a in p._actions if a.dest == "position").help = "token read (default first)"
    p.add_argument("--model-items", type=int, default=16)
    assert _flag_drift(p, ("source", "scan")) == ["--position: help 'token read (default first)', declared "
                                                  "'token read for hidden states (default %(default)s)'",
                                                  "--prefetch: default 2, declared 1",
                                                  "--model-items is not a declared setting"]


def test_flags_give_the_declared_defaults_and_every_value_reaches_the_config():
    from ckptgeo.cli._options import scan_kwargs
    from ckptgeo.engine.config import ScanConfig, declared, settings_from

    parser = _subparser("scan")
    assert ScanConfig(**settings_from(scan_kwargs(parser.parse_args(["x"])))) == ScanConfig()
    argv = ["x", "--revisions", "all", "--suite", "logic", "--metrics", "rankme", "--metric-option", "rankme.eps=1e-5",
            "--n-samples", "50", "--position", "mean", "--centered", "--dtype", "float64", "--epsilon", "1e-6",
            "--seed", "3", "--batch-size", "3", "--device", "meta", "--prefetch", "0", "--max-disk", "10B",
            "--keep-cache", "--overwrite", "--save-states", "--on-error", "raise", "--step-pattern", r"^s(\d+)$",
            "--threads", "2", "--tokenizer", "runs/x", "--source-option", "cache_dir=/x"]
    config = ScanConfig(**settings_from(scan_kwargs(parser.parse_args(argv))))
    flagged = [f.name for f, s in declared() if s.flag]
    assert {n: getattr(config, n) for n in flagged} == {n: OTHER[n] for n in flagged}


def test_the_config_hash_changes_exactly_with_the_settings_declared_hashed():
    from ckptgeo.engine.config import declared

    settings = {f.name: s for f, s in declared()}
    assert set(OTHER) == set(settings)
    base = _hash()
    changed = {n for n, v in OTHER.items() if _hash(**{n: v}) != base}
    assert changed == {n for n, s in settings.items() if s.hashed}
    assert changed == {"suites", "metrics", "metric_options", "n_samples", "position", "centered", "dtype",
                       "epsilon", "seed", "model_items", "tokenizer"}


def test_row_columns_are_settings_declared_hashed_by_value():
    import typing

    import pyarrow as pa

    from ckptgeo.engine.config import ScanConfig, declared
    from ckptgeo.store.schemas import SCAN_SETTINGS

    hashed = {f.name for f, s in declared() if s.hashed == "value"}
    hints, arrow = typing.get_type_hints(ScanConfig), {int: pa.int64(), str: pa.string()}
    assert [(n, arrow[hints[n]]) for n, _ in SCAN_SETTINGS if n in hashed] == SCAN_SETTINGS


def test_monitor_config_shares_the_declared_settings():
    import dataclasses

    from ckptgeo._params import validate_params
    from ckptgeo.engine.config import ScanConfig, declared
    from ckptgeo.errors import InvalidParameterError
    from ckptgeo.monitor import MonitorConfig
    from ckptgeo.monitor.core import _scan_config

    from ckptgeo._settings import declared as declared_settings
    from ckptgeo.events.rules import EventRules

    shared = [(f.name, s) for f, s in declared() if s.monitor]
    # the scan's monitor settings, then the event rules of analyze (one declaration each)
    assert [(f.name, s) for f, s in declared(MonitorConfig)] == shared + [(f.name, s) for f, s in
                                                                          declared_settings(EventRules)]
    assert [f.name for f in dataclasses.fields(MonitorConfig)][:len(shared)] == [n for n, _ in shared]
    defaults = {f.name: f.default for f in dataclasses.fields(MonitorConfig)}
    assert {n: defaults[n] for n, _ in shared} == {**{n: getattr(ScanConfig(), n) for n, _ in shared},
                                                   "batch_size": 64}
    with pytest.raises(InvalidParameterError, match=r"'n_samples' parameter of monitor must be an int in \[2, inf\)"):
        validate_params(MonitorConfig(n_samples=1), owner="monitor")
    # the monitor's defaults hash as a default scan's (same items, the model's float32 weights)
    cfg = dataclasses.replace(_scan_config(MonitorConfig()), suites=("copy-L1",))
    assert _hash(**{n: getattr(cfg, n) for n, _ in shared}) == PINNED[0][1]
    assert _scan_config(MonitorConfig(metrics=["rankme"], n_samples=40)).metrics == ("rankme",)


# ------------------------------------------------------------------- one mechanism for every settings class
def test_scan_training_and_measure_settings_share_one_declaration():
    """ScanConfig, TrainConfig and every built-in measure's config declare each field with
    ``ckptgeo._settings.setting``; none keeps a separate constraints table."""
    import dataclasses

    from ckptgeo._settings import Setting, declared
    from ckptgeo.metrics.registry import all_metrics
    from ckptgeo.training.config import TrainConfig

    classes = [ScanConfig, TrainConfig] + [s.config for s in all_metrics().values() if s.config is not None]
    for cls in classes:
        fields = [f.name for f in dataclasses.fields(cls)]
        assert [f.name for f, s in declared(cls) if isinstance(s, Setting)] == fields, cls
        assert "_parameter_constraints" not in vars(cls), cls


def test_a_setting_declared_on_a_plain_dataclass_is_checked_documented_and_flagged():
    import argparse
    from dataclasses import dataclass

    from ckptgeo._settings import Interval, add_flags, replace_params, setting, settings_doc
    from ckptgeo.errors import InvalidParameterError

    @dataclass(frozen=True)
    class Cfg:
        window: int = setting(3, "Consecutive checkpoints above the threshold.", admits=(Interval(int, 1, None),),
                              flag="--window", help="checkpoints (default %(default)s)")

    with pytest.raises(InvalidParameterError, match=r"The 'window' parameter of analysis must be an int in \[1, inf\)"):
        replace_params(Cfg(), {"window": 0}, owner="analysis")
    assert settings_doc(Cfg, indent=0) == "window : int, default=3\n    Consecutive checkpoints above the threshold.\n"
    p = argparse.ArgumentParser()
    assert add_flags(p, Cfg) == ["window"]
    assert p.parse_args(["--window", "5"]).window == 5 and p.parse_args([]).window == 3


def test_behaviour_settings_are_declared_and_recorded_in_every_run():
    """The settings that decide whether two runs measured the same accuracy come from the declaration, and
    each is a key of ``runs/<hash>.json`` (or the source)."""
    from ckptgeo.engine.config import behavior_settings, declared

    names = behavior_settings()
    assert names == ("suites", "n_samples", "dtype", "seed", "tokenizer", "source")
    hashed = {f.name for f, s in declared() if s.hashed}
    assert set(names) - {"source"} <= hashed   # so each is in runs/<hash>.json when it matters


def test_compare_rows_carry_the_identity_and_settings_columns_of_the_store():
    from ckptgeo.metrics.cross import CARRIED_COLUMNS
    from ckptgeo.store.schemas import REVISION, SCHEMAS, SETTINGS_COLUMNS

    assert CARRIED_COLUMNS == tuple(n for n, _ in REVISION + SETTINGS_COLUMNS)
    assert set(CARRIED_COLUMNS) <= set(SCHEMAS["compare"].names)
