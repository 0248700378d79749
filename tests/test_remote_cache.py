"""The team cache (issue 32) against a real redis-server on loopback: a second machine's first
run is a remote hit with the right kernels; records that do not carry the team's signature
are refused and never served; a server that is down, paused or cuts a reply never stops a
cell, and costs one bounded timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from cudamagic import build
from cudamagic.errors import CacheWarning
from cudamagic.core.miss import HitKind
from cudamagic.store import KernelCache, decode_entry, encode_entry
from cudamagic.store.remote import (RECORD_MAGIC, RemoteStore, open_remote, sign, verify,
                                    Refused)

from .conftest import run_python
from .redis_server import CuttingProxy, start_server

CELL = 'extern "C" __global__ void fill(float* x, float v, int n) { x[0] = v + n; }\n'
TEMPLATE = ("template <typename T> __global__ void axpy(T a, T* x, int n) { x[0] += a * n; }\n"
            + CELL)
NAMES = ["axpy<float>", "axpy<double>"]


@pytest.fixture
def server(tmp_path):
    s = start_server(tmp_path / "redis")
    yield s
    s.stop()


@pytest.fixture
def key_file(tmp_path) -> Path:
    path = tmp_path / "team.key"
    path.write_text(os.urandom(32).hex() + "\n")
    path.chmod(0o600)
    return path


def _cache(tmp_path: Path, name: str, url: str, key_file: Path, **kw) -> KernelCache:
    store, why = open_remote(url, str(key_file), **kw)
    assert why is None, why
    return KernelCache(tmp_path / name, remote=store)


def _kernels(module) -> dict[str, str]:
    return {k.name_expression: k.symbol for k in module.kernels.values()}


# --- trust -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, content, said", [
    (0o644, "k" * 64, "readable or writable by others"),
    (0o640, "k" * 64, "readable or writable by others"),
    (0o602, "k" * 64, "readable or writable by others"),
    (0o600, "short", "fewer than 16"),
    (0o600, "", "fewer than 16"),
])
def test_a_key_file_others_can_read_or_too_short_keeps_the_tier_off(tmp_path, mode, content,
                                                                     said):
    path = tmp_path / "k"
    path.write_text(content)
    path.chmod(mode)
    store, why = open_remote("redis://127.0.0.1:1/0", str(path))
    assert store is None and said in why and "off" in why or said in why, why


def test_no_key_no_tier_and_it_says_why(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDAMAGIC_REMOTE_KEY_FILE", raising=False)
    monkeypatch.setenv("CUDAMAGIC_REMOTE_CACHE", "redis://127.0.0.1:1/0")
    with pytest.warns(CacheWarning, match="no team key"):
        cache = KernelCache(tmp_path / "c")
    assert cache.remote is None and "CUDAMAGIC_REMOTE_KEY_FILE" in cache.remote_off
    assert open_remote("http://x/")[1] and "redis://" in open_remote("http://x/")[1]


def test_a_key_file_of_another_owner_is_refused(tmp_path):
    if os.getuid() != 0:
        pytest.skip("making a file of another owner needs root")
    path = tmp_path / "k"
    path.write_text("k" * 64)
    path.chmod(0o600)
    os.chown(path, 65534, 65534)
    store, why = open_remote("redis://127.0.0.1:1/0", str(path))
    assert store is None and "owned by uid 65534" in why


def _stored(store: RemoteStore, key: str) -> tuple[str, str]:
    """The Redis name and variant of ``key``'s one record on the server."""
    names = [n.decode() for n in store.raw.scan_iter(store.record_name(key, "*"))]
    assert len(names) == 1, names
    return names[0], names[0].rpartition(":")[2]


def _forge(kind: str, key: str, variant: str, record: bytes, team_key: bytes) -> bytes:
    """A record changed the way an attacker who can write the server would change it."""
    entry = verify(team_key, key, record, variant)
    rec = decode_entry(entry, key)
    tag = record[len(RECORD_MAGIC):len(RECORD_MAGIC) + 32]
    if kind == "cubin":  # one byte of the CUBIN, the entry's own checksum left as it was
        body = bytearray(entry)
        body[-100] ^= 0xFF
        return RECORD_MAGIC + tag + bytes(body)
    if kind == "map":  # the name map pointed at another kernel, the checksum recomputed
        lowered = dict(rec.lowered or {})
        lowered["axpy<float>"], lowered["axpy<double>"] = (lowered["axpy<double>"],
                                                           lowered["axpy<float>"])
        forged = encode_entry(type(rec)(**{**rec.__dict__, "lowered": lowered}))
        return RECORD_MAGIC + tag + forged
    if kind == "tag":  # a valid entry, a tag that is not the team's
        return RECORD_MAGIC + os.urandom(32) + entry
    if kind == "other-key":  # signed properly, with another team's key
        return sign(os.urandom(32), key, entry, variant)
    if kind == "other-variant":  # the team's record, signed for another header state
        return sign(team_key, key, entry, "0" * 32)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["cubin", "map", "tag", "other-key", "other-variant"])
def test_a_forged_record_is_refused_and_never_served(tmp_path, server, key_file, kind):
    maker = _cache(tmp_path, "a", server.url, key_file)
    made = build(TEMPLATE, name_expressions=NAMES, cache=maker)
    maker.remote.flush()
    redis_key, variant = _stored(maker.remote, made.key)
    record = server.client().get(redis_key)
    team_key = key_file.read_bytes().strip()
    server.client().set(redis_key, _forge(kind, made.key, variant, record, team_key))

    victim = _cache(tmp_path, "b", server.url, key_file)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = build(TEMPLATE, name_expressions=NAMES, cache=victim)
    assert not got.hit and got.report.hit_kind is None  # compiled here, not served
    assert got.cubin == made.cubin and _kernels(got) == _kernels(made)
    assert victim.remote.remote_stats().refused == 1
    assert sum("signature" in str(w.message) for w in caught) == 1  # said once
    victim.remote.flush()
    # deleted, and this machine's own record put in its place
    assert verify(team_key, made.key, server.client().get(redis_key), variant)


def test_nothing_on_the_server_is_unpickled():
    import pickle

    class Boom:
        def __reduce__(self):
            return (os.system, ("echo owned",))

    with pytest.raises(Refused):
        verify(b"k" * 32, "key", pickle.dumps(Boom()))


# --- two machines --------------------------------------------------------------------------

CHILD = textwrap.dedent('''
    import json, os, sys
    from cudamagic import build
    from cudamagic.store import KernelCache
    src = open(sys.argv[1]).read()
    cache = KernelCache(sys.argv[2])
    m = build(src, name_expressions=json.loads(sys.argv[3]), options=["-Iinc"], cache=cache)
    cache.remote.flush()
    r = m.report
    print(json.dumps({"status": r.status, "kernels": {k.name_expression: k.symbol
                      for k in m.kernels.values()}, "timings": r.timings, "key": m.key,
                      "miss": r.miss_reason, "stats": cache.remote.remote_stats().hits}))
''')


def _venv_like(root: Path) -> Path:
    """A copy of this venv's toolkit headers in another folder, as another venv holds them:
    the nvidia namespace with cu13/include copied (the libraries linked), and the same
    distributions' metadata names."""
    import nvidia

    # the portion of the nvidia namespace that holds the headers (on the GPU machine the first
    # is the carried wheels' folder, which has none)
    real = next(Path(p) for p in nvidia.__path__ if (Path(p) / "cu13" / "include").is_dir())
    site = root / "lib" / "python3.11" / "site-packages"
    cu = site / "nvidia" / "cu13"
    cu.mkdir(parents=True)
    shutil.copytree(real / "cu13" / "include", cu / "include")
    for part in ("lib", "bin"):
        if (real / "cu13" / part).exists():
            (cu / part).symlink_to(real / "cu13" / part)
    for name in os.listdir(real.parent):
        if name.startswith("nvidia_") and name.endswith(".dist-info"):
            (site / name).mkdir()
    return site


def _checkout(root: Path, text: str = "#define SCALE 2\n") -> Path:
    (root / "inc").mkdir(parents=True)
    (root / "inc" / "scale.h").write_text(text)
    (root / "cell.cu").write_text('#include <cuda_fp16.h>\n#include "scale.h"\n'
                                  'template <typename T> __global__ void axpy(T a, T* x, int n)'
                                  ' { x[0] += a * n * SCALE + (T)__half2float(__half(1)); }\n')
    return root


def _run(where: Path, cache: Path, env: dict[str, str]) -> dict:
    out = run_python(CHILD.replace("sys.argv[1]", repr(str(where / "cell.cu")))
                     .replace("sys.argv[2]", repr(str(cache)))
                     .replace("sys.argv[3]", repr(json.dumps(NAMES))), env={**env,
                                                                          "CWD": str(where)})
    return json.loads(out.strip().splitlines()[-1])


def test_a_second_machine_is_a_remote_hit_with_the_right_kernels(tmp_path, server, key_file):
    """Two processes, two cache folders, two working folders, two toolkit paths (the second
    a copied header folder, as another venv): the second's first run is a remote hit, its
    next one a local hit; an edited header there is a miss."""
    env = {"CUDAMAGIC_REMOTE_CACHE": server.url, "CUDAMAGIC_REMOTE_KEY_FILE": str(key_file)}
    a = _run(_checkout(tmp_path / "alice" / "proj"), tmp_path / "cache-a", env)
    assert a["status"] == "cache miss"
    other = _venv_like(tmp_path / "venv-b")
    env_b = {**env, "PYTHONPATH": f"{other}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    where_b = _checkout(tmp_path / "bob" / "work" / "proj")
    b = _run(where_b, tmp_path / "cache-b", env_b)
    assert b["status"] == "cache hit (remote)", b["miss"]
    assert b["kernels"] == a["kernels"] and b["key"] == a["key"]
    assert "compile" not in b["timings"] and b["timings"]["remote"] < 1.0
    again = _run(where_b, tmp_path / "cache-b", env_b)
    assert again["status"] == "cache hit" and "remote" not in again["timings"]
    (where_b / "inc" / "scale.h").write_text("#define SCALE 3\n")
    changed = _run(where_b, tmp_path / "cache-b", env_b)
    assert changed["status"] == "cache miss" and "scale.h" in changed["miss"]


def test_two_machines_compiling_at_once_keep_one_record(tmp_path, server, key_file):
    caches = [_cache(tmp_path, n, server.url, key_file) for n in "ab"]
    # force: the second compiles although the first's record may be there already, as two
    # machines that both looked before either stored
    mods = [build(TEMPLATE, name_expressions=NAMES, cache=c, force=True) for c in caches]
    for c in caches:
        c.remote.flush()
    assert _kernels(mods[0]) == _kernels(mods[1])
    sent = [c.remote.remote_stats() for c in caches]
    # the second compile found the first's record there (SET NX): one record, both correct
    assert sorted((s.sent, s.kept_theirs) for s in sent) == [(0, 1), (1, 0)]
    assert len(list(server.client().scan_iter(caches[0].remote.record_name("*", "*")))) == 1


def test_a_record_over_the_limit_is_not_sent(tmp_path, server, key_file):
    cache = _cache(tmp_path, "a", server.url, key_file, max_record=1000)
    build(CELL, cache=cache)
    cache.remote.flush()
    assert cache.remote.remote_stats().too_large == 1
    assert list(server.client().scan_iter("cudamagic:*")) == []


def test_an_evicted_record_is_a_plain_miss(tmp_path, server, key_file):
    maker = _cache(tmp_path, "a", server.url, key_file)
    build(CELL, cache=maker)
    maker.remote.flush()
    client = server.client()
    client.config_set("maxmemory", "2mb")
    client.config_set("maxmemory-policy", "allkeys-lru")
    for i in range(64):  # filler past maxmemory: the server evicts the record
        client.set(f"filler:{i}", os.urandom(64 << 10))
    assert not list(client.scan_iter("cudamagic:*"))
    other = _cache(tmp_path, "b", server.url, key_file)
    got = build(CELL, cache=other)
    assert not got.hit and got.report.miss_reason and other.remote.remote_stats().errors == 0


# --- faults ----------------------------------------------------------------------------------


def _fault_cells(cache: KernelCache, n: int = 3) -> list[float]:
    """Build ``n`` different cells; the seconds each spent on the remote tier."""
    spent = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(n):
            m = build(CELL.replace("fill", f"fill{i}"), cache=cache)
            assert m.kernels and m.report.status == "cache miss"  # served: compiled
            spent.append(m.report.timings.get("remote", 0.0))
    assert sum("remote cache" in str(w.message) for w in caught) == 1, \
        [str(w.message) for w in caught]
    return spent


@pytest.mark.parametrize("fault", ["stopped", "paused", "cut"])
def test_a_failing_server_costs_one_bounded_timeout_then_is_skipped(tmp_path, server,
                                                                    key_file, fault):
    proxy = CuttingProxy(server.port)
    try:
        maker = _cache(tmp_path, "a", proxy.url, key_file)
        for i in range(3):  # records the cut case has to read
            build(CELL.replace("fill", f"fill{i}"), cache=maker)
        maker.remote.flush()
        cache = _cache(tmp_path, "b", proxy.url, key_file)
        if fault == "stopped":
            server.stop()
        elif fault == "paused":
            server.pause()
        else:
            proxy.cut = True
        spent = _fault_cells(cache)
        stats = cache.remote.remote_stats()
        print(f"{fault}: remote seconds per cell {spent}")
        assert spent[0] < 0.1 + 0.15, spent  # one timeout (0.1 s), on a loaded machine
        assert all(s < 0.005 for s in spent[1:]), spent  # then skipped
        assert stats.errors == 1 and stats.skipped >= 2 and stats.state.value == "backing-off"
        assert fault != "cut" or proxy.cuts == 1
    finally:
        server.resume() if fault == "paused" else None
        proxy.close()


def test_the_report_and_the_stats_say_remote(tmp_path, server, key_file):
    maker = _cache(tmp_path, "a", server.url, key_file)
    build(CELL, cache=maker)
    maker.remote.flush()
    cache = _cache(tmp_path, "b", server.url, key_file)
    m = build(CELL, cache=cache)
    assert m.hit and m.report.hit_kind is HitKind.REMOTE
    assert "cache hit (remote)" in m.report.headline
    assert "remote cache lookup" in [p.label for p in m.report.phases]
    from cudamagic.view.report import render_html, render_text

    assert "cache hit (remote)" in render_text(m.report)
    assert "cache hit (remote)" in render_html(m.report)
    local = build(CELL, cache=cache)  # kept in the folder: the next one is a local hit
    assert local.report.hit_kind is HitKind.LOCAL and local.report.status == "cache hit"
    s = cache.remote.remote_stats()
    assert (s.hits, s.misses, s.errors) == (1, 0, 0) and s.bytes_read > 0
    assert s.server == server.url and s.lookup_seconds > 0
    from cudamagic.view.records import RemoteCacheStats

    text = RemoteCacheStats.of(cache).text()
    assert server.url in text and "1 hits, 0 misses" in text and "latency" in text
    off = RemoteCacheStats.of(KernelCache(tmp_path / "c", remote=False)).text()
    assert "CUDAMAGIC_REMOTE_CACHE is not set" in off


@pytest.mark.parametrize("state, said", [("ON", "state: on"),
                                          ("BACKING_OFF", "skipped for 30 s more after: refused")])
def test_the_remote_state_is_shown_from_the_enum_member(monkeypatch, state, said):
    """``%cuda_cache remote`` tells the tier's state by its RemoteState member, not the word
    it carries: a reworded member reads the same."""
    from cudamagic.store import remote
    from cudamagic.view.records import RemoteCacheStats

    counts = dict.fromkeys(("hits", "misses", "bytes_read", "bytes_sent", "sent", "kept_theirs",
                            "errors", "refused", "too_large", "dropped", "skipped", "lookups"), 0)
    stats = remote.RemoteStats(server="redis://h", state=remote.RemoteState[state],
                               lookup_seconds=0.0, slowest_seconds=0.0, last_error="refused",
                               backoff_left=30.0, **counts)
    monkeypatch.setattr(remote.RemoteState.ON, "_value_", "up")  # the word is not what counts
    assert said in RemoteCacheStats(stats).text()


def test_cuda_cache_remote_in_a_shell(tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    from cudamagic.store import reset

    from .conftest import fresh_shell

    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("CUDAMAGIC_REMOTE_CACHE", raising=False)
    reset()
    ip = fresh_shell()
    try:
        ip.run_line_magic("load_ext", "cudamagic")
        shown = ip.run_line_magic("cuda_cache", "remote")
    finally:
        InteractiveShell.clear_instance()
    assert "cudamagic remote cache" in str(shown) and "server: none" in str(shown)


def test_a_forked_child_sends_through_its_own_queue_and_connection(tmp_path, server,
                                                                    key_file):
    """A fork while the parent's sender thread is busy: the child gets a fresh lock, queue
    and connection (never the parent's socket), sends its own record and exits promptly."""
    store, _ = open_remote(server.url, str(key_file))
    entry = b"x" * 1000
    for i in range(20):  # the parent's thread busy sending
        store.share(f"parent{i}", entry)
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery, only os._exit
        code = 1
        try:
            store.share("child", entry)
            code = 0 if store.flush(10) and store.load("child") == entry else 2
        finally:
            os._exit(code)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        pytest.fail("the forked child hung")
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.flush(10) and store.load("parent19") == entry


def _build_on_worker(source: str, names: list[str]) -> dict:
    """A task that builds the cell itself (the module is not shipped)."""
    import cudamagic
    from cudamagic.toolchain.compile import nvrtc as compiler

    compiles = []
    real = compiler._compile
    compiler._compile = lambda *a, **k: compiles.append(a) or real(*a, **k)
    try:
        m = cudamagic.build(source, names)
    finally:
        compiler._compile = real
    return {"status": m.report.status, "compiles": len(compiles), "pid": os.getpid(),
            "kernels": {k.name_expression: k.symbol for k in m.kernels.values()}}


def test_dask_workers_warm_from_the_team_cache_without_the_module(tmp_path, server, key_file,
                                                                  monkeypatch):
    distributed = pytest.importorskip("distributed")
    ours = _cache(tmp_path, "client", server.url, key_file)
    made = build(TEMPLATE, name_expressions=NAMES, cache=ours)
    assert ours.remote.flush()  # the client's record is on the server
    monkeypatch.setenv("CUDAMAGIC_REMOTE_CACHE", server.url)
    monkeypatch.setenv("CUDAMAGIC_REMOTE_KEY_FILE", str(key_file))
    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "workers"))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=40) as cluster, \
            distributed.Client(cluster) as client:
        workers = list(client.scheduler_info()["workers"])
        results = client.gather([client.submit(_build_on_worker, TEMPLATE, NAMES,
                                               workers=[w], pure=False) for w in workers])
    assert len({r["pid"] for r in results}) == 2
    for r in results:  # each worker: no compile; the first from the server
        assert r["compiles"] == 0 and r["kernels"] == _kernels(made), r
        assert r["status"] in ("cache hit (remote)", "cache hit"), r
    assert "cache hit (remote)" in [r["status"] for r in results]


def test_ctrl_c_inside_a_reply_leaves_no_half_read_connection(tmp_path, server, key_file,
                                                             monkeypatch):
    """KeyboardInterrupt while the server's reply is read: the cell is interrupted, and the
    next lookup reads a whole reply on a new connection (never the old reply's tail)."""
    store, _ = open_remote(server.url, str(key_file))
    store.save("a", b"A" * 5000)
    store.save("b", b"B" * 5000)
    from redis.connection import Connection

    real = Connection.read_response
    calls = []

    def interrupted(self, *a, **k):
        calls.append(1)
        if len(calls) == 1:  # the command was sent; its reply waits unread
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(Connection, "read_response", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.load("a")
    monkeypatch.setattr(Connection, "read_response", real)
    assert store.load("b") == b"B" * 5000 and store.load("a") == b"A" * 5000


@pytest.mark.parametrize("how", ["url", "file", "wrong", "none"])
def test_a_password_from_the_url_or_a_file(tmp_path, key_file, how):
    """A server that requires a password: from the URL or from a file readable by its owner
    only, the tier works; a wrong or missing one is an error the cell does not see (it
    compiles) and the tier backs off."""
    secret = "s3cret-" + os.urandom(8).hex()
    server = start_server(tmp_path / "redis", "--requirepass", secret)
    try:
        pw = tmp_path / "pw"
        pw.write_text((secret if how != "wrong" else "nope") + "\n")
        pw.chmod(0o600)
        url = f"redis://:{secret}@127.0.0.1:{server.port}/0" if how == "url" else server.url
        store, why = open_remote(url, str(key_file),
                                 password_file=str(pw) if how in ("file", "wrong") else None)
        assert why is None and secret not in store.location
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m = build(CELL, cache=KernelCache(tmp_path / "c", remote=store))
        assert m.kernels
        works = how in ("url", "file")
        assert store.flush() and (store.remote_stats().sent == 1) is works
        assert (store.remote_stats().errors >= 1) is not works
        assert any("remote cache" in str(w.message) for w in caught) is not works
    finally:
        server.stop()


def test_a_password_file_others_can_read_is_refused(tmp_path, key_file):
    pw = tmp_path / "pw"
    pw.write_text("secret\n")
    pw.chmod(0o644)
    store, why = open_remote("redis://127.0.0.1:1/0", str(key_file), password_file=str(pw))
    assert store is None and "password file" in why and "readable or writable by others" in why


def test_without_the_client_the_reason_gives_an_install_command_that_works(monkeypatch, tmp_path):
    """cudamagic is on no package index (README): the reason said pip install
    'cudamagic[remote]', which a user cannot run. It names the remote extra's own requirement
    (read from pyproject.toml) and the checkout's extra."""
    import tomllib

    from .conftest import REPO
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["remote"]
    key = tmp_path / "team.key"
    key.write_text("k" * 32)
    key.chmod(0o600)
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis raises ImportError
    store, why = open_remote("redis://127.0.0.1:1/0", str(key))
    assert store is None and why is not None
    assert "'cudamagic[remote]'" not in why, why
    for requirement in extra:
        assert f"pip install '{requirement}'" in why, why
    assert "pip install -e '.[remote]'" in why, why


# --- Against a hostile server (from the file that held them alone) ---
# The team cache against a hostile server: a scripted RESP server on loopback answers each
# request as a test says (a trickled reply, a declared size of terabytes, junk, another
# protocol), and the lookup must cost one bounded delay, hold no more than a record's bytes, and
# never raise into the cell.
import socket
import threading
import time
import warnings
from collections.abc import Callable

import pytest

from cudamagic.store.base import Refused
from cudamagic.store.remote import RemoteStore, TIMEOUT_S

from .redis_server import use_parser


_HELLO = b"%1\r\n$5\r\nproto\r\n:3\r\n"  # a RESP3 HELLO reply redis-py 8 takes


def _commands(data: bytes) -> tuple[list[bytes], bytes]:
    """The names of the whole RESP commands (arrays of bulk strings) at the start of ``data``,
    upper case, and the bytes after them (a command not yet whole)."""
    names: list[bytes] = []
    while data.startswith(b"*") and b"\r\n" in data:
        head, _, rest = data.partition(b"\r\n")
        args: list[bytes] = []
        for _ in range(int(head[1:])):
            size, sep, rest = rest.partition(b"\r\n")
            if not sep or len(rest) < int(size[1:]) + 2:
                return names, data
            args.append(rest[:int(size[1:])])
            rest = rest[int(size[1:]) + 2:]
        names.append(args[0].upper() if args else b"")
        data = rest
    return names, data


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
        """Each command answered on its own: the client pipelines some (two CLIENT SETINFO in
        one send), and one answer for two left it waiting for the second until its timeout."""
        pending = b""
        try:
            while request := conn.recv(1 << 16):
                pending += request
                commands, pending = _commands(pending)
                for name in commands:
                    if name == b"HELLO":
                        conn.sendall(self.hello)
                    elif b"GET" in name:  # GET, HGETALL: the lookup's reads
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
    # junk to redis-py's RESP2 parser (a failing server); hiredis reads a map either way
    ("a GET answered with a RESP3 map", _map, _HELLO, "either"),
    ("no reply at all", _silent, _HELLO, None),
]


@pytest.mark.parametrize("parser", ["python", "hiredis"])
@pytest.mark.parametrize("name, reply, hello, gives", CASES, ids=[c[0] for c in CASES])
def test_a_hostile_server_costs_one_bounded_delay_and_never_raises(name, reply, hello, gives,
                                                                   parser):
    server = ScriptedServer(reply, hello)
    store = RemoteStore(f"redis://127.0.0.1:{server.port}/0", b"k" * 32, max_record=1 << 20)
    use_parser(store, parser)
    try:
        t = time.perf_counter()
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            if gives is Refused:
                with pytest.raises(Refused):
                    store.load("abc")
            elif gives == "either":
                try:
                    assert store.load("abc") is None
                except Refused:
                    pass
            else:
                assert store.load("abc") is None
        seconds = time.perf_counter() - t
        # the connect, the handshake and the GET each have at most one timeout
        assert seconds < 4 * TIMEOUT_S + 0.3, f"{name}: {seconds:.2f} s"
        if gives is None:
            stats = store.remote_stats()
            assert stats.errors == 1 and stats.state.value == "backing-off"
            # one warning of the package's (a library's own, such as a DeprecationWarning
            # another Python or hiredis version says, is not the store's to count)
            ours = [w for w in said if issubclass(w.category, CacheWarning)]
            assert len(ours) == 1, [f"{w.category.__name__}: {w.message}" for w in said]
            t = time.perf_counter()
            assert store.load("abc") is None  # skipped, at once
            assert time.perf_counter() - t < 0.01
    finally:
        store.close()
        server.close()


def _megabytes(conn, end):  # declares 90 TB, sends 8 MiB as fast as it can, then holds
    conn.sendall(b"$99999999999999\r\n")
    for _ in range(128):
        conn.sendall(b"x" * (1 << 16))
    time.sleep(max(0.0, end - time.monotonic()))


@pytest.mark.parametrize("parser", ["python", "hiredis"])
def test_the_byte_budget_bounds_the_whole_reply_not_each_read(parser):
    """With a time bound far off (2 s), a reply past its byte budget (1 MiB of record and
    1 MiB of slack) is cut by its size: at about 2 MiB, at once, however small each read."""
    server = ScriptedServer(_megabytes)
    store = RemoteStore(f"redis://127.0.0.1:{server.port}/0", b"k" * 32, max_record=1 << 20,
                        timeout=2.0)
    use_parser(store, parser)
    try:
        t = time.perf_counter()
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            assert store.load("abc") is None
        seconds = time.perf_counter() - t
        stats = store.remote_stats()
        assert seconds < 1.0, f"{seconds:.2f} s: cut by the time bound, not the size"
        assert stats.errors == 1 and stats.state.value == "backing-off"
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


# where a key of another type stands: the record (its index field names it) or the index
PLACES = [(kind, put, "record") for kind, put in TYPES] + [
    (kind, put, "index") for kind, put in TYPES if kind != "hash"] + [
    ("string", lambda r, k: r.set(k, b"x"), "index")]


@pytest.mark.parametrize("kind, put, where", PLACES, ids=[f"{k} as {w}" for k, _, w in PLACES])
def test_a_key_of_another_type_is_a_refused_record_not_a_failing_server(real_server, kind,
                                                                        put, where):
    store = RemoteStore(real_server.url, b"k" * 32)
    raw = real_server.client()
    key = f"{kind} as {where}"  # the server is the module's: one key per row
    name = store.record_name(key) if where == "record" else store.index_name(key)
    if where == "record":
        assert store.save(key, b"entry")  # its index field names the record
    raw.delete(name)
    put(raw, name)
    try:
        with pytest.raises(Refused, match="another type"):
            store.load(key)
        stats = store.remote_stats()
        assert stats.errors == 0 and stats.state.value == "on" and stats.refused == 1
        assert not raw.exists(name)  # deleted: the next compile's record fits
        assert store.save(key, b"entry")
        assert store.load(key) == b"entry"
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
