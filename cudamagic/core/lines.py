"""A source's lines as NVRTC numbers them: the one numbering every line a user is shown is named
by (the annotation, a miss's diff, a tool run's findings and hot lines, the compile log).

NVRTC ends a line at ``\\n`` alone (asked of NVRTC 13.5: a deliberate error after each of these
in a comment is reported on the line ``\\n`` counts, ``tests/test_annotate_exact.py``). A
``\\r`` before the ``\\n`` is part of the line it ends, as whitespace; a lone ``\\r``, form
feed, vertical tab, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028 and U+2029, where
:meth:`str.splitlines` breaks, are characters inside a line.
"""

from __future__ import annotations

__all__ = ["cell_lines"]


def cell_lines(source: str) -> list[str]:
    """The lines of ``source`` as NVRTC numbers them: item ``N - 1`` is line ``N``, its text
    without the ``\\n`` that ends it (a ``\\r`` before it kept, as NVRTC reads it). A source
    that ends with ``\\n`` has no empty line after it; an empty source has no line."""
    parts = source.split("\n")
    if parts[-1] == "":
        parts.pop()
    return parts
