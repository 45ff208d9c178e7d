"""Generators of the seven bundled diagnostic suites, from the project's own templates and word lists.

Every generator takes a :class:`random.Random` and returns item dicts in the item schema
(docs/definitions.md#items); the same seed gives the same file (``scripts/make_diagnostics.py`` writes them
to ``diagnostics/``).

========== ============= ================================================== ==========================
suite      kind          what an item asks                                   ``label`` (probe target)
========== ============= ================================================== ==========================
syntax     minimal pair  agreement, reflexives, participles, word order      (good vs bad)
semantics  2-way choice  "Is a robin a kind of bird?", antonyms, synonyms     ``yes`` / ``no``
logic      2-way choice  is a categorical syllogism (nonce terms) valid?      ``valid`` / ``invalid``
arithmetic 4-way choice  "What is 17 + 25?"                                   parity of the result
icl        2-way choice  infer an A/B labelling rule from 6 examples          ``A`` / ``B``
factual    2-way choice  is a statement about capitals, elements ... true?   ``true`` / ``false``
general    2-way choice  "Which is heavier, a brick or a feather?"            ``first`` / ``second``
========== ============= ================================================== ==========================

Choices are continuations with a leading space (as BIG-bench and lm-evaluation-harness score them).
:func:`check_items` holds a suite to the rules every bundled suite obeys.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import dataclass

from ckptgeo.errors import SuiteFormatError
from ckptgeo.suites.items import item_from_dict

__all__ = ["GENERATOR_VERSION", "SUITES", "SuiteSpec", "generate_suite", "check_items", "SuiteCheck"]

GENERATOR_VERSION = "1"

# ---------------------------------------------------------------------------------------------- syntax
_SG_NOUNS = ("dog", "teacher", "girl", "boy", "doctor", "farmer", "student", "cat", "singer", "pilot",
             "baker", "child", "nurse", "writer", "player")
_PL = {"child": "children"}
_VERBS = (("runs", "run"), ("sleeps", "sleep"), ("waits", "wait"), ("laughs", "laugh"), ("sings", "sing"),
          ("works", "work"), ("eats", "eat"), ("reads", "read"))
_PLACES = ("in the park", "at home", "near the river", "after lunch", "every morning", "in the garden",
           "at school", "on Sundays")
_ATTRACTORS = (("key", "to the cabinets"), ("road", "to the villages"), ("book", "about the kings"),
               ("picture", "of the mountains"), ("door", "to the rooms"), ("bill", "for the meals"),
               ("box", "of old toys"), ("list", "of names"), ("label", "on the bottles"), ("roof", "of the houses"))
_STATES = ("very old", "broken", "missing", "dirty", "too small", "new", "quite long", "famous")
_DET_NOUNS = ("chair", "song", "window", "apple", "letter", "river", "shirt", "lamp", "cup", "garden",
              "horse", "coat")
_DET_VERBS = ("bought", "saw", "liked", "painted", "found", "cleaned", "noticed", "wanted")
_NAMES_F = ("Alice", "Maria", "Sofia", "Emma", "Laura", "Nina", "Clara", "Rita")
_NAMES_M = ("David", "Peter", "James", "Mark", "Tom", "Leo", "Paul", "Hugo")
_REFLEXIVE_VERBS = ("hurt", "saw", "praised", "blamed", "described", "fed", "taught", "helped")
_PARTICIPLES = (("eaten", "ate"), ("written", "wrote"), ("taken", "took"), ("seen", "saw"), ("given", "gave"),
                ("broken", "broke"), ("driven", "drove"), ("chosen", "chose"), ("forgotten", "forgot"),
                ("spoken", "spoke"))
_PARTICIPLE_OBJECTS = {"eaten": "the cake", "written": "a letter", "taken": "the bus", "seen": "the film",
                       "given": "a gift", "broken": "the vase", "driven": "the truck", "chosen": "a colour",
                       "forgotten": "the keys", "spoken": "the truth"}
_SUBJECTS = ("The girl", "My brother", "The old man", "Her friend", "The student", "Our neighbour")
_ORDER_SUBJECTS = ("The cat", "The baby", "My sister", "The old dog", "The teacher", "The farmer", "Our guest")
_ORDER_VERBS = ("sleeping", "waiting", "reading", "sitting", "resting", "eating")
_ORDER_PLACES = (("on", "sofa"), ("in", "kitchen"), ("by", "door"), ("near", "window"), ("in", "garden"))


def _plural(noun: str) -> str:
    return _PL.get(noun, noun + "s")


def _syntax(rng: random.Random) -> list[dict]:
    pairs: list[tuple[str, str, str]] = []
    for noun, (v_sg, v_pl), place in itertools.product(_SG_NOUNS, _VERBS, _PLACES):
        if rng.random() < 0.5:
            pairs.append(("subject_verb_agreement", f"The {noun} {v_sg} {place}.", f"The {noun} {v_pl} {place}."))
        else:
            pl = _plural(noun)
            pairs.append(("subject_verb_agreement", f"The {pl} {v_pl} {place}.", f"The {pl} {v_sg} {place}."))
    for (head, attractor), state in itertools.product(_ATTRACTORS, _STATES):
        pairs.append(("agreement_attractor", f"The {head} {attractor} is {state}.",
                      f"The {head} {attractor} are {state}."))
    for noun, verb, subj in itertools.product(_DET_NOUNS, _DET_VERBS, ("She", "He", "We", "They")):
        if rng.random() < 0.5:
            pairs.append(("determiner_noun_agreement", f"{subj} {verb} this {noun}.", f"{subj} {verb} these {noun}."))
        else:
            pairs.append(("determiner_noun_agreement", f"{subj} {verb} these {_plural(noun)}.",
                          f"{subj} {verb} this {_plural(noun)}."))
    for verb in _REFLEXIVE_VERBS:
        for name in _NAMES_F:
            pairs.append(("reflexive_agreement", f"{name} {verb} herself.", f"{name} {verb} himself."))
        for name in _NAMES_M:
            pairs.append(("reflexive_agreement", f"{name} {verb} himself.", f"{name} {verb} herself."))
    for (part, past), subj in itertools.product(_PARTICIPLES, _SUBJECTS):
        obj = _PARTICIPLE_OBJECTS[part]
        pairs.append(("irregular_participle", f"{subj} has {part} {obj}.", f"{subj} has {past} {obj}."))
    for subj, verb, (prep, noun) in itertools.product(_ORDER_SUBJECTS, _ORDER_VERBS, _ORDER_PLACES):
        pairs.append(("word_order", f"{subj} is {verb} {prep} the {noun}.", f"{subj} is {verb} {prep} {noun} the."))
    by_phenomenon: dict[str, list] = {}
    for p in pairs:
        by_phenomenon.setdefault(p[0], []).append(p)
    out = []
    for phenomenon, group in by_phenomenon.items():  # 50 per phenomenon: 300 pairs
        for _, good, bad in rng.sample(group, min(50, len(group))):
            out.append({"good": good, "bad": bad, "phenomenon": phenomenon})
    return out


# ------------------------------------------------------------------------------------------- semantics
_CATEGORIES = {
    "bird": ("robin", "sparrow", "eagle", "owl", "pigeon", "parrot", "crow", "swan"),
    "fish": ("salmon", "trout", "cod", "tuna", "carp", "herring", "shark", "sardine"),
    "fruit": ("apple", "banana", "cherry", "pear", "plum", "peach", "mango", "grape"),
    "vegetable": ("carrot", "onion", "potato", "cabbage", "leek", "turnip", "radish", "lettuce"),
    "tool": ("hammer", "saw", "wrench", "screwdriver", "drill", "chisel", "shovel", "rake"),
    "vehicle": ("car", "bus", "truck", "bicycle", "tractor", "van", "motorcycle", "scooter"),
    "musical instrument": ("violin", "piano", "flute", "trumpet", "drum", "guitar", "cello", "harp"),
    "piece of furniture": ("chair", "table", "sofa", "bed", "wardrobe", "desk", "bench", "stool"),
}
_ANTONYMS = (("hot", "cold"), ("tall", "short"), ("happy", "sad"), ("fast", "slow"), ("heavy", "light"),
             ("early", "late"), ("rich", "poor"), ("wet", "dry"), ("young", "old"), ("open", "closed"),
             ("loud", "quiet"), ("full", "empty"), ("strong", "weak"), ("hard", "soft"), ("clean", "dirty"),
             ("thick", "thin"), ("wide", "narrow"), ("deep", "shallow"), ("sharp", "blunt"), ("cheap", "expensive"))
_SYNONYMS = (("big", "large"), ("small", "little"), ("quick", "rapid"), ("begin", "start"), ("end", "finish"),
             ("angry", "mad"), ("smart", "clever"), ("buy", "purchase"), ("help", "assist"), ("gift", "present"),
             ("shut", "close"), ("silent", "quiet"), ("sick", "ill"), ("tired", "sleepy"), ("rock", "stone"),
             ("car", "automobile"), ("afraid", "scared"), ("choose", "select"), ("fix", "repair"),
             ("correct", "right"))
_CONFUSABLE = ({"end", "finish", "shut", "close"}, {"silent", "quiet", "shut"}, {"tired", "sick", "ill", "sleepy"})


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def _yes_no(question: str, yes: bool) -> dict:
    return {"prompt": f"Question: {question}\nAnswer:", "choices": [" yes", " no"], "answer": 0 if yes else 1,
            "label": "yes" if yes else "no"}


def _semantics(rng: random.Random) -> list[dict]:
    out = []
    cats = list(_CATEGORIES)
    for cat, members in _CATEGORIES.items():
        for m in members:
            other = rng.choice([c for c in cats if c != cat])
            out.append({**_yes_no(f"Is {_a(m)} a kind of {cat}?", True), "relation": "hypernym"})
            out.append({**_yes_no(f"Is {_a(m)} a kind of {other}?", False), "relation": "hypernym"})
    all_adj = [w for pair in _ANTONYMS for w in pair]
    for a, b in _ANTONYMS:
        if rng.random() < 0.5:
            a, b = b, a
        wrong = rng.choice([w for w in all_adj if w not in (a, b)])
        out.append({**_yes_no(f"Is '{a}' the opposite of '{b}'?", True), "relation": "antonym"})
        out.append({**_yes_no(f"Is '{a}' the opposite of '{wrong}'?", False), "relation": "antonym"})
    syn_words = [w for pair in _SYNONYMS for w in pair]
    for a, b in _SYNONYMS:
        # a wrong partner that is neither a synonym nor listed as an antonym of `a`
        banned = {a, b} | next((g for g in _CONFUSABLE if a in g), set())
        wrong = rng.choice([w for w in syn_words if w not in banned])
        out.append({**_yes_no(f"Does '{a}' mean the same as '{b}'?", True), "relation": "synonym"})
        out.append({**_yes_no(f"Does '{a}' mean the same as '{wrong}'?", False), "relation": "synonym"})
    return out


# ----------------------------------------------------------------------------------------------- logic
_NONCE = ("blickets", "daxes", "wugs", "feps", "zorbs", "glorps", "tufas", "mibs", "kests", "vorns", "plinks",
          "snerds", "larps", "quibs", "drents", "yoms", "frels", "toves", "nabes", "grints")
# (name, premise 1, premise 2, conclusion, valid); A = subject, B = middle, C = predicate term
_FORMS = (
    ("barbara", "All {A} are {B}.", "All {B} are {C}.", "All {A} are {C}.", True),
    ("celarent", "No {B} are {C}.", "All {A} are {B}.", "No {A} are {C}.", True),
    ("darii", "All {B} are {C}.", "Some {A} are {B}.", "Some {A} are {C}.", True),
    ("ferio", "No {B} are {C}.", "Some {A} are {B}.", "Some {A} are not {C}.", True),
    ("cesare", "No {C} are {B}.", "All {A} are {B}.", "No {A} are {C}.", True),
    ("camestres", "All {C} are {B}.", "No {A} are {B}.", "No {A} are {C}.", True),
    ("undistributed_middle", "All {A} are {B}.", "All {C} are {B}.", "All {A} are {C}.", False),
    ("illicit_major", "All {B} are {C}.", "No {A} are {B}.", "No {A} are {C}.", False),
    ("converse", "All {A} are {B}.", "All {B} are {C}.", "All {C} are {A}.", False),
    ("some_some", "Some {A} are {B}.", "Some {B} are {C}.", "Some {A} are {C}.", False),
    ("illicit_minor", "All {B} are {C}.", "All {B} are {A}.", "All {A} are {C}.", False),
    ("exclusive_premises", "No {A} are {B}.", "No {B} are {C}.", "No {A} are {C}.", False),
)


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


def _logic(rng: random.Random) -> list[dict]:
    out, seen = [], set()
    for name, p1, p2, concl, valid in _FORMS:
        for _ in range(20):
            a, b, c = rng.sample(_NONCE, 3)
            while (name, a, b, c) in seen or (p1.format(A=a, B=b, C=c), p2.format(A=a, B=b, C=c)) in seen:
                a, b, c = rng.sample(_NONCE, 3)
            seen.update({(name, a, b, c), (p1.format(A=a, B=b, C=c), p2.format(A=a, B=b, C=c))})
            premises = [p1.format(A=a, B=b, C=c), p2.format(A=a, B=b, C=c)]
            prompt = (f"Premise 1: {premises[0]}\nPremise 2: {premises[1]}\n"
                      f"Conclusion: {concl.format(A=a, B=b, C=c)}\n"
                      f"Question: Is this argument valid or invalid?\nAnswer:")
            out.append({"prompt": prompt, "choices": [" valid", " invalid"], "answer": 0 if valid else 1,
                        "label": "valid" if valid else "invalid", "form": name})
    return out


# ------------------------------------------------------------------------------------------ arithmetic
def _arithmetic(rng: random.Random) -> list[dict]:
    out, seen = [], set()
    ops = ("+", "-", "*")
    for i in range(240):
        op = ops[i % 3]
        want_even = (i // 3) % 2 == 0
        while True:
            if op == "*":
                x, y = rng.randint(2, 25), rng.randint(2, 12)
                result = x * y
            elif op == "+":
                x, y = rng.randint(2, 60), rng.randint(2, 60)
                result = x + y
            else:
                x = rng.randint(10, 99)
                y = rng.randint(1, x - 1)
                result = x - y
            if (result % 2 == 0) == want_even and (x, op, y) not in seen:
                seen.add((x, op, y))
                break
        distractors = {result + d for d in (-10, -2, -1, 1, 2, 10) if result + d >= 0} - {result}
        choices = [result] + rng.sample(sorted(distractors), 3)
        rng.shuffle(choices)
        word = {"+": "plus", "-": "minus", "*": "times"}[op]
        out.append({"prompt": f"Question: What is {x} {word} {y}?\nAnswer:", "choices": [f" {c}" for c in choices],
                    "answer": choices.index(result), "label": "even" if result % 2 == 0 else "odd",
                    "operation": word})
    return out


# ------------------------------------------------------------------------------------------------- icl
def _icl(rng: random.Random) -> list[dict]:
    out = []
    cats = list(_CATEGORIES)
    for i in range(240):
        query_label = "AB"[i % 2]
        if i % 4 < 3:  # a word-category rule: members of one category -> A, of another -> B
            ca, cb = rng.sample(cats, 2)
            pools = {"A": list(_CATEGORIES[ca]), "B": list(_CATEGORIES[cb])}
            rule = f"{ca}/{cb}"
        else:  # a number rule: below 50 -> A, above -> B (or the reverse)
            low, high = list(range(1, 50)), list(range(51, 100))
            pools = {"A": low, "B": high} if rng.random() < 0.5 else {"A": high, "B": low}
            rule = "number-size"
        shots = []
        for lab in ("A", "B"):
            shots += [(x, lab) for x in rng.sample(pools[lab], 3)]
        rng.shuffle(shots)
        used = {x for x, _ in shots}
        query = rng.choice([x for x in pools[query_label] if x not in used])
        lines = "\n".join(f"{x} -> {lab}" for x, lab in shots)
        out.append({"prompt": f"{lines}\n{query} ->", "choices": [" A", " B"], "answer": "AB".index(query_label),
                    "label": query_label, "rule": rule})
    return out


# --------------------------------------------------------------------------------------------- factual
_CAPITALS = (("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
             ("Portugal", "Lisbon"), ("Austria", "Vienna"), ("Greece", "Athens"), ("Poland", "Warsaw"),
             ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Denmark", "Copenhagen"),
             ("Ireland", "Dublin"), ("Hungary", "Budapest"), ("Japan", "Tokyo"), ("China", "Beijing"),
             ("India", "New Delhi"), ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"), ("Egypt", "Cairo"),
             ("Kenya", "Nairobi"), ("Nigeria", "Abuja"), ("Ghana", "Accra"), ("Ethiopia", "Addis Ababa"),
             ("Canada", "Ottawa"), ("Mexico", "Mexico City"), ("Brazil", "Brasilia"), ("Argentina", "Buenos Aires"),
             ("Peru", "Lima"), ("Chile", "Santiago"), ("Australia", "Canberra"), ("Russia", "Moscow"),
             ("Turkey", "Ankara"), ("Iran", "Tehran"), ("Cuba", "Havana"), ("Colombia", "Bogota"),
             ("Philippines", "Manila"), ("South Korea", "Seoul"), ("Belgium", "Brussels"), ("Czechia", "Prague"))
_CONTINENTS = (("France", "Europe"), ("Germany", "Europe"), ("Italy", "Europe"), ("Poland", "Europe"),
               ("Norway", "Europe"), ("Ireland", "Europe"), ("Japan", "Asia"), ("China", "Asia"),
               ("India", "Asia"), ("Thailand", "Asia"), ("Vietnam", "Asia"), ("Indonesia", "Asia"),
               ("Kenya", "Africa"), ("Nigeria", "Africa"), ("Ghana", "Africa"), ("Ethiopia", "Africa"),
               ("Morocco", "Africa"), ("Senegal", "Africa"), ("Brazil", "South America"),
               ("Argentina", "South America"), ("Peru", "South America"), ("Chile", "South America"),
               ("Colombia", "South America"), ("Canada", "North America"), ("Mexico", "North America"),
               ("Australia", "Oceania"), ("New Zealand", "Oceania"), ("Fiji", "Oceania"))
_SYMBOLS = (("gold", "Au"), ("silver", "Ag"), ("iron", "Fe"), ("copper", "Cu"), ("sodium", "Na"),
            ("potassium", "K"), ("lead", "Pb"), ("tin", "Sn"), ("mercury", "Hg"), ("oxygen", "O"),
            ("hydrogen", "H"), ("carbon", "C"), ("nitrogen", "N"), ("helium", "He"), ("calcium", "Ca"),
            ("zinc", "Zn"), ("sulfur", "S"), ("chlorine", "Cl"), ("neon", "Ne"), ("uranium", "U"))
_LANGUAGES = (("Brazil", "Portuguese"), ("Portugal", "Portuguese"), ("Mexico", "Spanish"), ("Spain", "Spanish"),
              ("Argentina", "Spanish"), ("Germany", "German"), ("Austria", "German"), ("France", "French"),
              ("Japan", "Japanese"), ("China", "Chinese"), ("Greece", "Greek"), ("Poland", "Polish"),
              ("Italy", "Italian"), ("Russia", "Russian"), ("Turkey", "Turkish"), ("Hungary", "Hungarian"),
              ("Sweden", "Swedish"), ("Finland", "Finnish"), ("Thailand", "Thai"), ("Vietnam", "Vietnamese"))


def _true_false(statement: str, true: bool, relation: str) -> dict:
    return {"prompt": f"Statement: {statement}\nTrue or false?\nAnswer:", "choices": [" True", " False"],
            "answer": 0 if true else 1, "label": "true" if true else "false", "relation": relation}


def _factual(rng: random.Random) -> list[dict]:
    out = []
    tables = (
        ("capital", _CAPITALS, "{o} is the capital of {s}."),
        ("continent", _CONTINENTS, "{s} is in {o}."),
        ("chemical_symbol", _SYMBOLS, "The chemical symbol for {s} is {o}."),
        ("language", _LANGUAGES, "The main language spoken in {s} is {o}."),
    )
    for relation, table, template in tables:
        for s, o in table:
            true_objects = {o2 for s2, o2 in table if s2 == s}
            wrong = rng.choice(sorted({o2 for _, o2 in table} - true_objects))
            out.append(_true_false(template.format(s=s, o=o), True, relation))
            out.append(_true_false(template.format(s=s, o=wrong), False, relation))
    return out


# --------------------------------------------------------------------------------------------- general
# Each scale lists things in increasing order of the property; only pairs at least `gap` apart are asked.
_SCALES = (
    ("heavier", "lighter", ("a feather", "a coin", "an apple", "a brick", "a bicycle", "a horse", "a car",
                            "an elephant"), 2),
    ("bigger", "smaller", ("an ant", "a mouse", "a rabbit", "a sheep", "a horse", "an elephant", "a whale"), 2),
    ("faster", "slower", ("a snail", "a tortoise", "a walking person", "a bicycle", "a car", "a jet plane"), 2),
    ("hotter", "colder", ("ice", "cold water", "warm soup", "boiling water", "a candle flame",
                          "the surface of the sun"), 2),
    ("longer", "shorter", ("a second", "a minute", "an hour", "a day", "a week", "a month", "a year",
                           "a century"), 1),
    ("taller", "shorter", ("a blade of grass", "a cat", "a child", "a door", "a house", "a tree", "a skyscraper",
                           "a mountain"), 2),
)


def _general(rng: random.Random) -> list[dict]:
    out = []
    for more, less, things, gap in _SCALES:
        for i, j in itertools.combinations(range(len(things)), 2):
            if j - i < gap:
                continue
            # one order per pair, both adjectives: one answer is first, the other second
            first, second = (things[i], things[j]) if rng.random() < 0.5 else (things[j], things[i])
            for adjective, winner in ((more, things[j]), (less, things[i])):
                out.append({"prompt": f"Question: Which is {adjective}, {first} or {second}?\nAnswer:",
                            "choices": [f" {first}", f" {second}"], "answer": 0 if winner == first else 1,
                            "label": "first" if winner == first else "second", "scale": more})
    return out


# ---------------------------------------------------------------------------------------------- driver
@dataclass(frozen=True)
class SuiteSpec:
    """A bundled suite: its name, description, item kind and generator."""

    name: str
    description: str
    kind: str
    generator: object


SUITES: tuple[SuiteSpec, ...] = (
    SuiteSpec("syntax", "Grammatical vs ungrammatical minimal pairs: subject-verb agreement (also across a "
              "prepositional attractor), determiner-noun agreement, reflexives, irregular participles, word order.",
              "minimal_pair", _syntax),
    SuiteSpec("semantics", "Yes/no questions on category membership, antonyms and synonyms.", "multiple_choice",
              _semantics),
    SuiteSpec("logic", "Categorical syllogisms over nonce terms; is the argument valid or invalid?",
              "multiple_choice", _logic),
    SuiteSpec("arithmetic", "Two-operand addition, subtraction and multiplication; four numeric choices; "
              "label is the parity of the result.", "multiple_choice", _arithmetic),
    SuiteSpec("icl", "In-context learning: six examples label words or numbers A or B by a rule that only the "
              "context reveals; label the query.", "multiple_choice", _icl),
    SuiteSpec("factual", "True/false statements about capitals, continents, chemical symbols and languages.",
              "multiple_choice", _factual),
    SuiteSpec("general", "Common-sense comparisons (heavier, bigger, faster, hotter, longer, taller) between two "
              "well-separated things.", "multiple_choice", _general),
)


def _chance(items: list[dict]) -> float:
    vals = [1.0 / len(it["choices"]) if "choices" in it else 0.5 for it in items]
    return round(sum(vals) / len(vals), 6)


def generate_suite(name: str, *, seed: int = 0) -> tuple[dict, list[dict]]:
    """The header and item dicts of bundled suite ``name`` (or ``"logical_deduction"``).

    Ids are ``{name}-{index:04d}``; the header holds name, description, kind, chance, n_items,
    seed and generator version.

    Examples
    --------
    >>> header, items = generate_suite("logic")
    >>> header["kind"], len(items) >= 200, items[0]["choices"]
    ('multiple_choice', True, [' valid', ' invalid'])
    """
    if name == "logical_deduction":
        from ckptgeo.suites.deduction import generate_deduction_items

        raw = generate_deduction_items(80, seed=seed)
        description = ("Logical deduction: 3, 5 or 7 objects in a fixed order stated by pairwise constraints "
                       "(minimal sets, answer proven unique by brute force); which object is at position k? "
                       "label = the answer's index in the listing.")
        kind = "multiple_choice"
        items = raw
    else:
        spec = next((s for s in SUITES if s.name == name), None)
        if spec is None:
            raise KeyError(f"no generator for suite {name!r}; known: {[s.name for s in SUITES]}")
        rng = random.Random(f"{name}-{seed}")
        raw = spec.generator(rng)
        description, kind = spec.description, spec.kind
        items = [{"id": f"{name}-{i:04d}", "suite": name, **it} for i, it in enumerate(raw)]
    header = {"name": name, "description": description, "kind": kind, "chance": _chance(items),
              "n_items": len(items), "seed": seed, "generator": "ckptgeo.suites.generators",
              "generator_version": GENERATOR_VERSION}
    labels = Counter(str(it["label"]) for it in items if "label" in it)
    if labels:
        header["label_counts"] = dict(sorted(labels.items()))
    return header, items


@dataclass(frozen=True)
class SuiteCheck:
    """What :func:`check_items` found: counts, label classes, and the problems (empty when all pass)."""

    n_items: int
    label_counts: dict
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def check_items(items: list[dict], *, min_items: int = 200, min_class: int = 10,
                min_ratio: float = 0.15) -> SuiteCheck:
    """Hold a suite to the rules of the bundled suites.

    Every item parses under the schema; ids and prompts (good sentences for minimal pairs) are unique;
    choices are distinct (so exactly one is correct) and start with a space; a minimal pair's sentences
    differ; at least ``min_items`` items; where items carry labels, at least two classes, each with at
    least ``min_class`` members and at least ``min_ratio`` times the largest class.

    Returns
    -------
    SuiteCheck
        ``problems`` lists each broken rule (at most 20 item-level ones).
    """
    problems: list[str] = []
    ids, texts = Counter(), Counter()
    for i, obj in enumerate(items):
        try:
            item = item_from_dict(obj, line=i + 1)
        except SuiteFormatError as err:
            problems.append(str(err))
            continue
        ids[item.id] += 1
        if item.kind == "multiple_choice":
            texts[item.prompt] += 1
            if len(set(item.choices)) != len(item.choices):
                problems.append(f"{item.id}: repeated choices {item.choices}")
            if not all(c.startswith(" ") for c in item.choices):
                problems.append(f"{item.id}: a choice lacks its leading space")
        elif item.kind == "minimal_pair":
            texts[item.good] += 1
            if item.good == item.bad:
                problems.append(f"{item.id}: good and bad sentences are the same")
    problems = problems[:20]
    problems += [f"id {k!r} occurs {v} times" for k, v in ids.items() if v > 1][:10]
    problems += [f"prompt occurs {v} times: {k[:60]!r}" for k, v in texts.items() if v > 1][:10]
    if len(items) < min_items:
        problems.append(f"{len(items)} items; at least {min_items} required")
    labels = Counter(str(it["label"]) for it in items if it.get("label") is not None)
    if labels:
        if len(labels) < 2:
            problems.append(f"one label class only: {dict(labels)}")
        else:
            top = max(labels.values())
            for cls, n in labels.items():
                if n < min_class or n < min_ratio * top:
                    problems.append(f"label {cls!r} has {n} items (largest class {top}); too few to probe")
    return SuiteCheck(n_items=len(items), label_counts=dict(labels), problems=tuple(problems))
