"""Loaders on the real public reference files (tests/_checkpoints.py: PUBLIC_DATA), a BIG-bench Hard file, and
`datasets` folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptgeo.errors import SourceNotFoundError, SuiteFormatError
from ckptgeo.suites.items import load_blimp, load_bigbench, load_hf, load_suite
from tests._checkpoints import BIGBENCH as BB, BLIMP, PUBLIC_FILES

BBH = Path(__file__).parent / "data" / "bbh_logical_deduction_three_objects.json"


@pytest.mark.public_data("bigbench")
@pytest.mark.parametrize("name,n_items,n_choices", [("three_objects", 300, 3), ("five_objects", 500, 5)])
def test_bigbench_logical_deduction(name, n_items, n_choices):
    path = BB / f"{name}.json"
    raw = json.loads(path.read_text())
    suite = load_suite(path)
    assert suite.name == name and len(suite) == n_items
    for item, ex in zip(suite.items, raw["examples"]):
        assert len(item.choices) == n_choices
        assert item.prompt == raw["task_prefix"] + ex["input"]
        correct = [c for c, v in ex["target_scores"].items() if v == 1]
        assert item.choices[item.answer] == " " + correct[0]
        assert all(c.startswith(" ") for c in item.choices)


@pytest.mark.public_data("bigbench")
def test_bigbench_spot_checks():
    three = load_bigbench(BB / "three_objects.json")
    assert three.items[0].choices[three.items[0].answer] == " The black book is the leftmost."
    assert three.items[-1].choices[three.items[-1].answer] == " The cantaloupes are the cheapest."
    five = load_bigbench(BB / "five_objects.json")
    assert five.items[3].answer == 2
    assert five.items[3].choices[2] == " The purple book is the second from the right."
    assert five.items[-1].choices[five.items[-1].answer] == " The mangoes are the cheapest."


def test_bigbench_hard_file():
    suite = load_suite(BBH)
    raw = json.loads(BBH.read_text())["examples"]
    assert len(suite) == 4
    assert [it.answer for it in suite.items] == [1, 0, 1, 2]
    for item, ex in zip(suite.items, raw):
        assert item.choices == (" (A)", " (B)", " (C)")
        assert item.choices[item.answer] == " " + ex["target"]
        assert item.prompt == ex["input"]


def test_bigbench_hard_bad_target(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"examples": [{"input": "Q\nOptions:\n(A) x\n(B) y", "target": "(D)"}]}))
    with pytest.raises(SuiteFormatError, match="not one of the options"):
        load_bigbench(bad)


@pytest.mark.public_data("blimp")
@pytest.mark.parametrize("path", [BLIMP / f for f in PUBLIC_FILES["blimp"][1]], ids=lambda p: p.stem)
def test_blimp_files(path):
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    suite = load_suite(path)  # picked by shape, not by name
    assert suite.header["format"] == "blimp"
    assert suite.name == path.stem and len(suite) == 1000
    assert suite.kinds == {"minimal_pair"}
    for i in (0, 500, 999):
        assert suite.items[i].good == rows[i]["sentence_good"]
        assert suite.items[i].bad == rows[i]["sentence_bad"]
        assert suite.items[i].id == f"{rows[i]['UID']}-{rows[i]['pairID']}"
    assert len({it.id for it in suite.items}) == 1000


@pytest.mark.public_data("blimp")
def test_blimp_spot_check():
    suite = load_blimp(BLIMP / "anaphor_gender_agreement.jsonl")
    first = suite.items[0]
    assert (first.good, first.bad) == ("Katherine can't help herself.", "Katherine can't help himself.")
    assert first.extra["linguistics_term"] == "anaphor_agreement"
    irregular = load_blimp(BLIMP / "irregular_past_participle_verbs.jsonl").items[500]
    assert (irregular.good, irregular.bad) == ("Those students knew Rachel.", "Those students known Rachel.")


def test_blimp_row_missing_sentence(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"sentence_good": "A b.", "sentence_bad": "B a.", "UID": "x", "pairID": "0"}\n'
                    '{"sentence_good": "A b.", "sentence_bad": "", "UID": "x", "pairID": "1"}\n')
    with pytest.raises(SuiteFormatError, match=":2:.*sentence_bad"):
        load_suite(path)


def test_schema_jsonl_still_loads_as_jsonl(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"suite_header": {"name": "s"}}\n{"id": 1, "good": "a", "bad": "b"}\n')
    suite = load_suite(path)
    assert suite.name == "s" and suite.items[0].kind == "minimal_pair" and suite.header == {"name": "s"}


_ROWS = [{"sentence_good": f"The cat sleeps {i}.", "sentence_bad": f"The cat sleep {i}.", "UID": "toy_agreement",
          "pairID": str(i), "field": "morphology"} for i in range(6)]


@pytest.fixture
def datasets_cache(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    return tmp_path / "hf_cache"


def test_hf_loader_save_to_disk_folder(tmp_path, datasets_cache):
    import datasets

    folder = tmp_path / "toy_agreement"
    datasets.Dataset.from_list(_ROWS).save_to_disk(str(folder))
    suite = load_suite(f"hf:{folder}")
    assert suite.name == "toy_agreement" and len(suite) == 6 and suite.kinds == {"minimal_pair"}
    assert suite.items[3].good == "The cat sleeps 3." and suite.items[3].id == "toy_agreement-3"
    dd = tmp_path / "dd"
    datasets.DatasetDict({"test": datasets.Dataset.from_list(_ROWS[:2])}).save_to_disk(str(dd))
    assert len(load_hf(str(dd))) == 2 and load_hf(str(dd)).header["split"] == "test"


def test_hf_loader_jsonl_folder_in_item_schema(tmp_path, datasets_cache):
    folder = tmp_path / "mc"
    folder.mkdir()
    rows = [{"prompt": f"Q{i}\nAnswer:", "choices": [" yes", " no"], "answer": i % 2, "label": "yes" if i % 2 == 0
             else "no"} for i in range(4)]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    suite = load_hf(f"{folder}", name="mc", cache_dir=str(datasets_cache))
    assert [it.answer for it in suite.items] == [0, 1, 0, 1]
    assert suite.items[1].id == "mc-1" and suite.items[1].label == "no"


def test_hf_loader_errors(tmp_path, datasets_cache):
    with pytest.raises(SourceNotFoundError):
        load_hf(str(tmp_path / "missing_folder"))
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "train.jsonl").write_text('{"text": "hello"}\n')
    with pytest.raises(SuiteFormatError, match="columns"):
        load_hf(str(folder), cache_dir=str(datasets_cache))


def test_hf_spec_parsing():
    from ckptgeo.suites.items import _parse_hf_spec

    assert _parse_hf_spec("blimp/anaphor_gender_agreement") == ("nyu-mll/blimp", "anaphor_gender_agreement", None)
    assert _parse_hf_spec("org/name:cfg@test") == ("org/name", "cfg", "test")
    assert _parse_hf_spec("org/name") == ("org/name", None, None)
