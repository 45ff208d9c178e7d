"""The settings of a scan (:class:`ScanConfig`), each declared once, and their checks.

Every field of :class:`ScanConfig` is declared with :func:`setting` (the base declaration of
:mod:`ckptgeo._settings`, with the scan's :class:`ScanSetting`): its type and default (the field's),
what it admits, its entry in :func:`~ckptgeo.engine.scan.scan`'s docstring, its command-line flag and
``--help`` text, how it enters the config hash, and whether :class:`~ckptgeo.monitor.MonitorConfig` takes
it. Everything else derives from that one declaration: the flags (``ckptgeo.cli._options``), ``scan()``'s
documented parameters, the constraints checked by :func:`validate_scan_config`, the settings that key the
config hash (:func:`hashed_settings`) and the monitor's fields (:func:`monitor_settings`);
``tests/test_settings.py`` fails when ``scan()``'s keywords or defaults drift from it.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ckptgeo._settings as _settings
from ckptgeo._settings import Interval, Options, Setting, validate_params
from ckptgeo.constants import DEFAULT_N_SAMPLES
from ckptgeo.errors import InvalidParameterError

__all__ = ["ScanConfig", "ScanSetting", "setting", "declared", "behavior_settings", "settings_from",
           "hashed_settings", "monitor_settings", "with_settings_doc", "parse_size", "validate_scan_config",
           "merge_options", "METRIC_OPTION_ALIASES"]

#: ScanConfig fields kept as short forms of one measure's option: ``centered=True`` is
#: ``metric_options={"rankme": {"centered": True}}`` (``--centered`` on the command line).
METRIC_OPTION_ALIASES = {"centered": ("rankme", "centered"), "epsilon": ("rankme", "eps")}


@dataclass(frozen=True)
class ScanSetting(Setting):
    """A scan setting's declaration: the base :class:`~ckptgeo._settings.Setting` (description, what it
    admits, flag, help, coercion) and how the scan uses it.

    Attributes
    ----------
    group : {"scan", "source", "command"}
        Which parser function adds the flag: ``add_scan_options`` (``scan``, ``probe``), ``add_source_options``
        (also ``revisions``, ``fetch``), or a command itself (``scan``'s ``--metrics``).
    hashed : {"value", "given", "suites", "measures"}, optional
        How it enters the config hash: its value; its value when given (not None, not its default: a setting
        added later keeps the hashes of earlier runs at its default); through the items of
        the suites it names; through the configs of the measures it sets. None: it does not change values.
    monitor : bool
        :class:`~ckptgeo.monitor.MonitorConfig` takes it too.
    behavior : bool
        It changes the behaviour rows (accuracy): two runs that agree on these (and the source) measured
        the same accuracy (:func:`behavior_settings`).
    """

    group: str = "scan"
    hashed: str | None = None
    monitor: bool = False
    behavior: bool = False


def setting(default: Any, doc: str, **declaration) -> Any:
    """A :class:`ScanConfig` field with ``default``, declared by a :class:`ScanSetting`."""
    return _settings.setting(default, doc, cls=ScanSetting, **declaration)


def parse_size(text: str | int | None) -> int | None:
    """``"20GB"``, ``"500M"``, ``"1.5TiB"``, ``1000`` -> bytes.

    >>> parse_size("2GB"), parse_size("1KiB")
    (2000000000, 1024)
    """
    if text is None or isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?)(i?)B?\s*", str(text), flags=re.I)
    if not m:
        raise InvalidParameterError(f"Cannot parse size {text!r}; use e.g. 500MB, 20GB, 1.5TiB",
                                    name="max_disk", value=text)
    base = 1024 if m.group(3) else 1000
    return int(float(m.group(1)) * base ** " KMGT".index(m.group(2).upper() or " "))


def _tuple(value) -> tuple:
    return tuple(value or ())


def _text(value) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class ScanConfig:
    """Settings of a scan: the keyword options of :func:`ckptgeo.engine.scan.scan`, where each is documented.
    Those declared ``hashed`` (not ``device``, ``batch_size``, ``prefetch``, the disk and resume options)
    change values: they enter the config hash that keys resume, and are recorded in ``runs/<hash>.json``.
    """

    revisions: str | None = setting(
        None, "A revision selector: ``all``, ``every-N``, ``log``, ``A:B[:N]``, ``step1000,step2000``, ``main``, "
              "``final``. Default: ``all`` for a folder, ``every-1000`` for a Hub repo.",
        flag="--revisions", group="source",
        help="revision selector: all, every-N, log, A:B[:N], main, genuine (no two serve the same weights; see "
             "`ckptgeo revisions SOURCE --integrity`), names/steps, or STAGE:SEL such as 'stage2-ingredient1:*' "
             "(default: all for a folder, every-1000 for a Hub repo)")
    suites: tuple[str, ...] = setting(
        (), "Suite names, file paths or loader specs (``hf:blimp/...``); empty: the source's default suites.",
        kind="sequence of str", coerce=_tuple, hashed="suites", behavior=True,
        flag="--suite", action="append", metavar="NAME|PATH",
        help="bundled suite name, file path, loader spec (hf:ORG/NAME), or an algorithmic task level such as "
             "copy-L1 (its 200 held-out items, as `ckptgeo train` draws them); repeat for several (default: the "
             "source's suites)")
    metrics: tuple[str, ...] = setting(
        (), "Measure names (``rankme``, ``behavior``, ``probe``, ``grad_rank``, ``grad_cov_rank``, ``hessian``, "
            "``llc``, ``cka``, ``weight_distance``, ``all``); empty: the cheap ones (RankMe and behaviour). "
            "``probe`` adds per-layer probes.",
        kind="sequence of str", coerce=_tuple, hashed="measures", monitor=True,
        flag="--metrics", group="command", action="append", metavar="M1,M2",
        help="metrics, comma-separated, from: {names} (default: the cheap ones; 'all' for every one)")
    metric_options: Mapping[str, Mapping[str, Any]] | None = setting(
        None, "Settings of the measures by name, e.g. ``{\"hessian\": {\"k\": 10}, \"llc\": {\"num_chains\": 2}}``: "
              "the fields of each measure's config dataclass (``HessianConfig`` ...), checked against its "
              "constraints and recorded in each row's ``settings``. Options of a measure not in ``metrics`` are "
              "refused.",
        kind="mapping of str to mapping", hashed="measures",
        flag="--metric-option", action="append", metavar="METRIC.OPTION=VALUE",
        help="a metric's setting, e.g. hessian.k=10, llc.num_chains=2, grad_rank.sketch_dim=1024, probe.C=0.5, "
             "cka.reference=step1000; repeat for several; the options are the fields of the metric's config "
             "(HessianConfig, LLCConfig, ...), checked before anything is fetched and recorded in each row; every "
             "metric also takes METRIC.revisions=SELECTOR, the revisions (of the scan's selection) it runs at, e.g. "
             "hessian.revisions=every-5")
    n_samples: int = setting(
        DEFAULT_N_SAMPLES, "Items per suite (seeded selection), at least 2.",
        admits=(Interval(int, 2, None),), hashed="value", monitor=True, behavior=True,
        flag="--n-samples", help="items per suite (default %(default)s)")
    position: str = setting(
        "last", "Hidden states at the last prompt token, or averaged over the prompt.",
        admits=(Options("last", "mean"),), hashed="value", monitor=True,
        flag="--position", help="token read for hidden states (default %(default)s)")
    centered: bool | None = setting(
        None, "Short for ``metric_options={\"rankme\": {\"centered\": ...}}`` (default: RankMe's, uncentred).",
        hashed="measures", monitor=True, flag="--centered", action="store_true",
        help="centred RankMe (short for --metric-option rankme.centered=true; default uncentred, as Garrido et al.)")
    dtype: str = setting(
        "float32", "Dtype of the forward pass (measures upcast; RankMe's SVD runs in float64). ``\"auto\"``: half "
                   "precision on a GPU when no whole-model measure is selected, else float32 "
                   "(:func:`~ckptgeo.engine.plan.forward_dtype`); the dtype used is recorded.",
        admits=(Options("float32", "float64", "bfloat16", "float16", "auto"),), hashed="value", behavior=True,
        flag="--dtype", help="forward-pass dtype (states are upcast, RankMe's SVD runs in float64; default "
                             "%(default)s); auto: half precision on a GPU unless a whole-model measure is selected")
    precision: str = setting(
        "fp32", "Arithmetic of the forward sweep's matrix products, with the weights in ``dtype`` float32: "
                "``\"fp32\"`` (float32 throughout, the default; TF32 off), ``\"tf32\"`` (float32 products on a GPU's "
                "tensor cores with a 10-bit mantissa; CUDA only) or ``\"bf16\"`` (``torch.autocast`` to bfloat16: "
                "products in bfloat16, normalisations and softmax in float32). States are upcast and RankMe's SVD "
                "runs in float64 either way; whole-model measures (gradients, Hessian, LLC) keep float32. Entered in "
                "the config hash when not fp32. Agreement with fp32: ``scripts/bench_scan.py --compare-precision``, "
                "``scripts/bench_gpu.py`` (docs/speed.md).",
        admits=(Options("fp32", "tf32", "bf16"),), hashed="given", behavior=True,
        flag="--precision", help="forward-pass arithmetic with float32 weights: fp32 (default), tf32 (CUDA tensor "
                                 "cores), bf16 (autocast); RankMe's SVD stays float64")
    epsilon: float | None = setting(
        None, "Short for ``metric_options={\"rankme\": {\"eps\": ...}}`` (default: RankMe's, 1e-7).",
        hashed="measures", monitor=True,
        flag="--epsilon", help="RankMe's epsilon (short for --metric-option rankme.eps=E; default 1e-7)")
    seed: int = setting(
        0, "Seeds the item selection and every measure with a ``seed`` (probe folds, sketches, Lanczos, SGLD).",
        admits=(Interval(int, 0, None),), hashed="value", monitor=True, behavior=True,
        flag="--seed", help="seed for item selection and metrics (default %(default)s)")
    batch_size: int | None = setting(
        None, "Items per forward batch (does not change values); None: on a GPU, as many as half its free memory "
              "holds for the suite's longest item (:func:`~ckptgeo.engine.forward.auto_batch_size`); on a CPU, "
              "the cheapest of 16, 32, 64 in CPU seconds per item, timed at the first revision and recorded in "
              "``runs/<hash>.json`` (:func:`~ckptgeo.engine.batching.choose_batch_size`).",
        admits=(Interval(int, 1, None), None), monitor=True,
        flag="--batch-size", help="items per forward batch (default: from the GPU's free memory; on a CPU the "
                                  "cheapest of 16, 32, 64 per item, timed at the first revision)")
    device: str = setting(
        "cpu", "Torch device; ``\"cuda\"`` maps to ``cuda:$LOCAL_RANK`` under a multi-process launcher.",
        flag="--device", help="torch device (default %(default)s)")
    prefetch: int = setting(
        1, "Revisions downloaded ahead of the one measured, 0 to 64.",
        admits=(Interval(int, 0, 64),), flag="--prefetch", help="revisions downloaded ahead (default %(default)s)")
    max_disk: int | None = setting(
        None, "Refuse to start when the peak the Hub cache holds (prefetch + 1 revisions and the files kept "
              "for a later revision; everything fetched with keep_cache) exceeds this many bytes (``\"40GB\"`` "
              "accepted).",
        kind="int or str", admits=(Interval(int, 1, None), None), coerce=parse_size,
        flag="--max-disk", text=str,
        help="refuse to start if the Hub cache's peak (kept files included) exceeds this (e.g. 40GB)")
    keep_cache: bool = setting(
        False, "Keep measured revisions in the Hub cache instead of evicting them.",
        flag="--keep-cache", action="store_true", help="do not evict measured revisions from the Hub cache")
    overwrite: bool = setting(
        False, "Measure again revisions already done with these settings.",
        flag="--overwrite", action="store_true", help="measure again revisions already done")
    save_states: bool = setting(
        False, "Keep each suite's hidden states under ``out/states/`` (safetensors).",
        flag="--save-states", action="store_true", help="keep the measured hidden states (safetensors)")
    on_error: str = setting(
        "skip", "``\"skip\"`` records a failed revision and goes on; ``\"raise\"`` stops at the first.",
        admits=(Options("skip", "raise"),),
        flag="--on-error", help="skip: record a failed revision and continue (default); raise: stop")
    step_pattern: str | None = setting(
        None, "A regular expression whose first group captures the step from a branch or folder name (default: "
              "the built-in naming schemes, ``step{N}`` and the like).",
        flag="--step-pattern", group="source",
        help=r"regex mapping branch names to steps: group 'step' (or the first), optional 'stage' and 'tokens' "
             r"(billions); default: the built-in schemes step{N}, [stageK[-ingredientJ]-]step{N}-tokens{T}B, "
             r"stageK-step-{N}, step-{N}, step-{N}-{T}BT, step_{N}, checkpoint-{N}, global_step{N}, iter{N}, "
             r"ckpt_{K}, {N}")
    model_items: int = setting(
        32, "Items in the fixed batch of whole-model measures (gradients, Hessian, LLC).",
        admits=(Interval(int, 1, None),), hashed="value", monitor=True)
    threads: int | None = setting(
        None, "Torch CPU threads (default :func:`ckptgeo._threads.default_threads` of the model's size); "
              "recorded, with torch's deterministic settings, in ``runs/<config_hash>.json`` under ``runtime``.",
        admits=(Interval(int, 1, None), None), flag="--threads", monitor=True,
        help="torch CPU threads (default: 1 for models under 10M parameters, else the physical cores)")
    share_prefix: bool = setting(
        True, "Run a prefix that a batch's prompts share once and reuse its key/value cache (equal results to "
              "1e-5 relative; does not change values). False runs every prompt whole: the baseline of "
              "``scripts/bench_scan.py --compare-prefix``.")
    tokenizer: str | None = setting(
        None, "A tokenizer folder or Hub repo id, for checkpoint folders that hold none (a ``transformers.Trainer`` "
              "run's ``checkpoint-{N}/`` folders); default: the source's own. Entered in the config hash when given.",
        kind="str or Path", coerce=_text, hashed="given", behavior=True,
        flag="--tokenizer", metavar="PATH|REPO",
        help="tokenizer folder or Hub repo id, for checkpoint folders without one (a Trainer's checkpoint-N "
             "folders); default: the source's own")
    source_options: Mapping[str, Any] | None = setting(
        None, "Options of the checkpoint source by name, e.g. ``{\"cache_dir\": \"/scratch/hf\"}`` for a Hub repo: "
              "the fields of its ``options`` class (:class:`~ckptgeo.sources.protocol.DownloadOptions` for the Hub), "
              "checked when the source is opened; a name it does not take is refused.",
        kind="mapping of str to value", flag="--source-option", group="source", action="append",
        metavar="OPTION=VALUE",
        help="an option of the checkpoint source, e.g. cache_dir=/scratch/hf for a Hub repo (a folder takes "
             "step_pattern; the Hub and a family also keep_cache and cache_dir); repeat for several")

    def options_of(self, metric: str) -> dict[str, Any]:
        """The options given for ``metric``: ``metric_options[metric]`` plus the alias fields set
        (``centered``, ``epsilon`` for RankMe).

        Raises
        ------
        InvalidParameterError
            An alias and ``metric_options`` set the same option to different values.
        """
        options = dict((self.metric_options or {}).get(metric) or {})
        for field, (owner, option) in METRIC_OPTION_ALIASES.items():
            value = getattr(self, field)
            if owner != metric or value is None:
                continue
            if option in options and options[option] != value:
                raise InvalidParameterError(f"{field}={value!r} and metric_options[{metric!r}][{option!r}]="
                                            f"{options[option]!r} disagree; give it once", name=field, value=value)
            options[option] = value
        return options


def declared(cls: type = ScanConfig) -> list[tuple[dataclasses.Field, ScanSetting]]:
    """The fields of ``cls`` declared with :func:`setting`, in order, each with its :class:`ScanSetting`.

    >>> [f.name for f, s in declared() if s.hashed == "value"]
    ['n_samples', 'position', 'dtype', 'seed', 'model_items']
    """
    return _settings.declared(cls)


def behavior_settings() -> tuple[str, ...]:
    """The names under which ``runs/<config_hash>.json`` records what changes behaviour rows: the settings
    declared ``behavior`` and the source.

    >>> behavior_settings()
    ('suites', 'n_samples', 'dtype', 'precision', 'seed', 'tokenizer', 'source')
    """
    return tuple(f.name for f, s in declared() if s.behavior) + ("source",)


def settings_from(options: Mapping[str, Any], *, owner: str = "scan") -> dict[str, Any]:
    """``scan()``'s keyword options as the values :class:`ScanConfig` holds (a list of suites as a tuple,
    ``"40GB"`` as bytes, a tokenizer ``Path`` as str).

    Raises
    ------
    TypeError
        A name that is not a setting: *plan_scan() got unexpected keyword arguments ['n_sample']*.
    InvalidParameterError
        A ``max_disk`` that is not a size.
    """
    settings = {f.name: s for f, s in declared()}
    unknown = set(options) - set(settings)
    if unknown:
        raise TypeError(f"{owner}() got unexpected keyword arguments {sorted(unknown)}")
    return {k: settings[k].coerce(v) if settings[k].coerce else v for k, v in options.items()}


def hashed_settings(config: ScanConfig) -> dict[str, Any]:
    """The settings that enter the config hash by value (``hashed`` ``"value"``, and ``"given"`` when given);
    suites and measures enter it through their digests and configs (:func:`ckptgeo.engine.plan.scan_settings`).

    >>> hashed_settings(ScanConfig(n_samples=50))
    {'n_samples': 50, 'position': 'last', 'dtype': 'float32', 'seed': 0, 'model_items': 32}
    """
    out = {}
    for f, s in declared():
        value = getattr(config, f.name)
        if s.hashed == "value" or (s.hashed == "given" and value is not None and value != "" and value != f.default):
            out[f.name] = value
    return out


def monitor_settings(**defaults) -> type:
    """A frozen dataclass of the settings declared ``monitor=True``, the base of
    :class:`~ckptgeo.monitor.MonitorConfig`: each field as declared here, its default replaced where
    ``defaults`` names it (the monitor measures in batches of 64).

    Raises
    ------
    TypeError
        ``defaults`` names a field the monitor does not take.
    """
    taken = [(f, s) for f, s in declared() if s.monitor]
    unknown = set(defaults) - {f.name for f, _ in taken}
    if unknown:
        raise TypeError(f"monitor_settings() got settings the monitor does not take: {sorted(unknown)}")
    hints = typing.get_type_hints(ScanConfig)
    fields = [(f.name, hints[f.name], dataclasses.field(default=defaults.get(f.name, f.default), metadata=f.metadata))
              for f, _ in taken]
    base = dataclasses.make_dataclass("MonitorSettings", fields, frozen=True)
    base.__module__, base.__doc__ = __name__, "The scan settings a monitor takes, as declared on :class:`ScanConfig`."
    return base


def with_settings_doc(doc: str | None, cls: type = ScanConfig) -> str | None:
    """``doc`` with its line ``{settings}`` replaced by the numpydoc entries of the settings of ``cls``
    (:func:`ckptgeo._settings.settings_doc`)."""
    return _settings.with_settings_doc(doc, cls)


def validate_scan_config(config: ScanConfig) -> None:
    """Check a scan's settings (measure options are checked by each measure's config).

    Raises
    ------
    InvalidParameterError
        A value outside what its declaration admits (*The 'n_samples' parameter of scan must be an int in
        [2, inf). Got 1.*), a ``step_pattern`` that does not compile or captures no step,
        ``metric_options`` that is not a mapping of metric names to mappings, or ``source_options`` that is not
        a mapping of names.
    """
    validate_params(config, owner="scan")
    if config.precision != "fp32" and config.dtype not in ("float32", "auto"):
        raise InvalidParameterError(f"--precision {config.precision} sets the arithmetic of a float32 model; with "
                                    f"--dtype {config.dtype} the weights are already {config.dtype}. Use --dtype "
                                    f"float32, or --precision fp32.", name="precision", value=config.precision)
    if config.precision == "tf32" and not str(config.device).startswith("cuda"):
        raise InvalidParameterError(f"--precision tf32 runs float32 products on a CUDA GPU's tensor cores; got "
                                    f"--device {config.device}. Use --precision bf16 or fp32 there.",
                                    name="precision", value=config.precision)
    if config.step_pattern is not None:
        try:
            groups = re.compile(config.step_pattern).groups
        except re.error as err:
            raise InvalidParameterError(f"--step-pattern {config.step_pattern!r} is not a valid regular expression: "
                                        f"{err}", name="step_pattern", value=config.step_pattern) from err
        if groups < 1:
            raise InvalidParameterError(f"--step-pattern {config.step_pattern!r} needs a group capturing the step, "
                                        r"e.g. '^ckpt-(\d+)$'", name="step_pattern", value=config.step_pattern)
    given = config.source_options
    if given is not None and (not isinstance(given, Mapping) or not all(isinstance(k, str) for k in given)):
        raise InvalidParameterError(f"The 'source_options' parameter of scan must be a mapping of option names to "
                                    f"values, e.g. {{'cache_dir': '/scratch/hf'}}. Got {given!r}.",
                                    name="source_options", value=given)
    options = config.metric_options
    if options is not None and (not isinstance(options, Mapping)
                                or not all(isinstance(v, Mapping) for v in options.values())):
        raise InvalidParameterError(f"The 'metric_options' parameter of scan must be a mapping of metric names to "
                                    f"mappings of options, e.g. {{'hessian': {{'k': 10}}}}. Got {options!r}.",
                                    name="metric_options", value=options)


def merge_options(config: ScanConfig | None, options: Mapping[str, Any]) -> ScanConfig:
    """``config`` (default: all defaults) with the ``options`` that differ from their defaults set on it."""
    if config is None:
        return ScanConfig(**options)
    defaults = {f.name: f.default for f in dataclasses.fields(ScanConfig)}
    return dataclasses.replace(config, **{k: v for k, v in options.items() if v != defaults[k]})
