"""The ``ckptgeo`` command line: one module per subcommand, thin wrappers over the Python API.

Each subcommand module has ``add_parser(subparsers)``; the built-in ones are listed in
:data:`ckptgeo.registry.COMMANDS` and third-party packages add more through the ``ckptgeo.commands``
entry-point group.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
import warnings

from ckptgeo._version import __version__
from ckptgeo._registry import Registry
from ckptgeo.constants import DEBUG

__all__ = ["main", "build_parser", "COMMANDS"]

_EPILOG = """examples:
  ckptgeo revisions EleutherAI/pythia-160m --revisions log
  ckptgeo revisions allenai/OLMo-2-1124-7B --revisions 'stage2-ingredient1:*'
  ckptgeo fetch EleutherAI/pythia-160m --revisions every-10000 --max-disk 20GB   # then HF_HUB_OFFLINE=1
  ckptgeo scan EleutherAI/pythia-2.8b --revisions every-1000 --suite logic
  ckptgeo scan runs/addition-L1 --out results/addition   # a folder of step{N} checkpoints
  ckptgeo probe --suite logic
  ckptgeo analyze results/addition
  ckptgeo forecast results/reproduce/dataset
  ckptgeo demo
  ckptgeo reproduce --preset cpu
  ckptgeo claims results/reproduce --calibrate 24
  ckptgeo submit scan EleutherAI/pythia-1b --out /scratch/p1b --workers 8 --partition gpu --gpus-per-task 1 --stage
  ckptgeo status /scratch/p1b

environment: HF_ENDPOINT / HF_HOME / HF_TOKEN / HF_HUB_OFFLINE as for huggingface_hub; CKPTGEO_DEBUG=1 prints tracebacks;
CKPTGEO_NO_PROGRESS=1 hides progress bars."""


#: The built-in subcommands, in the order ``--help`` lists them; ``ckptgeo.commands`` entry points add more.
COMMANDS = Registry("command", "ckptgeo.commands", {
    name: f"ckptgeo.cli.{name}:add_parser" for name in ("scan", "probe", "revisions", "fetch", "train", "analyze",
                                                          "claims", "forecast", "demo", "reproduce", "submit",
                                                          "status")})


def build_parser() -> argparse.ArgumentParser:
    """The ``ckptgeo`` parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="ckptgeo", description="Walk training checkpoints and measure representation geometry, behaviour "
        "and probes at each one.", epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"ckptgeo {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS.names():
        COMMANDS.get(name)(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ckptgeo`` console script; returns the exit code."""

    if not sys.stderr.isatty():   # a batch log: huggingface_hub's download bars would fill it (ours are hidden too)
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    with warnings.catch_warnings():   # restores the default display when main() returns (tests call it in-process)
        warnings.showwarning = _one_line_warning
        return _run(args)


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """ckptgeo's own warnings at the command line: one line each, ``ckptgeo: warning: ...``, no source line
    (other packages' warnings keep Python's format, which says where they come from)."""
    from ckptgeo.errors import CkptgeoWarning

    if not issubclass(category, CkptgeoWarning):
        return _SHOW_WARNING(message, category, filename, lineno, file, line)
    text = " ".join(str(message).split())
    try:
        print(f"ckptgeo: warning: {text} ({category.__name__})", file=file or sys.stderr)
    except OSError:   # a closed stderr: nowhere to show it
        pass


_SHOW_WARNING = warnings.showwarning


def _run(args) -> int:
    from ckptgeo.errors import CkptgeoError, DiskSpaceError

    try:
        return int(args.func(args) or 0)
    except CkptgeoError as err:
        if DEBUG:
            raise
        print(f"ckptgeo: error: {err}", file=sys.stderr)
        print("(set CKPTGEO_DEBUG=1 for the traceback)", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("ckptgeo: interrupted; finished revisions are saved, rerun to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` & co., which stopped reading: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 0
    except OSError as err:
        if DEBUG or err.errno != errno.ENOSPC:
            raise
        from ckptgeo._io import temp_target

        path = str(err.filename or "")  # the temporary file of an atomic write names the file it was for
        target = temp_target(os.path.basename(path))
        where = f" while writing {os.path.join(os.path.dirname(path), target) if target else path}" if path else ""
        print(f"ckptgeo: error: disk full{where}; free space and rerun: finished work is kept", file=sys.stderr)
        return DiskSpaceError.exit_code
