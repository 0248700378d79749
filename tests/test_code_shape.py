"""The package's size rules (docs/architecture.md): modules of at most 800 lines, functions of at
most 60, and at most 8 positional parameters; a record carries what would be more. A call passes
at most 8 arguments by position too: a dataclass's generated ``__init__`` takes every field
positionally, so a record of 12 fields built as ``Record(a, b, ..., l)`` is the 12-parameter
call again, with nothing to say which value is which."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cudamagic

PACKAGE = Path(cudamagic.__file__).parent
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 60
MAX_POSITIONAL = 8


def shape_faults(source: str, where: str) -> list[str]:
    """What in one module's ``source`` breaks the size rules, each said with its place."""
    faults = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        faults.append(f"{where}: {lines} lines (at most {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            given = sum(1 for a in node.args if not isinstance(a, ast.Starred))
            if given > MAX_POSITIONAL:
                faults.append(f"{where}:{node.lineno} {ast.unparse(node.func)}(...): {given} "
                              f"positional arguments (at most {MAX_POSITIONAL}: name them)")
            continue
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        name = getattr(node, "name", "<lambda>")
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length > MAX_FUNCTION_LINES:
            faults.append(f"{where}:{node.lineno} {name}: {length} lines "
                          f"(at most {MAX_FUNCTION_LINES})")
        positional = len(node.args.posonlyargs) + len(node.args.args)
        if positional > MAX_POSITIONAL:
            faults.append(f"{where}:{node.lineno} {name}: {positional} positional parameters "
                          f"(at most {MAX_POSITIONAL})")
    return faults


def test_every_module_function_and_signature_keeps_the_size_rules():
    faults = [f for path in sorted(PACKAGE.rglob("*.py"))
              for f in shape_faults(path.read_text(encoding="utf-8"),
                                    str(path.relative_to(PACKAGE.parent)))]
    assert not faults, "\n".join(faults)


def _function(lines: int, params: int) -> str:
    args = ", ".join(f"a{i}" for i in range(params))
    return f"def f({args}):\n" + "    x = 1\n" * (lines - 1)


@pytest.mark.parametrize("source, faulty", [
    (_function(60, 8), False),
    (_function(61, 1), True),                          # one line too long
    (_function(2, 9), True),                           # one parameter too many
    ("class K:\n    def m(self, a, b, c, d, e, f, g):\n        pass\n", False),  # self counts: 8
    ("class K:\n    def m(self, a, b, c, d, e, f, g, h):\n        pass\n", True),
    ("def f(a, b, /, c, d, e, f, g, h, i):\n    pass\n", True),   # positional-only count
    ("def f(a, *rest, b, c, d, e, f, g, h, i, j):\n    pass\n", False),  # keyword-only do not
    ("def outer():\n    def inner(a, b, c, d, e, f, g, h, i):\n        pass\n", True),
    ("g = lambda a, b, c, d, e, f, g, h, i: a\n", True),
    ("async def f(a, b, c, d, e, f, g, h, i):\n    pass\n", True),
    ("class K:\n    async def m(self):\n" + "        x = 1\n" * 60, True),  # 61 lines
    ("r = Record(1, 2, 3, 4, 5, 6, 7, 8)\n", False),
    ("r = Record(1, 2, 3, 4, 5, 6, 7, 8, 9)\n", True),    # a call of 9 positional arguments
    ("r = Record(1, 2, 3, 4, 5, 6, 7, 8, i=9, *more)\n", False),  # named and starred do not
    ("def f():\n    return g(h(1, 2, 3, 4, 5, 6, 7, 8, 9))\n", True),  # a call in a call
    ("x = 1\n" * 800, False),
    ("x = 1\n" * 801, True),                           # a module one line too long
])
def test_the_rules_catch_each_kind_of_fault(source, faulty):
    assert bool(shape_faults(source, "m.py")) == faulty
