"""The compile server (cudamagic.compiler): NVRTC out of the notebook's process, each compile
in a child of the server. Real NVRTC, real servers (each test's own, in its tmp cache folder,
ended by the fixture), real signals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cudamagic.compiler import client
from cudamagic.compiler.wire import paths, server_folder
from cudamagic.errors import CompileError, ToolchainError
from cudamagic.core.options import options_from_args
from cudamagic.pipeline.steps import SERVED, build_module
from cudamagic.toolchain.compile.deps import trace_headers
from cudamagic.toolchain.compile.nvrtc import compile_cubin
from tests.conftest import run_python

SMALL = '__global__ void k(float* x) {{ x[0] = {n}; }}\n'
CUB = ("#include <cub/block/block_reduce.cuh>\n__global__ void k(float* o) {{ typedef "
       "cub::BlockReduce<float, 256> R; __shared__ typename R::TempStorage t; "
       "float s = R(t).Sum(o[threadIdx.x] * {n}); if (!threadIdx.x) o[0] = s; }}\n")
_n = iter(range(10**6))


def _servers(folder: str) -> list[int]:
    """The pids of processes serving from ``folder`` (their command line names it)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"cudamagic.compiler.server" in cmd and folder.encode() in cmd:
            out.append(int(pid))
    return out


@pytest.fixture
def served(tmp_path, monkeypatch):
    """The server on, in this test's own cache folder; every server of it ended after."""
    home = tmp_path / "home"
    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(home))
    monkeypatch.setenv("CUDAMAGIC_COMPILE_SERVER", "1")
    client._state.clear()
    yield str(home / "server")
    SERVED.stop()
    for pid in _servers(str(home / "server")):
        os.kill(pid, signal.SIGKILL)
    client._state.clear()


def _build(source, cache, *args):
    pch = "--no-pch" not in args
    opts = [a for a in args if a != "--no-pch"]
    return build_module(source, options_from_args(opts, arch="sm_90", pch=pch), cache=cache)


def test_misses_compile_in_the_server_and_the_notebook_never_loads_nvrtc(served, tmp_path):
    """A new process (a kernel) builds two cells: both compiled by one server, the hit served
    here, and no libnvrtc in its /proc/self/maps; %cuda_info's words name the server."""
    out = run_python(
        "import cudamagic\n"
        "from cudamagic.pipeline.steps import SERVED\n"
        f"a = cudamagic.build({SMALL.format(n=1)!r}, arch='sm_90', cache={str(tmp_path / 'c')!r})\n"
        f"b = cudamagic.build({SMALL.format(n=2)!r}, arch='sm_90', cache={str(tmp_path / 'c')!r})\n"
        f"c = cudamagic.build({SMALL.format(n=2)!r}, arch='sm_90', cache={str(tmp_path / 'c')!r})\n"
        "maps = open('/proc/self/maps').read()\n"
        "from cudamagic.shell.info import server_text\n"
        "s = SERVED.status()\n"
        "print(a.hit, b.hit, c.hit, 'libnvrtc' in maps, s.served, s.pid)\n"
        "print(server_text(s))\n")
    first, words = out.splitlines()
    hits, nvrtc, count, pid = first.split()[:3], first.split()[3], first.split()[4], \
        first.split()[5]
    assert hits == ["False", "False", "True"] and nvrtc == "False", out
    assert int(count) >= 2 and int(pid) in _servers(served)  # (and its spare child)
    assert words.startswith(f"pid {pid}, up ") and "compiles served" in words


def test_two_processes_share_one_server(served, tmp_path):
    code = ("import cudamagic, sys\nfrom cudamagic.pipeline.steps import SERVED\n"
            "cudamagic.build(sys.argv[1], arch='sm_90', cache=sys.argv[2])\n"
            "print(SERVED.status().pid)\n")
    pids = set()
    for n in range(2):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")) if p)}
        out = subprocess.run([sys.executable, "-c", code, SMALL.format(n=n + 10),
                              str(tmp_path / f"c{n}")], capture_output=True, text=True,
                             env=env, timeout=120, check=True).stdout
        pids.add(int(out))
    assert len(pids) == 1 and pids <= set(_servers(served))


def _ctrl_c_after(seconds: float, stamp: list[float]) -> threading.Timer:
    def fire():
        stamp.append(time.perf_counter())
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    timer = threading.Timer(seconds, fire)
    timer.start()
    return timer


def test_ctrl_c_stops_a_cub_compile_at_once(served, cache):
    """Ctrl-C 1 s into a CUB compile (seconds here) raises KeyboardInterrupt within 0.2 s;
    nothing is cached; the next build compiles and is right; its child is gone."""
    source = CUB.format(n=next(_n) + 3000)
    SERVED.facts()  # the server up (its start is not the compile)
    fired: list[float] = []
    timer = _ctrl_c_after(1.0, fired)
    with pytest.raises(KeyboardInterrupt, match="stopped"):
        _build(source, cache, "--no-pch")
    late = time.perf_counter() - fired[0]
    timer.join()
    assert late < 0.2, late
    assert not list(cache.keys())
    again = _build(source, cache, "--no-pch")
    assert not again.hit and list(cache.keys())
    assert _build(source, cache, "--no-pch").hit


def test_a_compile_failing_inside_a_header_leaves_the_next_cells_cached(served, cache,
                                                                         tmp_path):
    """NVRTC's trace breaks for the rest of a process after such a compile: in the server it
    is one child's, and the next cells' entries are complete (a hit after)."""
    (tmp_path / "bad.h").write_text('#include "nowhere.h"\n')
    (tmp_path / "good.h").write_text("#define GOOD 1\n")
    with pytest.raises(CompileError):
        _build('#include "bad.h"\n' + SMALL.format(n=1), cache, f"-I{tmp_path}")
    for n in range(2):
        cell = '#include "good.h"\n' + SMALL.format(n=n + 100)
        assert not _build(cell, cache, f"-I{tmp_path}").hit
        assert _build(cell, cache, f"-I{tmp_path}").hit


def _children(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        text = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        out += [int(c) for c in text]
    return out


def _during_compile(action, cache, source):
    """Build ``source`` while ``action(server_pid, compiling_child)`` runs once the server
    has handed the compile to a child (its spare stands behind it)."""
    server = SERVED.facts().pid
    before = set(_children(server))
    done = threading.Event()

    def watch():  # the spare waiting before takes the compile (a CUB cell: seconds here)
        if not done.wait(1.0):
            action(server, sorted(before)[0])

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        return _build(source, cache, "--no-pch")
    finally:
        done.set()
        watcher.join()


def test_a_crash_in_the_compile_is_one_clear_error(served, cache):
    """NVRTC's SIGSEGV (its child killed by SIGSEGV mid-compile) is one compile's
    ToolchainError naming the signal; the next build is fine."""
    def crash(server, child):
        os.kill(child, signal.SIGSEGV)

    with pytest.raises(ToolchainError, match="SIGSEGV"):
        _during_compile(crash, cache, CUB.format(n=next(_n) + 5000))
    assert not list(cache.keys())
    assert not _build(SMALL.format(n=next(_n) + 5000), cache).hit


def test_the_server_killed_mid_compile_gives_a_retry(served, cache):
    """The server SIGKILLed while its child compiles: the client starts another and asks it
    again (never a hang); the build is right."""
    killed = []

    def kill(server, child):
        killed.append(server)
        os.kill(server, signal.SIGKILL)

    start = time.perf_counter()
    m = _during_compile(kill, cache, CUB.format(n=next(_n) + 6000))
    assert killed and not m.hit and time.perf_counter() - start < 120
    assert _servers(served) and killed[0] not in _servers(served)


def test_the_server_ends_when_idle(served, cache, monkeypatch):
    monkeypatch.setenv("CUDAMAGIC_COMPILE_SERVER_IDLE", "0.5")
    _build(SMALL.format(n=next(_n)), cache)
    pid = SERVED.status().pid
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    assert not _servers(served)
    assert not any(p.endswith(".sock") for p in os.listdir(served))
    assert not _build(SMALL.format(n=next(_n)), cache).hit  # a new one starts


def test_a_stale_socket_is_replaced(served, cache):
    """A socket file no server listens on (a server that died unlinking nothing)."""
    ep = client.endpoint(SERVED.cache_dir)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(ep.sock_path)
    stale.close()
    assert not _build(SMALL.format(n=next(_n)), cache).hit
    assert SERVED.status() is not None


def test_another_users_connection_is_refused(served):
    """A client running as nobody reaches the socket (the folder opened for the test) and
    gets not a byte: the server checks the peer's uid."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as another user")
    SERVED.facts()
    ep = client.endpoint(SERVED.cache_dir)
    os.chmod(served, 0o711)
    os.chmod(ep.sock_path, 0o777)
    code = ("import socket, struct, pickle, sys\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
            "d = pickle.dumps({'kind': 'facts'}); s.sendall(struct.pack('<Q', len(d)) + d)\n"
            "s.settimeout(10); print(repr(s.recv(100)))\n")
    python = "/usr/bin/python3"  # (the venv's is not nobody's to run)
    if not os.access(python, os.X_OK):
        pytest.skip("no system python3 to run as nobody")
    out = subprocess.run([python, "-c", code, ep.sock_path], capture_output=True,
                         text=True, timeout=60, user=65534, group=65534)
    if "PermissionError" in out.stderr:  # pytest's tmp folders are closed to others above
        pytest.skip("nobody cannot reach a socket under pytest's tmp folder")
    assert out.stdout.strip() in ("b''",) or "ConnectionResetError" in out.stderr, out
    assert SERVED.status() is not None  # the server serves on


def test_fallback_where_the_folder_cannot_hold_the_socket(served, cache, tmp_path):
    """``server`` is a file in the cache folder: compiled in this process, said once."""
    Path(served).parent.mkdir(parents=True, exist_ok=True)
    Path(served).write_text("")
    with pytest.warns(Warning, match="compiles in this process") as said:
        _build(SMALL.format(n=next(_n)), cache)
        _build(SMALL.format(n=next(_n)), cache)
    assert sum("compiles in this process" in str(w.message) for w in said) == 1
    assert not _servers(served)


def _header_cases(root: Path) -> list[tuple[str, list[str], list[str]]]:
    inc = root / "inc"
    inc.mkdir()
    (inc / "a.h").write_text('#pragma once\n#include "b.h"\ntemplate <class T> '
                             '__device__ T twice(T x) { return x + x; }\n')
    (inc / "b.h").write_text("#define B_VALUE 3\n")
    (root / "local.h").write_text("#define LOCAL 7\n")
    kernel = ("template <class T> __global__ void k(T* x) {{ x[0] = {body}; }}\n"
              "namespace ns {{ template <int N> __global__ void m(int* x) {{ x[0] = N; }} }}\n")
    return [
        ('#include "a.h"\n' + kernel.format(body="twice(x[1]) + B_VALUE"),
         ["k<float>", "k<double>"], [f"-I{inc}"]),
        ('#include "local.h"\n' + kernel.format(body="LOCAL"), ["k<int>", "ns::m<3>"], []),
        (kernel.format(body="__has_include(<nowhere.h>)"), ["k<long long>"], [f"-I{inc}"]),
    ]


def test_the_same_compile_in_the_server_as_in_process(served, tmp_path, monkeypatch):
    """The same CUBIN bytes, lowered names and headers read (the trace's), for header cases
    (an -I folder, a quoted include from the working folder, __has_include) and name
    expressions."""
    monkeypatch.chdir(tmp_path)
    for source, names, extra in _header_cases(tmp_path):
        opts = ["-arch=sm_90", "-std=c++17", *extra]
        here = compile_cubin(source, names, opts)
        there = SERVED(source, names, opts)
        assert there.cubin == here.cubin and there.lowered == here.lowered
        assert there.trace is not None and here.trace is not None
        assert [h[:2] for h in trace_headers(there.trace)] == \
            [h[:2] for h in trace_headers(here.trace)]
    assert SERVED.status().served >= 3


def test_server_folder_is_private(tmp_path):
    folder = server_folder(str(tmp_path / "c"))
    os.chmod(folder, 0o755)
    assert os.stat(server_folder(str(tmp_path / "c"))).st_mode & 0o777 == 0o700
    sock, lock, log = paths(folder, "x")
    assert sock.endswith("x.sock") and lock.endswith("x.lock") and log.endswith("x.log")


RESTART = ("import sys, cudamagic\nfrom cudamagic.pipeline.steps import SERVED\n"
           "m = cudamagic.build(sys.argv[1], arch='sm_90')\n"
           "print(m.hit, m.report.pch[0].value, 'from the precompiled header' in m.report.text(),"
           " SERVED.status().pid)\n")


def _in_new_process(source: str) -> list[str]:
    """One build in a new Python process (a kernel, or the kernel after its restart), in the
    default cache folder: its hit, what its PCH did, whether its report says so, its server."""
    # the checkout first, then the path this run has (the GPU machine's carried wheels are there)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")) if p)}
    done = subprocess.run([sys.executable, "-c", RESTART, source], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.split()


def _pchs(served: str) -> list[Path]:
    return sorted((Path(served).parent / "pch").glob("*.pch"))


def test_after_a_kernel_restart_the_first_edit_starts_from_the_servers_pch(served):
    """A kernel makes a CUB cell's PCH (in the server's child); it ends; a new kernel's first
    edit of the cell starts from that PCH, and its report says so. The PCH is the server's
    (its record names the server's owner lock, not the dead kernel's): the new kernel's next
    PCH made does not evict it."""
    first = _in_new_process(CUB.format(n=next(_n) + 7000))
    assert first[:2] == ["False", "made"], first
    again = _in_new_process(CUB.format(n=next(_n) + 7000))
    assert again[:3] == ["False", "used", "True"] and again[3] == first[3], again
    other = "#include <cub/block/block_scan.cuh>\n" + SMALL.format(n=next(_n))
    assert _in_new_process(other)[:2] == ["False", "made"]
    assert len(_pchs(served)) == 2  # the first one kept: its owner, the server, lives


def test_a_dead_servers_pchs_go_when_a_server_starts_and_an_idle_exit_frees_its_own(
        served, monkeypatch):
    """A server killed (SIGKILL: it freed nothing) leaves its PCH, which no later process can
    use: the next server removes it as it starts. A server that ends idle removes its own."""
    made = _in_new_process(CUB.format(n=next(_n) + 8000))
    assert made[1] == "made" and len(_pchs(served)) == 1
    os.kill(int(made[3]), signal.SIGKILL)
    while int(made[3]) in _servers(served):
        time.sleep(0.02)
    client._state.clear()
    assert SERVED.facts().pid != int(made[3])  # a new server, which compiled nothing
    assert not _pchs(served)
    monkeypatch.setenv("CUDAMAGIC_COMPILE_SERVER_IDLE", "1")
    SERVED.stop()
    made = _in_new_process(CUB.format(n=next(_n) + 8000))
    assert made[1] == "made" and len(_pchs(served)) == 1
    deadline = time.monotonic() + 60
    while int(made[3]) in _servers(served) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _servers(served) and not _pchs(served)
