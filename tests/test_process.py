"""cudamagic/core/process.py: the one registry of the package's per-process state.

Every module-level container the package changes, every memoized function and every object with
fork hooks of its own is registered there with what becomes of it in a forked child and in a
test's reset; an ast walk of the package's source finds them all, so a new one that is not
registered fails here. The fork and test sides are run from the registry alone."""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
from pathlib import Path

import pytest

import cudamagic
from cudamagic.core import process
from cudamagic.core.process import InChild, InTest

from .conftest import REPO

PACKAGE = REPO / "cudamagic"
CONTAINERS = {"dict", "list", "set", "OrderedDict", "defaultdict", "deque", "Counter",
              "WeakSet", "WeakValueDictionary", "WeakKeyDictionary"}
CHANGES = {"append", "extend", "add", "update", "clear", "pop", "popitem", "setdefault",
           "insert", "remove", "discard", "appendleft", "move_to_end"}


def _called(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        fn = node.func
        return fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
    return None


def _changed_names(trees: list[ast.Module]) -> set[str]:
    """The names the package changes in place anywhere (``x.append``, ``x[k] = v``, ``del x[k]``,
    ``mod.x.clear()``), or rebinds through ``global``."""
    changed: set[str] = set()
    for tree in trees:
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
                    and n.func.attr in CHANGES:
                owner = n.func.value
                if isinstance(owner, ast.Name):
                    changed.add(owner.id)
                elif isinstance(owner, ast.Attribute):
                    changed.add(owner.attr)
            targets: list[ast.expr] = []
            if isinstance(n, (ast.Assign, ast.Delete)):
                targets = list(n.targets)
            elif isinstance(n, ast.AugAssign):
                targets = [n.target]
            for t in targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                    changed.add(t.value.id)
            if isinstance(n, ast.Global):
                changed.update(n.names)
    return changed


def state_in_source(sources: dict[str, str]) -> set[tuple[str, str]]:
    """(module, name) of every piece of per-process state the source holds: a module-level
    container that the package changes, a memoized function, a name rebound by ``global``."""
    trees = {mod: ast.parse(text) for mod, text in sources.items()}
    changed = _changed_names(list(trees.values()))
    found: set[tuple[str, str]] = set()
    for mod, tree in trees.items():
        for node in tree.body:
            name = value = None
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name):
                name, value = node.targets[0].id, node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                name, value = node.target.id, node.value
            if name is not None and value is not None:
                literal = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp,
                                             ast.ListComp, ast.SetComp))
                if _called(value) == "held" or (
                        (literal or _called(value) in CONTAINERS) and name in changed):
                    found.add((mod, name))
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for deco in n.decorator_list:
                    words = ast.unparse(deco)
                    if "lru_cache" in words or words.split("(")[0] in (
                            "cache", "functools.cache", "cached"):
                        found.add((mod, n.name))
            if isinstance(n, ast.Global):
                found.update((mod, g) for g in n.names if g in changed)
    return found


def _package_sources() -> dict[str, str]:
    return {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"):
            p.read_text() for p in sorted(PACKAGE.rglob("*.py"))
            if "__pycache__" not in p.parts and p.name != "process.py"}


def registered() -> set[tuple[str, str]]:
    for info in pkgutil.walk_packages(cudamagic.__path__, "cudamagic."):
        if info.name != "cudamagic.pipeline.child" and not info.name.startswith("cudamagic.headers"):
            importlib.import_module(info.name)
    importlib.import_module("cudamagic.shell.magic")
    return {(p.module, name) for p in process.pieces() for name in (p.name, *p.covers)}


def test_the_registry_knows_every_piece_of_process_state_the_package_has():
    found = state_in_source(_package_sources())
    assert len(found) >= 30  # the walk sees them (33 when this was written)
    missing = found - registered()
    assert not missing, (
        f"module-level state not registered with cudamagic.core.process: {sorted(missing)}; make it "
        f"with process.held(...) (a container), @process.cached(...) (in place of lru_cache) or "
        f"process.at_fork(...) (an object with fork hooks), saying what a forked child and a "
        f"test's reset do with it")


PLANTED = {
    "a new module-level dict the package fills": (
        "cudamagic.toolchain.compile.nvrtc", "_seen: dict[str, int] = {}\n\n\ndef note(k):\n"
        "    _seen[k] = 1\n", "_seen"),
    "a set filled from another module": (
        "cudamagic.launch.kernel", "_told = set()\n", "_told"),
    "an lru_cache'd finder": (
        "cudamagic.toolchain.tools.tools", "import functools\n\n\n@functools.lru_cache(maxsize=1)\n"
        "def where():\n    return 1\n", "where"),
    "functools.cache": (
        "cudamagic.core.units", "import functools\n\n\n@functools.cache\ndef table():\n"
        "    return {}\n", "table"),
    "a name rebound through global": (
        "cudamagic.core.files", "_last = None\n\n\ndef remember(x):\n    global _last\n"
        "    _last = x\n", "_last"),
}


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_unregistered_piece_of_state_is_found(case):
    """Each kind of state, planted in a copy of the package's source, is found by the walk and is
    not in the registry: the test above would fail on it."""
    module, planted, name = PLANTED[case]
    sources = _package_sources()
    sources[module] += "\n\n" + planted
    if case == "a set filled from another module":
        sources["cudamagic.pipeline.module"] += "\n\ndef _tell(d):\n    _told.add(d)\n"
    assert (module, name) in state_in_source(sources) - registered()


def test_constant_tables_are_not_state():
    """A module-level table nobody changes is not state, so it need not be registered."""
    sources = {"cudamagic.m": "TABLE = {'a': 1}\nROWS = [1, 2]\n\n\ndef f():\n"
                              "    rows = []\n    rows.append(TABLE['a'])\n    return rows\n"}
    assert state_in_source(sources) == set()


def test_a_tests_reset_empties_what_it_says_and_keeps_the_rest():
    from cudamagic.pipeline import explain
    from cudamagic.core import forksafe
    from cudamagic.launch import launcher
    from cudamagic.core import toolkit
    from cudamagic.toolchain.device import driver

    registered()
    driver._lost[99] = driver.Sticky.ASSERT
    driver._told.add(99)
    launcher.LAST_LAUNCH[0] = ("k", (1,), (1,))
    toolkit.toolkit()
    lock = forksafe.ForkSafeLock()
    primary = dict(driver._primary)
    process.reset_for_tests()
    assert driver._lost == {} and driver._told == set() and launcher.LAST_LAUNCH == [None]
    assert toolkit._toolkit_for.cache_info().currsize == 0 and explain._histories == {}
    assert lock in forksafe._all and driver._primary == primary  # kept: live objects
    by_name = {(p.module, p.name): p for p in process.pieces()}
    assert by_name["cudamagic.toolchain.device.driver", "_primary"].in_test is InTest.KEPT
    assert by_name["cudamagic.cxx.parse", "parse_expression"].in_test is InTest.KEPT


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_runs_each_pieces_side_from_the_registry():
    """The one fork hook: a CLEARED piece is empty in the child, a KEPT one as the parent had
    it, a RENEWED one's handler has run (tracefolder's _reaped emptied by its handler)."""
    from cudamagic.toolchain.compile import tracefolder

    emptied = process.held(__name__, "emptied", {1: 2}, child=InChild.CLEARED)
    kept = process.held(__name__, "kept", {1: 2})
    tracefolder._reaped.add("/nowhere")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        ok = emptied == {} and kept == {1: 2} and not tracefolder._reaped
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    said = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    tracefolder._reaped.discard("/nowhere")
    assert said == b"1" and emptied == {1: 2}


def test_the_registry_imports_nothing_of_the_package():
    tree = ast.parse(Path(process.__file__).read_text())
    imported = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level > 0]
    assert imported == []
