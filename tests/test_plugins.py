"""Third-party packages extend ckptgeo through entry points: a measure installed from outside runs in
``ckptgeo scan --metrics``; registry errors name what is wrong."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ckptgeo._registry import Registry
from ckptgeo.errors import DuplicateNameError, InvalidParameterError, PluginLoadError
from tests._checkpoints import BIGBENCH, SUITE, make_checkpoints

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = Path(__file__).resolve().parent / "plugin_example"
BIGBENCH_FILE = str(BIGBENCH / "three_objects.json")


def _install(site: Path, entry_points: str, name: str = "ckptgeo_example_measure") -> Path:
    """What ``pip install`` leaves for a package's metadata: a dist-info folder with its entry points."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    return site


def _env(*paths: Path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *map(str, paths)]), "CKPTGEO_NO_PROGRESS": "1"}


def test_an_installed_measure_runs_through_ckptgeo_scan(tmp_path):
    from safetensors.torch import load_file

    ckpts = make_checkpoints(tmp_path / "ck")
    site = _install(tmp_path / "site", '[ckptgeo.metrics]\nmean_norm = ckptgeo_example_measure\n')
    env = _env(EXAMPLE, site)
    helptext = subprocess.run([sys.executable, "-m", "ckptgeo", "scan", "--help"], env=env, capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
    assert "mean_norm" in helptext.stdout, helptext.stdout + helptext.stderr
    out = tmp_path / "ds"
    proc = subprocess.run([sys.executable, "-m", "ckptgeo", "scan", str(ckpts), "--revisions", "step0,step4",
                           "--suite", SUITE, "--n-samples", "8", "--metrics", "mean_norm", "--out", str(out),
                           "--save-states", "--threads", "1"], env=env, capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    g = pd.read_parquet(out / "geometry")
    assert set(g.metric) == {"mean_norm"}
    assert sorted(g.revision.unique()) == ["step0", "step4"] and set(g.layer) == {0, 1, 2}
    # the values are the measure applied to the very states the scan read: mean row norm per layer
    for rev in ("step0", "step4"):
        states = load_file(str(next((out / "states").glob(f"*--{rev}--*")) / f"{SUITE}.safetensors"))["states"]
        expected = states.double().norm(dim=2).mean(dim=1)
        got = g[g.revision == rev].sort_values("layer").value.to_numpy()
        assert got == pytest.approx(expected.numpy(), rel=1e-6), (got, expected)
        assert (got > 0).all()


def test_a_broken_entry_point_is_reported_not_swallowed(tmp_path):
    site = _install(tmp_path / "site", "[ckptgeo.metrics]\nbroken = no_such_module_xyz\n")
    proc = subprocess.run([sys.executable, "-c", "from ckptgeo.metrics.registry import get_metric; get_metric('broken')"],
                          env=_env(site), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode != 0
    assert "PluginLoadError" in proc.stderr and "broken = no_such_module_xyz" in proc.stderr, proc.stderr[-2000:]
    assert "ModuleNotFoundError" in proc.stderr and "ckptgeo_example_measure 0.1" in proc.stderr


def test_unknown_and_duplicate_names_are_clear():
    from ckptgeo.metrics.registry import get_metric, register_metric

    with pytest.raises(InvalidParameterError, match=r"Unknown measure 'rankmee'\. Did you mean: rankme\? Available: "
                                                    r"behavior, .*rankme"):
        get_metric("rankmee")
    get_metric("rankme")
    with pytest.raises(DuplicateNameError, match=r"'rankme' is registered twice: ckptgeo\.metrics\.rankme\.rankme "
                                                 r"and tests\.test_plugins\..*impostor"):
        @register_metric(name="rankme", needs="hidden_states")
        def impostor(hidden_states, config=None):
            return 0.0


def test_an_entry_point_that_registers_nothing_under_its_name(tmp_path, monkeypatch):
    reg = Registry("measure", "ckptgeo.test-only", {"fine": "ckptgeo.constants:RANKME_EPS",
                                                    "silent": "ckptgeo.constants"},
                   check=lambda name, obj: None)
    assert reg.get("fine") == 1e-7
    with pytest.raises(LookupError, match="importing ckptgeo.constants registered no measure of that name"):
        reg.get("silent")
    bad = Registry("measure", "ckptgeo.test-only", {"x": "ckptgeo.constants:STEP_PATTERN"},
                   check=lambda name, obj: (_ for _ in ()).throw(TypeError("not a spec")))
    with pytest.raises(PluginLoadError, match="not usable: not a spec"):
        bad.get("x")


def test_sources_are_picked_through_the_registry(tmp_path, monkeypatch):
    from ckptgeo.sources.hub import HubSource
    from ckptgeo.sources.local import LocalSource
    from ckptgeo.sources.registry import SOURCES, open_source

    ckpts = make_checkpoints(tmp_path / "ck")
    assert isinstance(open_source(ckpts), LocalSource) and isinstance(open_source(f"local:{ckpts}"), LocalSource)
    assert SOURCES.names() == ["family", "hub", "local"] and SOURCES.get("hub") is HubSource

    class Zoo(LocalSource):  # an installed source: asked after local folders, before the Hub
        claim_order = 10

        @classmethod
        def claims(cls, spec):
            return spec.startswith("zoo/")

        @classmethod
        def from_spec(cls, spec, options=None):
            return cls(ckpts, step_pattern=options.step_pattern)

    monkeypatch.setitem(SOURCES._items, "zoo", Zoo)
    assert type(open_source("zoo/anything")) is Zoo and type(open_source(f"zoo:{ckpts}")) is Zoo
    assert [r.name for r in open_source("zoo/x").revisions()][:2] == ["step0", "step1"]
    assert open_source("zoo/x", step_pattern=r"^step(\d+)$").step_pattern == r"^step(\d+)$"


def test_source_options_are_declared_per_source_and_checked(tmp_path, capsys):
    """A source's options are its ``options`` dataclass: the scan's shared settings reach the sources that
    declare them, an option a source does not declare is a one-line error naming the ones it has."""
    from ckptgeo.cli import main
    from ckptgeo.sources.hub import HubSource
    from ckptgeo.sources.local import LocalSource
    from ckptgeo.sources.protocol import DownloadOptions, SourceOptions
    from ckptgeo.sources.registry import open_source, source_options

    assert LocalSource.options is SourceOptions and HubSource.options is DownloadOptions
    assert source_options(HubSource, {"cache_dir": tmp_path, "keep_cache": "true"}, step_pattern="^s(\\d+)$") == \
        DownloadOptions(step_pattern="^s(\\d+)$", keep_cache=True, cache_dir=str(tmp_path))
    assert source_options(LocalSource, keep_cache=True) == SourceOptions()  # not a folder's business
    ckpts = make_checkpoints(tmp_path / "ck")
    capsys.readouterr()
    with pytest.raises(InvalidParameterError, match="Unknown option 'cache_dir' of source LocalSource. Valid "
                                                    "options: step_pattern"):
        open_source(ckpts, options={"cache_dir": "/x"})
    assert main(["revisions", str(ckpts), "--source-option", "cache_dir=/x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "ckptgeo: error: Unknown option 'cache_dir' of source LocalSource. Valid options: step_pattern."
    assert main(["revisions", str(ckpts), "--source-option", "step_pattern=^step(\\d+)$"]) == 0
    from ckptgeo.engine.plan import plan_scan

    with pytest.raises(InvalidParameterError, match="source_options apply to a source ckptgeo opens"):
        plan_scan(open_source(ckpts), source_options={"step_pattern": "^step(\\d+)$"})


def test_a_source_that_is_no_checkpoint_source_subclass_is_refused_by_name(monkeypatch):
    from ckptgeo.sources.registry import SOURCES

    monkeypatch.setitem(SOURCES._builtins, "bare", "ckptgeo.sources.naming:parse_names")
    with pytest.raises(PluginLoadError, match="source 'bare' .* not usable: a checkpoint source is a subclass of "
                                              "ckptgeo.sources.protocol.CheckpointSource"):
        SOURCES.get("bare")


def test_nothing_probes_a_source_for_undeclared_attributes():
    """The engine and commands read only what CheckpointSource declares: no ``getattr(source, ...)``."""
    import re

    root = Path(__file__).resolve().parents[1] / "ckptgeo"
    probes = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py")
              for i, line in enumerate(p.read_text().splitlines(), 1)
              if re.search(r"getattr\((source|src|self\.source)\b|\._snapshot\b", line)]
    assert probes == []


@pytest.mark.public_data("bigbench")
def test_suite_formats_and_loaders_go_through_the_registry(tmp_path, monkeypatch):
    from ckptgeo.suites.items import LOADERS, Item, Suite, load_suite, write_jsonl

    assert {"jsonl", "bigbench", "blimp", "hf"} <= set(LOADERS.names())
    assert len(load_suite(f"bigbench:{BIGBENCH_FILE}")) == len(load_suite(BIGBENCH_FILE)) == 300
    path = tmp_path / "t.jsonl"
    write_jsonl(path, [{"id": 1, "suite": "t", "good": "a b", "bad": "b a"}])
    assert load_suite(f"jsonl:{path}").items[0].kind == "minimal_pair"
    monkeypatch.setitem(LOADERS._items, "echo", lambda rest: Suite(rest, (Item(id="0", suite=rest, kind="generation",
                                                                               prompt="x", target=rest),)))
    assert load_suite("echo:hello").items[0].target == "hello"
    with pytest.raises(InvalidParameterError, match="loader prefixes: bigbench, blimp, echo, hf, jsonl"):
        load_suite("nosuch:thing")


def test_scan_help_lists_the_registry_without_importing_torch():
    code = ("import contextlib, io, sys\nfrom ckptgeo.cli import main\nbuf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):\n    main(['scan', '--help'])\n"
            "print(' '.join(buf.getvalue().split()))\nprint('heavy:', sorted(m for m in ('torch', 'pyarrow', 'pandas') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    from ckptgeo.metrics.registry import metric_names

    assert {"rankme", "behavior", "hessian", "llc"} <= set(metric_names())
    assert f"from: {', '.join(metric_names())} (default" in proc.stdout, proc.stdout
    assert "heavy: []" in proc.stdout
