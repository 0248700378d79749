"""A miss after a cell of thousands of name expressions says what changed in a line a person
reads: the first names added and removed, and how many more (a line of 5000 ``-n`` made a
headline of 54 KB, every name quoted, in the report, its text and its HTML)."""

from __future__ import annotations

import re

import pytest

from cudamagic import explain as H
from cudamagic.explain import explain

from .test_history import NO_ENTRY, cb

# (names before, names after): counts added and removed around the limit, on either side
SIZES = [(0, 1), (1, 0), (0, 10), (10, 0), (0, 11), (11, 0), (3, 14), (5000, 0), (0, 5000),
         (2500, 5000), (5000, 4990), (5000, 5000)]


def _names(start: int, stop: int) -> tuple[str, ...]:
    return tuple(f"k<{i}>" for i in range(start, stop))


@pytest.mark.parametrize("before, after", SIZES)
def test_a_changed_line_of_names_says_the_first_ones_and_counts_the_rest(before, after):
    # the new line keeps the old one's first names only where 'after' overlaps them
    old = _names(0, before)
    new = _names(before - min(before, after) // 2, before - min(before, after) // 2 + after)
    added = [n for n in new if n not in old]
    removed = [n for n in old if n not in new]
    summary = explain(cb(names=old), cb("k2", names=new), NO_ENTRY).summary
    for word, names in (("added", added), ("removed", removed)):
        if not names:
            assert f"{word} " not in summary
            continue
        said = re.search(rf"{word} ((?:'[^']*'(?:, )?)+)(?: and (\d+) more)?", summary)
        assert said, summary
        listed = re.findall(r"'([^']*)'", said.group(1))
        assert listed == names[:H.MAX_LISTED], summary
        more = int(said.group(2) or 0)
        assert more == len(names) - len(listed), summary
    assert len(summary) < 600, f"{len(summary)} characters"
