"""One launch run again in a child process under compute-sanitizer or Nsight Compute, never in
the notebook's own process: :func:`sanitize` and :func:`profile` (``Kernel.sanitize`` /
``Kernel.profile`` are these).

The child gets what a Dask worker gets, the module's travelling record (the ``-lineinfo`` build
of the same cell, which the pipeline hands the module as a callable: :class:`DebugSupport`), and
the launch by value (:mod:`.capture`). It rebuilds the arguments in buffers of its own,
launches once and synchronises; the tool watches it. The notebook's arrays are only read (one
device-to-host copy each) and its context is not otherwise used.

The results are frozen records (:class:`SanitizeReport`, and the profile's in
:mod:`cudamagic.toolchain.tools.profiler`); their words are the view's (:mod:`cudamagic.view.debug`),
which the module's :class:`DebugSupport` passes in as ``present``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import files
from ..errors import ArgumentValueError, LaunchError, OptionError
from ..toolchain.device import driver
from ..toolchain.tools import tools
from ..core.lines import cell_lines
from ..core.units import size_text
from ..toolchain.tools.sanitizer import Finding, SanitizerTool, Space, read_xml, sanitizer_argv
from ..errors import SanitizerOutputError
from .calls import CallSyntax, read_calls, read_options
from .capture import (TIMES_ENV, ArgAddress, ArgKind, Capture, CapturedArg, Placement, capture,
                      check_launch, encode_capture, name_address, check_options,
                      uninitialized_indices)
from .params import layout_error
from . import warm
from .support import DebugSupport, LineinfoBuild

__all__ = ["LineinfoBuild", "DebugSupport", "CellFinding", "SanitizeReport", "sanitize",
           "profile", "prepare_run", "CHILD_MODULE"]

#: the module a child runs (``python -m``): it imports the pipeline's arrival of a module
CHILD_MODULE = "cudamagic.pipeline.child"


@dataclass(frozen=True)
class CellFinding:
    """Findings of one kind at one place, folded: the first of them, and how many.

    Attributes
    ----------
    finding : Finding
        The first record (its thread, block and address).
    count : int
    cell_line : int or None
        The line in the cell (NVRTC's line plus the cell's offset).
    source_line : str or None
        That line's text.
    place : ArgAddress or None
        The first record's address named against the launch's arguments.
    peer_line, peer_source : int or None, str or None
        A hazard's other access (``finding.peer``): its cell line and that line's text.
    """

    finding: Finding
    count: int = 1
    cell_line: int | None = None
    source_line: str | None = None
    place: ArgAddress | None = None
    peer_line: int | None = None
    peer_source: str | None = None


@dataclass(frozen=True)
class SanitizeReport:
    """The result of one launch under compute-sanitizer.

    ``findings`` are folded (one per kind and cell line); ``failed`` is the child's own
    account where it ended badly without a finding that says why.
    """

    tool: SanitizerTool
    tool_version: str
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    findings: tuple[CellFinding, ...] = ()
    total: int = 0
    lineinfo: bool = False
    failed: str = ""
    #: The array arguments whose bytes the child was given (their contents left out): initcheck
    #: takes them as written, so a read of memory the notebook never wrote there is not seen
    copied_in: tuple[CapturedArg, ...] = ()
    #: Seconds the capture of the arguments and the child's run took
    capture_seconds: float = field(default=0.0, compare=False)
    child_seconds: float = field(default=0.0, compare=False)

    @property
    def clean(self) -> bool:
        return not self.findings and not self.failed


def fold(findings: Sequence[Finding], build: LineinfoBuild, c: Capture,
         placed: Sequence[Placement]) -> tuple[CellFinding, ...]:
    """One :class:`CellFinding` per kind and place (a hazard's: both its places), in the order
    first seen, each with the cell's own line and its text, and the first address named
    against the arguments."""
    lines = cell_lines(build.source)

    def in_cell(file: str | None, line: int | None) -> tuple[int | None, str | None]:
        if line is None or file not in (build.program, None) or not build.source:
            return None, None
        return line + build.line_offset, lines[line - 1] if 0 < line <= len(lines) else None

    groups: dict[tuple, list[Finding]] = {}
    for f in findings:
        other = (f.peer.file, f.peer.line, f.peer.access) if f.peer is not None else None
        groups.setdefault((f.kind, f.file, f.line, f.space, f.access, other), []).append(f)
    out = []
    for (_, file, line, *_rest), group in groups.items():
        first = group[0]
        cell_line, text = in_cell(file, line)
        peer_line, peer_text = in_cell(first.peer.file, first.peer.line) \
            if first.peer is not None else (None, None)
        # a __shared__ or local address is in its own window: it lies in no argument's buffer
        named = first.address is not None and first.space in (Space.GLOBAL, Space.UNKNOWN)
        place = name_address(first.address, c, placed) if named and first.address is not None \
            else None
        out.append(CellFinding(first, len(group), cell_line, text, place, peer_line, peer_text))
    return tuple(out)


def copied_in(c: Capture) -> tuple[CapturedArg, ...]:
    """The array arguments the child gets the notebook's bytes of (not ``uninitialized``, not
    empty), without those bytes."""
    return tuple(dataclasses.replace(a, contents=b"") for a in c.args
                 if a.kind is ArgKind.ARRAY and a.copied and a.contents)


def _check_tool(name: str, tool: Any) -> SanitizerTool:
    try:
        return SanitizerTool.of(tool)
    except ValueError as exc:
        raise ArgumentValueError(f"{name}: {exc}") from None


def prepare_run(kernel: Any, grid: Any, block: Any, args: Sequence[Any],
                launch_options: dict[str, Any], *, labels: Sequence[str] = (),
                uninitialized: Sequence[int] = ()) -> tuple[Capture, LineinfoBuild, int]:
    """Check the launch, then (with a GPU only) capture it by value and get the module's
    ``-lineinfo`` build: ``(capture, build, device)``.

    :raises ArgumentError: an argument the launch would refuse (checked first, no GPU needed).
    :raises NoDeviceError: after the checks, without a GPU.
    """
    name = kernel.name_expression
    check_options(name, launch_options)
    specs = kernel.params
    if specs is None:
        raise LaunchError(f"{name}: the CUBIN carries no parameter records for "
                          f"{kernel.symbol}; its arguments cannot be captured")
    bad = layout_error(name, specs)
    if bad is not None:
        raise bad
    device: list[int] = []

    def copy(ptr: int, nbytes: int) -> bytes:
        return driver.copy_to_host(ptr, nbytes)

    def ready() -> None:  # the arguments are checked: from here on a GPU is needed
        driver._require()
        device.append(driver.current_device())
        driver.ensure_context(device[0])
        driver.synchronize()  # the arrays as the work queued before this call leaves them

    c = capture(name, specs, grid, block, args, launch_options.get("shared_mem", 0),
                copy=copy, labels=labels, uninitialized=uninitialized, ready=ready)
    support = getattr(kernel.module, "debug", None)
    build = support.lineinfo() if support is not None else \
        LineinfoBuild(kernel.module.payload()) if kernel.module is not None else None
    if build is None:
        raise LaunchError(f"{name}: a kernel made outside a module cannot be sent to a child "
                          "process")
    return c, build, device[0]


#: the child's start: the notebook's sys.path, every entry as it is (PYTHONPATH cannot say one
#: that holds os.pathsep), then :data:`CHILD_MODULE`'s main
_BOOT = ("import json, os, sys\n"
         "with open(os.path.join(sys.argv[1], 'path.json'), encoding='utf-8') as f:\n"
         "    sys.path[:] = json.load(f)\n"
         f"from {CHILD_MODULE} import main\n"
         "sys.exit(main(sys.argv[1:]))\n")


def _child_env() -> dict[str, str]:
    """The notebook's environment without cudamagic's own settings: the child compiles and
    caches nothing, and the team cache's address holds its password
    (``CUDAMAGIC_REMOTE_CACHE``); only where the child stamps its steps is kept."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("CUDAMAGIC_") or k == TIMES_ENV}


def write_run(folder: Path, c: Capture, build: LineinfoBuild, device: int) -> list[str]:
    """The child's files in ``folder`` (the module, the capture, the notebook's sys.path,
    each entry made absolute: the child runs in ``folder``), and its command line."""
    (folder / "module.bin").write_bytes(build.payload)
    (folder / "capture.bin").write_bytes(encode_capture(c))
    (folder / "path.json").write_text(json.dumps(_child_path()), encoding="utf-8")
    return [sys.executable, "-c", _BOOT, os.fspath(folder), str(device)]


def _child_path() -> list[str]:
    return [os.path.abspath(p) for p in sys.path if isinstance(p, str)]


#: the most bytes of placed.json read (the child writes three numbers per array argument)
_MAX_PLACED = 1 << 20


def read_placed(folder: Path) -> tuple[list[Placement], str]:
    """Where the child put each array, and its own account of how it ended (nothing where it
    ended before it wrote them).

    :raises LaunchError: the file is not what the child writes (it names what is wrong).
    """
    where = folder / "placed.json"
    try:
        data = json.loads(files.read_regular(where, max_size=_MAX_PLACED))
    except FileNotFoundError:
        return [], ""
    except files.FileRefused as exc:
        raise _placed_error(where, f"it {exc.reason}") from None
    except (OSError, ValueError) as exc:  # ValueError: not JSON, not UTF-8
        raise _placed_error(where, f"it cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("placed"), list) \
            or not isinstance(data.get("error", ""), str):
        raise _placed_error(where, 'not {"placed": [[index, address, bytes], ...], "error": '
                                   'text}')
    out = []
    for row in data["placed"]:
        if not (isinstance(row, list) and len(row) == 3
                and all(type(n) is int and n >= 0 for n in row)):
            raise _placed_error(where, f"the placement {str(row)[:80]} is not three "
                                       "non-negative integers (index, address, bytes)")
        out.append(Placement(*row))
    return out, data.get("error", "")


def _placed_error(where: Path, what: str) -> LaunchError:
    return LaunchError(f"the tool run's child left {where} that is not what it writes ({what}): "
                       "the run's result cannot be read; run it again")


def sanitize(kernel: Any, grid: Any, block: Any, args: Sequence[Any] = (),
             tool: Any = "memcheck", *, labels: Sequence[str] = (),
             uninitialized: Sequence[int] = (), save_report: "str | os.PathLike | None" = None,
             **launch_options: Any) -> Any:
    """Run the launch once in a child process under compute-sanitizer's ``tool``
    (``save_report``: a file to keep the tool's XML report in).

    :raises ArgumentError: a bad argument or tool name (before anything starts).
    :raises NoDeviceError: no GPU (after the checks).
    :raises ToolMissingError: no compute-sanitizer.
    """
    which = _check_tool(kernel.name_expression, tool)
    _check_save(kernel.name_expression, save_report)
    t0 = time.perf_counter()
    c, build, device = prepare_run(kernel, grid, block, args, launch_options, labels=labels,
                                   uninitialized=uninitialized)
    program = tools.require(tools.ToolKind.SANITIZER)
    t1 = time.perf_counter()
    env, path = _child_env(), _child_path()
    kind, key = f"sanitize {which.value}", warm.interpreter_key(env, path, program.path)
    ready = warm.take(kind, key)  # the child the last run of this tool left waiting
    folder = ready.folder if ready is not None else tools.scratch_folder()
    try:
        child = write_run(folder, c, build, device)
        report = folder / "report.xml"
        done = ready.go(device) if ready is not None else tools.run_child(
            sanitizer_argv(program.path, which, report, child), env=env, cwd=folder)
        t2 = time.perf_counter()
        unread = ""  # the report, a result, unread (too large, not the tool's): never "clean"
        try:
            findings = read_xml(report, which)
        except SanitizerOutputError as exc:
            findings, unread = (), str(exc)
        placed, said = read_placed(folder)
        if save_report is not None and _is_file(report):
            shutil.copyfile(report, save_report)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    warm.keep(kind, key, lambda f: sanitizer_argv(
        program.path, which, f / "report.xml",
        [sys.executable, "-c", warm.warm_boot(CHILD_MODULE), os.fspath(f), str(os.getpid()),
         str(device)]),
        env, path)
    folded = fold(findings, build, c, placed)
    failed = failed_account(bool(folded), done, said, unread)
    record = SanitizeReport(which, program.version, kernel.name_expression, c.grid, c.block,
                            findings=folded, total=len(findings), lineinfo=build.lineinfo,
                            failed=failed, copied_in=copied_in(c), capture_seconds=t1 - t0,
                            child_seconds=t2 - t1)
    return _present(kernel, record)


def failed_account(found: bool, done: tools.ChildResult, said: str, unread: str) -> str:
    """Why a run that ``found`` no finding is not clean ("" where it is): its report unread
    (``unread``: what was wrong with it), the child's own account (``said``), or the last
    lines of its output where it exited badly."""
    if unread:
        return f"the tool's report was not read, so no finding of it is shown: {unread}"
    if found or (done.returncode == 0 and not said):
        return ""
    return said or _tail(done, stderr=True) or f"the child exited with {done.returncode}"


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a regular file, itself (not through a link)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _check_save(name: str, path: "str | os.PathLike | None") -> None:
    """A ``save_report`` file a run can write at its end (its folder there), checked before
    the run starts: a copy that failed after it lost the run's findings."""
    if path is None:
        return
    try:
        folder = Path(os.fspath(path)).expanduser().absolute().parent
    except TypeError:
        raise ArgumentValueError(f"{name}: save_report={path!r:.60} is not a file path") from None
    if not folder.is_dir() or Path(os.fspath(path)).is_dir():
        raise ArgumentValueError(f"{name}: save_report={os.fspath(path)!r}: "
                                 + (f"the folder {str(folder)!r} does not exist"
                                    if not folder.is_dir() else "it is a folder")
                                 + "; give a file in an existing folder")


def _with_occupancy(p: Any, kernel: Any, c: Capture) -> Any:
    """The profile with cudamagic's own occupancy for the launch's block (the driver's answer
    on this GPU), beside ncu's theoretical figure."""
    threads = c.block[0] * c.block[1] * c.block[2]
    try:
        row = kernel.occupancy([threads], [c.shared_mem]).at(threads, c.shared_mem)
    except Exception:  # noqa: BLE001 - the profile stands without it
        return p
    return dataclasses.replace(p, occupancy_pct=100.0 * row.occupancy,
                               limited_by=tuple(row.limited_by))


def sanitize_call(last: Any) -> str | None:
    """The ``k.sanitize(grid, block, args)`` call that reruns the last launch,
    ``(kernel, grid, block)``, under compute-sanitizer (None: no launch yet)."""
    if last is None:
        return None
    kernel, grid, block = last
    return f"{kernel.python_name}.sanitize({grid!r}, {block!r}, args)"


def sanitize_hint(last: Any) -> str:
    """What to run to find a fault's cause, naming the last launch where there is one."""
    call = sanitize_call(last)
    if call is None:
        return ("To find the cause, run the faulting launch as kernel.sanitize(grid, block, "
                "args) after the restart.")
    return (f"The last cudamagic launch was {call.replace('.sanitize', '')}: to find the "
            f"cause, after the restart run {call} with the same args in its place (the launch "
            "then runs in a child process under compute-sanitizer; tool='racecheck', "
            "'initcheck', 'synccheck' for the other checks).")


def _tail(done: tools.ChildResult, stderr: bool = False, lines: int = 8) -> str:
    """The last ``lines`` of what the child wrote (``stderr``: its stderr, else its stdout;
    otherwise both), and how much came before what was kept of it."""
    if stderr:
        text, cut = (done.stderr, done.stderr_cut) if done.stderr.strip() else \
            (done.stdout, done.stdout_cut)
    else:
        text, cut = done.stdout + done.stderr, done.stdout_cut + done.stderr_cut
    shown = text.strip().splitlines()[-lines:]
    if cut and shown:
        shown.insert(0, f"({size_text(cut)} of output before its last "
                        f"{size_text(tools.TAIL_BYTES)}, not kept)")
    return "\n".join(shown)


def _present(kernel: Any, record: Any) -> Any:
    support = getattr(kernel.module, "debug", None)
    return support.present(record) if support is not None else record


def profile(kernel: Any, grid: Any, block: Any, args: Sequence[Any] = (), *,
            labels: Sequence[str] = (), **launch_options: Any) -> Any:
    """Run the launch once in a child process under Nsight Compute and read its report.

    :raises ArgumentError: a bad argument (before anything starts).
    :raises NoDeviceError: no GPU (after the checks).
    :raises ToolMissingError: no ncu (the message says how to install it).
    """
    from ..toolchain.tools import profiler

    records = profile_many([(kernel, grid, block, args, launch_options, labels)])
    return _present(kernel, records[0] if len(records) == 1 else profiler.Comparison(
        tuple(records)))


def profile_many(launches: Sequence[tuple]) -> list[Any]:
    """Each ``(kernel, grid, block, args, launch_options, labels)`` profiled in a child of its
    own (one ncu run each); every launch is checked before the first starts."""
    from ..toolchain.tools import profiler

    prepared = [(k, prepare_run(k, g, b, a, o, labels=lab)) for k, g, b, a, o, lab in launches]
    program = tools.require(tools.ToolKind.NCU)
    out = []
    for k, (c, build, device) in prepared:
        folder = tools.scratch_folder()
        try:
            child = write_run(folder, c, build, device)
            report = folder / "profile.ncu-rep"
            done = tools.run_child(profiler.ncu_argv(program.path, k.symbol, report, child),
                                   env=_child_env(), cwd=folder)
            if not report.exists():
                raise LaunchError(f"{k.name_expression}: ncu wrote no report (exit "
                                  f"{done.returncode}):\n{_tail(done)}")
            read = profiler.read_report(report, label=k.name_expression, source=build.source,
                                        line_offset=build.line_offset, program=build.program,
                                        tool=program.version, seconds=done.seconds)
            out.append(_with_occupancy(read, k, c))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return out


# --- %cuda_sanitize and %cuda_profile: a line of launches ----------------------------------------

_NO_STREAM = "a tool run takes no stream: the launch runs again in a child process of its own"
SANITIZE_SYNTAX = CallSyntax(
    magic="%cuda_sanitize", verb="sanitize", flags=frozenset(),
    valued={"--tool": "tool", "-t": "tool", "--uninitialized": "uninitialized"},
    usage="%cuda_sanitize [--tool memcheck|racecheck|initcheck|synccheck] [--uninitialized I,J] "
          "kernel(grid, block, args[, shared_mem]) [; other(grid, block, args) ...]",
    stream_note=_NO_STREAM)
PROFILE_SYNTAX = CallSyntax(
    magic="%cuda_profile", verb="profile", flags=frozenset(), valued={},
    usage="%cuda_profile kernel(grid, block, args[, shared_mem]) [; other(grid, block, args) "
          "...]", stream_note=_NO_STREAM)


def _checked_calls(line: str, namespace: dict, syntax: CallSyntax) -> tuple[dict, list]:
    """The line's options and launches, every launch checked before any starts."""
    opts, rest = read_options(line, syntax)
    calls = read_calls(rest, namespace, syntax)
    for c in calls:
        if not hasattr(c.kernel, "sanitize") or getattr(c.kernel, "params", None) is None:
            raise OptionError(f"{syntax.magic}: {c.label!r}: {type(c.kernel).__name__} is not "
                              "a cudamagic kernel")
        check_launch(c.kernel.name_expression, c.kernel.params, c.grid, c.block, c.args,
                     c.shared_mem)
    return opts, calls


def _indices(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise OptionError(f"%cuda_sanitize: --uninitialized {text!r}: give argument indices "
                          "separated by commas, e.g. --uninitialized 0,2") from None


def sanitize_line(line: str, namespace: dict) -> Any:
    """What ``%cuda_sanitize`` does: each launch of the line under compute-sanitizer, one
    child each; every launch is checked first.

    :raises OptionError: a line that does not say what to run.
    :raises ArgumentError: a launch the kernel would refuse.
    :raises NoDeviceError: no GPU.
    """
    opts, calls = _checked_calls(line, namespace, SANITIZE_SYNTAX)
    tool = opts.get("tool", "memcheck")
    uninit = _indices(opts.get("uninitialized"))
    for c in calls:  # the options against every launch, before the first starts
        _check_tool(c.kernel.name_expression, tool)
        uninitialized_indices(c.kernel.name_expression, c.kernel.params, uninit)
    views = [sanitize(c.kernel, c.grid, c.block, c.args, tool, labels=c.arg_labels,
                      uninitialized=uninit, shared_mem=c.shared_mem) for c in calls]
    return views[0] if len(views) == 1 else _present(calls[0].kernel, tuple(
        getattr(v, "record", v) for v in views))


def profile_line(line: str, namespace: dict) -> Any:
    """What ``%cuda_profile`` does: each launch of the line under ncu, side by side.

    :raises OptionError, ArgumentError: as for :func:`sanitize_line`.
    :raises NoDeviceError: no GPU.
    :raises ToolMissingError: no ncu.
    """
    from ..toolchain.tools import profiler

    _, calls = _checked_calls(line, namespace, PROFILE_SYNTAX)
    records = profile_many([(c.kernel, c.grid, c.block, c.args, {"shared_mem": c.shared_mem},
                             c.arg_labels) for c in calls])
    return _present(calls[0].kernel, records[0] if len(records) == 1 else
                    profiler.Comparison(tuple(records)))
