"""``ckptgeo probe``: behaviour and linear probes of a suite across checkpoints."""

from __future__ import annotations

import argparse

from ckptgeo.engine.probe import DEFAULT_SOURCE, PROBE_METRICS, unreachable_message
from ckptgeo.errors import HubUnreachableError

__all__ = ["add_parser"]

_EPILOG = """\
examples:
  ckptgeo probe --suite logic --out runs/probe-logic     # EleutherAI/pythia-160m, every 1000th step
  ckptgeo probe runs/hf-copy --suite copy-L1 --tokenizer runs/copy-L1    # Trainer checkpoint-N folders
  ckptgeo probe --suite logical_deduction EleutherAI/pythia-410m --revisions every-1000 --out runs/ld
  ckptgeo probe --suite path/to/three_objects.json --suite syntax ./my-run --revisions all --out runs/mine
  ckptgeo probe --suite hf:blimp/anaphor_gender_agreement --out runs/blimp
  ckptgeo probe --suite logic --metric-option probe.k=3 --metric-option probe.C=0.1
  HF_ENDPOINT=https://my-mirror.example ckptgeo probe --suite logic --out runs/probe-logic

progress: a start line with the cost, then one line per revision with an ETA, also in a batch log; -v for more
"""


def _handle(args: argparse.Namespace) -> int:
    from ckptgeo.cli._options import run_scan_command

    try:
        return run_scan_command(args, metrics=PROBE_METRICS)
    except HubUnreachableError as err:
        raise HubUnreachableError(unreachable_message(str(args.source), err)) from err


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``probe`` subcommand (the scan options, metrics fixed to behaviour and probes) to
    ``subparsers``. Returns the new subparser; its ``func`` default is the handler, which returns the exit code.
    """
    from ckptgeo.cli._options import add_scan_options, add_source_options

    parser = subparsers.add_parser(
        "probe", help="behaviour and linear probes of a suite across checkpoints",
        description="Score a suite's behaviour and train a linear probe per layer on its labels at every "
                    "selected checkpoint; writes behavior/ and probes/ tables in the scan dataset layout. Without "
                    f"SOURCE and --revisions it probes {DEFAULT_SOURCE} at every 1000th step (--revisions every-1000, "
                    f"144 revisions: step0, step1000, ..., step143000) into "
                    f"results/{DEFAULT_SOURCE.split('/')[-1]}.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", nargs="?", default=DEFAULT_SOURCE,
                        help=f"Hub model id or local folder of step{{N}} checkpoints (default: {DEFAULT_SOURCE})")
    add_source_options(parser, source_required=False)
    add_scan_options(parser)
    parser.set_defaults(func=_handle)
    return parser

