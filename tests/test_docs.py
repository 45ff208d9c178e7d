"""The definitions live in the repository (docs/definitions.md), and everything that cites them cites a section
that exists; nothing cites a file users do not have. Every relative link and every ``#anchor`` in README.md,
CONTRIBUTING.md, CHANGELOG.md and docs/*.md resolves (anchors as GitHub renders headings), and the README stays a
front door (issue 43, item 6)."""

import contextlib
import io
import re
import shlex
import subprocess
from pathlib import Path

import pytest

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


# -- links and anchors between the pages ---------------------------------------------------------------------------

PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")])

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)
_HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)


def _prose(text: str) -> str:
    """``text`` without fenced code blocks (a ``# comment`` in a bash block is not a heading, nor a link)."""
    return _FENCE.sub("", text)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text lower-cased, punctuation dropped (letters, digits,
    ``_``, ``-`` and spaces kept), each space a ``-``.

    Examples
    --------
    >>> slug("Speed against the device's limit (GPU)")
    'speed-against-the-devices-limit-gpu'
    >>> slug("With `transformers.Trainer`")
    'with-transformerstrainer'
    >>> slug("Recipe: add a [claim](x.md) row")
    'recipe-add-a-claim-row'
    """
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link renders as its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def page_anchors(path: Path) -> set[str]:
    """Every anchor a page offers: its headings' slugs (a repeated one gets ``-1``, ``-2`` ...) and HTML ids."""
    text = path.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    found = set(_HTML_ID.findall(text))
    for _, title in _HEADING.findall(_prose(text)):
        base = slug(title)
        found.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return found


def links(path: Path) -> list[str]:
    """The link targets in a page's prose (not inside code)."""
    return _LINK.findall(_INLINE_CODE.sub("", _prose(path.read_text(encoding="utf-8"))))


def broken_links(path: Path) -> list[str]:
    """Each relative link of ``path`` whose file is missing or whose ``#anchor`` the target does not offer."""
    bad = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):   # http:, https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part) if file_part else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in page_anchors(dest):
            bad.append(f"{target}: no heading or id {anchor!r} in {dest.name}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    assert page.is_file()
    assert broken_links(page) == []


def test_the_link_check_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n## The `x` option (y)\n\nsee [b](b.md), [ok](#the-x-option-y), "
                                   "[bad](#the-x-option), `[code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n")
    assert broken_links(tmp_path / "a.md") == ["b.md: no such file",
                                               "#the-x-option: no heading or id 'the-x-option' in a.md"]


def test_repeated_headings_get_numbered_anchors(tmp_path):
    (tmp_path / "a.md").write_text("## Forecast\n\n### Forecast\n\n```bash\n# Forecast\n```\n<a id=\"lead\"></a>\n")
    assert page_anchors(tmp_path / "a.md") == {"forecast", "forecast-1", "lead"}


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 300, len(lines)


def test_every_docs_page_is_linked_from_the_readme():
    """A page nobody links is a page nobody reads."""
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    assert [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked] == []


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


def _commands(text: str) -> list[str]:
    """The ``ckptgeo ...`` (or ``torchrun ... -m ckptgeo ...``) lines of a page's bash blocks, continuation lines
    joined, as the arguments after ``ckptgeo``; a line with a ``...`` placeholder is left out."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            m = re.match(r"^\s*(?:torchrun .*?-m )?ckptgeo (.*)$", line)
            if m and "..." not in m.group(1):
                found.append(m.group(1))
    return found


def test_the_commands_the_docs_give_parse():
    """Every command line of README.md and docs/*.md is one the CLI accepts (flags, choices, argument counts)."""
    from ckptgeo.cli import build_parser

    refused = []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for rest in _commands(page.read_text(encoding="utf-8")):
            argv = shlex.split(rest, comments=True)
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    build_parser().parse_args(argv)
            except SystemExit:
                refused.append(f"{page.name}: ckptgeo {rest}: {err.getvalue().strip().splitlines()[-1:]}")
    assert sum(len(_commands(p.read_text(encoding="utf-8"))) for p in pages) >= 40
    assert refused == []


def test_the_command_check_sees_a_bad_flag():
    from ckptgeo.cli import build_parser

    (rest,) = _commands("```bash\nckptgeo scan EleutherAI/pythia-160m \\\n    --revisionz log   # typo\n```\n")
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        build_parser().parse_args(shlex.split(rest, comments=True))
