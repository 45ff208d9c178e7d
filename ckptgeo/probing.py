"""``ckptgeo probe``: behaviour and linear probes of a suite across a model's checkpoints.

A thin layer over the scan engine: :func:`probe_checkpoints` runs :func:`ckptgeo.scan.scan` with the
metrics ``behavior`` and ``probe`` only, so the output folder has the same dataset layout (and
resumes the same way) as ``ckptgeo scan``, with ``behavior/`` and ``probes/`` tables filled.
Heavy imports happen inside the functions so ``ckptgeo --help`` stays instant.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .errors import HubUnreachableError

__all__ = ["DEFAULT_SOURCE", "DEFAULT_REVISIONS", "PROBE_METRICS", "probe_checkpoints", "add_probe_parser"]

DEFAULT_SOURCE = "EleutherAI/pythia-160m"
DEFAULT_REVISIONS = "every-1000"
PROBE_METRICS = ("behavior", "probe")

_EPILOG = """\
examples:
  ckptgeo probe --suite logic --out runs/probe-logic
  ckptgeo probe --suite logical_deduction EleutherAI/pythia-410m --revisions every-1000 --out runs/ld
  ckptgeo probe --suite path/to/three_objects.json --suite syntax ./my-run --revisions all --out runs/mine
  ckptgeo probe --suite hf:blimp/anaphor_gender_agreement --out runs/blimp
  HF_ENDPOINT=https://my-mirror.example ckptgeo probe --suite logic --out runs/probe-logic
"""


def _unreachable_message(source: str, err: BaseException) -> str:
    return (f"The Hugging Face Hub cannot be reached for {source!r} ({err}). Point ckptgeo at a mirror "
            f"with HF_ENDPOINT (e.g. `HF_ENDPOINT=https://my-mirror.example ckptgeo probe ...`), or at a local "
            f"folder of step{{N}} checkpoints: `ckptgeo probe --suite ... path/to/run --out ...`.")


def probe_checkpoints(source: str | Path = DEFAULT_SOURCE, *, suites, revisions: str | None = None,
                      out: str | Path | None = None):
    """Measure behaviour and per-layer linear probes of ``suites`` at each selected revision.

    Parameters
    ----------
    source : str or Path, default="EleutherAI/pythia-160m"
        A Hub model id (its ``step{N}`` branches) or a local folder of ``step{N}`` checkpoints.
    suites : str or sequence of str
        Suite names, paths or loader specs (``logic``, ``path/to/task.json``, ``hf:blimp/...``).
    revisions : str, optional
        Revision selector, as for ``ckptgeo scan`` (default: every-1000 on the Hub, all for a folder).
    out : str or Path, optional
        Output dataset folder (default ``results/<source name>``); ``behavior/`` and ``probes/`` tables
        are written (resumable).

    Returns
    -------
    ScanResult

    Raises
    ------
    InvalidParameterError
        An unknown suite (checked before any download).
    SuiteFormatError
        A suite file breaks the item schema.
    HubUnreachableError
        The Hub cannot be reached; the message shows ``HF_ENDPOINT`` and the local-folder form.
    """
    from .items import load_suite
    from .scan import scan

    suites = [suites] if isinstance(suites, (str, Path)) else list(suites)
    for spec in suites:  # fail on a mistyped suite before touching the network
        if not str(spec).startswith("hf:"):
            load_suite(spec)
    try:
        return scan(str(source), revisions=revisions, suites=[str(s) for s in suites], metrics=list(PROBE_METRICS),
                    out=out)
    except HubUnreachableError as err:
        raise HubUnreachableError(_unreachable_message(str(source), err)) from err


def _handle(args: argparse.Namespace) -> int:
    from .cli import run_scan_command

    try:
        return run_scan_command(args, metrics=PROBE_METRICS)
    except HubUnreachableError as err:
        raise HubUnreachableError(_unreachable_message(str(args.source), err)) from err


def add_probe_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``probe`` subcommand (the scan options, metrics fixed to behaviour and probes) to
    ``subparsers``. Returns the new subparser; its ``func`` default is the handler, which returns the exit code.
    """
    from .cli import add_scan_options, add_source_options

    parser = subparsers.add_parser(
        "probe", help="behaviour and linear probes of a suite across checkpoints",
        description="Score a suite's behaviour and train a linear probe per layer on its labels at every "
                    "selected checkpoint; writes behavior/ and probes/ tables in the scan dataset layout.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", nargs="?", default=DEFAULT_SOURCE,
                        help=f"Hub model id or local folder of step{{N}} checkpoints (default: {DEFAULT_SOURCE})")
    add_source_options(parser, source_required=False)
    add_scan_options(parser)
    parser.set_defaults(func=_handle)
    return parser
