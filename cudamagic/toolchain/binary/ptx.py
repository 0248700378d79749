"""What PTX says about each kernel: the ``.param`` type of every slot, and whether it reads
the driver's grid workspace (grid-wide synchronisation).

PTX names a type for each parameter of an ``.entry`` (``.param .u32 k_param_3``,
``.param .f32 ...``, ``.param .align 8 .b8 k_param_5[16]`` for a struct), which a CUBIN built from
it no longer says: a kernel loaded from PTX (``nvcc -ptx``, a fatbin's PTX entry) takes Python
numbers where its slots are declared numbers. The compilers lower C++ integers by width alone
(``int`` and ``unsigned`` are both ``.u32``), so an integer slot's sign is not known: a value of
either reading fits.

Grid-wide synchronisation (``cooperative_groups::this_grid().sync()``, ``barrier_arrive``) works
on a workspace the driver gives a cooperative launch only, whose address cooperative groups read
from the special registers ``%envreg1`` and ``%envreg2`` (``cooperative_groups/details/
driver_abi.h``; nothing else in CUDA's headers reads them), and it aborts (``__trap()``, or
``assert`` under ``CG_DEBUG``) where the launch gave none. :func:`grid_syncs` reads that, per
``.entry``, from the code it reaches (``call``, followed through the PTX's ``.func`` bodies);
:class:`GridSyncTable` is its answer for the kernels of one CUBIN. Pure: no CUDA.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .image import GridSyncTable

__all__ = ["PtxType", "PtxParam", "entry_params", "grid_syncs", "GridSyncTable", "grid_sync_table",
           "SYSTEM_CALLS"]


class PtxType(enum.Enum):
    """A PTX fundamental type of a ``.param`` (its spelling without the dot)."""

    U8, U16, U32, U64 = "u8", "u16", "u32", "u64"
    S8, S16, S32, S64 = "s8", "s16", "s32", "s64"
    F16, F32, F64 = "f16", "f32", "f64"
    B8, B16, B32, B64 = "b8", "b16", "b32", "b64"

    @property
    def width(self) -> int:
        """Its size in bytes."""
        return int(self.value[1:]) // 8

    @property
    def integer(self) -> bool:
        return self.value[0] in "us"

    @property
    def signed(self) -> bool:
        return self.value[0] == "s"

    @property
    def floating(self) -> bool:
        return self.value[0] == "f"


@dataclass(frozen=True)
class PtxParam:
    """One ``.param`` of an entry: its type, and the element count of an array (``.b8 p[16]``
    is a 16-byte struct or vector by value); ``count`` is 1 for a scalar."""

    type: PtxType
    count: int = 1

    @property
    def size(self) -> int:
        return self.type.width * self.count


class _Pattern:
    """A regular expression compiled on its first use: a first launch imports this module for
    PTX's parameter types and reads no PTX (docs/performance.md has what its patterns cost)."""

    __slots__ = ("_args", "_re")

    def __init__(self, pattern: bytes, flags: int = 0) -> None:
        self._args: tuple[bytes, int] = (pattern, flags)
        self._re: re.Pattern[bytes] | None = None

    def __getattr__(self, name: str) -> Any:
        if self._re is None:
            self._re = re.compile(*self._args)
        return getattr(self._re, name)


_COMMENT = _Pattern(rb"//[^\n]*|/\*.*?\*/", re.S)
_ENTRY = _Pattern(rb"\.entry\s+([A-Za-z_$%][\w$%]*)\s*\(([^)]*)\)")
_PARAM = _Pattern(rb"^\.param((?:\s+\.\w+(?:\s+\d+)?)*?)\s+\.([a-z]\d+)\s+[A-Za-z_$%][\w$%]*"
                    rb"\s*(?:\[\s*(\d+)\s*\])?$")
_TYPES = {t.value.encode(): t for t in PtxType}


def entry_params(ptx: bytes) -> dict[str, tuple[PtxParam, ...] | None]:
    """Each ``.entry``'s parameters as PTX declares them, by the entry's name (the symbol).

    An entry whose parameter list this reader does not follow (a type it does not know, an
    unsized array) maps to None: its slots stay untyped, never guessed.
    """
    text = _COMMENT.sub(b" ", ptx)
    return {m.group(1).decode("utf-8", "replace"): _params(m.group(2).strip())
            for m in _ENTRY.finditer(text)}


def _params(body: bytes) -> tuple[PtxParam, ...] | None:
    """The parameters of one entry's list, or None where one is not understood."""
    params: list[PtxParam] = []
    for decl in (body.split(b",") if body else []):
        p = _PARAM.match(decl.strip())
        kind = _TYPES.get(p.group(2)) if p else None
        if p is None or kind is None:
            return None
        params.append(PtxParam(kind, int(p.group(3)) if p.group(3) else 1))
    return tuple(params)


#: The functions PTX calls that the driver provides (the PTX Interoperability guide's system
#: calls): ``.extern`` in every PTX that calls them, none touches the grid workspace.
SYSTEM_CALLS = frozenset((b"vprintf", b"malloc", b"free", b"__assertfail"))

# a PTX comment or a quoted string (a -G or -lineinfo .file directive's path may hold "//")
_COMMENT_OR_STRING = _Pattern(rb'//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"', re.S)
_BRACE = _Pattern(rb"[{}]")
# a function's head: its linkage, .entry or .func, the return parameters, the name
_FUNCTION = _Pattern(rb"(?:^|\s)\.(entry|func)\s*(?:\([^)]*\)\s*)?([A-Za-z_$%][\w$%]*)")
_WORKSPACE = _Pattern(rb"%envreg[12](?![0-9])")
# an instruction word is found by its letters first (a pattern that starts with a literal is
# searched fast), then checked to stand where an instruction starts: a trap (PTX's __trap())
_TRAP = _Pattern(rb"trap\s*;")
_CALL = _Pattern(rb"call(?:\.uni)?\s")
# what may stand before an instruction: a line's start, a statement's end, a label, then a
# predicate; looked for in the few bytes before the word only (a long line costs no more)
_STARTS = _Pattern(rb"[\n;{}:]\s*(?:@!?%[\w$]+\s+)?\Z")
_LOOK_BACK = 256
# a call's target, after its return parameters: a register for an indirect call
_TARGET = _Pattern(rb"call(?:\.uni)?\s+(?:\([^)]*\)\s*,\s*)?([A-Za-z_$%][\w$%]*)")
_UNREAD = b"%unread"  # a call whose target this reader does not follow: an unknown callee


def _instruction(body: bytes, at: int) -> bool:
    """The word found at ``at`` starts an instruction (not the tail of a name, an operand)."""
    before = body[max(0, at - _LOOK_BACK):at]
    return _STARTS.search(b"\n" + before if at <= _LOOK_BACK else before) is not None


def _calls(body: bytes) -> frozenset[bytes]:
    """The targets of a body's ``call`` instructions."""
    targets = set()
    for m in _CALL.finditer(body):
        if _instruction(body, m.start()):
            target = _TARGET.match(body, m.start())
            targets.add(target.group(1) if target is not None else _UNREAD)
    return frozenset(targets)


@dataclass(frozen=True)
class _Function:
    """One ``.func`` or ``.entry`` body: whether it reads the workspace and traps, whom it calls."""

    entry: bool
    reads: bool
    traps: bool
    calls: frozenset[bytes]


def _blanked(ptx: bytes) -> bytes:
    """The PTX with its comments blanked and its strings emptied (their braces and words are
    not the code's)."""
    return _COMMENT_OR_STRING.sub(
        lambda m: b'""' if m.group(0)[:1] == b'"' else b" ", ptx)


def _top_level_blocks(text: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Each outermost ``{...}`` of the PTX as (the statement's head before it, its body)."""
    depth, start, head_from = 0, 0, 0
    for m in _BRACE.finditer(text):
        if m.group(0) == b"{":
            if depth == 0:
                start = m.start()
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:
                head = text[head_from:start]
                yield head[head.rfind(b";") + 1:], text[start + 1:m.start()]
                head_from = m.end()


def _functions(ptx: bytes) -> dict[bytes, _Function]:
    """The PTX's defined functions by name (a declaration, with no body, is not one)."""
    found: dict[bytes, _Function] = {}
    for head, body in _top_level_blocks(_blanked(ptx)):
        m = _FUNCTION.search(head)
        if m is None or b"=" in head:  # a variable's initialiser, a .section's bytes
            continue
        traps = any(_instruction(body, t.start()) for t in _TRAP.finditer(body))
        found[m.group(2)] = _Function(m.group(1) == b"entry", _WORKSPACE.search(body) is not None,
                                      traps, _calls(body))
    return found


def grid_syncs(ptx: bytes) -> dict[str, bool]:
    """Whether each ``.entry`` of the PTX synchronises the grid, by its name (the symbol): the
    code it reaches (itself and every function it calls, directly or not) reads the driver's
    grid workspace (``%envreg1``/``%envreg2``) and can abort (``trap``, or a failed
    ``assert``'s ``__assertfail``), as ``grid_group::sync`` does without a cooperative launch.
    A read alone is no grid sync: ``if (grid.is_valid()) grid.sync();`` runs either way, and a
    ``-G`` build of ``this_grid().thread_rank()`` reads the workspace and never uses it. A trap
    alone is none either (``cuda::std::optional::value()``, ``array::at()``).

    An entry that calls through a register (a function pointer, a virtual function) or a
    function the PTX does not define (an ``extern`` one that another object brings, the device
    runtime's), other than the driver's :data:`SYSTEM_CALLS`, is left out: this PTX cannot
    tell.
    """
    functions = _functions(ptx)
    answers: dict[str, bool] = {}
    for name, function in functions.items():
        if not function.entry:
            continue
        seen, todo = {name}, [function]
        reads = aborts = False
        known = True
        while todo and known:
            here = todo.pop()
            reads, aborts = reads or here.reads, aborts or here.traps
            for callee in here.calls - seen:
                seen.add(callee)
                if callee in functions:
                    todo.append(functions[callee])
                elif callee == b"__assertfail":
                    aborts = True
                elif callee not in SYSTEM_CALLS:
                    known = False
        if known:
            answers[name.decode("utf-8", "replace")] = reads and aborts
    return answers


def grid_sync_table(answers: Mapping[str, bool] | None, symbols: Iterable[str]
                    ) -> GridSyncTable | None:
    """The table for a CUBIN's kernels (``symbols``) from :func:`grid_syncs`'s answers (a
    kernel they leave out is unknown); None without answers (no PTX was read)."""
    if answers is None:
        return None
    symbols = tuple(symbols)
    return GridSyncTable(frozenset(s for s in symbols if answers.get(s)),
                         frozenset(s for s in symbols if s not in answers))
