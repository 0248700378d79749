"""The remote tier: entry records shared through a Redis server, signed with a team key.

A team's machines (JupyterHub users, GPU nodes, CI runners, Dask workers) point
``$CUDAMAGIC_REMOTE_CACHE`` at one server (``redis://host:port/db``, ``rediss://`` with TLS, a
user and password in the URL or ``$CUDAMAGIC_REMOTE_PASSWORD_FILE``) and
``$CUDAMAGIC_REMOTE_KEY_FILE`` at a file holding the team's secret key. The folder on each
machine stays the first tier (:class:`~cudamagic.store.KernelCache`); this one is asked on a
local miss, and a compile is offered to it in the background.

**Builds of one cell by what they read.** A cache key does not cover the headers' contents (the
compile says what it read), so one key has a record per state of its headers: a *variant*,
named by the sha256 of its header manifest's contents (:func:`~cudamagic.toolchain.compile.manifest.
contents_digest`). Under ``r:<key>:<variant>`` is the record; the hash ``i:<key>`` indexes a
key's variants, each field holding that variant's manifest. A lookup reads the index, asks the
caller which manifest holds on this machine (newest first) and fetches that record alone: after
a header edit both states serve, each machine the one its headers match. Records and indexes
expire :data:`RECORD_TTL_S` after their last store or hit, and an index keeps the newest
:data:`MAX_VARIANTS`: a state of the headers that no machine has any more goes away.

**Trust.** Anyone who can write the server must not be able to make a notebook run their code.
A record is ``RECORD_MAGIC + tag + entry``, the tag an HMAC-SHA256 with the team key over the
magic, the cache key, the variant and the whole entry (CUBIN, name map, manifest); an index
field is ``INDEX_MAGIC + tag + time + manifest``, its tag over the magic, the key, the variant,
the time and the manifest. A record or field whose tag does not hold (a changed CUBIN or map, a
recomputed checksum, a tag made with another key, one moved to another key or variant) is never
used: it is counted, deleted from the server and rebuilt. Nothing read from the server is
unpickled: an entry is plain bytes (:mod:`cudamagic.store.entry`). Without a key the tier is off
and says why.

**Never in the way.** Every call has a bound (:data:`TIMEOUT_S`, also for connecting) on the
whole reply, not each read of it (a server trickling its reply a byte at a time costs one
bound), that grows with the bytes that came, at :data:`MIN_RATE`: a record of 24 MiB over a
1 Gbit/s link is read, not cut. A reply may hold at most a record's bytes (a declared size of
terabytes is cut at :data:`MAX_RECORD` and 1 MiB more); there are no retries. Any failure of
the client (a reply it cannot read: another protocol, junk) is the server's fault and is handled
so; a failure opens a circuit breaker: the server is skipped for :data:`BACKOFF_S`, with one
warning, and the cell goes on from the folder or compiles. Two failures cost their own call
only: a large reply still coming, too slowly for its size (that lookup is a miss), and a write
the server answered with an error (``OOM command not allowed`` from a full server under
``noeviction``: reads go on). Records go out on a daemon thread through a bounded queue (full:
the record is dropped and counted), with ``SET NX`` (two machines compiling one cell with the
same headers keep the first record; both are correct). A record over :data:`MAX_RECORD` is not
sent. A forked child gets a fresh queue, no thread and a new connection.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import queue
import re
import struct
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import CacheArgumentError, CacheWarning
from ..core.files import FileRefused, read_regular
from ..core.forksafe import ForkSafeLock
from ..core.process import at_fork
from .base import REMOTE_VARIABLES, Refused, Store, StoredEntry
from .server import bounded, masked, refused_url_text, shown_url, too_slow

__all__ = ["RemoteStore", "RemoteStats", "RemoteState", "Found", "open_remote", "sign",
           "verify", "TIMEOUT_S", "MIN_RATE", "BACKOFF_S", "MAX_RECORD", "RECORD_MAGIC",
           "INDEX_MAGIC", "RECORD_TTL_S", "MAX_VARIANTS", "NO_VARIANT", "read_secret",
           "REMOTE_VARIABLES"]

#: Seconds one call to the server may take beyond what its bytes take (connect, send, reply).
TIMEOUT_S = 0.1
#: The slowest transfer taken, in bytes per second: a reply (and a request) may take
#: :data:`TIMEOUT_S` more than its bytes take at this rate.
MIN_RATE = 8 << 20
#: Seconds the server is skipped after it failed.
BACKOFF_S = 30.0
#: Bytes of the largest record sent (larger ones stay local).
MAX_RECORD = 64 << 20
#: Records waiting to be sent; more are dropped.
QUEUE = 64
#: Seconds a record and its key's index live after their last store or hit.
RECORD_TTL_S = 30 * 86400
#: Variants (header states) an index keeps, the newest.
MAX_VARIANTS = 8
#: The variant of a record stored without a manifest (a test's, a link's).
NO_VARIANT = hashlib.sha256(b"").hexdigest()[:32]
#: What every signed record starts with.
RECORD_MAGIC = b"CUDAMAGIC-SIGNED-2\n"
#: What every signed index field starts with.
INDEX_MAGIC = b"CUDAMAGIC-INDEX-2\n"
_TAG = 32
_STAMP = struct.Struct(">d")
#: The shortest team key taken (bytes).
MIN_KEY = 16
_MAX_SECRET = 4096
#: Bytes a reply may hold beyond a record (its header, a SCAN page).
_REPLY_SLACK = 1 << 20
_NAME = re.compile(r"[0-9a-f]{1,64}")

#: index fields deleted per HDEL (refused ones: a filled index is cleared in few calls)
_HDEL_BATCH = 4096


def _close(client: Any) -> None:
    """Close a client's connections (a broken one may fail to close: nothing to do then)."""
    try:
        client.close()
    except Exception:  # noqa: BLE001 - a broken connection may fail to close
        pass


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
    slow: int = 0
    writes_refused: int = 0


@dataclass(frozen=True)
class Found:
    """What :meth:`RemoteStore.find` found: the entry of the variant that holds (None: none
    does, or the server did not answer), that variant and its manifest as indexed, how many
    others the key has, and the seconds the server took."""

    entry: bytes | None
    variant: str | None = None
    manifest: bytes = b""
    others: int = 0
    seconds: float = 0.0


def sign(team_key: bytes, key: str, entry: bytes, variant: str = NO_VARIANT) -> bytes:
    """The record stored on the server for ``entry`` under ``key`` and ``variant``."""
    return RECORD_MAGIC + _tag(team_key, RECORD_MAGIC, key, variant, entry) + entry


def _tag(team_key: bytes, magic: bytes, key: str, variant: str, body: bytes) -> bytes:
    mac = hmac.new(team_key, magic, hashlib.sha256)
    mac.update(key.encode("ascii", "replace") + b"\0" + variant.encode("ascii", "replace")
               + b"\0")
    mac.update(body)
    return mac.digest()


def _signed_body(team_key: bytes, magic: bytes, key: str, variant: str, data: object,
                 what: str) -> bytes:
    """The body of a signed value whose tag holds; :exc:`Refused` (the reason) otherwise."""
    if not isinstance(data, (bytes, bytearray)):
        kind = ("a Redis key of another type (a list, a hash...)" if isinstance(
            data, _NotAString) else f"a {type(data).__name__}")
        raise Refused(f"the remote {what} is {kind}, not bytes")
    data = bytes(data)
    head = len(magic) + _TAG
    if len(data) < head or not data.startswith(magic):
        raise Refused(f"the remote {what} is not a signed cudamagic {what}")
    body = data[head:]
    if not hmac.compare_digest(data[len(magic):head], _tag(team_key, magic, key, variant, body)):
        raise Refused(f"the remote {what}'s signature does not hold (it was changed, moved from "
                      "another key, or signed with another team key): it is not used")
    return body


def verify(team_key: bytes, key: str, record: object, variant: str = NO_VARIANT) -> bytes:
    """The entry bytes of a record whose tag holds for ``key`` and ``variant``.

    :raises Refused: not a signed record, or a tag that does not hold (the reason).
    """
    return _signed_body(team_key, RECORD_MAGIC, key, variant, record, "record")


def _index_item(team_key: bytes, key: str, variant: str, stamp: float, manifest: bytes
                ) -> bytes:
    body = _STAMP.pack(stamp) + manifest
    return INDEX_MAGIC + _tag(team_key, INDEX_MAGIC, key, variant, body) + body


def _stamp(item: object) -> float:
    """The time an index field says it was stored (unchecked: for trimming only)."""
    start = len(INDEX_MAGIC) + _TAG
    if isinstance(item, bytes) and len(item) >= start + _STAMP.size:
        return _STAMP.unpack_from(item, start)[0]
    return 0.0


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
        return None, (f"the remote cache {shown_url(url)!r} is not a redis://, rediss:// or "
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
        return None, (f"the remote cache {shown_url(url)!r} is not a URL the Redis client "
                      f"takes ({refused_url_text(url, exc)}): the remote cache is off")


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

    def trip(self, server: str, error: str) -> None:
        self.last_error = error
        self.until = time.monotonic() + self.backoff
        if not self._said:
            self._said = True
            self.pending = (f"cudamagic: the remote cache {server} failed ({self.last_error}); "
                            f"it is skipped for {self.backoff:g} s and cells are served from "
                            "the local cache or compiled")

    def ok(self) -> None:
        self._said = False


class RemoteStore(Store):
    """Signed entry records on a Redis server, by key and variant (see the module).

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
    ttl : int
        :data:`RECORD_TTL_S`.
    """

    in_memory = None

    def __init__(self, url: str, team_key: bytes, *, password: str | None = None,
                 timeout: float = TIMEOUT_S, backoff: float = BACKOFF_S,
                 max_record: int = MAX_RECORD, queue_size: int = QUEUE,
                 ttl: int = RECORD_TTL_S) -> None:
        if len(team_key) < MIN_KEY:
            raise CacheArgumentError(f"a team key must be at least {MIN_KEY} bytes")
        self.url, self.location = url, shown_url(url)
        self._team_key, self._password = bytes(team_key), password
        self.timeout, self.max_record, self.queue_size = timeout, max_record, queue_size
        self.ttl = ttl
        team = hmac.new(self._team_key, b"cudamagic team id", hashlib.sha256).hexdigest()[:16]
        self.prefix = f"cudamagic:e2:{team}:"  # teams with other keys never meet
        self._breaker = _Breaker(backoff)
        self._lock = ForkSafeLock()
        self._counts: dict[str, float] = dict.fromkeys(_COUNTS, 0)
        # one client per thread (each its own connection pool): a reply given up on one
        # thread drops that thread's connection only, never another's in flight
        self._local = threading.local()
        self._clients: list[Any] = []
        self._queue: queue.Queue[tuple[str, bytes, str, bytes]] = queue.Queue(queue_size)
        self._thread: threading.Thread | None = None
        _stores.add(self)
        self._redis()  # the client's imports here (the cache opens on %load_ext's thread)
        _import_what_connecting_imports()

    def record_name(self, key: str, variant: str = NO_VARIANT) -> str:
        """The Redis key of a record."""
        return f"{self.prefix}r:{key}:{variant}"

    def index_name(self, key: str) -> str:
        """The Redis key of a key's index of variants."""
        return f"{self.prefix}i:{key}"

    # --- the connection --------------------------------------------------------------------

    def _redis(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            client = redis.Redis.from_url(
                self.url, password=self._password, socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout, retry=Retry(NoBackoff(), 0),
                retry_on_timeout=False, health_check_interval=0,
                protocol=2)  # RESP2: every server takes it (redis-py 8 asks HELLO 3,
            # which a server older than 6 refuses: no connection at all)
            pool = client.connection_pool
            pool.connection_class = bounded(pool.connection_class, self.timeout,
                                            1 / MIN_RATE, self.max_record + _REPLY_SLACK)
            with self._lock:
                self._clients.append(client)
            self._local.client = client
        return client

    def _call(self, what: Callable[[Any], Any], default: Any = None, *,
              write: bool = False) -> Any:
        """``what(client)`` unless the breaker is open; a failure trips it (``default``),
        except a reply too slow for its size and, for a write, an error the server answered
        with: those cost this call only."""
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
            error = masked(f"{type(exc).__name__}: {exc}", self.url)[:300]
            if write and isinstance(exc, redis.ResponseError):  # OOM, READONLY: this write
                self._count("writes_refused")
                self._breaker.last_error = error
                return default
            if too_slow(exc):  # the rest of that reply must not be read later
                self._count("slow")
                self._breaker.last_error = error
                self._drop_connection()
                return default
            self._count("errors")
            self._breaker.trip(self.location, error)
            self._drop_connection()
            return default
        except BaseException:  # Ctrl-C mid-reply: the rest of the reply must not be read later
            self._drop_connection()
            raise
        self._breaker.ok()
        return result

    def _drop_connection(self) -> None:
        """Close this thread's client (its connections: one may hold the rest of a reply that
        must not be read later); other threads' are left alone."""
        client = getattr(self._local, "client", None)
        self._local.client = None
        if client is not None:
            with self._lock:
                if client in self._clients:
                    self._clients.remove(client)
            _close(client)

    def _count(self, name: str, n: float = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def said(self) -> None:
        """Say the warning a failure left (on the caller's thread, so a cell's report shows
        it), once per outage."""
        text, self._breaker.pending = self._breaker.pending, None
        if text:
            warnings.warn(text, CacheWarning, stacklevel=3)

    # --- lookups ---------------------------------------------------------------------------

    def find(self, key: str, holds: Callable[[bytes], bool] | None = None) -> Found:
        """The entry of ``key``'s newest variant whose manifest ``holds`` here (any variant,
        where ``holds`` is None), fetched alone; a variant whose record is gone (evicted,
        expired) leaves the index.

        :raises Refused: a record or index field whose signature does not hold (deleted from
            the server), where no variant served.
        """
        t = time.perf_counter()
        index = self.index_name(key)
        items = self._call(lambda r: _read(r, "hgetall", index), _FAILED)
        server = time.perf_counter() - t
        if items is _FAILED:
            self.said()
            return Found(None, seconds=server)
        variants, refusal = self._variants(key, items)
        for _, variant, manifest in variants:
            if holds is not None and not holds(manifest):
                continue
            name = self.record_name(key, variant)
            t = time.perf_counter()
            record = self._call(lambda r: _read(r, "get", name, index, self.ttl), _FAILED)
            server += time.perf_counter() - t
            if record is _FAILED:
                self.said()
                return Found(None, seconds=server)
            if record is None:  # evicted or expired: its field goes
                self._call(lambda r: r.hdel(index, variant), write=True)
                continue
            self._looked(server)
            try:
                entry = verify(self._team_key, key, record, variant)
            except Refused:
                self._count("refused")
                self._call(lambda r: r.delete(name) + r.hdel(index, variant), write=True)
                raise
            self._count("hits")
            self._count("bytes_read", len(record))
            return Found(entry, variant, manifest, len(variants) - 1, server)
        self._looked(server)
        self._count("misses")
        if refusal is not None:
            raise Refused(refusal)
        return Found(None, others=len(variants), seconds=server)

    def _variants(self, key: str, items: object
                  ) -> tuple[list[tuple[float, str, bytes]], str | None]:
        """An index's fields whose tags hold, as ``(time, variant, manifest)``, newest first,
        and why the last that did not was refused (those are deleted from the server)."""
        index = self.index_name(key)
        refusal: str | None = None
        if not isinstance(items, dict):  # WRONGTYPE, or another reply
            refusal = ("the remote index is a Redis key of another type (a list, a "
                       "string...), not a hash")
            self._count("refused")
            self._call(lambda r: r.delete(index), write=True)
            items = {}
        variants: list[tuple[float, str, bytes]] = []
        refused: list[Any] = []
        for field, item in items.items():
            try:
                variant = field.decode("ascii") if isinstance(field, bytes) else str(field)
                if not _NAME.fullmatch(variant):
                    raise Refused("the remote index names a variant that is not one")
                body = _signed_body(self._team_key, INDEX_MAGIC, key, variant, item,
                                    "index field")
                if len(body) < _STAMP.size:
                    raise Refused("the remote index field holds no time")
                variants.append((_STAMP.unpack_from(body)[0], variant, body[_STAMP.size:]))
            except (Refused, UnicodeDecodeError) as exc:
                refusal = str(exc) if isinstance(exc, Refused) else "a variant that is not one"
                self._count("refused")
                refused.append(field)
        # the refused fields go in a few commands, not one round trip each: an index a
        # server was filled with costs its lookup a bounded number of calls
        for at in range(0, len(refused), _HDEL_BATCH):
            batch = refused[at:at + _HDEL_BATCH]
            self._call(lambda r: r.hdel(index, *batch), write=True)
        return sorted(variants, reverse=True), refusal

    def _looked(self, seconds: float) -> None:
        with self._lock:
            self._counts["lookups"] += 1
            self._counts["lookup_seconds"] += seconds
            self._counts["slowest_seconds"] = max(self._counts["slowest_seconds"], seconds)

    def load(self, key: str) -> bytes | None:
        """The verified entry bytes of ``key``'s newest variant (None: none, or the server is
        not answering).

        :raises Refused: a record whose signature does not hold (deleted from the server).
        """
        return self.find(key).entry

    # --- stores ----------------------------------------------------------------------------

    def save(self, key: str, value: bytes, variant: str = NO_VARIANT,
             manifest: bytes = b"") -> bool:
        """Send a record now (``SET NX``) and index it under its variant with its manifest:
        whether the server holds this one after. A record already there keeps its place and
        lives on (its time to live starts again)."""
        record = sign(self._team_key, key, value, variant)
        if len(record) > self.max_record:
            self._count("too_large")
            return False
        name, index = self.record_name(key, variant), self.index_name(key)
        item = _index_item(self._team_key, key, variant, time.time(), manifest)

        def send(r: Any) -> bool:
            kept = r.set(name, record, nx=True, ex=self.ttl)
            pipe = r.pipeline(transaction=False)
            if kept:
                pipe.hset(index, variant, item)
            else:
                pipe.expire(name, self.ttl).hsetnx(index, variant, item)
            count = pipe.expire(index, self.ttl).hlen(index).execute()[-1]
            if count > MAX_VARIANTS:  # the oldest go; their records expire
                stamps = sorted((_stamp(v), f) for f, v in r.hgetall(index).items())
                r.hdel(index, *[f for _, f in stamps[:len(stamps) - MAX_VARIANTS]])
            return bool(kept)

        kept = self._call(send, _FAILED, write=True)
        if kept is _FAILED:
            return False
        self._count("sent" if kept else "kept_theirs")
        if kept:
            self._count("bytes_sent", len(record))
        return kept

    def share(self, key: str, value: bytes, variant: str = NO_VARIANT,
              manifest: bytes = b"") -> bool:
        """Send a record in the background; False where it is not sent (too large, the queue
        full, the server backing off), counted."""
        if len(value) + len(RECORD_MAGIC) + _TAG > self.max_record:
            self._count("too_large")
            return False
        if not self._breaker.closed():
            self._count("skipped")
            return False
        try:
            self._queue.put_nowait((key, value, variant, manifest))
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
                key, value, variant, manifest = q.get(timeout=5.0)
            except queue.Empty:
                with self._lock:
                    if q.empty():
                        self._thread = None
                        return
                continue
            try:
                self.save(key, value, variant, manifest)
            finally:
                q.task_done()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait (bounded) until the records offered so far are sent or given up; whether they
        were."""
        end = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < end:
            time.sleep(0.002)
        return not self._queue.unfinished_tasks

    # --- the rest of Store -----------------------------------------------------------------

    def delete(self, key: str) -> bool:
        """Remove every variant of ``key``."""
        names = self._names(f"r:{key}:*")
        return bool(self._call(lambda r: r.delete(self.index_name(key), *names), 0,
                               write=True))

    def __contains__(self, key: str) -> bool:
        return bool(self._call(lambda r: r.exists(self.index_name(key)), 0))

    def __bool__(self) -> bool:
        return True  # a store is there whatever it holds: never a scan of the server

    def _names(self, pattern: str) -> list[str]:
        found = self._call(lambda r: list(r.scan_iter(match=self.prefix + pattern, count=500)),
                           [])
        return [k.decode() if isinstance(k, bytes) else k for k in found]

    def _keys(self) -> list[str]:
        """``key:variant`` of every record."""
        return [n[len(self.prefix) + 2:] for n in self._names("r:*")]

    def __len__(self) -> int:
        return len(self._keys())

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def volume(self) -> int:
        names = self._names("r:*")
        sizes = self._call(lambda r: [r.strlen(n) for n in names], [])
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
        """Remove every record and index of this team; how many records there were."""
        names = self._names("*")
        if not names:
            return 0
        self._call(lambda r: r.delete(*names), 0, write=True)
        return sum(n.startswith(self.prefix + "r:") for n in names)

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
        with self._lock:
            clients, self._clients = self._clients, []
        self._local = threading.local()
        for client in clients:
            _close(client)

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
        self._local = threading.local()  # the parent's sockets: never used here
        self._clients = []
        self._queue = queue.Queue(self.queue_size)
        self._thread = None

    def __repr__(self) -> str:
        return f"RemoteStore({self.location!r})"


_COUNTS = ("hits", "misses", "bytes_read", "bytes_sent", "sent", "kept_theirs", "errors",
           "refused", "too_large", "dropped", "skipped", "lookups", "lookup_seconds",
           "slowest_seconds", "slow", "writes_refused")
_FAILED = object()


class _NotAString:
    """What is under a key when it is not of the type asked for (Redis's WRONGTYPE)."""


def _read(client: Any, command: str, name: str, index: str | None = None,
          ttl: int = 0) -> object:
    """GET or HGETALL, with a key of another type answered as a record (refused) rather than
    as a failing server (the breaker and its warning for every such key); a GET given the
    key's index and a time to live starts both lives again in the same round trip (ignoring
    a server that refuses that: a replica, a full server)."""
    import redis

    try:
        if index is None:
            return getattr(client, command)(name)
        got, *_ = client.pipeline(transaction=False).get(name).expire(name, ttl).expire(
            index, ttl).execute(raise_on_error=False)
    except redis.ResponseError as exc:
        if str(exc).startswith("WRONGTYPE"):
            return _NotAString()
        raise
    if isinstance(got, redis.ResponseError):
        if str(got).startswith("WRONGTYPE"):
            return _NotAString()
        raise got
    return got


_stores: "weakref.WeakSet[RemoteStore]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for store in list(_stores):
        store._renew()


at_fork(__name__, "_stores", after_in_child=_after_fork_in_child)
