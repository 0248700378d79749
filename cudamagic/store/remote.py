"""The remote tier: entry records shared through a Redis server, signed with a team key.

A team's machines (JupyterHub users, GPU nodes, CI runners, Dask workers) point
``$CUDAMAGIC_REMOTE_CACHE`` at one server (``redis://host:port/db``, ``rediss://`` with TLS, a
user and password in the URL or ``$CUDAMAGIC_REMOTE_PASSWORD_FILE``) and
``$CUDAMAGIC_REMOTE_KEY_FILE`` at a file holding the team's secret key. The folder on each
machine stays the first tier (:class:`~cudamagic.store.KernelCache`); this one is asked on a
local miss, and a compile is offered to it in the background.

**Trust.** Anyone who can write the server must not be able to make a notebook run their code.
Every record is ``MAGIC + tag + entry``, the tag an HMAC-SHA256 with the team key over the
magic, the cache key and the whole entry (CUBIN, name map, manifest). A record whose tag does
not hold (a changed CUBIN or map, a recomputed checksum, a tag made with another key) is never
handed out: it is counted, said once, deleted from the server and rebuilt. Nothing read from
the server is unpickled: an entry is plain bytes (:mod:`cudamagic.store.entry`). Without a key
the tier is off and says why.

**Never in the way.** Every call has a timeout (:data:`TIMEOUT_S`, also for connecting) that
bounds the whole reply, not each read of it (a server trickling its reply a byte at a time
costs one timeout), and a reply may hold at most a record's bytes (a declared size of
terabytes is cut at :data:`MAX_RECORD`); there are no retries. Any failure of the client
(a reply it cannot read: another protocol, junk) is the server's fault and is handled so; a failure opens a circuit breaker: the server is skipped for
:data:`BACKOFF_S`, with one warning, and the cell goes on from the folder or compiles. Records
go out on a daemon thread through a bounded queue (full: the record is dropped and counted),
with ``SET NX`` (two machines compiling one cell at once keep the first record; both are
correct). A record over :data:`MAX_RECORD` is not sent. A forked child gets a fresh queue, no
thread and a new connection.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import queue
import socket
import threading
import time
import urllib.parse
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import CacheArgumentError, CacheWarning
from ..files import FileRefused, read_regular
from ..forksafe import ForkSafeLock
from ..process import at_fork
from .base import REMOTE_VARIABLES, Refused, Store, StoredEntry

__all__ = ["RemoteStore", "RemoteStats", "RemoteState", "open_remote", "sign", "verify",
           "TIMEOUT_S", "BACKOFF_S", "MAX_RECORD", "RECORD_MAGIC", "read_secret",
           "REMOTE_VARIABLES"]

#: Seconds one call to the server may take (connect, send, each read).
TIMEOUT_S = 0.1
#: Seconds the server is skipped after it failed.
BACKOFF_S = 30.0
#: Bytes of the largest record sent (larger ones stay local).
MAX_RECORD = 64 << 20
#: Records waiting to be sent; more are dropped.
QUEUE = 64
#: What every signed record starts with.
RECORD_MAGIC = b"CUDAMAGIC-SIGNED-1\n"
_TAG = 32
#: The shortest team key taken (bytes).
MIN_KEY = 16
_MAX_SECRET = 4096
#: Bytes a reply may hold beyond a record (its header, a SCAN page).
_REPLY_SLACK = 1 << 20


class RemoteState(str, enum.Enum):
    """Where the tier stands."""

    #: Asked on every local miss.
    ON = "on"
    #: Skipped after a failure, until the back-off ends.
    BACKING_OFF = "backing-off"


@dataclass(frozen=True)
class RemoteStats:
    """What ``%cuda_cache remote`` shows: the numbers of this process."""

    server: str
    state: RemoteState
    hits: int
    misses: int
    bytes_read: int
    bytes_sent: int
    sent: int
    kept_theirs: int
    errors: int
    refused: int
    too_large: int
    dropped: int
    skipped: int
    lookups: int
    lookup_seconds: float
    slowest_seconds: float
    last_error: str
    backoff_left: float


def sign(team_key: bytes, key: str, entry: bytes) -> bytes:
    """The record stored on the server for ``entry`` under ``key``."""
    return RECORD_MAGIC + _tag(team_key, key, entry) + entry


def _tag(team_key: bytes, key: str, entry: bytes) -> bytes:
    mac = hmac.new(team_key, RECORD_MAGIC, hashlib.sha256)
    mac.update(key.encode("ascii", "replace") + b"\0")
    mac.update(entry)
    return mac.digest()


def verify(team_key: bytes, key: str, record: object) -> bytes:
    """The entry bytes of a record whose tag holds.

    :raises Refused: not a signed record, or a tag that does not hold (the reason).
    """
    if not isinstance(record, (bytes, bytearray)):
        what = ("a Redis key of another type (a list, a hash...)" if isinstance(
            record, _NotAString) else f"a {type(record).__name__}")
        raise Refused(f"the remote record is {what}, not bytes")
    data = bytes(record)
    head = len(RECORD_MAGIC) + _TAG
    if len(data) < head or not data.startswith(RECORD_MAGIC):
        raise Refused("the remote record is not a signed cudamagic record")
    entry = data[head:]
    if not hmac.compare_digest(data[len(RECORD_MAGIC):head], _tag(team_key, key, entry)):
        raise Refused("the remote record's signature does not hold (it was changed, or "
                      "signed with another team key): it is not used")
    return entry


def _owner_only(st: os.stat_result) -> str | None:
    if st.st_uid != os.getuid():
        return f"is owned by uid {st.st_uid}, not by this user ({os.getuid()})"
    if st.st_mode & 0o077:
        return (f"is readable or writable by others (mode {st.st_mode & 0o777:o}); "
                "chmod 600 it")
    return None


def read_secret(path: str, what: str) -> bytes:
    """A secret from a file readable by its owner (this user) only, stripped of the line end.

    :raises CacheArgumentError: it cannot be read, or is not such a file (the reason).
    """
    try:
        secret = read_regular(os.path.expanduser(path), max_size=_MAX_SECRET,
                              follow_links=True, trust=_owner_only).strip()
    except FileRefused as exc:
        raise CacheArgumentError(f"{what} {exc}") from None
    except OSError as exc:
        raise CacheArgumentError(f"{what} {path} cannot be read ({exc.strerror})") from None
    return secret


def _shown_url(url: str) -> str:
    """The URL without its password: the one in the user part and any ``password=`` of the
    query (redis-py takes both), whatever else the URL holds (it never raises)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "(a URL that is not one)" if "@" in url or "password" in url.lower() else url
    where, qmark, query = rest.partition("?")
    netloc, slash, path = where.partition("/")
    user, at, host = netloc.rpartition("@")
    if at:
        name, colon, _ = user.partition(":")
        netloc = f"{name}:***@{host}" if colon else f"{name}@{host}"
    if qmark:
        query = "&".join(f"{part.partition('=')[0]}=***"
                         if part.partition("=")[0].lower() in ("password", "username")
                         else part for part in query.split("&"))
    return f"{scheme}://{netloc}{slash}{path}{qmark}{query}"


def open_remote(url: str | None = None, key_file: str | None = None,
                password_file: str | None = None, **kw: Any
                ) -> tuple["RemoteStore | None", str | None]:
    """The remote tier named by the arguments or the environment, or why there is none.

    ``(store, None)``; ``(None, why)`` where a URL is given but the tier cannot be on (no team
    key, a key file others can read, a URL that is not Redis's); ``(None, None)`` where none
    is configured.
    """
    url = url if url is not None else os.environ.get("CUDAMAGIC_REMOTE_CACHE") or None
    if not url:
        return None, None
    if url.partition("://")[0].lower() not in ("redis", "rediss", "unix"):
        return None, (f"the remote cache {_shown_url(url)!r} is not a redis://, rediss:// or "
                      "unix:// URL")
    try:
        import redis  # noqa: F401
    except ImportError:
        return None, ("the redis client is not installed: pip install 'redis>=5' in the "
                      "notebook kernel's environment (from a checkout: pip install -e "
                      "'.[remote]'); the remote cache is off")
    key_file = key_file or os.environ.get("CUDAMAGIC_REMOTE_KEY_FILE")
    if not key_file:
        return None, ("no team key: set CUDAMAGIC_REMOTE_KEY_FILE to a file readable by you "
                      "only that holds the team's secret (docs/cache.md), so that records "
                      "can be signed and checked")
    try:
        team_key = read_secret(key_file, "the team key file")
        password_file = password_file or os.environ.get("CUDAMAGIC_REMOTE_PASSWORD_FILE")
        password = read_secret(password_file, "the remote password file").decode(
            "utf-8", "replace") if password_file else None
    except CacheArgumentError as exc:
        return None, f"{exc}: the remote cache is off"
    if len(team_key) < MIN_KEY:
        return None, (f"the team key in {key_file} is {len(team_key)} bytes, fewer than "
                      f"{MIN_KEY}: make one with `openssl rand -hex 32 > {key_file}`")
    try:
        return RemoteStore(url, team_key, password=password, **kw), None
    except ValueError as exc:  # the client's reading of the URL: a port, db or option
        return None, (f"the remote cache {_shown_url(url)!r} is not a URL the Redis client "
                      f"takes ({_masked(str(exc), url)}): the remote cache is off")


def _masked(text: str, url: str) -> str:
    """``text`` without the URL's passwords, should it quote them."""
    where, _, query = url.partition("://")[2].partition("?")
    secrets = [where.partition("/")[0].rpartition("@")[0].partition(":")[2]]
    secrets += [urllib.parse.unquote(part.partition("=")[2]) for part in query.split("&")
                if part.partition("=")[0].lower() == "password"]
    for secret in filter(None, secrets):
        text = text.replace(secret, "***").replace(urllib.parse.unquote(secret), "***")
    return text


class _BoundedSocket:
    """A connection's socket on which every request's reply must come whole within ``bound``
    seconds of the request being sent, and within ``budget`` bytes: the client's own timeout
    bounds each read only, so a server sending one byte at a time, each inside that timeout,
    held a lookup for as long as it liked, and a declared size of terabytes was read for as
    long as bytes came."""

    def __init__(self, sock: Any, bound: float, budget: int) -> None:
        self._sock, self._bound, self._budget = sock, bound, budget
        self._end, self._got, self._asked = time.monotonic() + bound, 0, sock.gettimeout()

    def sendall(self, data: Any, *flags: int) -> None:
        self._sock.sendall(data, *flags)
        self._end, self._got = time.monotonic() + self._bound, 0

    def settimeout(self, value: float | None) -> None:
        self._asked = value
        self._sock.settimeout(value)

    def recv(self, size: int, *flags: int) -> bytes:
        left = self._end - time.monotonic()
        if self._asked != 0:  # 0: the client asking whether anything is there, never blocks
            if left <= 0:
                raise socket.timeout(f"the reply took over {self._bound:g} s")
            self._sock.settimeout(left if self._asked is None else min(left, self._asked))
        data = self._sock.recv(size, *flags)
        self._got += len(data)
        if self._got > self._budget:
            raise socket.timeout(f"the reply is over {self._budget} bytes")
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _bounded(base: type, bound: float, budget: int) -> type:
    """``base`` (redis-py's connection class for the URL's scheme) with its socket bounded."""

    class Bounded(base):
        def _connect(self) -> Any:
            return _BoundedSocket(super()._connect(), bound, budget)

    return Bounded


def _import_what_connecting_imports() -> None:
    """Import now what a first connection would import on the sender thread: a fork while that
    thread imports leaves the child a half-initialized module (its sends, and any import of
    it, fail there for good). redis-py asks importlib.metadata its version (email.*), and the
    socket's name lookup encodes the host (encodings.idna)."""
    from redis.utils import get_lib_version

    get_lib_version()
    "localhost".encode("idna")


class _Breaker:
    """Skips the server for a while after it failed; one warning per outage."""

    def __init__(self, backoff: float) -> None:
        self.backoff = backoff
        self.until = 0.0
        self.last_error = ""
        self.pending: str | None = None  # a warning to say on the caller's thread
        self._said = False

    def closed(self) -> bool:
        return time.monotonic() >= self.until

    def trip(self, server: str, exc: BaseException) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"[:300]
        self.until = time.monotonic() + self.backoff
        if not self._said:
            self._said = True
            self.pending = (f"cudamagic: the remote cache {server} failed ({self.last_error}); "
                            f"it is skipped for {self.backoff:g} s and cells are served from "
                            "the local cache or compiled")

    def ok(self) -> None:
        self._said = False


class RemoteStore(Store):
    """Signed entry records on a Redis server (see the module).

    Parameters
    ----------
    url : str
        ``redis://[user:password@]host:port/db``, ``rediss://...`` or ``unix://path``.
    team_key : bytes
        The secret every record is signed with.
    password : str, optional
        Where the URL holds none (``$CUDAMAGIC_REMOTE_PASSWORD_FILE``).
    timeout, backoff : float
        :data:`TIMEOUT_S`, :data:`BACKOFF_S`.
    max_record, queue_size : int
        :data:`MAX_RECORD`, :data:`QUEUE`.
    """

    in_memory = None

    def __init__(self, url: str, team_key: bytes, *, password: str | None = None,
                 timeout: float = TIMEOUT_S, backoff: float = BACKOFF_S,
                 max_record: int = MAX_RECORD, queue_size: int = QUEUE) -> None:
        if len(team_key) < MIN_KEY:
            raise CacheArgumentError(f"a team key must be at least {MIN_KEY} bytes")
        self.url, self.location = url, _shown_url(url)
        self._team_key, self._password = bytes(team_key), password
        self.timeout, self.max_record, self.queue_size = timeout, max_record, queue_size
        team = hmac.new(self._team_key, b"cudamagic team id", hashlib.sha256).hexdigest()[:16]
        self.prefix = f"cudamagic:e1:{team}:"  # teams with other keys never meet
        self._breaker = _Breaker(backoff)
        self._lock = ForkSafeLock()
        self._counts: dict[str, float] = dict.fromkeys(_COUNTS, 0)
        self._client: Any = None
        self._queue: queue.Queue[tuple[str, bytes]] = queue.Queue(queue_size)
        self._thread: threading.Thread | None = None
        _stores.add(self)
        self._redis()  # the client's imports here (the cache opens on %load_ext's thread)
        _import_what_connecting_imports()

    # --- the connection --------------------------------------------------------------------

    def _redis(self) -> Any:
        with self._lock:
            if self._client is None:
                import redis
                from redis.backoff import NoBackoff
                from redis.retry import Retry

                self._client = redis.Redis.from_url(
                    self.url, password=self._password, socket_timeout=self.timeout,
                    socket_connect_timeout=self.timeout, retry=Retry(NoBackoff(), 0),
                    retry_on_timeout=False, health_check_interval=0)
                pool = self._client.connection_pool
                pool.connection_class = _bounded(pool.connection_class, self.timeout,
                                                 self.max_record + _REPLY_SLACK)
            return self._client

    def _call(self, what: Callable[[Any], Any], default: Any = None) -> Any:
        """``what(client)`` unless the breaker is open; a failure trips it (``default``)."""
        import redis

        if not self._breaker.closed():
            self._count("skipped")
            return default
        try:
            result = what(self._redis())
        except Exception as exc:  # noqa: BLE001 - whatever the client met is the server's
            # RedisError, OSError; ValueError: a reply cut inside a length or a number; and
            # any error of the client's own on a reply it did not expect (a HELLO answered
            # with junk raised AttributeError out of redis-py)
            self._count("errors")
            self._breaker.trip(self.location, exc)
            self._drop_connection()
            return default
        except BaseException:  # Ctrl-C mid-reply: the rest of the reply must not be read later
            self._drop_connection()
            raise
        self._breaker.ok()
        return result

    def _drop_connection(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - a broken connection may fail to close
                pass

    def _count(self, name: str, n: float = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def said(self) -> None:
        """Say the warning a failure left (on the caller's thread, so a cell's report shows
        it), once per outage."""
        text, self._breaker.pending = self._breaker.pending, None
        if text:
            warnings.warn(text, CacheWarning, stacklevel=3)

    # --- Store -----------------------------------------------------------------------------

    def load(self, key: str) -> bytes | None:
        """The verified entry bytes under ``key`` (None: none, or the server is not answering).

        :raises Refused: a record whose signature does not hold (deleted from the server).
        """
        t = time.perf_counter()
        record = self._call(lambda r: _get(r, self.prefix + key), _FAILED)
        seconds = time.perf_counter() - t
        if record is _FAILED:
            self.said()
            return None
        with self._lock:
            self._counts["lookups"] += 1
            self._counts["lookup_seconds"] += seconds
            self._counts["slowest_seconds"] = max(self._counts["slowest_seconds"], seconds)
        if record is None:
            self._count("misses")
            return None
        try:
            entry = verify(self._team_key, key, record)
        except Refused:
            self._count("refused")
            self._call(lambda r: r.delete(self.prefix + key))
            raise
        self._count("hits")
        self._count("bytes_read", len(record))
        return entry

    def save(self, key: str, value: bytes) -> bool:
        """Send a record now (``SET NX``): whether the server holds this one after."""
        record = sign(self._team_key, key, value)
        if len(record) > self.max_record:
            self._count("too_large")
            return False
        kept = self._call(lambda r: r.set(self.prefix + key, record, nx=True), _FAILED)
        if kept is _FAILED:
            return False
        self._count("sent" if kept else "kept_theirs")
        if kept:
            self._count("bytes_sent", len(record))
        return bool(kept)

    def share(self, key: str, value: bytes) -> bool:
        """Send a record in the background; False where it is not sent (too large, the queue
        full, the server backing off), counted."""
        if len(value) + len(RECORD_MAGIC) + _TAG > self.max_record:
            self._count("too_large")
            return False
        if not self._breaker.closed():
            self._count("skipped")
            return False
        try:
            self._queue.put_nowait((key, value))
        except queue.Full:
            self._count("dropped")
            return False
        self._start()
        return True

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._send, name="cudamagic-remote",
                                                daemon=True)
                self._thread.start()

    def _send(self) -> None:
        q = self._queue
        while q is self._queue:  # a forked child's store has a new queue and no thread
            try:
                key, value = q.get(timeout=5.0)
            except queue.Empty:
                with self._lock:
                    if q.empty():
                        self._thread = None
                        return
                continue
            try:
                self.save(key, value)
            finally:
                q.task_done()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait (bounded) until the records offered so far are sent or given up; whether they
        were."""
        end = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < end:
            time.sleep(0.002)
        return not self._queue.unfinished_tasks

    def delete(self, key: str) -> bool:
        return bool(self._call(lambda r: r.delete(self.prefix + key), 0))

    def __contains__(self, key: str) -> bool:
        return bool(self._call(lambda r: r.exists(self.prefix + key), 0))

    def _keys(self) -> list[str]:
        found = self._call(lambda r: list(r.scan_iter(match=self.prefix + "*", count=500)), [])
        return [(k.decode() if isinstance(k, bytes) else k)[len(self.prefix):] for k in found]

    def __len__(self) -> int:
        return len(self._keys())

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def volume(self) -> int:
        keys = self._keys()
        sizes = self._call(lambda r: [r.strlen(self.prefix + k) for k in keys], [])
        return int(sum(sizes))

    def overhead(self) -> int:
        return 0

    def stored_limit(self) -> object:
        return None  # the server's maxmemory and its eviction policy govern

    def set_limit(self, limit: int, *, keep: bool) -> None:
        pass

    def evict(self) -> None:
        pass

    def clear(self) -> int:
        keys = self._keys()
        return int(self._call(lambda r: r.delete(*[self.prefix + k for k in keys])
                              if keys else 0, 0))

    def stats(self) -> tuple[int, int]:
        return int(self._counts["hits"]), int(self._counts["misses"])

    def unhit(self) -> None:
        with self._lock:
            self._counts["hits"] -= 1
            self._counts["misses"] += 1

    def listing(self) -> list[StoredEntry]:
        return []  # the folder lists its entries; the server's are the team's

    def reclaim(self) -> int:
        return 0

    def close(self) -> None:
        self._drop_connection()

    @property
    def raw(self) -> Any:
        return self._redis()

    def remote_stats(self) -> RemoteStats:
        """This process's numbers (``%cuda_cache remote``)."""
        with self._lock:
            c = dict(self._counts)
        left = max(0.0, self._breaker.until - time.monotonic())
        return RemoteStats(
            server=self.location, state=RemoteState.ON if left == 0 else RemoteState.BACKING_OFF,
            **{k: int(c[k]) for k in _COUNTS if k not in ("lookup_seconds", "slowest_seconds")},
            lookup_seconds=c["lookup_seconds"], slowest_seconds=c["slowest_seconds"],
            last_error=self._breaker.last_error, backoff_left=left)

    def _renew(self) -> None:
        """In a forked child: a new lock, queue and connection, no thread, and its own numbers
        (``%cuda_cache remote`` shows this process's; the breaker stays: the same server)."""
        self._lock = ForkSafeLock()
        self._counts = dict.fromkeys(_COUNTS, 0)
        self._client = None  # the parent's socket: never used here
        self._queue = queue.Queue(self.queue_size)
        self._thread = None

    def __repr__(self) -> str:
        return f"RemoteStore({self.location!r})"


_COUNTS = ("hits", "misses", "bytes_read", "bytes_sent", "sent", "kept_theirs", "errors",
           "refused", "too_large", "dropped", "skipped", "lookups", "lookup_seconds",
           "slowest_seconds")
_FAILED = object()


class _NotAString:
    """What is under a key when it is not a string (a list, a hash: Redis's WRONGTYPE)."""


def _get(client: Any, name: str) -> object:
    """GET, with a key of another type answered as a record (refused) rather than as a
    failing server (the breaker and its warning for every such key)."""
    import redis

    try:
        return client.get(name)
    except redis.ResponseError as exc:
        if str(exc).startswith("WRONGTYPE"):
            return _NotAString()
        raise
_stores: "weakref.WeakSet[RemoteStore]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for store in list(_stores):
        store._renew()


at_fork(__name__, "_stores", after_in_child=_after_fork_in_child)
