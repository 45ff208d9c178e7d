"""Numbers and status tokens as a reader reads them: the one place the console, ``report.md``, ``report.html`` and
the figures take their human words from.

Tables keep their tokens (``never_acquired``) and exact integers; only what a person reads goes through here.
"""

from __future__ import annotations

import math

__all__ = ["STATUS_WORDS", "status_words", "count_text", "tokens_text", "number_text", "p_text", "short_text",
           "VERDICT_WORDS"]

#: an event status (the ``status`` column of the events table) in words
STATUS_WORDS = {
    "precursor": "precursor: the geometry moved first",
    "unresolved": "unresolved: gap within one checkpoint, not a precursor",
    "synchronous": "synchronous: recovery and acquisition at one checkpoint",
    "lagging": "lagging: the recovery came after acquisition",
    "no_onset": "no recovery onset",
    "acquired_at_start": "acquired at the first checkpoint",
    "censored": "censored: above threshold only in the last checkpoints",
    "never_acquired": "never acquired",
    "no_data": "no data",
}

#: a claim verdict, as it is (the tokens are already words); listed so the page can colour them
VERDICT_WORDS = ("reproduced", "not reproduced", "inconclusive", "descriptive", "not measured")


def status_words(status, *, short: bool = False) -> str:
    """``"never_acquired"`` -> ``"never acquired"``; ``short``: only the words before the colon.

    >>> status_words("never_acquired")
    'never acquired'
    >>> status_words("unresolved", short=True)
    'unresolved'
    >>> status_words("my_status")
    'my status'
    """
    if status is None or (isinstance(status, float) and math.isnan(status)):
        return "–"
    text = STATUS_WORDS.get(str(status), str(status).replace("_", " "))
    return text.split(":", 1)[0] if short else text


def count_text(x: float, *, digits: int = 2) -> str:
    """A large count in short form: ``1.2B``, ``2.1M``, ``500K``, ``999`` (``digits`` significant digits, more
    where the integer part has more, trailing zeros dropped); ``–`` for a missing value.

    >>> count_text(1_200_000_000), count_text(2_097_152), count_text(500_000), count_text(999), count_text(0)
    ('1.2B', '2.1M', '500K', '999', '0')
    >>> count_text(-3_000_000), count_text(float("nan"))
    ('-3M', '–')
    """
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    x = float(x)
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= scale:
            v = x / scale
            decimals = max(0, digits - len(str(int(abs(v)))))
            text = f"{v:.{decimals}f}"
            text = text.rstrip("0").rstrip(".") if "." in text else text
            return text + unit
    return f"{x:.0f}" if x == int(x) else f"{x:.3g}"


def tokens_text(tokens: float) -> str:
    """Training tokens in short form (:func:`count_text`): ``1.2B`` tokens, never ``1,200,000,000``."""
    return count_text(tokens)


def number_text(x, *, pct: bool = False) -> str:
    """A measured value for a table cell: ``0.0312``, ``41%`` (``pct``), ``–`` where missing."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    try:
        x = float(x)
    except (TypeError, ValueError):
        return str(x)
    return f"{x:.0%}" if pct else f"{x:.3g}"


def p_text(p) -> str:
    """A p-value: ``0.013``, ``< 0.001``, ``–`` where no test gave one."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "–"
    p = float(p)
    return "< 0.001" if p < 0.001 else f"{p:.2g}" if p < 0.01 else f"{p:.2f}" if p < 0.995 else "1"


def short_text(text, width: int = 90) -> str:
    """The first clause of ``text`` (up to the first ``;``), cut to ``width`` characters with ``…``: one phrase of a
    reason for a console row, the whole text stays in the tables.

    >>> short_text("too few runs: 2 counted; needs 5 or more")
    'too few runs: 2 counted'
    >>> short_text("x" * 10, width=5)
    'xxxx…'
    """
    text = "" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text)
    text = text.split(";", 1)[0].strip()
    return text if len(text) <= width else text[:width - 1].rstrip() + "…"
