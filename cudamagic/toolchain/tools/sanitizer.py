"""compute-sanitizer's findings as frozen records: its command line for one child, and its XML
report (``--xml --save FILE``) read into :class:`Finding` records, each with a
:class:`FindingKind`, the memory space and direction, the size and address, the device source
place (``-lineinfo``), and the thread and block.

The XML format is the tool's structured output (NVIDIA documents its use for suppression files:
``<ComputeSanitizerOutput>`` of ``<record>`` elements with ``<kind>``, ``<what>`` and the
stacks). The element names that give each field are in :data:`_TAGS`; each field is taken from
the first of its names that the record has, so a record that lacks one leaves the field None.
"""

from __future__ import annotations

import enum
import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

from ...core import files
from ...errors import CudaMagicError, SanitizerOutputError

__all__ = ["SanitizerTool", "FindingKind", "Space", "Access", "Finding", "SanitizerOutputError",
           "parse_xml", "read_xml", "sanitizer_argv", "MAX_REPORT_BYTES"]


class SanitizerTool(enum.Enum):
    """compute-sanitizer's tools (``--tool``)."""

    MEMCHECK = "memcheck"
    RACECHECK = "racecheck"
    INITCHECK = "initcheck"
    SYNCCHECK = "synccheck"

    @classmethod
    def of(cls, name: "str | SanitizerTool") -> "SanitizerTool":
        """The tool named ``name``.

        :raises ValueError: no such tool (the message lists them).
        """
        if isinstance(name, SanitizerTool):
            return name
        try:
            return cls(str(name).strip().lower())
        except ValueError:
            raise ValueError(f"no compute-sanitizer tool {name!r}: take one of "
                             f"{', '.join(t.value for t in cls)}") from None


class FindingKind(enum.Enum):
    """What a finding is."""

    OUT_OF_BOUNDS = "out-of-bounds access"
    MISALIGNED = "misaligned access"
    RACE = "data race"
    UNINITIALIZED = "uninitialised read"
    BARRIER = "barrier misuse"
    ASSERT = "device assert"
    API = "CUDA API error"
    LEAK = "leak"
    OTHER = "error"


class Space(enum.Enum):
    """The memory an access went to."""

    GLOBAL = "__global__"
    SHARED = "__shared__"
    LOCAL = "__local__"
    UNKNOWN = ""


class Access(enum.Enum):
    """What an access did."""

    READ = "read"
    WRITE = "write"
    ATOMIC = "atomic"
    UNKNOWN = ""


@dataclass(frozen=True)
class Finding:
    """One record of compute-sanitizer's report.

    Attributes
    ----------
    tool : SanitizerTool
    kind : FindingKind
    text : str
        The tool's own one-line description.
    space, access : Space, Access
    size : int or None
        Bytes of the access.
    address : int or None
        The address accessed (the child's; :mod:`cudamagic.launch.capture` names it against
        the launch's arguments).
    function : str
        The device function it happened in ("" where the record has none).
    file : str or None
        The device source file (``cell.cu`` for a cell; needs ``-lineinfo``).
    line : int or None
        The line in ``file`` (NVRTC's numbering).
    pc : int or None
        The offset in the function's code.
    thread, block : tuple of 3 ints, or None
    peer : Finding or None
        A hazard's other access (racecheck: the record's second thread, its access, place and
        thread); None for every other record.
    """

    tool: SanitizerTool
    kind: FindingKind
    text: str
    space: Space = Space.UNKNOWN
    access: Access = Access.UNKNOWN
    size: int | None = None
    address: int | None = None
    function: str = ""
    file: str | None = None
    line: int | None = None
    pc: int | None = None
    thread: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    peer: "Finding | None" = None



#: the largest report read (a launch that faults in every thread writes one record a thread,
#: bounded by --print-limit: see :func:`sanitizer_argv`)
MAX_REPORT_BYTES = 64 << 20
#: records compute-sanitizer keeps of one run (--print-limit)
PRINT_LIMIT = 1000
#: the deepest element of a report read (the tool's own lie at most 6 deep: a record, its
#: stack, a frame, a field)
MAX_DEPTH = 32

# each field, and the element names it is read from, first found wins
_TAGS = {
    "thread": ("threadIdx", "threadId", "thread"),
    "block": ("blockIdx", "blockId", "block"),
    "size": ("size", "accessSize"),
    "address": ("address", "accessAddress", "addr"),
    "space": ("space", "addressSpace", "memorySpace"),
    "access": ("direction", "accessType", "access"),
    "function": ("func", "function"),
    "file": ("path", "file", "filename"),
    "line": ("line",),
    "pc": ("pc", "offset"),
}
# the device place: a <where> element, else the first frame of the device stack
_WHERE = ("where", "deviceStack/frame", "devStack/frame")


def sanitizer_argv(program: str, tool: SanitizerTool, report: str | os.PathLike,
                   child: Sequence[str]) -> list[str]:
    """The command line that runs ``child`` under ``tool``, its findings saved as XML."""
    argv = [program, "--tool", tool.value, "--xml", "--save", os.fspath(report),
            "--print-limit", str(PRINT_LIMIT), "--target-processes", "application-only"]
    if tool is SanitizerTool.MEMCHECK:
        argv += ["--leak-check", "no"]
    elif tool is SanitizerTool.RACECHECK:
        argv += ["--racecheck-report", "hazard"]
    return argv + list(child)


def _first(record: ET.Element, field: str, scope: "ET.Element | None" = None) -> ET.Element | None:
    where = record if scope is None else scope
    for tag in _TAGS[field]:
        found = where.find(f".//{tag}")
        if found is not None:
            return found
    return None


def _int(el: ET.Element | None) -> int | None:
    text = (el.text or "").strip().replace(",", "") if el is not None else ""
    try:
        return int(text, 0)
    except ValueError:
        return None


def _dims(el: ET.Element | None) -> tuple[int, int, int] | None:
    if el is None:
        return None
    parts = [_int(el.find(c)) for c in "xyz"]
    if any(p is None for p in parts):
        return None
    return (parts[0], parts[1], parts[2])  # type: ignore[return-value]


def _space(record: ET.Element, text: str) -> Space:
    el = _first(record, "space")
    words = ((el.text or "") if el is not None else text).lower()
    for space in (Space.GLOBAL, Space.SHARED, Space.LOCAL):
        if space.value.strip("_") in words:
            return space
    return Space.UNKNOWN


def _access(record: ET.Element, text: str) -> Access:
    el = _first(record, "access")
    words = ((el.text or "") if el is not None else text).lower()
    for access in (Access.ATOMIC, Access.WRITE, Access.READ):
        if access.value in words:
            return access
    return Access.UNKNOWN


def _kind(tool: SanitizerTool, record_kind: str, text: str) -> FindingKind:
    """What a record is: by the tool that made it, the record's kind, and for memcheck the
    class of error its description names."""
    low, rk = text.lower(), record_kind.lower()
    if rk == "api":
        return FindingKind.API
    if "leak" in rk or "leak" in low:
        return FindingKind.LEAK
    if tool is SanitizerTool.RACECHECK:
        return FindingKind.RACE
    if tool is SanitizerTool.INITCHECK:
        return FindingKind.UNINITIALIZED
    if tool is SanitizerTool.SYNCCHECK:
        return FindingKind.BARRIER
    if "assert" in low or "assert" in rk:
        return FindingKind.ASSERT
    if "misaligned" in low:
        return FindingKind.MISALIGNED
    if "invalid" in low or "out of bounds" in low or "out-of-bounds" in low:
        return FindingKind.OUT_OF_BOUNDS
    return FindingKind.OTHER


def _finding(tool: SanitizerTool, record: ET.Element) -> Finding:
    kind_el = record.find("kind")
    text_el = record.find("what/text")
    if text_el is None:
        text_el = record.find(".//text")
    text = " ".join((text_el.text or "").split()) if text_el is not None else ""
    kind = _kind(tool, (kind_el.text or "") if kind_el is not None else "", text)
    # a racecheck hazard: the two accesses as what/thread0 and what/thread1, each with its own
    # access, threadIdx and where; the block and address under what/common
    first, second = record.find("what/thread0"), record.find("what/thread1")
    if first is not None:
        common = record.find("what/common")
        block = _dims(_first(common, "block")) if common is not None else None
        address = _int(_first(common, "address")) if common is not None else None
        peer = _access_of(tool, kind, text, second, block, address) \
            if second is not None else None
        return _access_of(tool, kind, text, first, block, address, peer)
    where = next((w for w in (record.find(p) for p in _WHERE) if w is not None), None)
    # the device place only: a record without one (an API error) has its host stack's frames
    func = _first(record, "function", where) if where is not None else None
    path = _first(record, "file", where) if where is not None else None
    who = record.find("who")
    space = _space(record, text)
    if space is Space.UNKNOWN and tool is SanitizerTool.RACECHECK:
        space = Space.SHARED  # racecheck watches shared memory only
    return Finding(
        tool=tool, kind=kind, text=text, space=space, access=_access(record, text),
        size=_int(_first(record, "size")), address=_int(_first(record, "address")),
        function=(func.text or "").strip() if func is not None else "",
        file=os.path.basename((path.text or "").strip()) or None if path is not None else None,
        line=_int(_first(record, "line", where)) if where is not None else None,
        pc=_int(_first(record, "pc", where)) if where is not None else None,
        thread=_dims(_first(record, "thread", who)), block=_dims(_first(record, "block", who)))


def _access_of(tool: SanitizerTool, kind: FindingKind, text: str, thread: ET.Element,
               block: tuple[int, int, int] | None, address: int | None,
               peer: Finding | None = None) -> Finding:
    """One access of a hazard record (its ``thread0`` or ``thread1`` element)."""
    where = thread.find("where")
    scope = where if where is not None else thread
    func, path = _first(scope, "function"), _first(scope, "file")
    access = thread.find("access")
    return Finding(
        tool=tool, kind=kind, text=text, space=Space.SHARED,  # racecheck: shared memory only
        access=_access(thread, "") if access is not None else Access.UNKNOWN,
        address=address, function=(func.text or "").strip() if func is not None else "",
        file=os.path.basename((path.text or "").strip()) or None if path is not None else None,
        line=_int(_first(scope, "line")), pc=_int(_first(scope, "pc")),
        thread=_dims(_first(thread, "thread")), block=block, peer=peer)


def read_xml(path: "str | os.PathLike[str]", tool: SanitizerTool) -> tuple[Finding, ...]:
    """The findings of the report in ``path`` (none where the tool wrote no file), read as
    :func:`cudamagic.core.files.read_regular` reads an untrusted file: a FIFO, a device, a folder
    or a link refused at once, the size checked before a byte is read.

    :raises SanitizerOutputError: as :func:`parse_xml`, or a report that cannot be read.
    """
    try:  # the child's folder is the tool's: a FIFO or a link there is no report of its
        data = files.read_regular(path, max_size=MAX_REPORT_BYTES)
    except FileNotFoundError:
        return ()
    except files.TooLarge as exc:
        raise SanitizerOutputError(f"compute-sanitizer's report is {exc.size} bytes, more "
                                   f"than the {MAX_REPORT_BYTES >> 20} MiB read") from None
    except files.NotAFile as exc:
        raise SanitizerOutputError(f"compute-sanitizer's report {os.fspath(path)} is "
                                   f"{exc.kind}, not a file the tool wrote: refused") from None
    except OSError as exc:
        raise SanitizerOutputError(f"compute-sanitizer's report {os.fspath(path)} cannot be "
                                   f"read ({exc.strerror or exc})") from None
    return parse_xml(data, tool)


def _tree(text: str) -> ET.Element:
    """The report's root element, its nesting checked to go no deeper than :data:`MAX_DEPTH`
    (one look at each element, level by level).

    :raises SanitizerOutputError: not well-formed XML, or nested too deep.
    """
    try:
        root = ET.fromstring(text)
    except (ET.ParseError, LookupError, ValueError) as exc:  # LookupError: a bad encoding
        raise SanitizerOutputError(f"compute-sanitizer's report is not well-formed XML "
                                   f"({exc}); was the child stopped while it wrote it?") from None
    level = [root]
    for _ in range(MAX_DEPTH):
        level = [child for el in level for child in el]
    if level:
        raise SanitizerOutputError(f"compute-sanitizer's report nests its elements more than "
                                   f"{MAX_DEPTH} deep, which its records never are: refused")
    return root


def parse_xml(data: bytes, tool: SanitizerTool) -> tuple[Finding, ...]:
    """The findings of one compute-sanitizer report, in its order.

    :raises SanitizerOutputError: not compute-sanitizer's XML, too large, or cut short.
    """
    if len(data) > MAX_REPORT_BYTES:
        raise SanitizerOutputError(f"compute-sanitizer's report is {len(data)} bytes, more "
                                   f"than the {MAX_REPORT_BYTES >> 20} MiB read")
    # the tool writes UTF-8: read as text, the report's own encoding declaration is not
    # followed, so a UTF-16 file cannot hide a DTD from the check below
    text = data.decode("utf-8-sig", errors="replace")
    if "\x00" in text:  # UTF-16 or UTF-32 (XML holds no NUL): expat would detect it itself
        raise SanitizerOutputError("compute-sanitizer's report is not UTF-8 text (it holds NUL "
                                   "bytes), which the tool always writes: refused")
    if "<!DOCTYPE" in text or "<!ENTITY" in text:  # the tool writes neither
        raise SanitizerOutputError("compute-sanitizer's report declares a DTD or entities, "
                                   "which its XML never does: refused")
    root = _tree(text)
    if root.tag != "ComputeSanitizerOutput":
        raise SanitizerOutputError(f"not a compute-sanitizer report: its root element is "
                                   f"<{root.tag}>, not <ComputeSanitizerOutput>")
    # the tool's records are the root's children: a <record> inside one is no finding of its
    # own (reading every nested one searched each one's whole subtree: quadratic)
    return tuple(_finding(tool, r) for r in root.findall("record"))
