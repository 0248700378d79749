"""NVRTC: source and name expressions in, CUBIN and the exact lowered-name map out.

Every NVRTC call goes through :func:`_check`, which turns ``(status, value...)`` into the value or
an error. A failed compile raises :class:`~cudamagic.errors.CompileError` whose message is NVRTC's
log rewritten to the cell's own line numbers, and an error in a name expression points at its
``-n`` option.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import CompileError, OptionError

__all__ = ["CompileResult", "compile_cubin", "nvrtc_version", "supported_archs", "rewrite_log"]


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
    """

    cubin: bytes
    lowered: dict[str, str]
    log: str
    seconds: float
    trace: bytes | None = None


def _nvrtc():
    from cuda.bindings import nvrtc  # imported on first compile: it loads libnvrtc

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


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> str:
    """NVRTC's version as ``"major.minor"``."""
    major, minor = _check(_nvrtc().nvrtcVersion(), "nvrtcVersion")
    return f"{major}.{minor}"


@functools.lru_cache(maxsize=1)
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
                  trace: bool = True) -> CompileResult:
    """Compile CUDA C++ to a CUBIN with NVRTC.

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
        (:mod:`cudamagic.deps`). An NVRTC that does not know the option, or a machine without
        room to write it (:data:`TRACE_ROOM`), compiles without it.

    :raises CompileError: NVRTC refused the source or a name expression.
    :raises OptionError: NVRTC refused an option.
    """
    start = time.perf_counter()
    folder = _trace_folder() if trace else None
    try:
        extra = [f"--fdevice-time-trace={os.path.join(folder, 'trace')}"] if folder else []
        try:
            cubin, lowered, log = _compile(source, name_expressions, [*options, *extra],
                                           program_name, line_offset)
        except OptionError as exc:
            if not extra or "fdevice-time-trace" not in str(exc):
                raise
            folder_trace = None  # an NVRTC older than the option: compile without it
            cubin, lowered, log = _compile(source, name_expressions, options, program_name,
                                           line_offset)
        else:
            folder_trace = _read_trace(folder) if folder else None
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    return CompileResult(cubin, lowered, log, time.perf_counter() - start, folder_trace)


#: Free space (and file size limit) a traced compile needs. NVRTC aborts the whole process
#: ("LLVM ERROR: out of memory", SIGABRT) when it cannot write its trace, so a compile traces
#: only where the write cannot fail for want of room; a CCCL-heavy cell writes about 0.6 MB.
TRACE_ROOM = 256 << 20


def _trace_folder() -> str | None:
    """A fresh private folder for NVRTC's trace, in memory (/dev/shm) where there is one, or
    None where a trace could not safely be written (the compile then runs without it)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY and soft < TRACE_ROOM:
            return None
    except (ImportError, ValueError, OSError):  # pragma: no cover - not Linux
        pass
    for parent in ("/dev/shm", tempfile.gettempdir()):
        try:
            st = os.statvfs(parent)
            if st.f_bavail * st.f_frsize >= TRACE_ROOM and os.access(parent, os.W_OK):
                return tempfile.mkdtemp(prefix="cudamagic-trace-", dir=parent)
        except OSError:
            continue
    return None


def _read_trace(folder: str) -> bytes | None:
    # NVRTC appends ".json" to the name it is given (and appends to an existing file: the
    # folder is fresh for each compile)
    try:
        with open(os.path.join(folder, "trace.json"), "rb") as f:
            return f.read()
    except OSError:
        return None


def _compile(source: str, name_expressions: Sequence[str], options: Sequence[str],
             program_name: str, line_offset: int) -> tuple[bytes, dict[str, str], str]:
    """One NVRTC program: (CUBIN, lowered names, rewritten log)."""
    nvrtc = _nvrtc()
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), program_name.encode(), 0, [], []),
                  "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            _check(nvrtc.nvrtcAddNameExpression(prog, expr.encode()), "nvrtcAddNameExpression")
        opts = [o.encode() for o in options]
        status, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = _log(prog)
        if status == nvrtc.nvrtcResult.NVRTC_ERROR_INVALID_OPTION:
            raise OptionError("NVRTC refused an option; the options passed were: "
                              + " ".join(options) + (f"\n{log}" if log else ""))
        if int(status) != 0:
            text = rewrite_log(log, program_name, name_expressions, line_offset, source)
            count = len(re.findall(r"^\S.*?: (?:catastrophic )?error", text, re.M))
            raise CompileError(f"NVRTC could not compile {program_name}"
                               f" ({count or 'an'} error{'s' if count != 1 else ''}):\n{text}",
                               text)
        lowered = {expr: _check(nvrtc.nvrtcGetLoweredName(prog, expr.encode()),
                                "nvrtcGetLoweredName").decode() for expr in name_expressions}
        size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = bytearray(size)  # writable and ours alone (see _log)
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    text = rewrite_log(log, program_name, name_expressions, line_offset, source) if log else ""
    return bytes(cubin), lowered, text


_LOCATED = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<rest>.*)$")
_NAME_MAP = "__nv_name_map"
_SUMMARY = re.compile(r"^\d+ errors? detected in the compilation of .*$")


def rewrite_log(log: str, program_name: str, name_expressions: Sequence[str],
                line_offset: int = 0, source: str | None = None) -> str:
    """NVRTC's log with ``cell.cu(6): error`` as ``line 7: error`` and name-map lines as ``-n``.

    The echo of the offending line and its caret, which NVRTC prints below each diagnostic, are
    kept; the trailing "N errors detected" summary is dropped (the message counts errors itself).
    """
    out: list[str] = []
    for line in log.splitlines():
        m = _LOCATED.match(line)
        if m and m.group("file") == program_name:
            out.append(f"line {int(m.group('line')) + line_offset}: {m.group('rest')}")
        elif m and m.group("file") == _NAME_MAP:
            index = int(m.group("line")) - 2
            expr = (name_expressions[index] if 0 <= index < len(name_expressions) else "?")
            out.append(f'name expression -n "{expr}": {m.group("rest")}')
        elif _SUMMARY.match(line.strip()):
            continue
        else:
            out.append(line)
    return "\n".join(out).strip("\n")
