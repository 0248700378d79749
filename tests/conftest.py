"""Shared test fixtures: the recorded GPU-machine outputs, a fresh cache, a watched compiler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# A shell without job control starts a background command (`nohup .ci/run &`) with SIGINT
# ignored, and Python then leaves it so: the tests that deliver Ctrl-C to themselves
# (test_compile_interrupts, test_compiler, test_debug_tools) would see nothing. They test what
# a user's notebook or terminal has, Python's own handler.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The tests never touch the user's own cache (~/.cache/cudamagic): a build with the default
# cache goes to a folder of this run's, removed at its end (a test run that found the last
# run's entries there served hits where a compile was meant: test_headers, round six). A test of
# the default location itself deletes the variable (test_store_inputs).
if "CUDAMAGIC_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["CUDAMAGIC_CACHE_DIR"] = tempfile.mkdtemp(prefix="cudamagic-tests-")
    atexit.register(shutil.rmtree, os.environ["CUDAMAGIC_CACHE_DIR"], ignore_errors=True)

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[1]


def settled(path: Path) -> None:
    """``path`` as a file written a while ago: its modification time put 5 s back, and its
    change time (which cannot be set) left more than the window in which a compile doubts what
    it read (deps.RACY_NS) behind, waited for on the clock, not guessed. A header written just
    before a build is rightly not cached; a test about anything else settles it first."""
    import time

    from cudamagic.toolchain.compile.deps import RACY_NS

    past = time.time() - 5
    os.utime(path, (past, past))
    ready = os.stat(path).st_ctime_ns + 3 * RACY_NS
    while time.time_ns() < ready:
        time.sleep(0.005)


@dataclass(frozen=True)
class FixtureRow:
    """One row of demangle_fixtures.tsv: read off the GPU machine (CUDA 13.0)."""

    expression: str
    symbol: str
    cufilt: str
    libstdcxx: str
    params: tuple[tuple[int, int], ...]


def fixture_rows() -> list[FixtureRow]:
    rows = []
    for line in (FIXTURES / "demangle_fixtures.tsv").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        expr, sym, cuf, lib, params = line.split("\t")
        pairs = tuple(tuple(int(x) for x in p.split(":")) for p in params.split())
        rows.append(FixtureRow(expr, sym, cuf, lib, pairs))
    return rows


@pytest.fixture(scope="session")
def rows() -> list[FixtureRow]:
    return fixture_rows()


@pytest.fixture
def cache(tmp_path):
    from cudamagic.store.cache import KernelCache

    c = KernelCache(tmp_path / "cache")
    yield c
    c.close()


class WatchedCompiler:
    """The real NVRTC compile, counted."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, source, name_expressions, options, **kw):
        from cudamagic.toolchain.compile.nvrtc import compile_cubin

        self.calls.append(tuple(name_expressions))
        return compile_cubin(source, name_expressions, options, **kw)


@pytest.fixture
def compiler() -> WatchedCompiler:
    return WatchedCompiler()


def value_file(cache, key: str) -> Path:
    """The file diskcache keeps a key's value in (read from its database, not through a get)."""
    import sqlite3

    con = sqlite3.connect(f"file:{cache.directory / 'cache.db'}?mode=ro", uri=True)
    try:
        ((name,),) = con.execute("SELECT filename FROM Cache WHERE key = ?", (key,)).fetchall()
    finally:
        con.close()
    return cache.directory / name


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run code in a fresh interpreter (a kernel restart); its stdout, or a failure with stderr."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    full_env = {**os.environ, "PYTHONPATH": path, **(env or {})}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=env.get("CWD", None) if env else None)
    if proc.returncode != 0:
        raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def benchmark_module(name: str):
    """``benchmarks/NAME.py`` as the script imports it (its folder on sys.path), for a
    fixture to yield: ``yield from benchmark_module("edit_loop")``."""
    import importlib

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def hit_child(program: str, cache: Path, *args: str) -> dict:
    """``program`` run with ``args`` in a fresh interpreter whose default cache is ``cache`` (no
    team cache), from the cache's parent folder: the JSON its last line prints."""
    env = {**os.environ, "CUDAMAGIC_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("CUDAMAGIC_REMOTE_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", program, *args], capture_output=True,
                          text=True, env=env, cwd=cache.parent, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1])


def trace_broken() -> bool:
    """Whether NVRTC's trace is broken in this process (one small traced compile asks; False
    where NVRTC cannot be used here)."""
    from cudamagic.toolchain.compile.nvrtc import compile_cubin

    try:
        return compile_cubin("__global__ void k() {}\n", [], ["-arch=sm_90"]).trace_broken
    except Exception:  # noqa: BLE001 - NVRTC not usable here: nothing to say of its trace
        return False


@pytest.fixture(autouse=True)
def nvrtc_trace_kept():
    """A test that fails a compile inside a header breaks NVRTC's trace for the rest of its
    process (docs/cache.md, 'After a compile fails inside a header'), and the tests after it would see caching
    off and no precompiled header, whatever their own code. After a test in which a compile
    failed, one small compile asks whether the trace is still whole; where this test broke
    it, the test errors, naming the cause: such a compile belongs in a child process
    (tests/test_headers.py's run_python)."""
    from cudamagic import errors

    failed: list[int] = []
    real = errors.CompileError.__init__

    def counted(self, *args, **kwargs):
        failed.append(1)
        real(self, *args, **kwargs)

    errors.CompileError.__init__ = counted  # type: ignore[method-assign]
    try:
        yield
    finally:
        errors.CompileError.__init__ = real  # type: ignore[method-assign]
    if failed and "cudamagic.toolchain.compile.nvrtc" in sys.modules and not _broken_before[0]:
        if trace_broken():
            _broken_before[0] = True
            pytest.fail("this test failed a compile inside a header in the test process, which "
                        "breaks NVRTC's trace for every later test: run that compile in a child "
                        "(run_python)", pytrace=False)


_broken_before = [False]  # said once: the tests after the first that broke it see it broken


@pytest.fixture
def no_gpu(monkeypatch):
    """This process as on a machine without a GPU, whatever this machine has: the driver's one
    probe (``driver._init``, which every question of the package's about a device goes
    through) answers that there is none. A test of the no-GPU behaviour takes it, so it passes
    on a GPU machine too; what a GPU does instead is a ``gpu`` test's."""
    from cudamagic.toolchain.device import driver

    monkeypatch.setattr(driver, "_init", lambda: "no device here (the test simulates none)")


def _gpu_reason() -> str | None:
    try:
        from cudamagic.toolchain.device import driver

        return None if driver.available() else "no CUDA device or driver on this machine"
    except Exception as exc:  # pragma: no cover
        return f"the CUDA driver could not be queried: {exc}"


def pytest_collection_modifyitems(config, items):
    reason = _gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def fresh_shell():
    """A new IPython shell as the process's singleton, for a test that installs hooks on it: any
    shell an earlier test made (as ``InteractiveShell.instance()``) is cleared first, so what
    the test sees does not depend on the order the suite runs in. Clear it again when done
    (``InteractiveShell.clear_instance()``)."""
    from IPython.core.interactiveshell import InteractiveShell

    InteractiveShell.clear_instance()
    return InteractiveShell.instance()


@pytest.fixture
def fresh_process():
    """The package's per-process state as a new process has it, before the test and after it:
    every piece cudamagic.core.process registers as cleared by a test's reset (the driver's lost
    contexts, the last launch, the finders' answers, the store's default cache and warnings...)."""
    from cudamagic.core import process

    process.reset_for_tests()
    yield
    process.reset_for_tests()
