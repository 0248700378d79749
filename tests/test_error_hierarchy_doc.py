"""docs/api.md's list of cudamagic's errors and warnings is the classes' own hierarchy: written
from ``cudamagic.__all__``'s exception classes and their bases, so it cannot drift."""

from __future__ import annotations

from pathlib import Path

import cudamagic

API_PAGE = Path(__file__).parent.parent / "docs" / "api.md"


def hierarchy() -> str:
    """The public exception and warning classes as an indented tree (two spaces a level, in
    ``__all__``'s order), each under its first public base, its other bases said after it (a root's: what
    it is a kind of)."""
    classes = [c for c in (getattr(cudamagic, n) for n in cudamagic.__all__)
               if isinstance(c, type) and issubclass(c, BaseException)]
    public = set(classes)

    def parent(c: type) -> type | None:
        return next((b for b in c.__bases__ if b in public), None)

    lines: list[str] = []

    def walk(c: type, depth: int) -> None:
        others = [b.__name__ for b in c.__bases__ if b is not parent(c)]
        also = "" if not others else f" ({', '.join(others)})" if depth == 0 else \
            f" (also {', '.join(others)})"
        lines.append("  " * depth + c.__name__ + also)
        for child in classes:
            if parent(child) is c:
                walk(child, depth + 1)

    for root in (c for c in classes if parent(c) is None):
        walk(root, 0)
    return "\n".join(lines)


def test_the_api_pages_error_hierarchy_is_the_classes():
    text = API_PAGE.read_text()
    block = text.split("<!-- the errors, as the classes are: checked by a test -->\n```text\n", 1)[1]
    assert block.split("\n```", 1)[0] == hierarchy(), "regenerate docs/api.md's list:\n" + \
        hierarchy()
