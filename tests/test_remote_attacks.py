"""The team cache against a hostile server: a scripted RESP server on loopback answers each
request as a test says (a trickled reply, a declared size of terabytes, junk, another
protocol), and the lookup must cost one bounded delay, hold no more than a record's bytes, and
never raise into the cell."""

from __future__ import annotations

import socket
import threading
import time
import warnings
from collections.abc import Callable

import pytest

from cudamagic.store.base import Refused
from cudamagic.store.remote import RemoteStore, TIMEOUT_S

pytest.importorskip("redis")

_HELLO = b"%1\r\n$5\r\nproto\r\n:3\r\n"  # a RESP3 HELLO reply redis-py 8 takes


class ScriptedServer:
    """A loopback server answering the handshake as Redis does and GET with ``reply(conn)``;
    it stops writing after ``limit_s`` seconds (so a test of the old code fails, not hangs)."""

    def __init__(self, reply: Callable[[socket.socket, float], None], hello: bytes = _HELLO):
        self.reply, self.hello = reply, hello
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while request := conn.recv(1 << 16):
                if b"HELLO" in request:
                    conn.sendall(self.hello)
                elif b"GET" in request:
                    self.reply(conn, time.monotonic() + 3.0)
                else:
                    conn.sendall(b"+OK\r\n")
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.listener.close()


def _trickle(conn, end):  # a whole 20-byte reply, one byte every 50 ms: each read is quick
    for byte in b"$10\r\n0123456789\r\n":
        conn.sendall(bytes([byte]))
        time.sleep(0.05)


def _terabytes(conn, end):  # declares 90 TB and streams as fast as it can
    conn.sendall(b"$99999999999999\r\n")
    while time.monotonic() < end:
        conn.sendall(b"x" * (1 << 16))


def _junk(conn, end):
    conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")


def _map(conn, end):
    conn.sendall(b"%1\r\n+a\r\n+b\r\n")


def _silent(conn, end):
    time.sleep(1.0)


# (name, GET's reply, HELLO's reply, what the lookup gives: None a miss after a failure,
# Refused a record refused)
CASES = [
    ("a reply trickled a byte at a time", _trickle, _HELLO, None),
    ("a declared size of terabytes, streamed", _terabytes, _HELLO, None),
    ("junk instead of RESP", _junk, _HELLO, None),
    ("a HELLO answered with junk", _junk, b"+OK\r\n", None),
    ("a HELLO answered with an error", _junk, b"-ERR unknown command\r\n", None),
    ("a GET answered with a RESP3 map", _map, _HELLO, Refused),
    ("no reply at all", _silent, _HELLO, None),
]


@pytest.mark.parametrize("name, reply, hello, gives", CASES, ids=[c[0] for c in CASES])
def test_a_hostile_server_costs_one_bounded_delay_and_never_raises(name, reply, hello, gives):
    server = ScriptedServer(reply, hello)
    store = RemoteStore(f"redis://127.0.0.1:{server.port}/0", b"k" * 32, max_record=1 << 20)
    try:
        t = time.perf_counter()
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            if gives is Refused:
                with pytest.raises(Refused):
                    store.load("abc")
            else:
                assert store.load("abc") is None
        seconds = time.perf_counter() - t
        # the connect, the handshake and the GET each have at most one timeout
        assert seconds < 4 * TIMEOUT_S + 0.3, f"{name}: {seconds:.2f} s"
        if gives is None:
            stats = store.remote_stats()
            assert stats.errors == 1 and stats.state.value == "backing-off"
            assert len(said) == 1
            t = time.perf_counter()
            assert store.load("abc") is None  # skipped, at once
            assert time.perf_counter() - t < 0.01
    finally:
        store.close()
        server.close()


# a URL as people write it: the tier on or off, never raising, the password never shown
URLS = [
    ("redis://:sekrit@127.0.0.1:1/0", True),
    ("redis://user:sekrit@[::1]:6379/0", True),
    ("redis://127.0.0.1:1/0?password=sekrit", True),
    ("rediss://u:sekrit@h/0?password=sekrit", True),
    ("unix:///tmp/no.sock?password=sekrit&db=0", True),
    ("redis://user:se%40krit@host/0", True),
    ("redis://:sekrit@host:99999/0", False),  # a port out of range
    ("redis://:sekrit@host:abc/0", False),
    ("redis://:sekrit@[::1:1/0", False),  # an unclosed IPv6 bracket
    ("redis://h:1/0?db=x&password=sekrit", False),  # a db that is not a number
]


@pytest.mark.parametrize("url, on", URLS, ids=[u for u, _ in URLS])
def test_a_url_never_shows_its_password_and_never_raises(tmp_path, url, on):
    from cudamagic.store.remote import open_remote

    key = tmp_path / "team.key"
    key.write_text("k" * 32)
    key.chmod(0o600)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store, why = open_remote(url, str(key))
    assert (store is not None) == on, why
    shown = store.location if store is not None else why
    assert "sekrit" not in shown and "se@krit" not in shown and "%40" not in shown, shown
    if store is not None:
        assert "sekrit" not in repr(store) and "sekrit" not in str(store.remote_stats())
        store.close()


# a key of another type under a record's name (WRONGTYPE): a refused record, deleted, and the
# server stays in use, where it tripped the breaker (30 s without the tier, a warning) each time
TYPES = [
    ("list", lambda r, k: r.rpush(k, b"x")),
    ("hash", lambda r, k: r.hset(k, "a", b"x")),
    ("set", lambda r, k: r.sadd(k, b"x")),
    ("sorted set", lambda r, k: r.zadd(k, {b"x": 1.0})),
    ("stream", lambda r, k: r.xadd(k, {"a": b"x"})),
]


@pytest.fixture(scope="module")
def real_server(tmp_path_factory):
    from .redis_server import start_server

    s = start_server(tmp_path_factory.mktemp("redis"))
    yield s
    s.stop()


@pytest.mark.parametrize("kind, put", TYPES, ids=[t[0] for t in TYPES])
def test_a_key_of_another_type_is_a_refused_record_not_a_failing_server(real_server, kind,
                                                                        put):
    store = RemoteStore(real_server.url, b"k" * 32)
    raw = real_server.client()
    put(raw, store.prefix + kind)
    try:
        with pytest.raises(Refused, match="another type"):
            store.load(kind)
        stats = store.remote_stats()
        assert stats.errors == 0 and stats.state.value == "on" and stats.refused == 1
        assert not raw.exists(store.prefix + kind)  # deleted: the next compile's record fits
        assert store.save(kind, b"entry")
        assert store.load(kind) == b"entry"
    finally:
        store.close()


_FIRST_SEND = """
import sys, warnings
warnings.simplefilter("ignore")
from cudamagic.store.remote import RemoteStore
store = RemoteStore(sys.argv[1], b"k" * 32)
before = set(sys.modules)
store.share("k", b"entry")
assert store.flush(5.0)
store.load("k")
print(sorted(set(sys.modules) - before))
"""


def test_the_first_send_imports_nothing_so_a_fork_meanwhile_leaves_no_half_module(
        real_server):
    # A fork while the sender thread imports (redis-py's first connection asked
    # importlib.metadata, which imports email.*) left the child with a half-initialized module:
    # its own sends, and any later import of it, failed with a circular-import ImportError.
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FIRST_SEND, real_server.url],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


def test_a_forked_child_counts_its_own_numbers(real_server):
    import os

    store = RemoteStore(real_server.url, b"k" * 32)
    assert store.save("parent", b"entry") and store.load("parent") == b"entry"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's sent, hits and bytes are not its own
        stats = store.remote_stats()
        os.write(write, f"{stats.sent} {stats.hits} {stats.bytes_sent}".encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 100) == b"0 0 0"
    assert store.remote_stats().sent == 1  # the parent's stay
    store.close()
