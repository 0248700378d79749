"""The external debugging tools: finding compute-sanitizer and Nsight Compute (``ncu``), asking
their versions, and running a child process under one of them.

compute-sanitizer comes with the ``nvidia-cuda-sanitizer-api`` wheel (the ``cu13``/``cu12``
extras install it) or with a CUDA toolkit; ``ncu`` only with a toolkit or Nsight Compute's own
installer. :func:`_candidates` lists where each is looked for, in order; what was found is a
frozen :class:`Tool`, and what was not, a :class:`Missing` that says how to install it.
"""

from __future__ import annotations

import enum
import glob
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...core.process import held
from ...errors import CudaMagicError, ScratchError, ToolMissingError
from ...core.units import size_text

__all__ = ["wait_child", "stop_child", "ToolKind", "Found", "Tool", "Missing", "ToolMissingError", "find", "look", "require",
           "ChildResult", "run_child", "run_for_result", "TAIL_BYTES", "ResultTooLarge",
           "ScratchError", "scratch_folder"]


class ToolKind(enum.Enum):
    """The external tools cudamagic runs a launch under."""

    SANITIZER = "compute-sanitizer"
    NCU = "ncu"
    NVDISASM = "nvdisasm"  # reads a CUBIN's machine code and line table (module.annotate)


class Found(enum.Enum):
    """Where a tool was found."""

    WHEEL = "the nvidia-cuda-sanitizer-api wheel"
    NVDISASM_WHEEL = "the nvidia-cuda-nvdisasm wheel"
    CUDA_HOME = "CUDA_HOME/CUDA_PATH"
    PATH = "PATH"
    TOOLKIT = "/usr/local/cuda"
    NSIGHT = "/opt/nvidia/nsight-compute"


@dataclass(frozen=True)
class Tool:
    """A tool found on this machine: its kind, program, version line and where it came from."""

    kind: ToolKind
    path: str
    version: str
    found: Found

    def describe(self) -> str:
        return f"{self.version} ({self.path}, from {self.found.value})"


_INSTALL = {
    ToolKind.SANITIZER: "pip install nvidia-cuda-sanitizer-api (the cu13 extra has it; "
                        "nvidia-cuda-sanitizer-api-cu12 for CUDA 12), or set CUDA_HOME to a "
                        "CUDA toolkit",
    ToolKind.NCU: "Nsight Compute is not pip-installable: install the CUDA toolkit (it has "
                  "bin/ncu) or Nsight Compute from developer.nvidia.com/nsight-compute, then set "
                  "CUDA_HOME or put ncu on PATH",
    ToolKind.NVDISASM: "pip install nvidia-cuda-nvdisasm (the annotate extra has it; "
                       "nvidia-cuda-nvdisasm-cu12 for CUDA 12), or set CUDA_HOME to a CUDA "
                       "toolkit",
}


@dataclass(frozen=True)
class Missing:
    """A tool that is not here: where it was looked for and how to install it."""

    kind: ToolKind
    looked: tuple[str, ...]
    install: str

    def describe(self) -> str:
        return f"not found (looked in {', '.join(self.looked) or 'nothing'}); {self.install}"



def _wheel_sanitizers() -> list[str]:
    """compute-sanitizer programs inside installed NVIDIA wheels (``nvidia/*/compute-sanitizer``
    of every ``nvidia`` namespace folder on sys.path)."""
    out = []
    for base in sys.path:
        out += sorted(glob.glob(os.path.join(base or ".", "nvidia", "*", "compute-sanitizer",
                                             "compute-sanitizer")))
    return out


def _wheel_programs(name: str) -> list[str]:
    """``name`` in the ``bin`` folders of installed NVIDIA wheels (``nvidia/cu13/bin`` of the
    CUDA 13 wheels, ``nvidia/cuda_nvdisasm/bin`` of CUDA 12's)."""
    out = []
    for base in sys.path:
        out += sorted(glob.glob(os.path.join(base or ".", "nvidia", "*", "bin", name)))
    return out


def _homes() -> list[str]:
    return [h for h in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")) if h]


def _candidates(kind: ToolKind) -> list[tuple[str, Found]]:
    """Every place the tool may be, in the order they are tried."""
    name = kind.value
    places: list[tuple[str, Found]] = []
    homes = _homes()
    if kind is ToolKind.SANITIZER:
        # a toolkit the user pointed at comes first: it matches the driver they chose
        places += [(os.path.join(h, "compute-sanitizer", name), Found.CUDA_HOME) for h in homes]
        places += [(os.path.join(h, "bin", name), Found.CUDA_HOME) for h in homes]
        places += [(p, Found.WHEEL) for p in _wheel_sanitizers()]
    elif kind is ToolKind.NVDISASM:
        places += [(os.path.join(h, "bin", name), Found.CUDA_HOME) for h in homes]
        places += [(p, Found.NVDISASM_WHEEL) for p in _wheel_programs(name)]
    else:
        places += [(os.path.join(h, "bin", name), Found.CUDA_HOME) for h in homes]
    on_path = shutil.which(name)
    if on_path:
        places.append((on_path, Found.PATH))
    places.append((f"/usr/local/cuda/bin/{name}", Found.TOOLKIT))
    if kind is ToolKind.SANITIZER:
        places.append((f"/usr/local/cuda/compute-sanitizer/{name}", Found.TOOLKIT))
    elif kind is ToolKind.NCU:
        places += [(p, Found.NSIGHT) for p in sorted(
            glob.glob(f"/opt/nvidia/nsight-compute/*/{name}"), reverse=True)]
    return places


def _version(path: str) -> str | None:
    """The tool's own version line (``--version``), or None where it does not run."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, timeout=30,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.decode(errors="replace").splitlines()
    # the Nsight tools say "Version 2025.3.1.0 ...", the compiler's "Cuda compilation tools,
    # release 13.5, V13.5.37"
    versions = [ln.strip() for ln in lines
                if ln.strip().lower().startswith(("version", "cuda compilation tools"))]
    if done.returncode != 0 or not versions:
        return None
    return versions[0]


_FOUND: dict[ToolKind, Tool] = held(__name__, "_FOUND", {})


def find(kind: ToolKind) -> Tool | Missing:
    """The first place the tool runs from, with its version (looked for once per process once
    found), or why not: a missing tool is looked for again at the next call, so one installed
    after the first attempt (``pip install`` in the notebook, CUDA_HOME set) is found."""
    known = _FOUND.get(kind)
    if known is not None:
        return known
    tool = look(kind)
    if isinstance(tool, Tool):
        _FOUND[kind] = tool
    return tool


def look(kind: ToolKind) -> Tool | Missing:
    """:func:`find` without its memory: every place looked at now."""
    looked: list[str] = []
    for path, found in _candidates(kind):
        if path in looked:
            continue
        looked.append(path)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            version = _version(path)
            if version is not None:
                return Tool(kind, path, version, found)
    return Missing(kind, tuple(looked), _INSTALL[kind])


def require(kind: ToolKind) -> Tool:
    """The tool, or :class:`ToolMissingError` saying where it was looked for and how to
    install it."""
    tool = find(kind)
    if isinstance(tool, Missing):
        raise ToolMissingError(f"{kind.value} {tool.describe()}")
    return tool


@dataclass(frozen=True)
class ChildResult:
    """How a child process ended: its status, the last :data:`TAIL_BYTES` of each of its
    output streams (of :func:`run_for_result`'s: its stdout whole), how many bytes before
    those were not kept, and how long it ran."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    stdout_cut: int = 0
    stderr_cut: int = 0


#: the longest a child may run before it is stopped (a hung kernel under a tool)
CHILD_TIMEOUT_S = 600.0
#: the bytes kept of each of a child's streams, its last (a tool ends with its own account,
#: and a view shows a few lines of it): a kernel's printf in every thread writes hundreds of MB
TAIL_BYTES = 64 << 10
#: how long the pipes are read for after the child has exited (what it wrote is there at once;
#: a helper it started in a session of its own may hold them open for ever)
EXIT_GRACE_S = 0.5
_CHUNK = 1 << 16


class ResultTooLarge(CudaMagicError):
    """A tool's result (what it writes to stdout: a listing) passed the bytes read of one; the
    run was stopped and nothing of the result is used (a part is never taken for the whole)."""

    def __init__(self, argv: Sequence[str], bound: int) -> None:
        super().__init__(f"{os.path.basename(str(argv[0]))} wrote more than "
                         f"{size_text(bound)} as its result, the most read of one: the run was "
                         "stopped and nothing of it is used")
        self.bound = bound


class _Whole:
    """A stream read whole, up to ``bound`` bytes: past it, :class:`ResultTooLarge`."""

    def __init__(self, argv: Sequence[str], bound: int) -> None:
        self.argv, self.bound = argv, bound
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.bound:
            raise ResultTooLarge(self.argv, self.bound)

    def text(self) -> tuple[str, int]:
        return bytes(self.data).decode(errors="replace"), 0


class _Tail:
    """The last ``keep`` bytes of a stream (a tool's chatter), and how many came in all."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.data = bytearray()
        self.seen = 0

    def add(self, chunk: bytes) -> None:
        self.seen += len(chunk)
        self.data += chunk
        if len(self.data) > 2 * self.keep:  # trimmed now and then, not at every chunk
            del self.data[:-self.keep]

    def text(self) -> tuple[str, int]:
        kept = bytes(self.data[-self.keep:]) if self.keep else b""
        return kept.decode(errors="replace"), self.seen - len(kept)


def run_child(argv: Sequence[str], env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike | None = None, timeout: float = CHILD_TIMEOUT_S,
              keep: int = TAIL_BYTES) -> ChildResult:
    """Run ``argv`` to its end in a process group of its own and return how it ended, with the
    last ``keep`` bytes of its stdout and stderr (what came before is counted, not kept).

    ``timeout`` bounds the whole call: past it, or at a Ctrl-C, the child's group is killed
    and the error raised at once, without waiting for pipes that something outside the group
    (a helper in a session of its own) still holds open.

    :raises subprocess.TimeoutExpired: the child ran past ``timeout`` seconds.
    """
    started = time.perf_counter()
    proc = _start(argv, env, cwd)
    return wait_child(proc, timeout, started, keep)


def run_for_result(argv: Sequence[str], bound: int, *, timeout: float = CHILD_TIMEOUT_S,
                   keep: int = TAIL_BYTES) -> ChildResult:
    """Run a tool whose stdout is its result (nvdisasm's listing) as :func:`run_child` does,
    reading that stdout whole; its stderr, chatter, keeps its last ``keep`` bytes.

    :raises ResultTooLarge: the stdout passed ``bound`` bytes (the child is stopped at once).
    :raises subprocess.TimeoutExpired: the child ran past ``timeout`` seconds.
    """
    started = time.perf_counter()
    proc = _start(argv, None, None)
    return _wait(proc, timeout, started, _Whole(argv, bound), _Tail(keep))


def _start(argv: Sequence[str], env: Mapping[str, str] | None,
           cwd: str | os.PathLike | None) -> subprocess.Popen:
    return subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=dict(env) if env is not None else None,
                            cwd=cwd, start_new_session=True)


def wait_child(proc: subprocess.Popen, timeout: float = CHILD_TIMEOUT_S,
               started: float | None = None, keep: int = TAIL_BYTES) -> ChildResult:
    """:func:`run_child`'s wait, for a child started with its stdout and stderr piped (a
    warm child, :mod:`cudamagic.launch.warm`): ``started`` is when its time began (now where
    None).

    :raises subprocess.TimeoutExpired: the child ran past ``timeout`` seconds.
    """
    started = time.perf_counter() if started is None else started
    return _wait(proc, timeout, started, _Tail(keep), _Tail(keep))


def _wait(proc: subprocess.Popen, timeout: float, started: float, out: "_Tail | _Whole",
          err: "_Tail | _Whole") -> ChildResult:
    deadline = time.monotonic() + timeout
    try:
        _read_until_exit(proc, {proc.stdout: out, proc.stderr: err}, deadline)
        proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:
        stop_child(proc)
        raise subprocess.TimeoutExpired(proc.args, timeout) from None
    except BaseException:  # Ctrl-C, a result too large: the whole group goes, then it is raised
        stop_child(proc)
        raise
    finally:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    (stdout, stdout_cut), (stderr, stderr_cut) = out.text(), err.text()
    return ChildResult(proc.returncode, stdout, stderr, time.perf_counter() - started,
                       stdout_cut=stdout_cut, stderr_cut=stderr_cut)


def _read_until_exit(proc: subprocess.Popen, tails: dict, deadline: float) -> None:
    """Read the child's pipes into their tails until both end, or the child has exited and
    :data:`EXIT_GRACE_S` passed.

    :raises subprocess.TimeoutExpired: the deadline passed first.
    """
    import selectors

    with selectors.DefaultSelector() as sel:
        for pipe in tails:
            sel.register(pipe, selectors.EVENT_READ)
        grace_end = None
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                raise subprocess.TimeoutExpired(proc.args, 0)
            if grace_end is None and proc.poll() is not None:
                grace_end = now + EXIT_GRACE_S
            if grace_end is not None and now >= grace_end:
                return
            wait = min(deadline, grace_end if grace_end is not None else now + 0.25) - now
            for key, _ in sel.select(timeout=max(wait, 0.0)):
                chunk = os.read(key.fd, _CHUNK)
                if chunk:
                    tails[key.fileobj].add(chunk)
                else:
                    sel.unregister(key.fileobj)


def stop_child(proc: subprocess.Popen) -> None:
    """Kill the child's process group and reap the child (a killed process ends at once; its
    pipes are not waited for)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # in the kernel's hands (D state): left to it
        pass



def scratch_folder(parent: str | os.PathLike | None = None) -> Path:
    """A private folder for one tool run's files (the payload, the tool's report), in the
    temporary folder; the run removes it.

    :raises ScratchError: it cannot be made there (the message names the folder and the fix).
    """
    import tempfile

    try:
        return Path(tempfile.mkdtemp(prefix="cudamagic-tool-", dir=parent))
    except OSError as exc:
        where = parent if parent is not None else tempfile.gettempdir()
        raise ScratchError(f"a tool run needs a private folder for the module, the arguments "
                           f"and the tool's report, and none can be made in {where} "
                           f"({exc.strerror or exc}): set TMPDIR to a writable folder") from None
