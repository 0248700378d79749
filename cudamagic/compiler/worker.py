"""One compile in a child of the compile server: forked ahead of its request (the spare), with
NVRTC loaded and its PCH heap set by the server, so that the PCHs of all the server's children
are one process's as NVRTC sees them.

The child reads one request from its pipe, takes the notebook's working folder and compile
environment, runs :func:`~cudamagic.toolchain.compile.nvrtc.compile_cubin` (the type probe's compiles
and NVRTC's ``-n`` retry are each a request of their own, or run inside it), writes one frame
(:mod:`.wire`'s: ``("ok", CompileResult)`` or ``("error", exception)``) to the server and ends.
Whatever NVRTC does to it (a signal handler, a trace broken by a failed header, SIGSEGV) ends
with it. It dies with the server (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
from typing import Any, NoReturn

from ..errors import ToolchainError
from .wire import apply_environment

__all__ = ["Spare", "fork_spare", "run_request"]

_HEADER = struct.Struct("<Q")


class Spare:
    """A child waiting for its request: its pid, the pipe the request goes in and the pipe its
    answer comes from."""

    def __init__(self, pid: int, request_w: int, answer_r: int) -> None:
        self.pid = pid
        self.request_w = request_w
        self.answer_r = answer_r


def _die_with_parent() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass
    if os.getppid() == 1:  # the server ended before the prctl
        os._exit(1)


def fork_spare(close: list[int]) -> Spare:
    """Fork a child that waits for one request; ``close``: the server's descriptors (its
    socket, the notebooks' connections) the child must not keep open."""
    req_r, req_w = os.pipe()
    ans_r, ans_w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(req_r)
        os.close(ans_w)
        return Spare(pid, req_w, ans_r)
    try:  # the child
        os.close(req_w)
        os.close(ans_r)
        for fd in close:
            try:
                os.close(fd)
            except OSError:
                pass
        _die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the notebook's, not ours
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _serve_one(req_r, ans_w)
    finally:
        os._exit(3)


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _serve_one(req_r: int, ans_w: int) -> NoReturn:
    data = _read_all(req_r)
    os.close(req_r)
    if not data:  # the server let this spare go
        os._exit(0)
    try:
        answer: tuple[str, Any] = ("ok", run_request(pickle.loads(data)))
    except BaseException as exc:  # noqa: BLE001 - the notebook raises it
        answer = ("error", exc)
    try:
        out = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - an exception that does not pickle
        out = pickle.dumps(("error", ToolchainError(f"{type(answer[1]).__name__}: "
                                                    f"{answer[1]} ({exc})")))
    view = memoryview(_HEADER.pack(len(out)) + out)
    while view:
        view = view[os.write(ans_w, view):]
    sys.stdout.flush()
    os._exit(0)


def run_request(request: dict[str, Any]) -> Any:
    """One compile as the notebook asked it: in its working folder and environment."""
    from ..toolchain.compile.nvrtc import compile_cubin

    os.chdir(request["cwd"])
    apply_environment(request["env"])
    return compile_cubin(*request["args"], **request["kwargs"])
