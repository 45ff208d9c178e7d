"""The definitions live in the repository (docs/definitions.md), and everything that cites them cites a section
that exists; nothing cites a file users do not have."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFINITIONS = ROOT / "docs" / "definitions.md"
#: the file name of the founders' notes, which are not part of the repository (spelled in two parts so that
#: this test does not match itself)
OUTSIDE = "SPEC" + ".md"


def _repo_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / p for p in out if (ROOT / p).is_file()]


def _anchors(text: str) -> set[str]:
    """The anchors of a markdown file as GitHub makes them: each heading lowercased, punctuation dropped,
    spaces as hyphens; and every explicit ``<a id="...">``."""
    heads = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
             for h in re.findall(r"^#+ (.+)$", text, re.M)}
    return heads | set(re.findall(r'<a id="([^"]+)"', text))


def test_no_file_cites_notes_outside_the_repository():
    hits = []
    for path in _repo_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        hits += [f"{path.relative_to(ROOT)}:{i}" for i, line in enumerate(text.splitlines(), 1) if OUTSIDE in line]
    assert hits == []


def test_every_cited_section_of_the_definitions_exists():
    anchors = _anchors(DEFINITIONS.read_text(encoding="utf-8"))
    assert {"rankme", "acquisition", "collapse-and-collapse-floor", "precursor-and-precursor-gap", "claims",
            "items", "events", "nulls"} <= anchors
    cited = {}
    for path in _repo_files():
        if path.suffix not in (".py", ".md"):
            continue
        for anchor in re.findall(r"definitions\.md#([\w\-]+)", path.read_text(encoding="utf-8")):
            cited.setdefault(anchor, path.relative_to(ROOT))
    assert len(cited) >= 10, cited
    missing = {a: str(p) for a, p in cited.items() if a not in anchors}
    assert missing == {}


def _built_in_rows() -> dict:
    from ckptgeo.claimtable.registry import CLAIMS, claim_ids

    return {cid: CLAIMS.get(cid) for cid in claim_ids() if CLAIMS.get(cid).fn.__module__.startswith("ckptgeo.claimtable.rows.")}


def test_every_claim_row_cites_its_definition():
    anchors = _anchors(DEFINITIONS.read_text(encoding="utf-8"))
    rows = _built_in_rows()
    assert len(rows) == 18, sorted(rows)
    for claim, row in rows.items():
        found = re.findall(r"docs/definitions\.md#([\w\-]+)", row.source_text)
        assert row.claim and row.source and found == [row.anchor] and row.anchor in anchors, (claim, row.source_text)


def test_every_built_in_measure_and_claim_row_is_defined():
    from ckptgeo.metrics.registry import metric_names

    text = DEFINITIONS.read_text(encoding="utf-8")
    assert [m for m in metric_names() if f"`{m}`" not in text] == []
    assert [c for c in _built_in_rows() if f"**{c}**" not in text] == []
