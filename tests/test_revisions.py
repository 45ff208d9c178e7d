import pytest

from ckptgeo.errors import EmptySelectionError, InvalidParameterError, RevisionNotFoundError
from ckptgeo.sources.revisions import Revision, parse_step, pythia_steps, select_revisions

REVS = [Revision(s, f"step{s}", commit=f"{s:040x}") for s in pythia_steps()]


def steps(sel):
    return [r.step for r in select_revisions(REVS, sel)]


def test_pythia_grid():
    s = pythia_steps()
    assert len(s) == 154 and s[:11] == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512] and s[11] == 1000


def test_all_and_final():
    assert len(steps("all")) == 154
    assert steps("main") == steps("final") == [143000]


def test_every_n_includes_step0():
    got = steps("every-10000")
    assert got == [0] + list(range(10000, 143001, 10000))


def test_log():
    assert steps("log") == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def test_ranges():
    assert steps("1000:5000") == [1000, 2000, 3000, 4000, 5000]
    assert steps("0:20000:5000") == [0, 5000, 10000, 15000, 20000]
    assert steps("500:1000") == [512, 1000]


def test_lists_of_names_and_steps():
    assert steps("step2000,1000,step4") == [4, 1000, 2000]


def test_missing_revision_names_closest():
    with pytest.raises(RevisionNotFoundError, match="step4000") as info:
        select_revisions(REVS[:14], "step4000", source="EleutherAI/pythia-12b")
    assert info.value.closest[0] == "step3000"
    assert info.value.revision == "step4000"


def test_empty_selection():
    with pytest.raises(EmptySelectionError):
        select_revisions(REVS, "600:900")


def test_bad_selector():
    with pytest.raises(InvalidParameterError):
        select_revisions(REVS, "every-x!")
    with pytest.raises(InvalidParameterError):
        select_revisions(REVS, "5:1")


def test_parse_step_pattern():
    assert parse_step("ckpt-300", r"^ckpt-(\d+)$") == 300
    assert parse_step("main") is None
