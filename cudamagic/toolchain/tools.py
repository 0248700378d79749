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

from ..process import held
from ..errors import CudaMagicError

__all__ = ["ToolKind", "Found", "Tool", "Missing", "ToolMissingError", "find", "look", "require",
           "ChildResult", "run_child", "ScratchError", "scratch_folder"]


class ToolKind(enum.Enum):
    """The external tools cudamagic runs a launch under."""

    SANITIZER = "compute-sanitizer"
    NCU = "ncu"


class Found(enum.Enum):
    """Where a tool was found."""

    WHEEL = "the nvidia-cuda-sanitizer-api wheel"
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
}


@dataclass(frozen=True)
class Missing:
    """A tool that is not here: where it was looked for and how to install it."""

    kind: ToolKind
    looked: tuple[str, ...]
    install: str

    def describe(self) -> str:
        return f"not found (looked in {', '.join(self.looked) or 'nothing'}); {self.install}"


class ToolMissingError(CudaMagicError):
    """A debugging tool that is not installed; the message says how to install it."""


def _wheel_sanitizers() -> list[str]:
    """compute-sanitizer programs inside installed NVIDIA wheels (``nvidia/*/compute-sanitizer``
    of every ``nvidia`` namespace folder on sys.path)."""
    out = []
    for base in sys.path:
        out += sorted(glob.glob(os.path.join(base or ".", "nvidia", "*", "compute-sanitizer",
                                             "compute-sanitizer")))
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
    else:
        places += [(os.path.join(h, "bin", name), Found.CUDA_HOME) for h in homes]
    on_path = shutil.which(name)
    if on_path:
        places.append((on_path, Found.PATH))
    places.append((f"/usr/local/cuda/bin/{name}", Found.TOOLKIT))
    if kind is ToolKind.SANITIZER:
        places.append((f"/usr/local/cuda/compute-sanitizer/{name}", Found.TOOLKIT))
    else:
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
    versions = [ln.strip() for ln in lines if ln.strip().lower().startswith("version")]
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
    """How a child process ended: its status, its output and how long it ran."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float


#: the longest a child may run before it is stopped (a hung kernel under a tool)
CHILD_TIMEOUT_S = 600.0


def run_child(argv: Sequence[str], env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike | None = None,
              timeout: float = CHILD_TIMEOUT_S) -> ChildResult:
    """Run ``argv`` to its end in a process group of its own (a Ctrl-C or a timeout here stops
    the child and whatever it started, and is then raised), and return how it ended."""
    started = time.perf_counter()
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=dict(env) if env is not None else None,
                            cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:  # a timeout, Ctrl-C: the whole group goes, then the error is raised
        _stop(proc)
        raise
    return ChildResult(proc.returncode, out.decode(errors="replace"),
                       err.decode(errors="replace"), time.perf_counter() - started)


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.communicate()


class ScratchError(CudaMagicError):
    """No private folder could be made for a tool run's files."""


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
