#!/usr/bin/env python
"""Regenerate the bundled diagnostic suites in ``diagnostics/`` (deterministic under ``--seed``).

Writes ``syntax``, ``semantics``, ``logic``, ``arithmetic``, ``icl``, ``factual``, ``general`` and
``logical_deduction`` as JSON lines, each starting with a ``suite_header`` line, after checking every
suite with :func:`ckptgeo.suites.generators.check_items`. Exits 1 (writing nothing) if a check fails.

Examples
--------
    python scripts/make_diagnostics.py                 # rewrite diagnostics/*.jsonl
    python scripts/make_diagnostics.py --check         # regenerate in memory, compare with the files
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ckptgeo.suites.generators import SUITES, check_items, generate_suite  # noqa: E402
from ckptgeo.suites.items import write_jsonl  # noqa: E402

NAMES = [s.name for s in SUITES] + ["logical_deduction"]


def _render(header: dict, items: list[dict]) -> str:
    lines = [json.dumps({"suite_header": header})] + [json.dumps(it, ensure_ascii=False) for it in items]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "diagnostics")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="compare with the files on disk; write nothing")
    args = parser.parse_args(argv)
    generated = {}
    failed = False
    for name in NAMES:
        header, items = generate_suite(name, seed=args.seed)
        report = check_items(items)
        status = "ok" if report.ok else "FAILED"
        print(f"{name:18s} {report.n_items:4d} items  labels {report.label_counts or '(good/bad)'}  {status}")
        for problem in report.problems:
            print(f"    {problem}")
        failed |= not report.ok
        generated[name] = (header, items)
    if failed:
        return 1
    if args.check:
        stale = [n for n, (h, it) in generated.items()
                 if not (args.out / f"{n}.jsonl").is_file()
                 or (args.out / f"{n}.jsonl").read_text(encoding="utf-8") != _render(h, it)]
        print("stale: " + ", ".join(stale) if stale else "all files up to date")
        return 1 if stale else 0
    for name, (header, items) in generated.items():
        write_jsonl(args.out / f"{name}.jsonl", items, header=header)
    print(f"wrote {len(generated)} suites to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
