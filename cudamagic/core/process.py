"""Every piece of state the package keeps per process, in one registry.

A module-level dict, list or set that the package changes, a memoized function
(:func:`cached`, in place of ``functools.lru_cache``), and an object with fork hooks of its own
(:func:`at_fork`) register here when their module is imported, each saying what becomes of it in
a forked child (:class:`InChild`) and in a test's reset (:class:`InTest`). The package's one
``os.register_at_fork`` runs the child's side from this registry, in the order the pieces were
registered (the ``before`` hooks in the reverse order, as ``os.register_at_fork`` runs its own);
:func:`reset_for_tests` is what the tests' ``fresh_process`` fixture calls.
tests/test_architecture.py walks the package's source and fails on a module-level container the
package changes, or a memoized function, that is not registered here.

This module is the lowest layer: it imports nothing of the package.
"""

from __future__ import annotations

import enum
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["InChild", "InTest", "Piece", "held", "cached", "at_fork", "pieces",
           "reset_for_tests"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class InChild(enum.Enum):
    """What a forked child does with a piece of its parent's state."""

    KEPT = "kept as the parent had it"
    CLEARED = "emptied"
    RENEWED = "made anew by its owner's handler"


class InTest(enum.Enum):
    """What :func:`reset_for_tests` does with it."""

    KEPT = "kept (live objects that must not be dropped, or a pure function's answers)"
    CLEARED = "emptied"


@dataclass(frozen=True)
class Piece:
    """One registered piece of per-process state: ``module.name``, and what becomes of it."""

    module: str
    name: str
    in_child: InChild
    in_test: InTest
    clear: Callable[[], None] | None = None
    renew: Callable[[], None] | None = None
    before: Callable[[], None] | None = None
    after_in_parent: Callable[[], None] | None = None
    #: the module's other names that ``renew`` looks after too
    covers: tuple[str, ...] = ()


_pieces: list[Piece] = []


def _add(piece: Piece) -> None:
    if piece.in_child is InChild.RENEWED and piece.renew is None:
        raise ValueError(f"{piece.module}.{piece.name}: a renewed piece needs its handler")
    if piece.in_child is InChild.CLEARED or piece.in_test is InTest.CLEARED:
        if piece.clear is None:
            raise ValueError(f"{piece.module}.{piece.name}: a cleared piece needs clear()")
    _pieces[:] = [p for p in _pieces if (p.module, p.name) != (piece.module, piece.name)]
    _pieces.append(piece)


def held(module: str, name: str, value: T, *, child: InChild = InChild.KEPT,
         test: InTest = InTest.CLEARED, clear: Callable[[], None] | None = None,
         renew: Callable[[], None] | None = None) -> T:
    """Register the module-level container ``value`` (``module.name``) and return it.

    ``clear`` empties it (its own ``clear()`` unless given: a list of one slot resets its
    slot); ``renew`` is the child's handler where ``child`` is RENEWED."""
    emptied = clear if clear is not None else getattr(value, "clear", None)
    _add(Piece(module, name, child, test, clear=emptied, renew=renew))
    return value


def cached(maxsize: int | None = None, *, child: InChild = InChild.KEPT,
           test: InTest = InTest.CLEARED) -> Callable[[F], F]:
    """``functools.lru_cache(maxsize)``, registered: a finder's answer (the library, the tool
    found) is kept by a child and forgotten by a test's reset; a pure function's answers may be
    kept by both."""

    def wrap(fn: F) -> F:
        memo = functools.lru_cache(maxsize=maxsize)(fn)
        _add(Piece(fn.__module__, fn.__name__, child, test, clear=memo.cache_clear,
                   renew=memo.cache_clear if child is InChild.RENEWED else None))
        return memo  # type: ignore[return-value]

    return wrap


def at_fork(module: str, name: str, *, after_in_child: Callable[[], None],
            before: Callable[[], None] | None = None,
            after_in_parent: Callable[[], None] | None = None,
            test: Callable[[], None] | None = None, covers: tuple[str, ...] = ()) -> None:
    """Register an object whose fork hooks are its own (``module.name``, and the module's
    names in ``covers`` that the same hooks look after): ``after_in_child`` renews it in a
    child, ``test`` (if any) is its reset for tests."""
    _add(Piece(module, name, InChild.RENEWED,
               InTest.CLEARED if test is not None else InTest.KEPT, clear=test,
               renew=after_in_child, before=before, after_in_parent=after_in_parent,
               covers=covers))


def pieces() -> tuple[Piece, ...]:
    """Every piece registered so far (by the modules imported), in registration order."""
    return tuple(_pieces)


def reset_for_tests() -> None:
    """Empty every piece whose :class:`InTest` is CLEARED, in registration order."""
    for piece in list(_pieces):
        if piece.in_test is InTest.CLEARED and piece.clear is not None:
            piece.clear()


def _before_fork() -> None:
    # a before hook may let a module be imported that registers a piece of its own (the
    # warm-up's wait lets its thread import the cache's modules): its hook runs too, after
    ran: set[tuple[str, str]] = set()
    while True:
        todo = [p for p in reversed(list(_pieces))
                if p.before is not None and (p.module, p.name) not in ran]
        if not todo:
            return
        for piece in todo:
            ran.add((piece.module, piece.name))
            piece.before()  # type: ignore[misc]


def _after_fork_in_parent() -> None:
    for piece in list(_pieces):
        if piece.after_in_parent is not None:
            piece.after_in_parent()


def _after_fork_in_child() -> None:
    for piece in list(_pieces):
        if piece.in_child is InChild.RENEWED and piece.renew is not None:
            piece.renew()
        elif piece.in_child is InChild.CLEARED and piece.clear is not None:
            piece.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
