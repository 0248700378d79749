"""The team cache as a team uses it (issue 39), against a real redis-server on loopback: after a
header edit every machine is served the build its headers match; a large record over a slow
link is read, and one too slow for its size costs that lookup only; a full server refuses a
write and goes on serving reads; a password never shows, however the URL parses; the reply
bounds hold with either parser (hiredis reads with ``recv_into``); a truth test never scans.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import pytest

from cudamagic import build
from cudamagic.store import KernelCache
from cudamagic.store.remote import MAX_VARIANTS, RECORD_TTL_S, RemoteState, RemoteStore

from .redis_server import ThrottlingProxy, start_server, use_parser
from .test_remote_cache import _cache, key_file, server  # noqa: F401 - the fixtures

NAMES = ["axpy<float>", "axpy<double>"]
CELL = ('#include "scale.h"\n'
        "template <typename T> __global__ void axpy(T a, T* x, int n) { x[0] += a * n * SCALE; }\n")
TEAM_KEY = b"t" * 32


# --- 1. after a header edit ---------------------------------------------------------------


class Machine:
    """A checkout (its inc/scale.h) and a cache folder of its own, built from in turn."""

    def __init__(self, root: Path, cache: KernelCache, scale: int) -> None:
        self.root, self.cache = root, cache
        (root / "inc").mkdir(parents=True)
        self.edit(scale)

    def edit(self, scale: int) -> None:
        (self.root / "inc" / "scale.h").write_text(f"#define SCALE {scale}\n")

    def build(self, monkeypatch):
        monkeypatch.chdir(self.root)  # the working folder is not in the key: -Iinc is
        m = build(CELL, NAMES, options=["-Iinc"], cache=self.cache)
        assert self.cache.remote.flush()
        return m


def test_after_a_header_edit_each_machine_gets_the_build_its_headers_match(tmp_path, server,
                                                                          key_file,
                                                                          monkeypatch):
    """A edits a header and recompiles: B, whose checkout has A's edit, and C, whose checkout
    has the header as it was, both get a remote hit with the build of their own headers; A
    going back to the old header gets the old build from the team, not a compile; a machine
    with headers nobody built compiles, and its report does not say a header changed since a
    last compile it never made."""
    def machine(name: str, scale: int) -> Machine:
        return Machine(tmp_path / name, _cache(tmp_path, f"cache-{name}", server.url,
                                               key_file), scale)

    a = machine("alice", 2)
    first = a.build(monkeypatch)
    assert first.report.status == "cache miss"
    a.edit(3)
    edited = a.build(monkeypatch)
    assert edited.report.status == "cache miss" and "scale.h" in edited.report.miss_reason
    assert edited.key == first.key  # one key, two header states

    for name, scale, want in (("bob", 3, edited), ("carol", 2, first)):
        m = machine(name, scale).build(monkeypatch)
        assert m.report.status == "cache hit (remote)", (name, m.report.miss_reason)
        assert m.cubin == want.cubin and m.cubin != (first if want is edited else edited).cubin

    a.edit(2)  # back: the folder's entry is of SCALE 3; the team holds SCALE 2's build
    back = a.build(monkeypatch)
    assert back.report.status == "cache hit (remote)", back.report.miss_reason
    assert back.cubin == first.cubin

    dave = machine("dave", 4).build(monkeypatch)
    assert dave.report.status == "cache miss"
    assert "since the last compile" not in dave.report.miss_reason, dave.report.miss_reason
    assert "team cache holds 2 builds" in dave.report.miss_reason, dave.report.miss_reason
    # issue 51, snag 3: the report shown says so too, not "first build" alone
    for shown in (dave.report.why, dave.report.text(), dave.report.html()):
        assert "team cache holds 2 builds of this cell that read other header contents" \
            in shown, shown
    # and dave's build is the team's third
    assert machine("erin", 4).build(monkeypatch).report.status == "cache hit (remote)"


def test_a_record_nobody_matches_goes_away(server):
    """Records and indexes live RECORD_TTL_S after their last store or hit (a hit starts the
    time again), and an index keeps the newest MAX_VARIANTS header states."""
    store = RemoteStore(server.url, TEAM_KEY)
    raw = server.client()
    variants = [f"{n:032x}" for n in range(MAX_VARIANTS + 3)]
    for v in variants:
        assert store.save("cell", f"entry {v}".encode(), v, b"{}")
    fields = {f.decode() for f in raw.hkeys(store.index_name("cell"))}
    assert fields == set(variants[-MAX_VARIANTS:])  # the oldest three left the index
    name = store.record_name("cell", variants[-1])
    assert 0 < raw.ttl(name) <= RECORD_TTL_S and 0 < raw.ttl(store.index_name("cell"))
    raw.expire(name, 100)
    raw.expire(store.index_name("cell"), 100)
    assert store.load("cell") == f"entry {variants[-1]}".encode()  # the newest
    assert raw.ttl(name) > RECORD_TTL_S - 60 and raw.ttl(store.index_name("cell")) > 100
    raw.delete(name)  # evicted: its field goes with the next lookup, the one before serves
    assert store.load("cell") == f"entry {variants[-2]}".encode()
    assert variants[-1].encode() not in raw.hkeys(store.index_name("cell"))


def test_a_record_moved_to_another_variant_or_key_is_refused(server):
    """The tag covers the key and the variant: a record copied under another variant's name,
    or an index field under another key's, is refused and deleted."""
    from cudamagic.store.base import Refused

    store = RemoteStore(server.url, TEAM_KEY)
    raw = server.client()
    a, b = "a" * 32, "b" * 32
    store.save("cell", b"entry A", a, b"{}")
    store.save("cell", b"entry B", b, b"{}")
    raw.set(store.record_name("cell", b), raw.get(store.record_name("cell", a)))
    with pytest.raises(Refused, match="signature"):
        store.find("cell", lambda m: True)  # b is the newest: its record is A's
    assert not raw.exists(store.record_name("cell", b))
    store.save("other", b"entry", a, b"{}")
    raw.hset(store.index_name("other"), a, raw.hget(store.index_name("cell"), a))
    with pytest.raises(Refused, match="signature"):
        store.load("other")
    assert store.remote_stats().refused == 2 and store.remote_stats().errors == 0


def test_an_index_filled_with_junk_costs_a_lookup_a_few_calls(server):
    """20 000 fields of junk written into a cell's index (a hostile or broken writer): one
    lookup serves the valid variant and deletes the junk in a few HDELs (it sent one per field:
    40 000 round trips, 2.3 s on loopback, minutes over a network)."""
    store = RemoteStore(server.url, TEAM_KEY)
    raw = server.client()
    store.save("cell", b"entry A", "a" * 32, b"{}")
    index = store.index_name("cell")
    for at in range(0, 20_000, 2_000):
        raw.hset(index, mapping={f"junk{i}": b"x" for i in range(at, at + 2_000)})
    raw.config_resetstat()
    assert store.load("cell") == b"entry A"
    hdel = raw.info("commandstats").get("cmdstat_hdel", {}).get("calls", 0)
    assert 1 <= hdel <= 5, hdel
    assert raw.hkeys(index) == [b"a" * 32]


def test_a_valid_record_moved_to_another_key_is_neither_served_nor_kept(server):
    """The record's tag covers its cache key: a record of one cell copied under another cell's
    name (same variant, that cell's own index field intact) is refused, counted and deleted,
    and the cell's index field goes with it."""
    from cudamagic.store.base import Refused

    store = RemoteStore(server.url, TEAM_KEY)
    raw = server.client()
    v = "c" * 32
    store.save("cell", b"entry of cell", v, b"{}")
    store.save("other", b"entry of other", v, b"{}")
    raw.set(store.record_name("other", v), raw.get(store.record_name("cell", v)))
    with pytest.raises(Refused, match="signature"):
        store.find("other", lambda m: True)
    assert not raw.exists(store.record_name("other", v))
    assert v.encode() not in raw.hkeys(store.index_name("other"))
    assert store.load("cell") == b"entry of cell"  # the record it came from still serves
    assert store.load("other") is None  # a plain miss now: rebuilt and sent again
    assert store.remote_stats().refused == 1 and store.remote_stats().errors == 0


# --- 2. large records over a slow link ---------------------------------------------------

BIG = 12 << 20


@pytest.mark.parametrize("parser", ["python", "hiredis"])
def test_a_large_record_over_a_slow_link_is_read_and_a_too_slow_one_costs_its_lookup(server,
                                                                                     parser):
    """Through a proxy that throttles the server's replies: a 12 MiB record at 40 MiB/s (about
    0.3 s, over the 0.1 s bound) is read, since the bound grows with its bytes; at 2 MiB/s it
    is given up after a bounded time, and that lookup alone is a miss: the 4 KiB record asked
    next is served (the breaker stays closed)."""
    RemoteStore(server.url, TEAM_KEY, timeout=10).save("big", b"B" * BIG)
    RemoteStore(server.url, TEAM_KEY).save("small", b"s" * 4096)
    proxy = ThrottlingProxy(server.port, rate=40 << 20)
    store = RemoteStore(proxy.url, TEAM_KEY)
    use_parser(store, parser)
    try:
        t = time.perf_counter()
        assert store.load("big") == b"B" * BIG
        took = time.perf_counter() - t
        assert took > 0.15, took  # the link was slow: the old bound would have cut it
        assert store.load("small") == b"s" * 4096
        proxy.rate = 2 << 20
        t = time.perf_counter()
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            assert store.load("big") is None
        took = time.perf_counter() - t
        assert took < 1.5, took  # 6 s at that rate: given up after about 0.15 s
        assert store.load("small") == b"s" * 4096
        stats = store.remote_stats()
        assert (stats.slow, stats.errors, stats.state) == (1, 0, RemoteState.ON), stats
        assert not said, [str(w.message) for w in said]
    finally:
        store.close()
        proxy.close()


def test_a_too_slow_reply_leaves_another_threads_lookup_alone(server):
    """A reply given up on one thread drops that thread's connection only: another thread's,
    held in the middle of its lookup (checked out of its pool, connected), stays connected and
    its lookup is served; the tier stays on (the whole client was closed before: the other
    thread's command failed, and the breaker opened for 30 s)."""
    import threading

    RemoteStore(server.url, TEAM_KEY, timeout=10).save("big", b"B" * BIG)
    RemoteStore(server.url, TEAM_KEY).save("small", b"s" * 4096)
    proxy = ThrottlingProxy(server.port, rate=2 << 20)
    store = RemoteStore(proxy.url, TEAM_KEY)
    held, slow_done, seen = threading.Event(), threading.Event(), {}

    def other() -> None:
        conn = store.raw.connection_pool.get_connection("GET")
        conn.connect()
        held.set()  # in flight: its connection is out of the pool
        slow_done.wait(30)
        seen["connected"] = conn._sock is not None
        store.raw.connection_pool.release(conn)
        seen["served"] = store.load("small") == b"s" * 4096

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert held.wait(30)
        assert store.load("big") is None  # too slow for its size: given up
        slow_done.set()
        thread.join(30)
        stats = store.remote_stats()
        assert seen == {"connected": True, "served": True}, seen
        assert (stats.slow, stats.errors, stats.state) == (1, 0, RemoteState.ON), stats
    finally:
        slow_done.set()
        store.close()
        proxy.close()


# --- 3. a full server ----------------------------------------------------------------------


def test_a_full_server_refuses_a_write_and_goes_on_serving(tmp_path, key_file):
    """maxmemory with noeviction, past it: the server answers a SET with 'OOM command not allowed';
    that record is not sent, the tier stays on, and the records it holds are served."""
    server = start_server(tmp_path / "redis", "--maxmemory-policy", "noeviction")
    try:
        maker = _cache(tmp_path, "a", server.url, key_file)
        build(CELL.replace('#include "scale.h"\n', "#define SCALE 2\n"), NAMES, cache=maker)
        assert maker.remote.flush() and maker.remote.remote_stats().sent == 1
        raw = server.client()
        for i in range(64):  # 4 MiB, then a limit of 1 MiB: full, whatever a write frees
            raw.set(f"filler:{i}", os.urandom(64 << 10))
        raw.config_set("maxmemory", "1mb")
        import redis

        with pytest.raises(redis.OutOfMemoryError):  # "OOM command not allowed..."
            raw.set("one more", b"x")
        other = _cache(tmp_path, "b", server.url, key_file)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            compiled = build(CELL.replace('#include "scale.h"\n', "#define SCALE 5\n"), NAMES,
                             cache=other)
            assert other.remote.flush()
            served = build(CELL.replace('#include "scale.h"\n', "#define SCALE 2\n"), NAMES,
                           cache=other)
        assert compiled.report.status == "cache miss"
        assert served.report.status == "cache hit (remote)", served.report.miss_reason
        stats = other.remote.remote_stats()
        assert (stats.writes_refused, stats.errors, stats.state) == (1, 0, RemoteState.ON)
        assert "OutOfMemoryError" in stats.last_error and "maxmemory" in stats.last_error
        assert not [w for w in said if "remote cache" in str(w.message)]
        from cudamagic.view.records import RemoteCacheStats

        assert "1 refused by the server" in RemoteCacheStats.of(other).text()
    finally:
        server.stop()


def test_one_warning_per_outage_and_another_after_a_recovery(server):
    """docs/cache.md: a failing server is skipped with one warning, not one per cell; a call
    after the back-off that fails again is the same outage (no second warning); a good call
    ends the outage, so the next failure warns again."""
    store = RemoteStore(server.url, TEAM_KEY, backoff=0.05)
    said: list[str] = []

    def lookup(after_backoff: bool = True) -> None:
        while after_backoff and store.remote_stats().state is not RemoteState.ON:
            time.sleep(0.01)  # the back-off's end, polled: no call is skipped
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            store.load("k")
        said.extend(str(w.message) for w in caught if "remote cache" in str(w.message))

    try:
        lookup()
        assert said == []  # a good call
        server.pause()
        lookup()
        assert len(said) == 1  # the outage: said
        lookup()
        assert len(said) == 1 and store.remote_stats().errors == 2  # still down: not again
        server.resume()
        lookup()
        assert len(said) == 1 and store.remote_stats().errors == 2  # recovered
        server.pause()
        lookup()
        assert len(said) == 2 and store.remote_stats().errors == 3  # a second outage: said
    finally:
        server.resume()
        store.close()


# --- 4. passwords --------------------------------------------------------------------------

# (URL, its password): '/', '?', '#' and '@' as base64 and people write them, raw and encoded
PASSWORDS = [
    ("redis://:Zm9v/YmFy+c2Vr=@127.0.0.1:1/0", "Zm9v/YmFy+c2Vr="),
    ("redis://default:Zm9v/YmFy+c2Vr=@127.0.0.1:1/0", "Zm9v/YmFy+c2Vr="),
    ("redis://:ab?cd/efgh@127.0.0.1:1/0", "ab?cd/efgh"),
    ("redis://:pa#ss/wxyz@127.0.0.1:1/0", "pa#ss/wxyz"),
    ("redis://user:s3cr@t!x@127.0.0.1:1/0", "s3cr@t!x"),
    ("redis://:abc@def/ghij@127.0.0.1:1/0", "abc@def/ghij"),
    ("redis://user:abc@def?ghij#klmn@127.0.0.1:1/0", "abc@def?ghij#klmn"),
    ("redis://:abc@def:uvwx@127.0.0.1:1/0", "abc@def:uvwx"),
    ("redis://:Zm9vYmFy%2Fc2Vy@127.0.0.1:1/0", "Zm9vYmFy%2Fc2Vy"),
    ("redis://127.0.0.1:1/0?password=Zm9v/YmFy+c2Vr=&db=0", "Zm9v/YmFy+c2Vr="),
    ("redis://127.0.0.1:1/0?db=x&password=qwe/rty", "qwe/rty"),
    ("unix:///tmp/none.sock?password=Zm9v/YmFy", "Zm9v/YmFy"),
    ("http://:Zm9v/YmFy@host/", "Zm9v/YmFy"),
    # a query's password holding "@" (redis-py takes it): it passed for a user part's end
    ("redis://127.0.0.1:1/0?password=ab@cdefgh1234", "ab@cdefgh1234"),
    ("redis://:abcd@127.0.0.1:1/0?password=wxyz@qrst", "wxyz@qrst"),
]


def _pieces(password: str) -> list[str]:
    """The password, decoded, and every piece of it a URL parser could split off."""
    import re
    import urllib.parse

    out = {password, urllib.parse.unquote(password)}
    for text in list(out):
        out.update(p for p in re.split(r"[/?#@:&=]", text) if len(p) >= 3)
    return sorted(out)


@pytest.mark.parametrize("url, password", PASSWORDS, ids=[u for u, _ in PASSWORDS])
def test_a_password_is_never_shown_however_the_url_parses(tmp_path, monkeypatch, key_file,
                                                          url, password):
    """Every text a user sees: the warnings on opening, the stats while on, the failure's
    warning and last error, and %cuda_cache remote in a shell."""
    from IPython.core.interactiveshell import InteractiveShell

    from cudamagic.store import reset
    from cudamagic.view.records import RemoteCacheStats

    from .conftest import fresh_shell

    monkeypatch.setenv("CUDAMAGIC_REMOTE_KEY_FILE", str(key_file))
    shown: list[str] = []
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        cache = KernelCache(tmp_path / "c", remote=url)
        shown.append(RemoteCacheStats.of(cache).text())
        if cache.remote is not None:
            shown += [cache.remote.location, repr(cache.remote), repr(cache)]
            cache.remote.load("k")  # nobody there: the breaker's warning and last error
            shown += [str(cache.remote.remote_stats()), RemoteCacheStats.of(cache).text()]
    shown += [str(w.message) for w in said]
    monkeypatch.setenv("CUDAMAGIC_REMOTE_CACHE", url)
    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "shell"))
    reset()
    ip = fresh_shell()
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            ip.run_line_magic("load_ext", "cudamagic")
            shown.append(str(ip.run_line_magic("cuda_cache", "remote")))
        shown += [str(w.message) for w in said]
    finally:
        InteractiveShell.clear_instance()
        reset()
    text = "\n".join(shown)
    assert "remote cache" in text
    for piece in _pieces(password):
        assert piece not in text, (piece, text)


# --- 5. the bounds with either parser; a truth test ---------------------------------------


def test_a_truth_test_never_scans_the_server(tmp_path, server, key_file):
    cache = _cache(tmp_path, "a", server.url, key_file)
    for i in range(3):
        cache.remote.save(f"k{i}", b"entry")
    raw = server.client()
    raw.config_resetstat()
    assert cache.remote and cache
    assert "cmdstat_scan" not in raw.info("commandstats")
