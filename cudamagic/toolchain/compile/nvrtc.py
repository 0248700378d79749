"""NVRTC: source and name expressions in, CUBIN and the exact lowered-name map out.

Every NVRTC call goes through :func:`_check`, which turns ``(status, value...)`` into the value or
an error. A failed compile raises :class:`~cudamagic.errors.CompileError` whose message is NVRTC's
log rewritten to the cell's own line numbers, and an error in a name expression points at its
``-n`` option.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...core.process import cached
from ...errors import CompileError, CudaMagicError, LogError, OptionError, ToolchainError
from ...core.forksafe import NativeSection
from ...core.lines import cell_lines
from ...cxx.kernel_names import plain_kernels, template_kernels
from ...core.options import lto, shift_lines
from ...core.toolkit import include_hints, std_header_dirs
from .pch import CANNOT_OPEN, PchKind, PchOutcome, PchPlan, raise_heap, read_outcome
from .listing import (NO_LISTING, HeaderListing, ListingChild, Traced, in_pch, listing_source,
                      made_whole)
from ..binary.ptx import grid_syncs
from .threads import clean_thread, on_own_thread as _on_own_thread
from .tracefolder import compile_folder

__all__ = ["CompileResult", "compile_cubin", "shift_lines", "nvrtc_version", "nvrtc_identity",
           "supported_archs", "rewrite_log", "name_map_lines", "template_kernels"]

# one NVRTC program's CUBIN (or LTO IR), lowered names, rewritten log and PTX (None: none)
# and what became of its precompiled header (None: it was given none)
_Program = tuple[bytes, dict[str, str], str, "bytes | None", "PchOutcome | None"]


@dataclass(frozen=True)
class CompileResult:
    """What one NVRTC compile gave.

    Attributes
    ----------
    cubin : bytes
    lowered : dict of str to str
        Name expression -> mangled symbol, exactly as NVRTC lowered it.
    log : str
        NVRTC's log (warnings), rewritten to cell line numbers; empty when silent.
    seconds : float
        Wall time of the compile.
    trace : bytes or None
        NVRTC's ``--fdevice-time-trace`` JSON (which names every header it read); None where
        this NVRTC cannot write one.
    grid_sync : dict of str to bool, or None
        Whether each kernel synchronises the grid, read from the PTX NVRTC assembled the CUBIN
        from (:func:`~cudamagic.toolchain.binary.ptx.grid_syncs`; a kernel it cannot tell about is
        not there); None where NVRTC made no PTX (``-dlto``: LTO IR, whose link may read it:
        :func:`~cudamagic.toolchain.compile.link.link_compiled`).
    pch : PchOutcome or None
        What NVRTC did with the precompiled header it was given (None: none was given).
    """

    cubin: bytes
    lowered: dict[str, str]
    log: str
    seconds: float
    trace: bytes | None = None
    grid_sync: dict[str, bool] | None = None
    pch: PchOutcome | None = None
    #: NVRTC wrote a trace that lacks its front end's event (:func:`whole_trace`): ``trace``
    #: is None, and the headers read are not known from it
    trace_broken: bool = False
    #: how ``trace`` was had: the header listing beside the compile, or the compile traced
    #: itself and why (:mod:`cudamagic.toolchain.compile.listing`)
    listing: HeaderListing = NO_LISTING
    #: the compile's own NVRTC time (``seconds`` less what the listing added past it)
    nvrtc_seconds: float = 0.0
    #: where the PCH was made from the cell's include lines alone (:func:`_made_apart`): the
    #: trace of those lines, which names the headers the PCH holds and no other
    pch_trace: bytes | None = None


def _probe() -> None:
    """A compile of an empty kernel to CUBIN, through every stage of a compile, straight
    through the bindings (:data:`_INSIDE`'s probe)."""
    from cuda.bindings import nvrtc

    _, archs = nvrtc.nvrtcGetSupportedArchs()
    _, prog = nvrtc.nvrtcCreateProgram(b"__global__ void probe() {}", b"probe.cu", 0, [], [])
    try:
        _compile_program(nvrtc, prog, [f"-arch=sm_{archs[-1]}".encode()])
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


#: How long a forked child's probe of NVRTC may take (an empty kernel's compile takes
#: milliseconds; this leaves room for a machine under load).
PROBE_S = 5.0

#: Every NVRTC program's life, from its creation to its destruction: a child forked during one
#: probes NVRTC first and is refused it where the fork left NVRTC's lock held.
_INSIDE = NativeSection("NVRTC", _probe, PROBE_S, ToolchainError)


def _nvrtc():
    _INSIDE.check()
    try:
        from cuda.bindings import nvrtc  # imported on first compile: it loads libnvrtc
    except ImportError as exc:  # the package was installed without a CUDA stack
        from ...core.toolkit import install_command

        raise ToolchainError(
            "NVRTC is not installed here (no cuda.bindings): cudamagic needs the CUDA stack of "
            "your driver's major version beside it, its extra cu13 (a CUDA 13 driver) or cu12 "
            f"(CUDA 12). Install it with: {install_command('cu13')}") \
            from exc
    return nvrtc


def _check(result, what: str):
    """``(status, *values)`` -> values (one value unwrapped); a bad status raises."""
    status, *values = result
    if int(status) != 0:
        _, msg = _nvrtc().nvrtcGetErrorString(status)
        raise CompileError(f"NVRTC failed in {what}: {msg.decode() if msg else status}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@cached(1)
def nvrtc_version() -> str:
    """NVRTC's version as ``"major.minor"``."""
    major, minor = _check(_nvrtc().nvrtcVersion(), "nvrtcVersion")
    return f"{major}.{minor}"


@cached(1)
def nvrtc_identity() -> str:
    """NVRTC's identity for a cache key where no wheel names it (a conda or system toolkit):
    its version and the loaded library's files and sizes (``13.0 (libnvrtc.so.13:...)``).
    ``nvrtcVersion`` says major.minor only, so a patch release would otherwise share the
    entries of the NVRTC before it."""
    from ...core.toolkit import loaded_libraries

    version = nvrtc_version()  # (loads the library)
    # libnvrtc.so itself: its builtins library is mapped by the first compile only, so a key
    # made before one would differ from a key made after
    files = loaded_libraries("libnvrtc.so")
    return f"{version} ({', '.join(files)})" if files else version


@cached(1)
def supported_archs() -> tuple[int, ...]:
    """The SM versions this NVRTC can build a CUBIN for (``(75, 80, ..., 120)``)."""
    return tuple(int(a) for a in _check(_nvrtc().nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


def _log(prog) -> str:
    nvrtc = _nvrtc()
    size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    # NVRTC writes into the buffer it is given: it must be a fresh, writable one. A bytes
    # object such as b" " * 1 is CPython's shared single-byte object, and writing into it
    # changes b" " for the whole interpreter.
    buf = bytearray(size)
    _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return bytes(buf).rstrip(b"\0 \n").decode("utf-8", "replace")


def compile_cubin(source: str, name_expressions: Sequence[str], options: Sequence[str],
                  program_name: str = "cell.cu", line_offset: int = 0,
                  trace: bool = True, pch: PchPlan | None = None) -> CompileResult:
    """Compile CUDA C++ to a CUBIN with NVRTC, on a thread of its own (:func:`_on_own_thread`).

    Parameters
    ----------
    source : str
        The CUDA C++ source.
    name_expressions : sequence of str
        Expressions to instantiate and lower (``"saxpy<float>"``).
    options : sequence of str
        NVRTC options, ``-arch=sm_XX`` among them (a CUBIN needs a real architecture).
    program_name : str
        The file name NVRTC uses in its log and for ``__FILE__``.
    line_offset : int
        Added to NVRTC's line numbers in the rewritten log (1 when a magic line precedes the
        source in the cell).
    trace : bool
        Ask NVRTC for its time trace, which lists every header the compile read
        (:mod:`cudamagic.toolchain.compile.deps`). An NVRTC that does not know the option, or a machine
        without room to write it (:data:`~cudamagic.toolchain.compile.tracefolder.TRACE_ROOM`), compiles without it.
    pch : PchPlan or None
        A precompiled header to make or to use (:mod:`cudamagic.toolchain.compile.pch`); NVRTC's log
        says nothing of it, the result's ``pch`` does.

    :raises CompileError: NVRTC refused the source or a name expression.
    :raises OptionError: NVRTC refused an option.
    """
    start = time.perf_counter()
    args = (source, tuple(name_expressions), tuple(options), program_name, line_offset)
    if trace and pch is not None and pch.create and pch.prefix \
            and not made_whole(source, pch.prefix):
        return _made_apart(args, pch, start)
    if trace and pch is not None and not pch.create and pch.prefix \
            and in_pch(source, pch.prefix):
        program, traced, listing = _from_pch(args, pch)
        return _result(program, traced, listing, start)
    listed = listing_source(source) if trace else Traced.NOTHING_LEFT_OUT
    # (a compile that reads a PCH is listed too where it may open more than the PCH holds:
    # NVRTC refuses a PCH made untraced to a traced compile, "incompatible options")
    child = _start_listing(listed, options, program_name) \
        if isinstance(listed, str) and not isinstance(listed, Traced) else None
    if child is not None:
        try:
            program, _ = _on_own_thread(_traced_compile, *args, False, pch)
        except BaseException:
            child.stop()
            raise
        main_end = time.perf_counter()
        bound = LISTING_WAIT_S + 2 * (main_end - start)
        traced, listing = _listed(child, args, main_end, bound)
    else:
        program, traced = _on_own_thread(_traced_compile, *args, trace, pch)
        why = listed if isinstance(listed, Traced) else Traced.NO_CHILD
        listing = HeaderListing(traced=why) if traced is not None else NO_LISTING
    return _result(program, traced, listing, start)


def _result(program: _Program, traced: bytes | None, listing: HeaderListing,
            start: float) -> CompileResult:
    cubin, lowered, log, ptx, made = program
    syncs = None if ptx is None else grid_syncs(ptx)  # read outside NVRTC's lock
    broken = traced is not None and not whole_trace(traced)
    seconds = time.perf_counter() - start
    return CompileResult(cubin, lowered, log, seconds, None if broken else traced, syncs, made,
                         trace_broken=broken, listing=listing,
                         nvrtc_seconds=seconds - listing.added_seconds)


def _made_apart(args: tuple, pch: PchPlan, start: float) -> CompileResult:
    """A PCH made from the cell's include lines alone (``pch.prefix``: the cell has more
    leading directives past them, which NVRTC's PCH of the cell itself would hold, or opens a
    file past them, which it would list), untraced as the compiles that use it are, with their
    trace taken beside it; then the cell compiled from it. Where the lines alone did not
    compile, or gave no PCH or no trace, the cell is compiled without one."""
    source, names, options, program_name, line_offset = args
    cut = (pch.prefix + "\n", (), options, program_name, 0)
    child = _start_listing(cut[0], options, program_name)
    made = traced = None
    if child is not None:
        try:
            made = _on_own_thread(_traced_compile, *cut, False, pch)[0]
            ok, _ = child.wait(LISTING_WAIT_S + 2 * (time.perf_counter() - start))
            traced = _read_trace(child.folder) if ok else None
        except BaseException as exc:
            child.stop()
            if not isinstance(exc, CudaMagicError):
                raise
        finally:
            shutil.rmtree(child.folder, ignore_errors=True)
    outcome = made[4] if made is not None else None
    if outcome is None or outcome.kind is not PchKind.MADE or traced is None \
            or not whole_trace(traced):
        # (the private file goes when settled)
        result = compile_cubin(source, names, options, program_name, line_offset, pch=None)
        return replace(result, pch=outcome if outcome is not None
                       and outcome.kind is PchKind.HEAP else None)
    result = compile_cubin(source, names, options, program_name, line_offset,
                           pch=replace(pch, create=False))
    used = result.pch is not None and result.pch.kind is PchKind.USED
    return replace(result, pch=outcome if used else None, pch_trace=traced,
                   seconds=time.perf_counter() - start)


def _from_pch(args: tuple, pch: PchPlan) -> tuple[_Program, bytes | None, HeaderListing]:
    """A compile whose every file-opening line is in the PCH it starts from: untraced and
    unlisted (its headers are the PCH record's, :func:`~cudamagic.toolchain.compile.listing.in_pch`);
    where NVRTC did not take the PCH, the compile read the headers itself: compiled again,
    traced, whose trace serves."""
    program, _ = _on_own_thread(_traced_compile, *args, False, pch)
    made = program[4]
    if made is not None and made.kind is PchKind.USED:
        return program, None, HeaderListing(in_pch=True)
    main_end = time.perf_counter()
    try:
        _, traced = _on_own_thread(_traced_compile, *args, True, None)
    except CudaMagicError:
        traced = b""  # the cell compiled once and not again: what it read is not known
    return program, traced, HeaderListing(traced=Traced.PCH_NOT_USED,
                                          added_seconds=time.perf_counter() - main_end)


def _start_listing(source: str, options: Sequence[str], program_name: str
                   ) -> ListingChild | None:
    """The header listing's compile of ``source`` (:func:`listing_source`'s text), traced, in
    a forked child (:class:`~cudamagic.toolchain.compile.listing.ListingChild`), or None where no
    trace can be written or no child started (the compile then runs traced itself)."""
    folder = compile_folder()
    if folder is None:
        return None
    extra = f"--fdevice-time-trace={os.path.join(folder, 'trace')}"
    child = ListingChild.start(folder, _INSIDE.fork_outside, _compile, source, (),
                               [*options, extra], program_name, 0)
    if child is None:
        shutil.rmtree(folder, ignore_errors=True)
    return child


#: How long the listing may run past its compile, beyond twice the compile's time (the listing
#: reads what the compile reads, without the code after the last include)
LISTING_WAIT_S = 30.0


def _listed(child: ListingChild, args: tuple, main_end: float, bound_s: float
            ) -> tuple[bytes | None, HeaderListing]:
    """The listing's trace and its record (the compile itself returned at ``main_end``); where
    the listing failed, or ran past ``bound_s``, the compile again, traced, whose trace
    serves."""
    try:
        ok, seconds = child.wait(bound_s)
        trace = _read_trace(child.folder) if ok else None
    finally:
        shutil.rmtree(child.folder, ignore_errors=True)
    if ok:
        return trace, HeaderListing(beside=True, seconds=seconds,
                                    added_seconds=max(0.0, time.perf_counter() - main_end))
    try:
        _, trace = _on_own_thread(_traced_compile, *args, True, None)
    except CudaMagicError:
        trace = b""  # the cell compiled once and not again: what it read is not known
    return trace, HeaderListing(traced=Traced.LISTING_FAILED,
                                added_seconds=max(0.0, time.perf_counter() - main_end))


#: The event of the compile's front end in NVRTC's trace (every header event nests in it), as
#: its name field gives it (a header's name in a detail field does not match)
_FRONT_END_EVENT = re.compile(rb'"name"\s*:\s*"CUDA C\+\+ Front-End"')


def whole_trace(trace: bytes) -> bool:
    """Whether NVRTC's trace of a compile is whole: it has the front end's event.

    Once a compile has failed with a catastrophic error while inside a header (an
    ``#include`` that finds nothing or a folder, an ``#error``, the include depth limit or
    too many errors, in a header the cell or a pre-include brought in), NVRTC 13.5's trace of
    every later compile in the process lacks the front end's event and the events of the
    builtin header and of the cell's first include, while other headers are still named: such
    a trace names only some of the headers read, and a manifest made from it would miss an
    edit of the rest.
    """
    return _FRONT_END_EVENT.search(trace) is not None


def _traced_compile(source: str, name_expressions: Sequence[str], options: Sequence[str],
                    program_name: str, line_offset: int, trace: bool,
                    pch: PchPlan | None = None) -> tuple[_Program, bytes | None]:
    """:func:`_compile` with NVRTC's trace written to a fresh private folder (removed after),
    where ``trace`` asks for one and there is room: (what the program gave, trace or None)."""
    folder = compile_folder() if trace else None
    if folder is None:
        return _compile(source, name_expressions, options, program_name, line_offset,
                        pch), None
    try:
        extra = f"--fdevice-time-trace={os.path.join(folder, 'trace')}"
        try:
            out = _compile(source, name_expressions, [*options, extra], program_name,
                           line_offset, pch)
        except OptionError as exc:
            if exc.refused is None or extra not in exc.refused:
                raise
            # an NVRTC older than the option: compile without it
            return _compile(source, name_expressions, options, program_name, line_offset,
                            pch), None
        return out, _read_trace(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _read_trace(folder: str) -> bytes | None:
    # NVRTC appends ".json" to the name it is given (and appends to an existing file: the
    # folder is fresh for each compile)
    try:
        with open(os.path.join(folder, "trace.json"), "rb") as f:
            return f.read()
    except OSError:
        return None


# NVRTC's assembler failing to open a file of its own: nothing in a cell's code does that (seen
# once as "ptxas fatal : Output file '(null)' could not be opened", not reproduced: see
# docs/testing.md)
_OUTSIDE_THE_CELL = re.compile(r"^ptxas fatal\s*: .*could not be opened", re.M)


def _compile(source: str, name_expressions: Sequence[str], options: Sequence[str],
             program_name: str, line_offset: int, pch: PchPlan | None = None) -> _Program:
    """One NVRTC program (:data:`_Program`). A failure of NVRTC's own
    files is tried once more, then raised as :class:`~cudamagic.errors.ToolchainError`, never
    as the cell's :class:`~cudamagic.errors.CompileError`; a precompiled header NVRTC could
    not open is given up and the compile done without it."""
    for attempt in (1, 2):
        try:
            with _INSIDE:
                return _program(source, name_expressions, options, program_name, line_offset,
                                pch)
        except CompileError as exc:
            if pch is not None and CANNOT_OPEN in (exc.log or str(exc)):
                out = _compile(source, name_expressions, options, program_name, line_offset)
                return (*out[:4], PchOutcome(PchKind.FAILED if pch.create else PchKind.REFUSED))
            found = _OUTSIDE_THE_CELL.search(exc.log or str(exc))
            if found is None:
                raise
            if attempt == 2:
                raise ToolchainError(
                    f"NVRTC could not compile {program_name} for a reason outside the cell's "
                    f"code, twice: its assembler said {found.group(0)!r}. The cell itself may "
                    f"be fine: run it again; if it persists, check the process's temporary "
                    f"folder and file limits") from exc
    raise AssertionError("unreachable")


def _program(source: str, name_expressions: Sequence[str], options: Sequence[str],
             program_name: str, line_offset: int, pch: PchPlan | None = None) -> _Program:
    nvrtc = _nvrtc()
    ptx = None
    made = None
    given = options  # what the message names: the PCH's options are the package's own
    if pch is not None:
        options = [*options, *pch.options()]
        if pch.create:
            raise_heap(nvrtc, pch.heap)
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), program_name.encode(), 0, [], []),
                  "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            _check(nvrtc.nvrtcAddNameExpression(prog, expr.encode()), "nvrtcAddNameExpression")
        opts = [o.encode() for o in options]
        status = _compile_program(nvrtc, prog, opts)
        log = _log(prog)
        if pch is not None:
            made, log = read_outcome(nvrtc, prog, pch, log)
        if status == nvrtc.nvrtcResult.NVRTC_ERROR_INVALID_OPTION:
            raise OptionError("NVRTC refused an option; the options passed were: "
                              + " ".join(given) + (f"\n{log}" if log else ""),
                              refused=tuple(options))
        if int(status) != 0:
            text = rewrite_log(log, program_name, name_expressions, line_offset, source)
            shims = f"-I{std_header_dirs()[1][0]}" in options
            hints = [*_not_templates(source, name_expressions, options),
                     *include_hints(log, source, std_headers=shims)]
            raise CompileError(compile_error_message(program_name, text, hints), text,
                               log_errors(text))
        lowered = {expr: _check(nvrtc.nvrtcGetLoweredName(prog, expr.encode()),
                                "nvrtcGetLoweredName").decode() for expr in name_expressions}
        size_of, get = nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN
        if lto(options):
            # NVRTC makes LTO IR and no CUBIN: nvJitLink makes that (toolchain/compile/link.py)
            size_of, get = nvrtc.nvrtcGetLTOIRSize, nvrtc.nvrtcGetLTOIR
        else:  # the PTX ptxas made the CUBIN of: it says which kernels sync the grid
            ptx = _ptx(nvrtc, prog)
        size = _check(size_of(prog), size_of.__name__)
        cubin = bytearray(size)  # writable and ours alone (see _log)
        _check(get(prog, cubin), get.__name__)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    text = rewrite_log(log, program_name, name_expressions, line_offset, source) if log else ""
    return bytes(cubin), lowered, text, ptx, made


#: Per thread: whether a traced compile failed on it since the last one that succeeded
_TRACE_LEFT = threading.local()
_TRACE_OPTIONS = (b"--fdevice-time-trace", b"-fdevice-time-trace")


def _compile_program(nvrtc: Any, prog: Any, opts: Sequence[bytes]) -> Any:
    """``nvrtcCompileProgram``: the package's one call of it. On a thread where a traced
    compile failed (NVRTC's trace state left set: :mod:`cudamagic.toolchain.compile.threads`) it runs
    on a new thread, so that it cannot write that trace into the current folder or abort."""
    if getattr(_TRACE_LEFT, "set", False):
        return clean_thread(_compile_program, nvrtc, prog, opts)
    status, = nvrtc.nvrtcCompileProgram(prog, len(opts), list(opts))
    if any(o.startswith(_TRACE_OPTIONS) for o in opts):
        _TRACE_LEFT.set = int(status) != 0
    return status


def _ptx(nvrtc: Any, prog: Any) -> bytes | None:
    """The program's PTX, or None where NVRTC has none to give (the CUBIN's records decide)."""
    status, size = nvrtc.nvrtcGetPTXSize(prog)
    if int(status) != 0 or size <= 1:
        return None
    buf = bytearray(size)  # writable and ours alone (see _log)
    status, = nvrtc.nvrtcGetPTX(prog, buf)
    return bytes(buf) if int(status) == 0 else None


#: Name expressions with template arguments a failed compile asks NVRTC about, at most.
_PROBED = 4


def _not_templates(source: str, name_expressions: Sequence[str], options: Sequence[str]
                   ) -> list[str]:
    """For each ``-n "f<...>"`` whose bare name NVRTC takes alone as a name expression (a
    function that is no template: NVRTC lowers ``f`` itself), a sentence saying so. Asked only
    after a failed compile, each a compile of its own (the first :data:`_PROBED`)."""
    nvrtc = _nvrtc()
    opts = [o.encode() for o in options if not o.startswith("--fdevice-time-trace")]
    out = []
    for expr in [e for e in name_expressions if "<" in e][:_PROBED]:
        bare = expr.split("<", 1)[0].strip()
        prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), b"probe.cu", 0, [], []),
                      "nvrtcCreateProgram")
        try:
            _check(nvrtc.nvrtcAddNameExpression(prog, bare.encode()), "nvrtcAddNameExpression")
            status = _compile_program(nvrtc, prog, opts)
        finally:
            nvrtc.nvrtcDestroyProgram(prog)
        if int(status) == 0:
            out.append(f'{bare} is not a template: -n "{expr}" gives it template arguments. '
                       f"Drop that -n (a kernel that is not a template is reached by its own "
                       f"name), or make {bare} a template")
    return out


_LOCATED = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<rest>.*)$")


def _located(line: str) -> tuple[int, str]:
    """A diagnostic's line number and text after its place (0 and the whole line where it names
    no place)."""
    m = _LOCATED.match(line)
    return (int(m.group("line")), m.group("rest")) if m else (0, line)
_NAME_MAP = "__nv_name_map"
_SUMMARY = re.compile(r"^\d+ errors? detected in the compilation of .*$")
_PRAGMA = "#pragma nv_mangled_name "
_PARSE_FAILED = "Error in parsing name expression for lowered name lookup"
# what NVRTC adds after a name expression's first error, each a consequence of it
_FOLLOW_ON = ("type name is not allowed", "expected an expression", "expected an identifier",
              _PARSE_FAILED)
_UNDEFINED = re.compile(r'error: identifier "(?P<name>[^"]+)" is undefined')
_TYPE_WORDS = ("float", "double", "int", "unsigned", "long", "short", "char", "bool", "size_t",
               "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t",
               "uint64_t", "__half", "__nv_bfloat16", "float2", "float4", "double2")


def _no_such_kernel(name: str, hints: "_Hints") -> str:
    """Why ``-n NAME`` without template arguments names nothing, with the kernel meant."""
    plain, templates = hints.plain, hints.defined
    guess = [hints.near(name, plain + templates, 0.6)] if hints.budget > 0 else []
    near = [k for k in guess if k] or [k for k in plain + templates
                                       if k.lower() == name.lower()][:1]
    if near and near[0] in plain:
        return (f"error: the cell defines no kernel {name!r}; a non-template kernel needs no "
                f"-n (it is pushed under its own name); did you mean {near[0]}?")
    return (f"error: the cell defines no kernel {name!r}"
            + (f"; did you mean {near[0]!r}?" if near else "")
            + f" (its kernels: {hints.listed(plain + templates)})")


def name_map_lines(name_expressions: Sequence[str]) -> dict[int, str]:
    """The line of NVRTC's internal ``__nv_name_map`` that holds each name expression.

    NVRTC keeps the expressions in a sorted set and writes one ``#pragma nv_mangled_name`` line
    per expression from line 2, in byte order (``-n "zeta<float>" -n "saxpy<float>" -n
    "alpha<int>"`` puts ``alpha<int>`` on line 2), not in the order they were added; read off
    NVRTC 13.5's logs (tests/test_compiler.py checks it against NVRTC).
    """
    ordered = sorted(set(name_expressions), key=lambda e: e.encode("utf-8", "surrogatepass"))
    return {i + 2: e for i, e in enumerate(ordered)}


def _expression_of(block: list[str], by_line: dict[int, str], exprs: set[str], line: int
                   ) -> str:
    echo = next((x.strip()[len(_PRAGMA):] for x in block[1:] if x.strip().startswith(_PRAGMA)),
                None)
    if echo is not None and echo in exprs:
        return echo
    return by_line.get(line, echo or "?")


def _pointed(block: list[str], expr: str) -> list[str]:
    """The echo of ``#pragma nv_mangled_name EXPR`` and its caret, as the user's ``-n``."""
    for i, x in enumerate(block[1:-1], 1):
        at = x.find(_PRAGMA)
        caret = block[i + 1]
        if at >= 0 and caret.strip() == "^":
            col = caret.index("^") - at - len(_PRAGMA)
            lead = '  -n "'
            return [f'{lead}{expr}"', " " * (len(lead) + max(col, 0)) + "^"]
    return []


class _Hints:
    """The cell's templates, read once, and how many more did-you-mean hints a log may get
    (each costs a fuzzy match; a log of thousands of errors gets them for its first few)."""

    SHOWN = 10  # templates listed in a message

    def __init__(self, source: str | None, budget: int = 20) -> None:
        self.source = source
        self.budget = budget
        self._defined: list[str] | None = None
        self._plain: list[str] | None = None

    @property
    def defined(self) -> list[str]:
        if self._defined is None:
            self._defined = template_kernels(self.source or "")
        return self._defined

    @property
    def plain(self) -> list[str]:
        if self._plain is None:
            self._plain = plain_kernels(self.source or "")
        return self._plain

    def near(self, name: str, words: Sequence[str], cutoff: float) -> str | None:
        if self.budget <= 0 or len(name) > 200:  # no hint where the match would cost more
            return None
        self.budget -= 1
        found = difflib.get_close_matches(name, words, n=1, cutoff=cutoff)
        return found[0] if found else None

    def listed(self, names: Sequence[str] | None = None) -> str:
        """``names`` (the cell's templates by default), the first few of them."""
        defined = self.defined if names is None else names
        more = len(defined) - self.SHOWN
        return ", ".join(defined[:self.SHOWN]) + (f" and {more} more" if more > 0 else "")


def _name_map_errors(blocks: list[tuple[int, list[str]]], expr: str, hints: _Hints
                     ) -> list[str]:
    """One name expression's errors: the first said plainly (a misspelled template named as
    such, with the closest one the cell defines), NVRTC's follow-on errors left out."""
    out: list[str] = []
    first = True
    for _, block in blocks:
        rest = _located(block[0])[1]
        if not first and any(f in rest for f in _FOLLOW_ON):
            continue
        if first and _PARSE_FAILED in rest and len(blocks) > 1:
            continue
        undefined = _UNDEFINED.search(rest)
        head = expr.split("<", 1)[0].strip().rsplit("::", 1)[-1]
        if undefined and hints.source is not None:
            name = undefined.group("name")
            if name == head and "<" not in expr and hints.plain:
                rest = _no_such_kernel(name, hints)
                out += [f'name expression -n "{expr}": {rest}', *_pointed(block, expr), ""]
                return out
            if name == head:
                near = hints.near(name, hints.defined, 0.6)
                rest = (f"error: the cell defines no kernel template {name!r}"
                        + (f"; did you mean {near!r}?" if near else "")
                        + (f" (its __global__ templates: {hints.listed()})" if hints.defined
                           else " (it defines no __global__ template)"))
                out += [f'name expression -n "{expr}": {rest}', *_pointed(block, expr), ""]
                return out
            near = hints.near(name, _TYPE_WORDS, 0.75)
            if near:
                rest += f"; did you mean {near!r}?"
        out += [f'name expression -n "{expr}": {rest}', *_pointed(block, expr), ""]
        first = False
    return out


def rewrite_log(log: str, program_name: str, name_expressions: Sequence[str],
                line_offset: int = 0, source: str | None = None) -> str:
    """NVRTC's log with ``cell.cu(6): error`` as ``line 7: error`` and the errors of NVRTC's
    internal name map as the ``-n`` they belong to.

    The echo of the offending line and its caret, which NVRTC prints below each diagnostic, are
    kept (for a name expression: its ``-n``, with the caret in it); the trailing "N errors
    detected" summary is dropped (the message counts errors itself). A name expression's
    follow-on errors are left out, and a misspelled template is named with the closest one the
    ``source`` defines.
    """
    by_line = name_map_lines(name_expressions)
    exprs = set(by_line.values())
    hints = _Hints(source)
    items: list[str | list[str]] = []  # log lines, and name-map diagnostics with their echo
    block: list[str] | None = None
    for line in cell_lines(log):  # NVRTC's lines: an echoed cell line is one of them
        m = _LOCATED.match(line)
        if block is not None and not m and line.startswith(" ") and line.strip():
            block.append(line)
            continue
        if block is not None and not line.strip():
            continue  # the blank line after a name-map diagnostic: its group brings its own
        block = None
        if m and m.group("file") == _NAME_MAP:
            block = [line]
            items.append(block)
        elif m and m.group("file") == program_name:
            items.append(f"line {int(m.group('line')) + line_offset}: {m.group('rest')}")
        elif not _SUMMARY.match(line.strip()):
            items.append(line)
    grouped: dict[str, list[tuple[int, list[str]]]] = {}
    for item in items:
        if isinstance(item, list):
            n = _located(item[0])[0]
            grouped.setdefault(_expression_of(item, by_line, exprs, n), []).append((n, item))
    text: list[str] = []
    said: set[str] = set()
    for item in items:
        if isinstance(item, str):
            text.append(item)
            continue
        n = _located(item[0])[0]
        expr = _expression_of(item, by_line, exprs, n)
        if expr not in said:  # an expression's errors together, where its first one was
            said.add(expr)
            text += _name_map_errors(grouped[expr], expr, hints)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(text)).strip("\n")  # one blank line between


#: A log of more lines than this is shown as its first error and a count of the rest
SHOWN_LOG_LINES = 24


def compile_error_message(program_name: str, text: str, hints: Sequence[str]) -> str:
    """What a failed compile says, the answer first: what to do (the hints), then the first
    error at its cell line, then the rest of the log, or past :data:`SHOWN_LOG_LINES` lines a
    count of it (the error's ``log`` holds it all)."""
    count = count_errors(text)
    counted = f" ({count} error{'s' if count != 1 else ''})" if count else ""
    lines = [f"NVRTC could not compile {program_name}{counted}:",
             *(f"hint: {h}" for h in hints)]
    log = [_cut(line) for line in cell_lines(text)] or ["(NVRTC wrote no log)"]
    if len(log) <= SHOWN_LOG_LINES:
        return "\n".join(lines + log)
    starts = [i for i, line in enumerate(log) if _ERROR_LINE.match(line)]
    end = starts[1] if len(starts) > 1 else SHOWN_LOG_LINES
    first = log[:min(end, SHOWN_LOG_LINES)]
    more = count - 1 if count > 1 else 0
    rest = (f"... {more} more error{'s' if more != 1 else ''} ({len(log) - len(first)} more "
            "lines of NVRTC's log): print(sys.last_value.log) shows them all")
    return "\n".join(lines + first + [rest])


#: The most characters a line of a failed compile's message shows (a 100 000-character -n was
#: quoted whole, twice: a 300 KB message); the error's ``log`` keeps every line whole
SHOWN_LINE_CHARS = 1000
#: of those, the line's last characters: NVRTC writes what is wrong at a line's end
#: (``-n "k<1111...>": error: integer constant is too large``)
SHOWN_LINE_END = 300


def _cut(line: str) -> str:
    if len(line) <= SHOWN_LINE_CHARS:
        return line
    head = SHOWN_LINE_CHARS - SHOWN_LINE_END
    return (f"{line[:head]} ... ({len(line)} characters: the error's log has it whole) ... "
            f"{line[-SHOWN_LINE_END:]}")


_ERROR_LINE = re.compile(r"^\S.*?: (?:catastrophic )?error")


_CELL_ERROR = re.compile(r"line (\d+): (?:catastrophic )?error")
_EXPRESSION_ERROR = re.compile(r'name expression -n "(.*)": (?:catastrophic )?error')


def log_errors(text: str) -> tuple[LogError, ...]:
    """The errors of a log :func:`rewrite_log` wrote, each by its place: a cell line, or the
    ``-n`` it belongs to (the words are this module's own, read back here only)."""
    out = []
    for line in cell_lines(text):
        if (cell := _CELL_ERROR.match(line)) is not None:
            out.append(LogError(line=int(cell.group(1))))
        elif (named := _EXPRESSION_ERROR.match(line)) is not None:
            out.append(LogError(expression=named.group(1)))
    return tuple(out)


def count_errors(text: str) -> int:
    """The errors in a rewritten log."""
    return sum(1 for line in cell_lines(text) if _ERROR_LINE.match(line))
