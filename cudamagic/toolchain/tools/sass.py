"""A CUBIN's machine code with its line table, as ``nvdisasm`` reads them: every instruction of
every kernel, its offset, its text, what kind of work it is, and the source place it came from
with the chain of call sites it was inlined at.

``nvdisasm -c -gi`` prints the code sections and, where the line changes, one comment per level
of the inlining: ``//## File "f", line 3 inlined at "g", line 6``, then ``... line 6 inlined
at ... line 10``, then the outermost ``... line 10``. An instruction without a comment before it
keeps the place of the one above it (nvdisasm writes only the changes). The place is the line
table's, never guessed from the source. nvdisasm comes with the ``nvidia-cuda-nvdisasm`` wheel
(the ``annotate`` extra) or a CUDA toolkit (:mod:`.tools` finds it).
"""

from __future__ import annotations

import enum
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ...errors import CudaMagicError, DisassemblyError
from ...core.units import size_text
from . import tools

__all__ = ["Kind", "Place", "Instruction", "FunctionCode", "Counts", "DisassemblyError",
           "disassemble", "read_listing", "kind_of", "access_bytes", "in_file",
           "LISTING_BYTES"]

#: the most bytes of nvdisasm's listing read (about 4 million instructions, 60 bytes of text
#: each): the listing is read whole up to it, and past it the annotation is refused, saying so
LISTING_BYTES = 256 << 20



class Kind(enum.Enum):
    """What an instruction does, as its opcode says (the counts a line is annotated with)."""

    LOCAL_LOAD = "local load"      # LDL: a spill reloaded, or a local array read
    LOCAL_STORE = "local store"    # STL
    SHARED = "shared"              # LDS, STS, ATOMS, LDSM, STSM
    GLOBAL = "global"              # LDG, STG, ATOMG, RED, generic LD/ST/ATOM, async copies
    BRANCH = "branch"              # BRA, BRX, JMP, JMX, CALL, RET
    BARRIER = "barrier"            # BAR, SYNCS (mbarriers), ARRIVES, WARPSYNC
    OTHER = "other"


# by the opcode's first part (``LDG`` of ``LDG.E.64``)
_KINDS = {
    "LDL": Kind.LOCAL_LOAD, "STL": Kind.LOCAL_STORE,
    **dict.fromkeys(("LDS", "STS", "ATOMS", "LDSM", "STSM"), Kind.SHARED),
    **dict.fromkeys(("LDG", "STG", "ATOMG", "RED", "REDG", "LD", "ST", "ATOM", "LDGSTS",
                     "UBLKCP", "UTMALDG", "UTMASTG", "UTMAREDG", "UBLKRED"), Kind.GLOBAL),
    **dict.fromkeys(("BRA", "BRX", "BRXU", "JMP", "JMX", "JMXU", "CALL", "RET"), Kind.BRANCH),
    **dict.fromkeys(("BAR", "SYNCS", "ARRIVES", "WARPSYNC"), Kind.BARRIER),
}


def kind_of(opcode: str) -> Kind:
    """The kind of work an opcode (``LDL.LU.64``) is."""
    return _KINDS.get(opcode.split(".", 1)[0], Kind.OTHER)


# the width suffixes of a load or store; no suffix is 32 bits
_WIDTHS = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}


def access_bytes(opcode: str) -> int:
    """The bytes one thread moves with a load or store opcode (``STL.64``: 8)."""
    for part in opcode.split(".")[1:]:
        if part in _WIDTHS:
            return _WIDTHS[part]
    return 4


@dataclass(frozen=True)
class Place:
    """A source place of the line table: the file as the compiler named it, and its line."""

    file: str
    line: int


@dataclass(frozen=True)
class Instruction:
    """One machine instruction of a kernel.

    Attributes
    ----------
    offset : int
        Bytes from the start of the kernel's code section (what ncu's PCs are, less the
        function's address).
    text : str
        As nvdisasm prints it, predicate included (``@!P0 BRA `(.L_x_2)``).
    opcode : str
        ``LDG.E.64``.
    places : tuple of Place
        Where it came from, innermost first: the line of the function it was written in, then
        each call site it was inlined at; empty where the line table says nothing.
    padding : bool
        The code's tail after its last instruction: the self-loop and NOPs that round the
        section up, which never run.
    spill : bool
        nvdisasm marks it as a register spilled or refilled (``(*"SpillRefill"*)``).
    """

    offset: int
    text: str
    opcode: str
    places: tuple[Place, ...] = ()
    padding: bool = False
    spill: bool = False

    @property
    def kind(self) -> Kind:
        return kind_of(self.opcode)


@dataclass(frozen=True)
class FunctionCode:
    """The instructions of one kernel's code section (its ``__noinline__`` callees included)."""

    symbol: str
    instructions: tuple[Instruction, ...]


@dataclass(frozen=True)
class Counts:
    """How many instructions of each kind, and the bytes local loads and stores move per
    thread (what ``ptxas -v`` calls spill loads and stores where the kernel has no local
    array)."""

    instructions: int = 0
    local_loads: int = 0
    local_stores: int = 0
    shared: int = 0
    global_: int = 0
    branches: int = 0
    barriers: int = 0
    local_load_bytes: int = 0
    local_store_bytes: int = 0
    spills: int = 0  # local loads and stores nvdisasm marks as spills

    @classmethod
    def of(cls, instructions: Iterable[Instruction]) -> "Counts":
        n = {k: 0 for k in Kind}
        load_bytes = store_bytes = total = spills = 0
        for i in instructions:
            total += 1
            spills += i.spill
            k = i.kind
            n[k] += 1
            if k is Kind.LOCAL_LOAD:
                load_bytes += access_bytes(i.opcode)
            elif k is Kind.LOCAL_STORE:
                store_bytes += access_bytes(i.opcode)
        return cls(total, n[Kind.LOCAL_LOAD], n[Kind.LOCAL_STORE], n[Kind.SHARED],
                   n[Kind.GLOBAL], n[Kind.BRANCH], n[Kind.BARRIER],
                   local_load_bytes=load_bytes, local_store_bytes=store_bytes, spills=spills)

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(*(a + b for a, b in zip(self._values(), other._values())))

    def _values(self) -> tuple[int, ...]:
        return (self.instructions, self.local_loads, self.local_stores, self.shared,
                self.global_, self.branches, self.barriers, self.local_load_bytes,
                self.local_store_bytes, self.spills)


_SECTION = re.compile(r"^//-+ \.text\.(\S+)\s+-+\s*$")
_OTHER_SECTION = re.compile(r"^//-+ ")
_PLACE = re.compile(r'^\s*//## File "((?:[^"\\]|\\.)*)", line (\d+)')
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+(.*?)\s*;?\s*$")
_MARK = re.compile(r'\(\*"[^"]*"\*\)')
_LABEL = re.compile(r"^\s*(\.L_x_\d+):\s*$")


def read_listing(text: str) -> tuple[FunctionCode, ...]:
    """Each kernel's instructions from ``nvdisasm -c -gi``'s listing."""
    out: list[FunctionCode] = []
    symbol: str | None = None
    code: list[Instruction] = []
    labels: dict[int, str] = {}  # instruction index -> the label just above it
    places: tuple[Place, ...] = ()
    pending: list[Place] = []  # the comments since the last instruction: one per level
    label = ""

    def close() -> None:
        if symbol is not None:
            out.append(FunctionCode(symbol, _mark_padding(code, labels)))

    for line in text.splitlines():
        m = _SECTION.match(line)
        if m or _OTHER_SECTION.match(line):
            close()
            symbol, code, labels, places, pending, label = (m.group(1) if m else None), [], \
                {}, (), [], ""
            continue
        if symbol is None:
            continue
        m = _PLACE.match(line)
        if m:
            pending.append(Place(m.group(1).replace('\\"', '"'), int(m.group(2))))
            continue
        m = _LABEL.match(line)
        if m:
            label = m.group(1)
            continue
        m = _INSTRUCTION.match(line)
        if m:
            if pending:
                places, pending = tuple(pending), []
            note = " ".join(_MARK.findall(m.group(2)))  # nvdisasm's marks: (*"SpillRefill"*)
            body = _MARK.sub("", m.group(2)).strip().rstrip(";").strip()
            words = body.split()
            opcode = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
            if label:
                labels[len(code)] = label
                label = ""
            code.append(Instruction(int(m.group(1), 16), body, opcode, places,
                                    spill="SpillRefill" in note))
    close()
    return tuple(out)


def _mark_padding(code: list[Instruction], labels: dict[int, str]) -> tuple[Instruction, ...]:
    """The instructions with the section's tail marked: the NOPs at its end and, before them,
    the unpredicated branch to itself that follows the last EXIT."""
    end = len(code)
    while end and code[end - 1].opcode == "NOP":
        end -= 1
    last = code[end - 1] if end else None
    if last is not None and last.opcode == "BRA" and end - 1 in labels \
            and last.text.endswith(f"`({labels[end - 1]})"):
        end -= 1
    return tuple(i if n < end else Instruction(i.offset, i.text, i.opcode, i.places, True,
                                               i.spill) for n, i in enumerate(code))


def disassemble(cubin: bytes, *, timeout: float = 300.0,
                bound: int | None = None) -> tuple[FunctionCode, ...]:
    """Every kernel of ``cubin`` as nvdisasm reads it, with its line table: its listing is
    read whole (never a tail of it), up to ``bound`` bytes (None: :data:`LISTING_BYTES`).

    :raises ToolMissingError: no nvdisasm (the message says how to install it).
    :raises DisassemblyError: nvdisasm refused the CUBIN, or its listing passed ``bound``.
    """
    program = tools.require(tools.ToolKind.NVDISASM)
    bound = LISTING_BYTES if bound is None else bound
    fd, path = tempfile.mkstemp(prefix="cudamagic-sass-", suffix=".cubin")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        done = tools.run_for_result([program.path, "-c", "-gi", path], bound, timeout=timeout)
    except tools.ResultTooLarge:
        raise DisassemblyError(
            f"nvdisasm's listing of this {size_text(len(cubin))} CUBIN is more than "
            f"{size_text(bound)}, the most read of one: it is not annotated (no part of it is "
            "shown as the whole); annotate a module of fewer kernels") from None
    finally:
        os.unlink(path)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().replace(path, "the CUBIN")
        raise DisassemblyError(f"nvdisasm ({program.version}) could not read the CUBIN: "
                               f"{said[-600:] or f'exit status {done.returncode}'}")
    return read_listing(done.stdout)


def in_file(places: Sequence[Place], name: str) -> int | None:
    """The index of the innermost place in the file called ``name`` (its base name), or None."""
    for n, p in enumerate(places):
        if os.path.basename(p.file) == name:
            return n
    return None
