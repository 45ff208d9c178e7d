"""The algorithmic task generators, their vocabulary and tokenizer, and the model sizes."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from ckptgeo.errors import InvalidParameterError
from ckptgeo.training import (LEVELS, SIZES, TASKS, VOCAB, build_config, build_tokenizer, chance, count_parameters,
                           generate, get_level, get_size, heldout_items, sample, space_size, suite_header,
                           suite_name)
from ckptgeo.suites.vocab import SEPARATOR

ALL = [(t, lvl) for t in TASKS for lvl in (1, 2, 3)]
MARKERS = {"copy": "copy", "reverse": "reverse", "compare": "compare", "parity": "parity", "addition": "add",
           "modular": "mod", "sort": "sort", "multiplication": "mul"}


def _split(tokens, sep):
    i = tokens.index(sep)
    return tokens[:i], tokens[i + 1:]


def _expected(task: str, inputs: list[str]) -> list[str]:
    """The answer computed independently with Python arithmetic from the prompt's input tokens."""
    if task == "copy":
        return list(inputs)
    if task == "reverse":
        return inputs[::-1]
    if task == "sort":
        return [str(d) for d in sorted(int(x) for x in inputs)]
    if task == "compare":
        a, b = _split(inputs, ",")
        assert len(a) == len(b) and a != b
        return ["<" if int("".join(a)) < int("".join(b)) else ">"]
    if task == "parity":
        return [str(sum(int(x) for x in inputs) % 2)]
    if task == "addition":  # digits least significant first
        a, b = _split(inputs, "+")
        return list(str(int("".join(a[::-1])) + int("".join(b[::-1]))).zfill(len(a) + 1))[::-1]
    if task == "modular":
        return [str(sum(int(x) for x in inputs if x != "+") % 97)]
    a, b = _split(inputs, "*")
    return list(str(int("".join(a[::-1])) * int("".join(b[::-1]))).zfill(len(a) + len(b)))[::-1]


@pytest.mark.parametrize("task,level", ALL)
def test_answers_match_python_arithmetic(task, level):
    items = generate(task, level, 400, seed=7)
    for it in items:
        toks = it.prompt.split(" ")
        assert toks[0] == MARKERS[task] and toks[-1] == SEPARATOR, it.prompt
        assert it.target.startswith(" ") and it.kind == "generation"
        answer = it.target.split()
        assert answer == _expected(task, toks[1:-1]), (it.prompt, it.target)
        if task == "modular":
            assert it.label == f"{int(answer[0]) // 10}x"
        elif task == "sort":
            assert it.label == (answer[0] if answer[0] in "01" else "2+")
        else:
            assert it.label == answer[0]
        assert it.suite == f"{task}-L{level}"


def _input_shape(task, inputs):
    """The quantity a level fixes: length, operand widths, or operand count."""
    if task in ("copy", "reverse", "sort", "parity"):
        return len(inputs)
    if task == "compare":
        return len(_split(inputs, ",")[0])
    if task == "addition":
        a, b = _split(inputs, "+")
        return (len(a), len(b))
    if task == "modular":
        return sum(1 for x in inputs if x != "+")
    a, b = _split(inputs, "*")
    return (len(a), len(b))


@pytest.mark.parametrize("task,level", ALL)
def test_levels_are_as_documented(task, level):
    spec = get_level(task, level)
    shapes = Counter(_input_shape(task, it.prompt.split()[1:-1]) for it in generate(task, level, 2000, seed=1))
    if task == "addition":
        assert set(shapes) == {(spec.min_length, spec.min_length)}
    elif task == "multiplication":
        assert set(shapes) == {(spec.min_length, spec.width_b)}
    else:
        # every length of the documented range occurs, and nothing else
        assert set(shapes) == set(range(spec.min_length, spec.max_length + 1)), shapes
    if task == "modular":
        values = [int(x) for it in generate(task, level, 500) for x in it.prompt.split()[1:-1] if x != "+"]
        assert min(values) == 0 and max(values) == 96


@pytest.mark.parametrize("task", TASKS)
def test_levels_grow_harder(task):
    sizes = [space_size(task, lvl) for lvl in (1, 2, 3)]
    assert sizes[0] < sizes[1] < sizes[2], sizes
    assert [get_level(task, lvl).level for lvl in (1, 2, 3)] == [1, 2, 3]
    assert chance(task, 3) <= chance(task, 1)


def test_compare_differs_at_every_position():
    n = get_level("compare", 3).min_length
    first_diff = Counter()
    for it in generate("compare", 3, 3000, seed=2):
        a, b = _split(it.prompt.split()[1:-1], ",")
        first_diff[next(i for i in range(n) if a[i] != b[i])] += 1
    assert set(first_diff) == set(range(n))
    assert min(first_diff.values()) > 3000 / n / 2, first_diff


@pytest.mark.parametrize("task", ["compare", "parity"])
def test_binary_tasks_are_balanced(task):
    counts = Counter(it.label for it in generate(task, 2, 4000, seed=3))
    assert abs(counts.most_common(1)[0][1] / 4000 - 0.5) < 0.05, counts


def test_same_seed_same_items_other_seed_other_items():
    for task, level in ALL:
        a, b = generate(task, level, 50, seed=11), generate(task, level, 50, seed=11)
        assert a == b
        assert generate(task, level, 50, seed=12) != a
    assert sample("sort", 2, random.Random(5)) == sample("sort", 2, random.Random(5))


def test_heldout_items_distinct_and_excludable():
    held = heldout_items("parity", 1, 200, seed=0)
    prompts = {it.prompt for it in held}
    assert len(prompts) == 200
    assert held == heldout_items("parity", 1, 200, seed=0)
    assert held != heldout_items("parity", 1, 200, seed=1)
    train = generate("parity", 1, 3000, seed="train", exclude=frozenset(prompts))
    assert not prompts & {it.prompt for it in train}
    with pytest.raises(InvalidParameterError, match="at most half"):
        heldout_items("parity", 1, 600)
    with pytest.raises(InvalidParameterError, match="cannot draw"):
        generate("parity", 1, 1001, unique=True)


def test_chance_levels():
    assert chance("compare", 1) == chance("parity", 3) == 0.5
    assert chance("modular", 2) == pytest.approx(1 / 97)
    assert chance("copy", 1) == pytest.approx(1e-5)
    assert chance("multiplication", 1) == pytest.approx(1 / len({a * b for a in range(1000) for b in range(10)}))
    header = suite_header("parity", 2, n_items=200)
    assert header == {"name": "parity-L2", "task": "parity", "level": 2, "difficulty": 2, "chance": 0.5,
                      "description": "parity of the sum of 6 digits", "kind": "generation", "n_items": 200}


def test_unknown_task_and_level():
    with pytest.raises(InvalidParameterError, match="Did you mean: modular"):
        get_level("modulr", 1)
    with pytest.raises(InvalidParameterError, match="must be 1, 2 or 3"):
        suite_name("copy", 4)
    with pytest.raises(InvalidParameterError, match="'n' parameter"):
        generate("copy", 1, -1)
    assert set(LEVELS) == set(TASKS) and len(TASKS) == 8


# ---------------------------------------------------------------------------------------------- tokenizer

@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def test_tokenizer_one_token_per_word_and_concatenation(tokenizer):
    unk = tokenizer.unk_token_id
    for task, level in ALL:
        for it in generate(task, level, 30, seed=4):
            p = tokenizer(it.prompt, add_special_tokens=False)["input_ids"]
            t = tokenizer(it.target, add_special_tokens=False)["input_ids"]
            full = tokenizer(it.prompt + it.target)["input_ids"]  # default call, as a scorer would make it
            assert full == p + t, (it.prompt, it.target)
            assert len(p) == len(it.prompt.split()) and len(t) == len(it.target.split())
            assert unk not in full
            assert tokenizer.decode(full) == it.prompt + it.target
            if task not in ("modular", "sort"):  # their labels are coarse classes, not tokens (tasks.py)
                assert tokenizer.convert_ids_to_tokens(t[:1]) == [it.label]


def test_tokenizer_saves_and_reloads(tokenizer, tmp_path):
    from transformers import AutoTokenizer

    tokenizer.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    text = "mod 96 + 5 = 4"
    assert again(text)["input_ids"] == tokenizer(text)["input_ids"] == [9, 114, 13, 23, 12, 22]
    assert len(again) == len(VOCAB) == 146
    assert (again.pad_token, again.eos_token, again.unk_token) == ("<pad>", "<eos>", "<unk>")
    batch = again(["copy 1 =", "copy 1 2 3 ="], padding=True)["input_ids"]
    assert batch[0][-1] == again.pad_token_id  # right padding
    assert again.convert_tokens_to_ids([str(i) for i in range(97)]) == list(range(18, 115))


# ------------------------------------------------------------------------------------------------- sizes

EXPECTED_PARAMETERS = {"tiny": 434_176, "mini": 3_234_304, "small": 10_759_680, "medium": 25_369_600,
                       "large": 85_280_256, "xl": 151_455_744}


def test_six_sizes_parameter_counts():
    import torch
    from transformers import GPTNeoXForCausalLM

    assert list(SIZES) == list(EXPECTED_PARAMETERS)
    for name, expected in EXPECTED_PARAMETERS.items():
        with torch.device("meta"):
            model = GPTNeoXForCausalLM(build_config(name))
        n = count_parameters(model)
        print(f"{name:7s} {SIZES[name].n_layers:2d} x {SIZES[name].d_model:4d}: {n:,} parameters "
              f"({SIZES[name].n_parameters(embeddings=False):,} without embeddings)")
        assert n == expected == SIZES[name].n_parameters(), (name, n, expected)
    assert 400_000 < EXPECTED_PARAMETERS["tiny"] < 440_000
    assert 150e6 < EXPECTED_PARAMETERS["xl"] < 152e6


def test_config_is_pythia_style():
    cfg = build_config("tiny")
    assert cfg.model_type == "gpt_neox" and cfg.use_parallel_residual and not cfg.tie_word_embeddings
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size) == (2, 128, 512)
    assert cfg.vocab_size == len(VOCAB) and cfg.pad_token_id == 0
    assert cfg.max_position_embeddings >= max(
        len(it.prompt.split()) + len(it.target.split()) for t in TASKS for it in generate(t, 3, 50))
    with pytest.raises(InvalidParameterError, match="Available: tiny"):
        get_size("huge")


@pytest.mark.parametrize("task,level", ALL)
def test_every_task_level_can_be_probed(task, level):
    """Every class of the probe's label has enough held-out items for stratified 5-fold cross-validation
    (a class of one item makes every probe of the suite undefined)."""
    counts = Counter(it.label for it in heldout_items(task, level, 200))
    assert len(counts) >= 2 and min(counts.values()) >= 4, counts
