"""``ckptgeo revisions``: list the revisions of a Hub repo or checkpoint folder."""

from __future__ import annotations

import argparse

from ckptgeo.cli._options import add_source_options, parse_source_options

__all__ = ["add_parser"]

_EPILOG = """examples:
  ckptgeo revisions EleutherAI/pythia-160m
  ckptgeo revisions EleutherAI/pythia-160m --revisions every-10000
  ckptgeo revisions EleutherAI/pythia-2.8b --integrity      # which branches serve the same weights
  ckptgeo scan EleutherAI/pythia-2.8b --revisions genuine   # then scan only the genuine ones
  ckptgeo revisions allenai/OLMo-2-1124-7B --revisions 'stage2-ingredient1:*'
  ckptgeo revisions runs/addition-L1"""


def _tokens(n: int | None) -> str:
    """Training tokens in three significant digits (exact counts: the ``tokens`` column of every table).

    >>> _tokens(3000 * 2_097_152), _tokens(4 * 10**9), _tokens(1_500_000), _tokens(None)
    ('6.29B', '4B', '1.5M', '-')
    """
    if n is None:
        return "-"
    if n == 0:
        return "0"
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def format_revisions(revs, sizes: dict | None = None) -> str:
    """The table ``ckptgeo revisions`` prints: revision, stage, step, tokens, seed (families only),
    commit and size (where ``sizes`` or the listing gives one), one line per revision, then the count."""
    sizes = sizes or {}
    seeds = any(r.seed is not None for r in revs)
    with_size = any(sizes.get(r.name, r.size) is not None for r in revs)
    w = max([12] + [len(r.name) for r in revs])
    ws = max([5] + [len(r.stage or "-") for r in revs])
    head = f"{'revision':<{w}}  {'stage':<{ws}}  {'step':>7}  {'tokens':>8}  " + ("seed  " if seeds else "")
    lines = [(head + f"{'commit':<40}" + ("  size" if with_size else "")).rstrip()]
    for r in revs:
        size = sizes.get(r.name, r.size)
        seed = (f"{'-' if r.seed is None else r.seed:>4}  " if seeds else "")
        lines.append(f"{r.name:<{w}}  {r.stage or '-':<{ws}}  {r.step:>7}  {_tokens(r.tokens):>8}  {seed}"
                     f"{r.commit or '-':<40}  {'' if size is None else f'{size / 1e6:.1f} MB'}".rstrip())
    lines.append(f"{len(revs)} revision{'s' if len(revs) != 1 else ''}")
    return "\n".join(lines)


def _cmd_revisions(args) -> int:
    from ckptgeo.sources.integrity import check_source
    from ckptgeo.sources.revisions import select_revisions
    from ckptgeo.sources.registry import open_source

    source = open_source(args.source, step_pattern=args.step_pattern, keep_cache=True,
                         options=parse_source_options(args.source_options))
    revs = source.revisions()
    report = None
    if args.integrity or (args.revisions and "genuine" in args.revisions):
        report = check_source(source, label=args.source)
    if args.revisions is not None:
        revs = select_revisions(revs, args.revisions, source=args.source, note=source.missing_note,
                                genuine=None if report is None else {r.name for r in report.genuine})
    offline = source.listing_note(revs, args.revisions)
    if offline:  # above the table, so that the count and the next command end it
        print(offline)
    if args.integrity:
        print(report.text())
        print(f"next: ckptgeo scan {args.source} --revisions genuine")
        return 0
    sizes = {}
    if args.sizes:
        sizes = {r.name: sum(f.size or 0 for f in source.weight_files(r)) for r in revs}
    print(format_revisions(revs, sizes))
    import shlex

    selector = f" --revisions {shlex.quote(args.revisions)}" if args.revisions else ""
    print(f"next: ckptgeo scan {shlex.quote(args.source)}{selector}")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``ckptgeo revisions`` to an argparse ``subparsers`` object and return its parser."""
    p = subparsers.add_parser("revisions", help="list a source's revisions", epilog=_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="List revision, stage, step, tokens, commit and size of a Hub repo, a family "
                                   "of repos or a checkpoint folder.")
    add_source_options(p)
    p.add_argument("--sizes", action="store_true", help="also ask the Hub for each revision's weight bytes")
    p.add_argument("--integrity", action="store_true",
                   help="from metadata only (no weights downloaded): the groups of revisions serving the same "
                        "weights or sharing a weight file, the branches without weights, and the genuine trajectory")
    p.set_defaults(func=_cmd_revisions)
    return p
