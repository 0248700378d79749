"""The compile server: one process per user and toolchain that holds NVRTC for every notebook
of that toolchain, and runs each compile in a child of its own (:mod:`.worker`).

``python -m cudamagic.compiler.server FOLDER ID`` (the client runs it) forks the server and
waits for it to say it is ready; the server starts a session of its own (a kernel's restart,
its process group's signals, do not reach it), takes ``ID.lock`` (a second server of the same
toolchain finds it held and leaves the first one serving), loads NVRTC, sets its PCH heap once
(:data:`HEAP`: every child's PCH then suits its siblings), compiles an empty kernel (the
children start warm), replaces a stale ``ID.sock`` and listens there.

One thread, one loop: a connection from another uid is closed unread; a ``compile`` request
goes to the spare child (a new spare is forked behind it), whose answer is handed on as it
came; the notebook closing its connection (Ctrl-C) kills the child; a child that died without
an answer (SIGSEGV, SIGABRT, killed) is one compile's :class:`~cudamagic.errors.ToolchainError`.
``facts`` answers what NVRTC is and who serves; ``stop`` ends the server. With nothing to do
for ``$CUDAMAGIC_COMPILE_SERVER_IDLE`` seconds (:data:`~.wire.DEFAULT_IDLE_S`) it removes its
socket and ends.
"""

from __future__ import annotations

import fcntl
import os
import selectors
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import ToolchainError
from .wire import DEFAULT_IDLE_S, Facts, IDLE_ENV, MAX_FRAME, paths, peer_uid, recv, send
from .worker import Spare, fork_spare

__all__ = ["HEAP", "main"]

#: NVRTC's PCH heap, set once before any child: a CUB cell's PCH needs 335 MB, a CuTe cell's
#: some more; the heap is address space, touched only as a PCH is made
HEAP = 1 << 30
_HEADER = struct.Struct("<Q")


@dataclass
class _Job:
    conn: socket.socket
    spare: Spare
    answer: bytearray = field(default_factory=bytearray)


class _Server:
    def __init__(self, listener: socket.socket, facts: Facts, idle_s: float) -> None:
        self.listener = listener
        self.facts = facts
        self.idle_s = idle_s
        self.served = 0
        self.sel = selectors.DefaultSelector()
        self.sel.register(listener, selectors.EVENT_READ, ("accept", None))
        self.jobs: dict[int, _Job] = {}  # by the answer pipe
        self.conns: set[socket.socket] = set()
        self.held: list[int] = []  # the instance lock's descriptor
        self.last = time.monotonic()
        self.spare: Spare | None = None
        self.running = True
        self.pch_folders: set[str] = set()  # where the server holds PCHs (freed at its end)

    def _fds(self) -> list[int]:
        # the instance lock too: a child (or the header listing's grandchild, which does not
        # die with the server) that kept it would keep the next server from starting
        from ..toolchain.compile import pch
        return [self.listener.fileno(), *(c.fileno() for c in self.conns), *self.held,
                *pch.held_fds()]

    def _spare(self) -> Spare:
        if self.spare is None:
            self.spare = fork_spare(self._fds())
        spare, self.spare = self.spare, None
        return spare

    def loop(self) -> None:
        while self.running:
            if self.spare is None and not self.jobs:
                self.spare = fork_spare(self._fds())
            wait = self.idle_s - (time.monotonic() - self.last)
            if wait <= 0 and not self.jobs and not self.conns:
                return
            for key, _ in self.sel.select(max(wait, 0.05) if not self.jobs else None):
                what, job = key.data
                if what == "accept":
                    self._accept()
                elif what == "conn":
                    self._request(key.fileobj)
                elif what == "cancel":
                    self._cancel(job)
                else:
                    self._answer(job)
            if self.jobs or self.conns:
                self.last = time.monotonic()

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        if peer_uid(conn) != os.geteuid():  # another user's: not a byte read from it
            conn.close()
            return
        conn.setblocking(True)
        conn.settimeout(30.0)
        self.conns.add(conn)
        self.sel.register(conn, selectors.EVENT_READ, ("conn", None))

    def _close(self, conn: socket.socket) -> None:
        try:
            self.sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        self.conns.discard(conn)
        conn.close()

    def _request(self, conn: Any) -> None:
        try:
            request = recv(conn)
        except (OSError, EOFError, ValueError, ImportError, AttributeError):
            self._close(conn)
            return
        kind = request.get("kind") if isinstance(request, dict) else None
        if kind == "compile":
            self._dispatch(conn, request)
            return
        try:
            if kind == "facts":
                send(conn, ("ok", self._facts()))
            elif kind == "hold":
                send(conn, ("ok", self._hold(request.get("folder"))))
            elif kind == "stop":
                send(conn, ("ok", None))
                self.running = False
            else:
                send(conn, ("error", ToolchainError(f"the compile server has no {kind!r}")))
        except OSError:
            pass
        self._close(conn)

    def _facts(self) -> Facts:
        from ..toolchain.compile import pch
        return Facts(**{**self.facts.__dict__, "served": self.served,
                        "generation": pch.generation()})

    def _hold(self, folder: object) -> str | None:
        """The server's owner name in a PCH folder, which the PCHs its children make are
        recorded under (they outlive the notebook that asked); None where it cannot be held."""
        from ..toolchain.compile import pch
        if not isinstance(folder, str) or not os.path.isabs(folder):
            return None
        try:
            name = pch.hold(folder)
        except OSError:
            return None
        self.pch_folders.add(folder)
        return name

    def release(self) -> None:
        """At the server's end: the PCHs it made are removed (no later process can use them)."""
        from ..toolchain.compile import pch
        for folder in sorted(self.pch_folders):
            try:
                pch.release(folder)
            except OSError:
                pass

    def _dispatch(self, conn: socket.socket, request: dict[str, Any]) -> None:
        plan = request["kwargs"].get("pch")
        if plan is not None and plan.create and plan.heap:
            self._raise_heap(plan.heap)
        import pickle
        data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        spare = self._spare()
        job = _Job(conn, spare)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(spare.request_w, view):]
        except OSError:  # the spare died waiting: its answer pipe says so
            pass
        os.close(spare.request_w)
        self.served += 1
        self.sel.unregister(conn)
        self.sel.register(conn, selectors.EVENT_READ, ("cancel", job))
        self.sel.register(spare.answer_r, selectors.EVENT_READ, ("answer", job))
        self.jobs[spare.answer_r] = job

    def _raise_heap(self, heap: int) -> None:
        """A PCH that needs more heap than the server has: raised here, in the process all
        children come from (their earlier PCHs no longer serve: the generation says so)."""
        from cuda.bindings import nvrtc

        from ..toolchain.compile import pch
        before = pch.generation()
        pch.raise_heap(nvrtc, heap)
        if pch.generation() != before and self.spare is not None:
            self._let_go(self.spare)
            self.spare = None

    def _let_go(self, spare: Spare) -> None:
        for fd in (spare.request_w, spare.answer_r):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.kill(spare.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(spare.pid, 0)

    def _end(self, job: _Job) -> int:
        self.sel.unregister(job.spare.answer_r)
        del self.jobs[job.spare.answer_r]
        os.close(job.spare.answer_r)
        _, status = os.waitpid(job.spare.pid, 0)
        return status

    def _cancel(self, job: _Job) -> None:
        """The notebook closed its connection (Ctrl-C) or wrote to it: the compile stops."""
        try:
            os.kill(job.spare.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._end(job)
        self._close(job.conn)

    def _answer(self, job: _Job) -> None:
        chunk = os.read(job.spare.answer_r, 1 << 20)
        if chunk:
            job.answer += chunk
            return
        status = self._end(job)
        whole = len(job.answer) >= _HEADER.size and \
            _HEADER.unpack_from(job.answer)[0] == len(job.answer) - _HEADER.size <= MAX_FRAME
        try:
            if whole:
                job.conn.sendall(job.answer)
            else:
                send(job.conn, ("error", ToolchainError(_died(job.spare.pid, status))))
        except OSError:
            pass
        self._close(job.conn)


def _died(pid: int, status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            how = f"by {signal.Signals(sig).name}"
        except ValueError:
            how = f"by signal {sig}"
    else:
        how = f"with exit status {os.WEXITSTATUS(status)}"
    return (f"NVRTC's compile ended {how} (in the compile server's child {pid}); the notebook "
            "is unaffected and nothing was cached. Run the cell again; if it ends the same way, "
            "this compile crashes NVRTC (try CUDAMAGIC_COMPILE_SERVER=0 to see it in-process)")


def _load(folder: str) -> Facts:
    """NVRTC loaded, its heap set, an empty kernel compiled (the children start warm)."""
    from cuda.bindings import nvrtc as bindings

    from ..toolchain.compile import nvrtc, pch

    # the package's version (imported already: this module is inside it), read without an
    # import of the layers above
    version = str(getattr(sys.modules.get("cudamagic"), "__version__", "?"))

    pch.raise_heap(bindings, HEAP)
    archs = nvrtc.supported_archs()
    nvrtc.compile_cubin("__global__ void k() {}", (), (f"-arch=sm_{archs[-1]}",),
                        program_name="warm.cu", trace=False)
    return Facts(pid=os.getpid(), started=time.time(), version=version,
                 nvrtc_version=nvrtc.nvrtc_version(), nvrtc_identity=nvrtc.nvrtc_identity(),
                 archs=archs, pch_supported=pch.supported(), owner=pch.owner(),
                 generation=pch.generation())


def _listen(sock_path: str) -> socket.socket:
    folder, name = os.path.split(sock_path)
    os.chdir(folder)  # a relative name: a socket's path is bounded (108 bytes)
    try:
        os.unlink(name)  # stale: the lock is ours, so no server listens there
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    old = os.umask(0o077)
    try:
        listener.bind(name)
    finally:
        os.umask(old)
    listener.listen(64)
    os.chdir("/")
    return listener


def _idle_s() -> float:
    try:
        return max(0.1, float(os.environ.get(IDLE_ENV, "") or DEFAULT_IDLE_S))
    except ValueError:
        return DEFAULT_IDLE_S


def _serve(folder: str, ident: str, ready: int) -> int:
    sock_path, lock_path, log_path = paths(folder, ident)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    lock = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.write(ready, b"busy")
        return 0
    try:
        facts = _load(folder)
        listener = _listen(sock_path)
    except BaseException as exc:  # noqa: BLE001 - said to the client that started it
        os.write(ready, f"failed: {type(exc).__name__}: {exc}".encode()[:4000])
        return 1
    os.write(ready, b"ready")
    os.close(ready)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = _Server(listener, facts, _idle_s())
    server.held.append(lock)
    default = os.path.join(os.path.dirname(folder), "pch")  # the default cache's
    if os.path.isdir(default):
        server._hold(default)  # earlier servers' PCHs go now
    try:
        server.loop()
    finally:
        try:
            os.unlink(sock_path)  # under the lock: no other server's
        except OSError:
            pass
        listener.close()
        if server.spare is not None:
            server._let_go(server.spare)
        for job in list(server.jobs.values()):
            server._cancel(job)
        server.release()
    return 0


def main(argv: list[str]) -> int:
    """Start the server of ``ID`` in ``FOLDER`` and say (exit status 0) once it listens or
    another one holds its lock; 1 and why on stderr where it could not start."""
    folder, ident = argv
    r, w = os.pipe()
    pid = os.fork()  # a fresh interpreter's fork, never the notebook's
    if pid:
        os.close(w)
        said = b""
        while chunk := os.read(r, 4096):
            said += chunk
        if said in (b"ready", b"busy"):
            return 0
        sys.stderr.write(said.decode("utf-8", "replace") or "the compile server ended at once")
        return 1
    os.close(r)
    os.setsid()
    try:
        code = _serve(folder, ident, w)
    except BaseException:  # noqa: BLE001 - the server's own end, said in its log
        import traceback
        traceback.print_exc()
        code = 1
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
