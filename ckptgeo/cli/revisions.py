"""``ckptgeo revisions``: list the revisions of a Hub repo or checkpoint folder."""

from __future__ import annotations

import argparse

from ckptgeo.cli._options import add_source_options

__all__ = ["add_parser"]

_EPILOG = """examples:
  ckptgeo revisions EleutherAI/pythia-160m
  ckptgeo revisions EleutherAI/pythia-160m --revisions every-10000
  ckptgeo revisions runs/addition-L1"""


def _cmd_revisions(args) -> int:
    from ckptgeo.sources.revisions import select_revisions
    from ckptgeo.sources.registry import open_source

    source = open_source(args.source, step_pattern=args.step_pattern, keep_cache=True)
    revs = source.revisions()
    if args.revisions:
        revs = select_revisions(revs, args.revisions, source=args.source)
    sizes = {}
    if args.sizes:
        sizes = {r.name: sum(f.size or 0 for f in source.weight_files(r)) for r in revs}
    print(f"{'revision':>12}  {'step':>7}  {'commit':<40}  size")
    for r in revs:
        size = sizes.get(r.name, r.size)
        print(f"{r.name:>12}  {r.step:>7}  {r.commit or '-':<40}  {'' if size is None else f'{size / 1e6:.1f} MB'}")
    print(f"{len(revs)} revision{'s' if len(revs) != 1 else ''}")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``ckptgeo revisions`` to an argparse ``subparsers`` object and return its parser."""
    p = subparsers.add_parser("revisions", help="list a source's revisions", epilog=_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="List revision, step, commit and size of a Hub repo or checkpoint folder.")
    add_source_options(p)
    p.add_argument("--sizes", action="store_true", help="also ask the Hub for each revision's weight bytes")
    p.set_defaults(func=_cmd_revisions)
    return p
