"""The notebook's side of the compile server: every NVRTC call of a build asked of the server
of this user and toolchain (:mod:`.server`), started on the first miss; where none can serve,
the compile in this process, as before, said once.

:class:`ServedCompiler` has :func:`~cudamagic.toolchain.compile.nvrtc.compile_cubin`'s signature and is
the pipeline's compiler (``BuildSettings.compiler``); the in-process compiler is handed to it
(``fallback``), never imported: this module imports nothing that loads NVRTC, and the
import-linter contract ``notebook-side`` says so. A compile's answer (its result, or the
exception NVRTC's compile raised) comes back as the in-process compile would give it.

Ctrl-C while the server compiles closes the connection: the server kills the compile's child
and the build raises :class:`~cudamagic.errors.CompileInterrupted` at once, nothing kept. A
server that went away mid-compile (killed, crashed, ended idle as the request came) is started
again and asked once more; a second loss is a :class:`~cudamagic.errors.ToolchainError`.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import CompileInterrupted, ToolchainError, CudaMagicWarning
from ..core.process import InChild, InTest, held
from .wire import SERVER_ENV, Refused, compile_environment, paths, peer_uid, recv, send
from .wire import server_folder, toolchain_id

__all__ = ["ServedCompiler", "Endpoint", "endpoint", "facts", "status", "stop", "enabled",
           "START_S"]

#: Where the cache folder is (the default cache's: handed in by the pipeline)
CacheDir = Callable[[], "str | os.PathLike[str]"]
#: How long a server may take to start (NVRTC loaded, its heap set, one empty compile)
START_S = 60.0

# this process's server (None: not looked for yet), the reasons already said, the facts asked
_state: dict[str, Any] = held(__name__, "_state", {}, child=InChild.KEPT, test=InTest.CLEARED,
                              clear=lambda: _state.clear())


def enabled() -> bool:
    """Whether builds ask a compile server (``$CUDAMAGIC_COMPILE_SERVER``: ``1`` on; unset,
    ``0``, off, false, no: the compile runs in this process)."""
    return os.environ.get(SERVER_ENV, "").strip().lower() in ("1", "on", "true", "yes")


class Endpoint:
    """Where this process's server is: its folder, toolchain id, socket, lock and log."""

    def __init__(self, folder: str, ident: str) -> None:
        self.folder, self.ident = folder, ident
        self.sock_path, self.lock_path, self.log_path = paths(folder, ident)

    def connect(self, start: bool = True) -> socket.socket | None:
        """A connection to the server, which is started where none listens (``start``); None
        where none listens and ``start`` is False.

        :raises Refused: the socket's peer is another user's.
        :raises ToolchainError: the server could not start.
        """
        deadline = time.monotonic() + START_S
        started = False
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            try:
                sock.connect(_address(self.sock_path))
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if not start:
                    return None
                if not started:
                    self._start()
                    started = True
                elif time.monotonic() > deadline:
                    raise ToolchainError(f"the compile server did not come up in {START_S:.0f} "
                                         f"s (its log: {self.log_path})") from None
                else:
                    time.sleep(0.02)
                continue
            if peer_uid(sock) != os.geteuid():
                sock.close()
                raise Refused(f"{self.sock_path} is served by another user: not used")
            return sock

    def _start(self) -> None:
        import subprocess  # a miss's: a hit starts no server
        env = dict(os.environ)
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
        try:
            done = subprocess.run([sys.executable, "-m", "cudamagic.compiler.server",
                                   self.folder, self.ident], env=env, cwd="/",
                                  stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=START_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ToolchainError(f"the compile server could not start: {exc}") from None
        if done.returncode != 0:
            raise ToolchainError("the compile server could not start: "
                                 + done.stderr.decode("utf-8", "replace").strip()[-2000:])

    def ask(self, request: dict[str, Any], start: bool = True) -> Any:
        """The server's answer to ``request`` (a compile's result or its exception raised);
        asked again of a new server where the first went away before answering (twice: a
        server killed as the first went away may still have taken the second connection into
        its backlog)."""
        for attempt in (1, 2, 3):
            sock = self.connect(start)
            if sock is None:
                return None
            try:
                send(sock, request)
                kind, value = _answer(sock)
            except (ConnectionError, EOFError) as exc:
                if attempt == 3:
                    raise ToolchainError(
                        f"the compile server went away during the request, three times ({exc}); "
                        f"its log: {self.log_path}") from None
                continue
            finally:
                sock.close()
            if kind == "error":
                raise value
            return value
        raise AssertionError("unreachable")


def _answer(sock: socket.socket) -> tuple[str, Any]:
    try:
        return recv(sock)
    except KeyboardInterrupt:
        sock.close()  # the server kills the compile
        raise CompileInterrupted("the compile was stopped (Ctrl-C): its child in the compile "
                                 "server was killed and nothing was cached") from None


def _address(path: str) -> str:
    """``path``, or where it is too long for a socket's address (108 bytes) the same file
    through an open descriptor of its folder (``/proc/self/fd/N/NAME``)."""
    if len(os.fsencode(path)) < 100:
        return path
    folder, name = os.path.split(path)
    fds = _state.setdefault("dir_fds", {})
    if folder not in fds:
        fds[folder] = os.open(folder, os.O_PATH | os.O_CLOEXEC)
    return f"/proc/self/fd/{fds[folder]}/{name}"


def _say_once(reason: str) -> None:
    said = _state.setdefault("said", set())
    if reason not in said:
        said.add(reason)
        warnings.warn(f"cudamagic compiles in this process: {reason}", CudaMagicWarning,
                      stacklevel=4)


def endpoint(cache_dir: CacheDir) -> Endpoint | None:
    """This process's server's place (in ``cache_dir()``'s folder ``server``), or None where
    builds compile in this process (the server switched off, a platform without fork or UNIX
    sockets, a folder that cannot hold the socket: said once as a warning)."""
    if not enabled():
        return None
    if not hasattr(os, "fork") or not hasattr(socket, "AF_UNIX"):
        _say_once("this platform cannot run the compile server (no fork or no UNIX sockets)")
        return None
    from ..core.toolkit import toolkit

    try:
        folder = server_folder(os.fspath(cache_dir()))
    except (OSError, ValueError) as exc:  # Refused, CacheArgumentError among them
        _say_once(f"no folder for the compile server's socket ({exc})")
        return None
    key = (folder, toolkit().nvrtc_wheel)
    if _state.get("key") != key:
        _state["key"], _state["endpoint"] = key, Endpoint(folder, toolchain_id(
            toolkit().nvrtc_wheel))
    return _state["endpoint"]


def facts(cache_dir: CacheDir) -> Any:
    """The server's :class:`~cudamagic.compiler.wire.Facts` (NVRTC's version, archs, PCH
    maker), asked once per server; None where builds compile in this process."""
    ep = endpoint(cache_dir)
    if ep is None:
        return None
    cached = _state.get("facts")
    if cached is not None and cached[0] is ep:
        return cached[1]
    try:
        got = ep.ask({"kind": "facts"})
    except (OSError, ToolchainError) as exc:
        _say_once(f"the compile server cannot serve ({exc})")
        _state["off"] = True
        return None
    _state["facts"] = (ep, got)
    return got


def status(cache_dir: CacheDir) -> Any:
    """The facts of the server serving this process now (its pid, start, compiles served),
    never starting one; None where none serves."""
    ep = endpoint(cache_dir)
    if ep is None:
        return None
    try:
        return ep.ask({"kind": "facts"}, start=False)
    except (OSError, ToolchainError):
        return None


def stop(cache_dir: CacheDir) -> bool:
    """End this process's server where one serves; whether one did."""
    ep = endpoint(cache_dir)
    if ep is None:
        return False
    try:
        ep.ask({"kind": "stop"}, start=False)
    except (OSError, ToolchainError):
        return False
    _state.pop("facts", None)
    return True


class ServedCompiler:
    """:func:`~cudamagic.toolchain.compile.nvrtc.compile_cubin` asked of the compile server;
    ``fallback`` (the in-process compile) where none serves."""

    #: Ctrl-C stops its compile at once (:class:`~cudamagic.pipeline.interrupts.Interrupts` lets it
    #: through while the server compiles)
    stoppable = True

    def __init__(self, fallback: Callable[..., Any], cache_dir: CacheDir) -> None:
        self.fallback = fallback
        self.cache_dir = cache_dir

    def facts(self) -> Any:
        """:func:`facts` (the server started where none serves), None where this process
        compiles."""
        return None if _state.get("off") else facts(self.cache_dir)

    def status(self) -> Any:
        """:func:`status`: the serving server's facts, None where none serves now."""
        return status(self.cache_dir)

    def stop(self) -> bool:
        """:func:`stop`."""
        return stop(self.cache_dir)

    def pch_holder(self, folder: str) -> str:
        """The owner name the server holds in the PCH folder ``folder`` (its PCHs are
        recorded under it and outlive this process: a kernel restart finds them), asked once
        per server and folder; "" where none serves (this process's own name then)."""
        got = self.facts()
        ep = None if got is None else endpoint(self.cache_dir)
        if ep is None:
            return ""
        holders = _state.setdefault("holders", {})
        if (got.owner, folder) not in holders:
            try:
                holders[(got.owner, folder)] = ep.ask({"kind": "hold", "folder": folder},
                                                      start=False) or ""
            except (OSError, ToolchainError):
                return ""
        return holders[(got.owner, folder)]

    def __call__(self, source: str, name_expressions: Sequence[str], options: Sequence[str],
                 program_name: str = "cell.cu", line_offset: int = 0, trace: bool = True,
                 pch: Any = None) -> Any:
        args = (source, tuple(name_expressions), tuple(options), program_name, line_offset)
        kwargs = {"trace": trace, "pch": pch}
        ep = None if _state.get("off") else endpoint(self.cache_dir)
        if ep is not None and self.facts() is not None:
            try:
                return ep.ask({"kind": "compile", "args": args, "kwargs": kwargs,
                               "cwd": os.getcwd(), "env": compile_environment()})
            except Refused as exc:
                _say_once(str(exc))
                _state["off"] = True
        return self.fallback(*args, **kwargs)
