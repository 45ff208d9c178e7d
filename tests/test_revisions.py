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


@pytest.mark.parametrize("name,step,stage,tokens", [
    ("step143000", 143000, None, None),
    ("step1000-tokens4B", 1000, None, 4 * 10**9),
    ("stage1-step928646-tokens3896B", 928646, "stage1", 3896 * 10**9),
    ("stage2-ingredient3-step11931-tokens50B", 11931, "stage2-ingredient3", 50 * 10**9),
    ("step-125000", 125000, None, None),
    ("step-001000-2BT", 1000, None, 2 * 10**9),
    ("checkpoint-500", 500, None, None),
    ("global_step1000", 1000, None, None),
    ("stage1-step-40000", 40000, "stage1", None),
    ("step_360", 360, None, None),
    ("iter2500", 2500, None, None),
    ("iter_0002500", 2500, None, None),
    ("ckpt_007", 7, None, None),
    ("128000", 128000, None, None),
])
def test_builtin_naming_schemes(name, step, stage, tokens):
    from ckptgeo.sources.revisions import revision_from_name

    r = revision_from_name(name)
    assert (r.step, r.stage, r.tokens) == (step, stage, tokens)


@pytest.mark.parametrize("name,scheme,tokens_per_step", [
    ("step143000", "pythia", 2_097_152), ("stage3-step-4000000", "smollm3", 2_359_296),
    ("step-125000", "smollm2", None), ("step_60", "olmo-post", None), ("ckpt_000", "ckpt", None),
    ("iter2500", "iter", None), ("128000", "bare", None)])
def test_each_scheme_knows_its_global_batch_or_says_none(name, scheme, tokens_per_step):
    from ckptgeo.sources.naming import parse_name

    p = parse_name(name)
    assert (p.scheme, p.tokens_per_step) == (scheme, tokens_per_step)


def test_olmo2_stage1_branches_without_prefix_are_stage1_where_the_repo_has_stages():
    from ckptgeo.sources.naming import parse_names

    got = parse_names(["step150-tokens1B", "stage1-step300-tokens2B", "stage2-ingredient1-step0-tokens4B", "main"])
    assert {n: p.stage for n, p in got.items()} == {"step150-tokens1B": "stage1", "stage1-step300-tokens2B": "stage1",
                                                   "stage2-ingredient1-step0-tokens4B": "stage2-ingredient1"}
    assert parse_names(["step150-tokens1B", "step300-tokens2B"])["step150-tokens1B"].stage is None  # OLMo-1: one stage


def test_names_that_are_no_checkpoint():
    from ckptgeo.sources.naming import parse_name

    assert [parse_name(n) for n in ("main", "step", "stepX", "stage1-step5", "checkpoint-", "v1.0")] == [None] * 6


def test_same_step_in_two_stages_is_two_revisions_ordered_by_stage():
    from ckptgeo.sources.revisions import revision_from_name

    names = ["stage2-ingredient1-step0-tokens9B", "stage1-step2000-tokens9B", "stage1-step0-tokens0B",
             "stage2-ingredient2-step0-tokens9B"]
    revs = sorted(revision_from_name(n) for n in names)
    assert [r.name for r in revs] == ["stage1-step0-tokens0B", "stage1-step2000-tokens9B",
                                      "stage2-ingredient1-step0-tokens9B", "stage2-ingredient2-step0-tokens9B"]
    assert len(set(revs)) == 4
    assert [r.name for r in select_revisions(revs, "0")] == [names[2], names[0], names[3]]


def test_tokens_from_tokens_per_step_and_custom_pattern():
    from ckptgeo.sources.revisions import revision_from_name

    assert revision_from_name("step10", tokens_per_step=2_097_152).tokens == 20_971_520
    r = revision_from_name("ep1-it300-t7B", pattern=r"^(?P<stage>ep\d+)-it(?P<step>\d+)-t(?P<tokens>\d+)B$")
    assert (r.stage, r.step, r.tokens) == ("ep1", 300, 7 * 10**9)


def test_mixed_schemes_keep_the_majority(caplog):
    from ckptgeo.sources.naming import parse_names

    assert sorted(parse_names(["step1", "step2", "checkpoint-7", "main"])) == ["step1", "step2"]
    assert "checkpoint-7" in caplog.text


def test_a_list_with_spaces_after_its_commas_selects_the_same_revisions():
    from ckptgeo.sources.revisions import Revision, select_revisions

    revs = [Revision(s, f"step{s}") for s in (0, 1, 2)]
    assert select_revisions(revs, " step0 , step2 ") == select_revisions(revs, "step0,step2") == [revs[0], revs[2]]


@pytest.mark.parametrize("empty", ["", " ", ",", " , "])
def test_an_empty_selector_is_refused_not_read_as_the_default(empty, tmp_path, capsys):
    with pytest.raises(InvalidParameterError, match="is empty; give 'all'"):
        select_revisions(REVS, empty)
    from ckptgeo.cli import main
    from tests._checkpoints import make_checkpoints

    ck = make_checkpoints(tmp_path / "ck" / "tiny", steps=(0, 1))
    assert main(["scan", str(ck), "--revisions", empty, "--out", str(tmp_path / "ds")]) == 2
    err = capsys.readouterr().err
    assert "revision selector" in err and "is empty" in err, err
    assert not (tmp_path / "ds" / "revisions").exists()
