"""Property-based fuzzing (hypothesis) of every importer and request validator (issue 11, item 8).

Each property is the same: whatever the input, the code under test returns a result or raises the
documented domain error; never another exception, never a hang. Runs are derandomized so CI is
reproducible, and bounded so each file takes seconds.

This package also holds what the fuzz files share: `FUZZ` (the settings), `NASTY_TOKENS` and
`JSON_VALUES` (what hostile input puts where a number or name belongs), `mutated`, which damages a
valid document line by line and character by character, and `mutated_json`, which changes values
inside a valid JSON document.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = ["ANY_TEXT", "FUZZ", "JSON_VALUES", "NASTY_TOKENS", "damaged_documents", "mutated", "mutated_json"]

# Reproducible (derandomize) and bounded: a property gets `max_examples` inputs, no per-input deadline
# (the first call of an importer loads modules), and no complaint that building inputs is slow.
FUZZ = settings(
    derandomize=True,
    deadline=None,
    max_examples=300,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

# What a careless or hostile dump puts where a number or a name belongs.
NASTY_TOKENS = (
    "0",
    "-1",
    "-9223372036854775809",
    "9223372036854775807",
    "18446744073709551616",
    "9" * 400,
    "1e308",
    "1e309",
    "-1e308",
    "1e-320",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "Infinity",
    "0x",
    "0xffffffffffffffffffff",
    "1e300Gbps",
    "NaNGbps",
    "-5ms",
    "",
    " ",
    "\t",
    '"',
    "'",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "#",
    "\\",
    "\x00",
    "\ufeff",
    "\u202e",
    "é",
    "🙂",
    "\udcff",  # a lone surrogate, as a non-UTF-8 file decoded with surrogateescape gives
    "x" * 5000,
)


@st.composite
def mutated(draw: st.DrawFn, text: str, max_edits: int = 4) -> str:
    """`text` with a few random edits: lines deleted, duplicated, swapped or replaced, tokens swapped
    for NASTY_TOKENS, single characters inserted, deleted or replaced, or the text cut short."""
    lines = text.splitlines(keepends=True) or [""]
    for _ in range(draw(st.integers(1, max_edits))):
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        edit = draw(
            st.sampled_from(
                ("delete", "duplicate", "swap", "replace", "token", "char", "truncate", "blank", "big")
            )
        )
        if edit == "delete" and lines:
            del lines[i]
        elif edit == "duplicate" and lines:
            lines.insert(i, lines[i])
        elif edit == "swap" and len(lines) > 1:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif edit == "replace" and lines:
            lines[i] = draw(st.text(max_size=80)) + "\n"
        elif edit == "token" and lines:
            words = lines[i].split(" ")
            k = draw(st.integers(0, len(words) - 1))
            words[k] = _replace_token(draw, words[k])
            lines[i] = " ".join(words)
        elif edit == "char" and lines and lines[i]:
            k = draw(st.integers(0, len(lines[i]) - 1))
            char = draw(st.characters())
            how = draw(st.sampled_from(("insert", "delete", "replace")))
            line = lines[i]
            if how == "insert":
                lines[i] = line[:k] + char + line[k:]
            elif how == "delete":
                lines[i] = line[:k] + line[k + 1 :]
            else:
                lines[i] = line[:k] + char + line[k + 1 :]
        elif edit == "truncate":
            joined = "".join(lines)
            cut = draw(st.integers(0, len(joined)))
            lines = joined[:cut].splitlines(keepends=True)
        elif edit == "blank":
            lines.insert(i, draw(st.sampled_from(("\n", "\r\n", "   \n", "\x0c\n", "#\n"))))
        elif edit == "big" and lines:
            lines[i] = lines[i].rstrip("\n") + draw(st.sampled_from(NASTY_TOKENS)) + "\n"
        if not lines:
            lines = [""]
    return "".join(lines)


def _replace_token(draw: st.DrawFn, word: str) -> str:
    """A word's digits swapped for a nasty number, or the whole word for a nasty token."""
    if draw(st.booleans()) and any(c.isdigit() for c in word):
        nasty = draw(st.sampled_from(NASTY_TOKENS[:20]))
        start = next(i for i, c in enumerate(word) if c.isdigit())
        end = start
        while end < len(word) and (word[end].isdigit() or word[end] == "."):
            end += 1
        return word[:start] + nasty + word[end:]
    return draw(st.sampled_from(NASTY_TOKENS))


# JSON values a hostile document puts anywhere: numbers beyond int64 and float, NaN and infinities
# (Python's json reads and writes them), odd strings, and small nested structures.
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from((2**63, -(2**63) - 1, 10**400, 0, -1, 65_536, 70_000))
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(NASTY_TOKENS),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def mutated_json(draw: st.DrawFn, text: str, max_edits: int = 3) -> str:
    """The JSON document `text` with a few values (or keys) replaced, deleted or duplicated (a text
    that is not JSON, e.g. one damaged by an earlier edit, is replaced whole)."""
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    for _ in range(draw(st.integers(1, max_edits))):
        document = _mutate_value(draw, document)
    return json.dumps(document)


def _mutate_value(draw: st.DrawFn, value: object) -> object:
    """`value` with one random node somewhere inside it changed."""
    if isinstance(value, dict) and value and draw(st.integers(0, 3)):
        key = draw(st.sampled_from(sorted(value)))
        edit = draw(st.sampled_from(("descend", "delete", "rename", "replace")))
        value = dict(value)
        if edit == "descend":
            value[key] = _mutate_value(draw, value[key])
        elif edit == "delete":
            del value[key]
        elif edit == "rename":
            value[draw(st.text(max_size=8))] = value.pop(key)
        else:
            value[key] = draw(JSON_VALUES)
        return value
    if isinstance(value, list) and value and draw(st.integers(0, 3)):
        i = draw(st.integers(0, len(value) - 1))
        edit = draw(st.sampled_from(("descend", "delete", "duplicate", "replace")))
        value = list(value)
        if edit == "descend":
            value[i] = _mutate_value(draw, value[i])
        elif edit == "delete":
            del value[i]
        elif edit == "duplicate":
            value.insert(i, value[i])
        else:
            value[i] = draw(JSON_VALUES)
        return value
    return draw(JSON_VALUES)


# Any text at all, or hostile tokens strung together.
ANY_TEXT = st.text(max_size=400) | st.lists(st.sampled_from(NASTY_TOKENS), max_size=12).map(" ".join)


@st.composite
def damaged_documents(draw: st.DrawFn, documents: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Per-node documents (LLDP tables) with a few damaged, dropped, duplicated or renamed."""
    documents = list(documents)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(documents) - 1))
        name, text = documents[i]
        edit = draw(st.sampled_from(("json", "text", "drop", "duplicate", "rename", "random")))
        if edit == "json":
            documents[i] = (name, draw(mutated_json(text)))
        elif edit == "text":
            documents[i] = (name, draw(mutated(text)))
        elif edit == "drop" and len(documents) > 1:
            del documents[i]
        elif edit == "duplicate":
            documents.insert(i, (name, text))
        elif edit == "rename":
            documents[i] = (draw(st.text(max_size=12) | st.sampled_from(NASTY_TOKENS)), text)
        elif edit == "random":
            documents[i] = (name, draw(ANY_TEXT))
    return documents
