"""The package's size rules (docs/architecture.md): modules of at most 800 lines, functions of at
most 60, and at most 8 positional parameters; a record carries what would be more. A call passes
at most 8 arguments by position too: a dataclass's generated ``__init__`` takes every field
positionally, so a record of 12 fields built as ``Record(a, b, ..., l)`` is the 12-parameter
call again, with nothing to say which value is which."""

from __future__ import annotations

import ast
import io
import re
import tokenize
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


# ---- measured numbers belong in docs/performance.md, not in the code's comments -------------

#: A duration as prose quotes a measurement (``7.6 ms``, ``0.1 s``, ``25 seconds``)
_DURATION = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?\s?(?:ms|µs|us|ns|s|seconds?|milliseconds?|"
                       r"microseconds?|minutes?)(?![\w'])")
#: What a docstring shows as code or output (``7.6 ms · 3 kernels``): an example, not a claim
_LITERAL = re.compile(r"``.*?``", re.S)


def timing_faults(source: str, where: str) -> list[str]:
    """The durations one module's comments and docstrings quote (outside ````literals````),
    each with its line: a timing measured on one host goes stale in the code; the code says
    why, docs/performance.md says how much."""
    prose = [(tok.start[0], tok.string) for tok in
             tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            text = _LITERAL.sub(lambda m: "\n" * m.group(0).count("\n"), node.value.value)
            prose += [(node.lineno + i, line) for i, line in enumerate(text.splitlines())]
    return [f"{where}:{n}: {found.group(0)!r} in {line.strip()[:80]!r}"
            for n, line in prose for found in _DURATION.finditer(_LITERAL.sub("", line))]


def test_no_comment_or_docstring_quotes_a_timing():
    faults = [f for path in sorted(PACKAGE.rglob("*.py"))
              for f in timing_faults(path.read_text(encoding="utf-8"),
                                     str(path.relative_to(PACKAGE.parent)))]
    assert not faults, ("move each measurement to docs/performance.md (section 7 keeps the "
                        "numbers behind the code's choices):\n" + "\n".join(faults))


@pytest.mark.parametrize("source, faulty", [
    ("x = 1  # about 2 ms for 1 000 names\n", True),
    ("x = 1  # each about 0.1 s on an H200 host\n", True),
    ('def f():\n    """Took 25 seconds before."""\n', True),
    ('def f():\n    """Shown as ``7.6 ms · 3\n    kernels``."""\n', False),  # an example
    ("x = 1  # a 30 s limit\n", True),
    ("x = 1  # sm_90's 228 KiB, 3 kernels, 64 threads\n", False),
    ("x = '12 ms'  # a string the code uses is not prose\n", False),
    ("x = 1  # kernel 3's block\n", False),
])
def test_the_timing_rule_catches_a_quoted_measurement(source, faulty):
    assert bool(timing_faults(source, "m.py")) == faulty


# ---- dead code: every function and class the package defines is used by the package --------

#: Used from outside the package only, each with why it stays
TEST_ONLY = {
    "kernel_names": "toolchain.driver.Library: the GPU tests check the ELF reader's kernel list "
                    "against the driver's enumeration (tests/test_gpu.py)",
}


def _used_names(tree: ast.AST) -> set[str]:
    """Every name a module's code refers to: loads, attributes, imported names, keywords and
    strings that are identifiers (getattr's, ``__all__``'s)."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.alias):
            used.add(node.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.keyword) and node.arg:
            used.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.isidentifier():
            used.add(node.value)
    return used


#: Decorators through which something outside the package calls a function: IPython's
#: magics, an exit hook
_CALLED_FROM_OUTSIDE = {"line_magic", "cell_magic", "line_cell_magic", "register",
                        "magics_class"}


def _decorator(node: ast.expr) -> str:
    """A decorator's last name (``atexit.register`` -> ``register``)."""
    node = node.func if isinstance(node, ast.Call) else node
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def dead_faults(sources: dict[str, str], public: set[str]) -> list[str]:
    """The functions, methods and classes defined in ``sources`` (path -> text) that no code
    among them names: neither public API (``public``, the package's ``__all__``: those classes'
    methods too), a protocol (``__dunder__``, ``_repr_html_``), nor called from outside (a
    magic, an ``atexit`` hook), nor listed in :data:`TEST_ONLY`."""
    trees = {path: ast.parse(text) for path, text in sources.items()}
    used = set().union(*map(_used_names, trees.values()))
    faults = []
    for path, tree in trees.items():
        exempt: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in public:
                exempt |= {id(m) for m in node.body}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            name = node.name
            if (name in used or name in public or name in TEST_ONLY or id(node) in exempt
                    or _CALLED_FROM_OUTSIDE & set(map(_decorator, node.decorator_list))
                    or (name.startswith("_") and name.endswith("_"))):
                continue
            faults.append(f"{path}:{node.lineno} {name}: defined, never used by the package")
    return faults


def test_the_package_has_no_dead_function_or_class():
    sources = {str(p.relative_to(PACKAGE.parent)): p.read_text(encoding="utf-8")
               for p in sorted(PACKAGE.rglob("*.py"))}
    faults = dead_faults(sources, set(cudamagic.__all__))
    assert not faults, ("remove it, or say in TEST_ONLY why only tests use it:\n"
                        + "\n".join(faults))


@pytest.mark.parametrize("sources, dead", [
    ({"a.py": "def f():\n    pass\n"}, ["f"]),
    ({"a.py": "def f():\n    pass\n", "b.py": "from a import f\nf()\n"}, []),
    ({"a.py": "class K:\n    def m(self):\n        pass\n\nK()\n"}, ["m"]),     # a dead method
    ({"a.py": "class Kernel:\n    def m(self):\n        pass\n"}, []),          # public API
    ({"a.py": "class K:\n    def __len__(self):\n        return 0\n\nK()\n"}, []),
    ({"a.py": "import atexit\n@atexit.register\ndef bye():\n    pass\n"}, []),
    ({"a.py": "class K:\n    @property\n    def p(self):\n        return 1\n\nK()\n"}, ["p"]),
    ({"a.py": "def f():\n    pass\n\nx = getattr(m, 'f')\n"}, []),
    ({"a.py": "def outer():\n    def inner():\n        pass\n    return 1\nouter()\n"}, ["inner"]),
])
def test_the_dead_code_rule_catches_what_nothing_calls(sources, dead):
    found = [f.split()[1].rstrip(":") for f in dead_faults(sources, {"Kernel"})]
    assert found == dead
