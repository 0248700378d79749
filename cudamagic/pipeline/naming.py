"""Python names for kernels, and the hints a build gives about what it could not name.

A kernel has three names, kept apart: the *name expression* the user wrote (``saxpy<float>``,
the lookup key), the *symbol* in the CUBIN (``_Z5saxpyIfEvT_PKS0_PS0_i``, what the driver
loads) and the *Python name* it is pushed under (``saxpy_float``). This module makes the third
from the first, never the other way round.
"""

from __future__ import annotations

import keyword
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..cxx.kernel_names import template_kernels

if TYPE_CHECKING:  # pragma: no cover
    from ..cxx import Signatures

__all__ = ["Namer", "unnamed_hints", "invalid_names", "derived_name"]

_SHELL = "IPython"
# what valid_python_name refuses besides a non-identifier, as one set for whole-table checks
_KEYWORDS = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)


def invalid_names(names: Sequence[str | None]) -> list[int]:
    """The places of the names (None: none given) that cannot be pushed as Python names; a
    table of valid ones is seen in two passes in C."""
    given = [n for n in names if n is not None]
    if all(map(str.isidentifier, given)) and _KEYWORDS.isdisjoint(given):
        return []
    from ..cxx.pyname import valid_python_name  # a name the fast check doubts: rare

    return [i for i, n in enumerate(names) if n is not None and not valid_python_name(n)]


def derived_name(label: str) -> str:
    """The Python name derived from a name expression (:func:`~cudamagic.cxx.pyname.python_name`:
    a compile's; a hit takes the name its entry stored, so the C++ reader is not imported)."""
    from ..cxx.pyname import python_name

    return python_name(label)


class Namer:
    """Python names for the kernels of one build: one per symbol, never a reserved name, never
    two alike. Each name that is not the derived one is said in ``notes``.

    Parameters
    ----------
    reserved : sequence of str
        The module's own name first (``--module``), then names the shell relies on
        (``get_ipython``, ``In``, ``Out``...).
    notes : list of str
        The build's warnings, appended to.
    """

    def __init__(self, reserved: Sequence[str], notes: list[str]) -> None:
        self._by_symbol: dict[str, str] = {}
        # name -> (the label that took it, its symbol); "" is the module, _SHELL the shell's
        self._owner: dict[str, tuple[str, str]] = {
            r: ("" if i == 0 else _SHELL, "") for i, r in enumerate(reserved)}
        self._notes = notes

    def names(self, items: Sequence[tuple[str, str, str | None]]) -> list[str]:
        """The Python names of ``(label, symbol, stored)`` items, in order, as :meth:`name`
        gives them one by one. A table in which every name is its own base (one label per
        symbol, no two bases alike, none reserved, no label a keyword) is seen as such in a
        few set operations: a restore of 1000 kernels names them without a loop of its own."""
        labels = [label for label, _, _ in items]
        symbols = [symbol for _, symbol, _ in items]
        bases = [stored or derived_name(label) for label, _, stored in items]
        if (not self._by_symbol and len(set(symbols)) == len(items) == len(set(bases))
                and self._owner.keys().isdisjoint(bases)
                and _KEYWORDS.isdisjoint(labels)):
            self._owner.update(zip(bases, zip(labels, symbols)))
            self._by_symbol.update(zip(symbols, bases))
            return bases
        return [self.name(label, symbol, base) for label, symbol, base in zip(labels, symbols, bases)]

    def name(self, label: str, symbol: str, stored: str | None = None) -> str:
        """The Python name of the kernel ``symbol`` asked for as ``label`` (``stored``: the
        name a cache entry derived for it, used as the base)."""
        if symbol in self._by_symbol:
            return self._by_symbol[symbol]
        base = stored or derived_name(label)
        if base != label and label.isidentifier() and keyword.iskeyword(label):
            self._notes.append(f"the kernel {label!r} is pushed as {base!r}: {label} is a "
                               f"Python keyword (it is also module[{label!r}])")
        name, n = base, 2
        while name in self._owner and self._owner[name][1] != symbol:
            name, n = f"{base}_{n}", n + 1
        if name != base:
            other = self._owner[base][0]
            self._notes.append(
                f"{label!r} is pushed as {name!r}: {base!r} is "
                + ("a name IPython relies on" if other == _SHELL else
                   f"taken by {other!r}" if other else "the module's own name (--module)"))
        self._owner[name] = (label, symbol)
        self._by_symbol[symbol] = name
        return name


def _kernel_name(expr: str) -> str:
    """The unqualified kernel name of a name expression, past a leading cast and before its
    template arguments (``(void(*)(float*))ns::over<float>`` -> ``over``)."""
    rest = expr.strip()
    if rest.startswith("("):
        depth = 0
        for i, ch in enumerate(rest):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0:
                rest = rest[i + 1:]
                break
    return rest.split("<", 1)[0].strip().rsplit("::", 1)[-1].strip()


def _instantiated(sigs: Signatures, templates: set[str]) -> set[str]:
    """Which of ``templates`` (unqualified names) have an instance among the CUBIN's kernels,
    read off their demangled names: one another kernel instantiates (a launch from device code,
    an explicit instantiation) is compiled though no -n names it."""
    found: set[str] = set()
    for symbol in sigs:
        if sigs.maybe_plain(symbol):  # no template arguments: not an instance
            continue
        text = sigs.text(symbol)
        if not any(name in text for name in templates - found):  # most kernels: no parse
            continue
        parts = sigs[symbol].parts
        if parts and parts[-1][1] is not None and parts[-1][0] in templates:
            found.add(parts[-1][0])
            if found == templates:
                break
    return found


def unnamed_hints(source: str, name_expressions: Sequence[str], sigs: Signatures,
                  named: set[str]) -> list[str]:
    """What a cell defines but the user cannot call, said as hints: templates without a -n,
    overloads without a cast, or no kernel at all (``named``: the symbols that got a name)."""
    hints = []
    # non-template kernels left without a name are overloads: only a cast can pick one
    unnamed = [sigs.text(s) for s in sigs
               if s not in named and sigs.maybe_plain(s) and "<" not in sigs[s].name]
    templates = template_kernels(source)
    if templates:  # which of them a name expression asks for: stop once all are found
        unasked = set(templates)
        for expr in name_expressions:
            unasked.discard(_kernel_name(expr))
            if not unasked:
                break
        compiled = _instantiated(sigs, unasked) if unasked else set()
        templates = [name for name in templates if name in unasked and name not in compiled]
    if templates:
        first = templates[0]
        hints.append(
            f"the __global__ template{'s' if len(templates) > 1 else ''} "
            f"{', '.join(templates)} {'are' if len(templates) > 1 else 'is'} "
            f"not compiled: a template kernel is compiled only for the instances named with "
            f'-n, e.g. -n "{first}<float>" (name_expressions=["{first}<float>"] in build())')
    elif not sigs:  # (no source: a CUBIN from elsewhere, which no cell defined)
        hints.append("the cell defines no __global__ kernel (only __device__ or host code): "
                     "there is nothing to call from Python" if source else
                     "the CUBIN holds no __global__ kernel (only device functions or "
                     "variables): there is nothing to call from Python")
    if unnamed:
        hints.append(f"{len(unnamed)} overloaded kernel(s) have no name to call them by; "
                     "name each with a cast, e.g. -n \"(void(*)(float*))f\": "
                     + "; ".join(unnamed[:5]))
    return hints
