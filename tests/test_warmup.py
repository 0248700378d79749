"""The warm-up after ``%load_ext`` (issue 38): once the cell that loaded the extension has
finished, a background thread imports what a ``%%cuda`` cell's hit imports, so the user's first
``%%cuda`` cell pays nothing for them (docs/performance.md, "Start-up").

Each case runs in a fresh interpreter on a real IPython ``InteractiveShell``, the GPU simulated
present (the driver's answers replaced, as tests/test_import_cost.py does), with a cache a first
process filled. A race is made to happen, never waited for: a module on the warm-up's list holds
its import until the other side has arrived.
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from .conftest import run_python

SOURCE = "template <int N> __global__ void k(float* x, int n) { if (n > N) x[N] += 1.f; }\n"

PRELUDE = textwrap.dedent("""
    import json, os, sys, threading, time
    from IPython.core.interactiveshell import InteractiveShell
    ip = InteractiveShell.instance()
    ip.kernel = object()  # shown as in a notebook: the HTML, the folds
    from cudamagic.toolchain.device import driver
    driver.available = lambda: True
    driver.retain_primary = lambda device: 1
    driver.current_device = lambda: 0
    driver.device_sm = lambda device: 90
    SOURCE = %r

    def warm_thread():
        return next((t for t in threading.enumerate() if t.name == "cudamagic-warm"), None)

    def cuda_cell():
        ip.run_cell("%%%%cuda -n k<1> -n k<2>\\n" + SOURCE)
        return ip.user_ns["cuda_module"]

    def fork_and_reap(in_child):
        # in_child() in a forked child (its exit status; 4 where it raised); -1: still running
        # after 60 s (hung), killed
        pid = os.fork()
        if pid == 0:
            try:
                code = in_child()
            except BaseException:
                code = 4
            os._exit(code)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            time.sleep(0.02)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return -1
""" % SOURCE)


def _fill(cache) -> None:
    """A first process compiles the cell (a miss), so the cases' cells are hits."""
    out = run_python(PRELUDE + textwrap.dedent("""
        ip.run_line_magic("load_ext", "cudamagic")
        print(json.dumps({"hit": cuda_cell().hit}))
    """), env={"CUDAMAGIC_CACHE_DIR": str(cache)})
    assert json.loads(out.strip().splitlines()[-1]) == {"hit": False}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    folder = tmp_path_factory.mktemp("warmup") / "cache"
    _fill(folder)
    return folder


@pytest.mark.parametrize("first", ["pass", "import comm"], ids=["bare", "comm imported"])
def test_after_the_load_ext_cell_a_hit_cell_imports_nothing(cache, first):
    """The cell that runs ``%load_ext`` imports only the magics (its own list is
    tests/test_import_cost.py's); after it the warm-up imports the hit path, and the first
    ``%%cuda`` cell, a hit, imports no module and reports no import time. So too where a module
    of the hit path was imported before (ipykernel imports ``comm``: every Jupyter kernel)."""
    out = run_python(PRELUDE + textwrap.dedent("""
        FIRST_IMPORT
        before = set(sys.modules)
        ip.run_cell("%load_ext cudamagic")
        from cudamagic.shell import magic
        thread = magic._WARMUP.thread  # (warm_thread() misses one that has ended already)
        started = thread is not None
        if started:
            thread.join(120)""").replace("FIRST_IMPORT", first) + textwrap.dedent("""
        warmed = set(sys.modules)
        module = cuda_cell()
        phases = {p.name: s for p, s in module.report.timings.items()}
        print(json.dumps({"started": started, "hit": module.hit,
                          "warmed": "cudamagic.pipeline.steps" in warmed - before,
                          "cell": sorted(set(sys.modules) - warmed),
                          "imports_ms": phases.get("IMPORTS", 0.0) * 1e3}))
    """), env={"CUDAMAGIC_CACHE_DIR": str(cache)})
    got = json.loads(out.strip().splitlines()[-1])
    assert got["started"] and got["hit"] and got["warmed"], got
    assert got["cell"] == [], f"the first hit cell imported {got['cell']}: add them to " \
                              "cudamagic.shell.magic.HIT_PATH (what the warm-up imports)"
    assert got["imports_ms"] < 5, got


def test_after_the_warm_up_a_hit_cell_makes_none_of_the_first_use_work(cache):
    """What a process's first hit would do once (the magic line's parser, regular expressions,
    a library loaded for the demangler) the warm-up did: the first ``%%cuda`` cell, a hit,
    compiles no expression, builds no parser and loads no library from cudamagic's code."""
    out = run_python(PRELUDE + textwrap.dedent("""
        import argparse, ctypes, re._compiler
        ip.run_cell("%load_ext cudamagic")
        warm_thread().join(120)
        made = []

        def spy(kind, real):
            def call(*args, **kwargs):
                frame = sys._getframe(1)  # the nearest caller outside the library doing it
                while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] \\
                        in ("re", "argparse", "ctypes", "functools"):
                    frame = frame.f_back
                where = frame.f_globals.get("__name__", "") if frame is not None else ""
                if where.startswith("cudamagic"):
                    made.append(f"{kind} in {where}.{frame.f_code.co_name}")
                return real(*args, **kwargs)
            return call

        re._compiler.compile = spy("expression", re._compiler.compile)
        argparse.ArgumentParser.__init__ = spy("parser", argparse.ArgumentParser.__init__)
        ctypes.CDLL.__init__ = spy("library", ctypes.CDLL.__init__)
        module = cuda_cell()
        print(json.dumps({"hit": module.hit, "made": made}))
    """), env={"CUDAMAGIC_CACHE_DIR": str(cache)})
    got = json.loads(out.strip().splitlines()[-1])
    assert got["hit"], got
    assert got["made"] == [], f"the first hit cell did first-use work the warm-up could do " \
                              f"(cudamagic.shell.magic._first_use): {got['made']}"


def test_a_load_ext_by_line_magic_starts_no_thread_and_its_cell_imports_as_before(cache):
    """``run_line_magic`` (a script, no cell) runs no ``post_run_cell``: no warm-up, and the
    ``%%cuda`` cell imports its own modules; the next cell does not start one either."""
    out = run_python(PRELUDE + textwrap.dedent("""
        ip.run_line_magic("load_ext", "cudamagic")
        none_yet = warm_thread() is None
        before = set(sys.modules)
        module = cuda_cell()
        print(json.dumps({"none": none_yet, "hit": module.hit,
                          "imported": "cudamagic.pipeline.steps" in set(sys.modules) - before,
                          "after": warm_thread() is None}))
    """), env={"CUDAMAGIC_CACHE_DIR": str(cache)})
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"none": True, "hit": True, "imported": True, "after": True}


#: a module the warm-up imports (put on its list by the case) that holds its import, with its
#: import lock taken, until the case's other side has arrived
HOLD = textwrap.dedent("""
    import builtins
    builtins.HELD_IN_IMPORT.set()
    builtins.RELEASE_IMPORT.wait(60)
""")


def _holding(tmp_path) -> str:
    (tmp_path / "cm_hold.py").write_text(HOLD)
    return textwrap.dedent(f"""
        import builtins
        sys.path.insert(0, {str(tmp_path)!r})
        builtins.HELD_IN_IMPORT, builtins.RELEASE_IMPORT = threading.Event(), threading.Event()
        from cudamagic.shell import magic
        magic.HIT_PATH = ("cudamagic.core.miss", "cm_hold", *magic.HIT_PATH[1:])
        arrived = threading.Event()  # set when a wait for the warm-up (a cell's, a fork's) starts
        real_wait = magic._WARMUP.wait
        def wait(timeout=None):
            arrived.set()
            return real_wait(timeout)
        magic._WARMUP.wait = wait
        ip.run_cell("%load_ext cudamagic")
        assert builtins.HELD_IN_IMPORT.wait(60)  # the warm-up holds an import
    """)


def test_a_cuda_cell_sent_during_the_warm_up_waits_for_it_and_is_served(cache, tmp_path):
    """A ``%%cuda`` cell that comes while the warm-up is importing (Run All) waits for the
    thread, never importing the package beside it, and is served; its report counts the wait
    as imports."""
    out = run_python(PRELUDE + _holding(tmp_path) + textwrap.dedent("""
        def release():
            arrived.wait(60)       # the cell has arrived at the warm-up and waits for it
            time.sleep(0.05)       # the hold is what the report's imports time must show
            builtins.RELEASE_IMPORT.set()
        threading.Thread(target=release).start()
        pipeline_before = "cudamagic.pipeline.steps" in sys.modules
        module = cuda_cell()
        phases = {p.name: s for p, s in module.report.timings.items()}
        print(json.dumps({"pipeline_before": pipeline_before, "waited": arrived.is_set(),
                          "hit": module.hit, "imports_ms": phases.get("IMPORTS", 0.0) * 1e3,
                          "done": magic._WARMUP.done.is_set()}))
    """), env={"CUDAMAGIC_CACHE_DIR": str(cache)})
    got = json.loads(out.strip().splitlines()[-1])
    assert got["waited"] and got["hit"] and got["done"] and not got["pipeline_before"], got
    assert got["imports_ms"] >= 50, got


def test_a_fork_during_the_warm_up_waits_for_it_so_the_child_can_import(cache, tmp_path):
    """``os.fork`` while the warm-up holds an import (``multiprocessing``'s default start on
    Linux before Python 3.14): the fork waits for the thread first, so the child does not
    inherit an import lock a thread of its parent held, and imports and builds there."""
    out = run_python(PRELUDE + _holding(tmp_path) + textwrap.dedent("""
        def release():
            arrived.wait(60)       # the fork has come to the warm-up and waits for it
            builtins.RELEASE_IMPORT.set()
        threading.Thread(target=release).start()
        def in_child():
            import cm_hold, cudamagic.pipeline.steps  # noqa: F401 - where the lock was held
            return 0 if cuda_cell().hit else 3
        status = fork_and_reap(in_child)
        print(json.dumps({"waited": arrived.is_set(), "child": status}))
    """), env={"CUDAMAGIC_CACHE_DIR": str(cache)})
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"waited": True, "child": 0}, got


def test_a_fork_while_the_driver_thread_holds_an_import_waits_for_it(cache, tmp_path):
    """``%load_ext``'s driver thread inside an import (the launch code it imports once the
    context is made) when the notebook forks: the fork waits for the thread's end, so the child
    does not inherit the import's lock held by a thread it does not have, and imports there.
    The driver's start is the test's: it holds an import until the fork waits for it."""
    (tmp_path / "cm_hold.py").write_text(HOLD)
    out = run_python(PRELUDE + textwrap.dedent(f"""
        import builtins
        sys.path.insert(0, {str(tmp_path)!r})
        builtins.HELD_IN_IMPORT, builtins.RELEASE_IMPORT = threading.Event(), threading.Event()
        import cudamagic
        from cudamagic.shell import magic
        cudamagic._start_driver = lambda eager: __import__("cm_hold")
        arrived = threading.Event()  # set when a wait for the driver thread starts
        class Watched:
            def __init__(self, done):
                self.done = done
            def wait(self, timeout=None):
                arrived.set()
                return self.done.wait(timeout)
            def is_set(self):
                return self.done.is_set()
        real_note = magic.note_driver_thread
        magic.note_driver_thread = lambda done: real_note(Watched(done))
        ip.run_line_magic("load_ext", "cudamagic")  # no warm-up: the driver thread alone
        assert builtins.HELD_IN_IMPORT.wait(60)  # the driver thread holds an import
        def release():
            arrived.wait(20)       # the fork has come to the driver thread and waits for it
            builtins.RELEASE_IMPORT.set()
        threading.Thread(target=release).start()
        def in_child():
            import cm_hold  # noqa: F401 - where the lock was held
            return 0
        status = fork_and_reap(in_child)
        print(json.dumps({{"waited": arrived.is_set(), "child": status}}))
    """), env={"CUDAMAGIC_CACHE_DIR": str(cache)})
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"waited": True, "child": 0}, got


def test_a_fork_that_waited_its_most_for_the_warm_up_says_so(cache, tmp_path):
    """A warm-up that does not end (an import from a file system that does not answer) holds a
    fork at most ``FORK_WAIT_S``; the fork then goes on and says on stderr that the thread is
    still running, rather than leaving a silent pause."""
    out = run_python(PRELUDE + _holding(tmp_path) + textwrap.dedent("""
        import io
        magic._Warmup.FORK_WAIT_S = 0.3
        real_stderr, sys.stderr = sys.stderr, io.StringIO()
        status = fork_and_reap(lambda: 0)
        said, sys.stderr = sys.stderr.getvalue(), real_stderr
        builtins.RELEASE_IMPORT.set()
        magic._WARMUP.done.wait(60)
        real_stderr, sys.stderr = sys.stderr, io.StringIO()
        again = fork_and_reap(lambda: 0)  # the warm-up has ended: nothing to say
        quiet, sys.stderr = sys.stderr.getvalue(), real_stderr
        print(json.dumps({"child": status, "said": said, "again": again, "quiet": quiet}))
    """), env={"CUDAMAGIC_CACHE_DIR": str(cache)})
    got = json.loads(out.strip().splitlines()[-1])
    assert got["child"] == 0 and got["again"] == 0, got
    assert "waited 0.3 s for the warm-up of cudamagic, which is still running" in got["said"], got
    assert got["quiet"] == "", got


#: what a notebook may change after ``%load_ext`` (whose warm-up looked up the toolkit and
#: cu++filt) and before its first ``%%cuda`` cell: (what was so before ``%load_ext``, the change,
#: the cell's source, what shows it was seen: a field of the child's answer and its value)
_NEEDS_STAND_IN = ("#include <cuda_fp16.h>\n#ifndef STAND_IN_TOOLKIT\n#error another toolkit\n"
                   "#endif\n__global__ void k(float* x) { x[0] = 1.f; }\n")
_PLAIN = "__global__ void k(float* x) { x[0] = 1.f; }\n"
SEEN_BY_THE_FIRST_CELL = {
    # a toolkit named by $CUDA_HOME: its cuda_fp16.h is the one the cell includes (#error else)
    "CUDA_HOME": ("", "os.environ['CUDA_HOME'] = HOME", _NEEDS_STAND_IN, "ok", True),
    # a relative $CUDA_HOME, and %cd to the folder it names from
    "CUDA_HOME relative, then %cd": ("os.chdir(HOME + '/elsewhere'); "
                                     "os.environ['CUDA_HOME'] = 'toolkit'",
                                     "os.chdir(HOME + '/..')", _NEEDS_STAND_IN, "ok", True),
    # the same where no entry of sys.path follows the working folder (a script's, or a kernel
    # started with absolute paths): only $CUDA_HOME's folder tells the %cd
    "CUDA_HOME relative, then %cd, sys.path absolute": (
        "sys.path[:] = [p for p in sys.path if p and os.path.isabs(p)]; "
        "os.chdir(HOME + '/elsewhere'); os.environ['CUDA_HOME'] = 'toolkit'",
        "os.chdir(HOME + '/..')", _NEEDS_STAND_IN, "ok", True),
    # a newer CUDA wheel's folder put first on sys.path (as %pip install --target would)
    "sys.path": ("", "sys.path.insert(0, HOME + '/wheel')", _NEEDS_STAND_IN, "ok", True),
    # a wheel installed into a folder already on sys.path (%pip install into the venv)
    "an install into a sys.path folder": (
        "os.makedirs(HOME + '/site'); sys.path.insert(0, HOME + '/site')",
        "shutil.copytree(HOME + '/wheel/nvidia', HOME + '/site/nvidia')", _NEEDS_STAND_IN,
        "ok", True),
    # an entry that is no text (Python's imports skip it): every cell still builds
    "a list in sys.path": ("", "sys.path.append(['../lib'])", _PLAIN, "ok", True),
    # cu++filt put on PATH: the cell's miss demangles with that one
    "PATH": ("", "os.environ['PATH'] = HOME + '/bin' + os.pathsep + os.environ['PATH']", _PLAIN,
             "cufilt", "{home}/bin/cu++filt"),
}


@pytest.mark.parametrize("change", sorted(SEEN_BY_THE_FIRST_CELL))
def test_what_the_notebook_changes_after_load_ext_its_first_cell_sees(tmp_path, change):
    """The warm-up looks up the toolkit's folders and cu++filt, which follow ``CUDA_HOME``,
    ``PATH``, ``sys.path``, the installed packages and the working folder: a change made
    between ``%load_ext`` and the first ``%%cuda`` cell is seen by that cell (a warm-up whose
    answers were kept for the process served the other toolkit, keyed as the other toolkit)."""
    home = tmp_path / "toolkit"
    (home / "include").mkdir(parents=True)
    (home / "include" / "cuda_fp16.h").write_text("#define STAND_IN_TOOLKIT 1\n")
    (home / "version.json").write_text('{"cuda": {"version": "99.0"}}')
    (home / "elsewhere").mkdir()
    wheel = home / "wheel" / "nvidia" / "cu99" / "include"  # a namespace package's folder
    wheel.mkdir(parents=True)
    (wheel / "cuda_fp16.h").write_text("#define STAND_IN_TOOLKIT 1\n")
    (home / "bin").mkdir()
    cufilt = home / "bin" / "cu++filt"
    cufilt.write_text("#!/bin/sh\nexec cat\n")  # names as they are: enough to resolve by
    cufilt.chmod(0o755)
    before, step, source, field, seen = SEEN_BY_THE_FIRST_CELL[change]
    out = run_python(PRELUDE + textwrap.dedent(f"""
        import shutil
        HOME = {str(home)!r}
        for var in ("CUDA_HOME", "CUDA_PATH"):  # the GPU machine's name its toolkit
            os.environ.pop(var, None)
        {before}
        ip.run_cell("%load_ext cudamagic")
        warm_thread().join(120)
        {step}
        result = ip.run_cell("%%cuda -n k\\n" + {source!r})
        from cudamagic.toolchain.binary.demangle import default_demangler
        print(json.dumps({{"ok": result.success, "error": repr(result.error_in_exec)[:400],
                          "cufilt": getattr(default_demangler(), "path", None)}}))
    """), env={"CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache")})
    got = json.loads(out.strip().splitlines()[-1])
    assert got[field] == (seen.format(home=home) if isinstance(seen, str) else seen), got
    assert got["ok"], got


def test_the_lookups_take_the_values_they_are_kept_by(tmp_path, monkeypatch):
    """The toolkit and cu++filt are kept by the values of what names them and found from
    those values, not from the environment read again (which another cell may have changed
    meanwhile: an answer kept under one value but made from another)."""
    from cudamagic.core import toolkit as tk
    from cudamagic.toolchain.binary.demangle import find_cufilt

    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda_fp16.h").write_text("")
    (tmp_path / "version.json").write_text("{}")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "cu++filt").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "cu++filt").chmod(0o755)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)  # the environment names none now
    found = tk._toolkit_for((("CUDA_HOME", str(tmp_path)),), ())
    assert str(tmp_path / "include") in found.include_dirs, found
    assert [h.split(":")[0] for h in found.cuda_homes] == ["CUDA_HOME"], found
    assert find_cufilt((str(tmp_path), None, "")) == str(tmp_path / "bin" / "cu++filt")
    monkeypatch.setenv("PATH", os.defpath)  # the environment's PATH names no cu++filt here
    assert find_cufilt((None, None, str(tmp_path / "bin"))) == str(tmp_path / "bin" / "cu++filt")


def test_the_interpreter_exit_waits_for_the_driver_thread(tmp_path):
    """A script that loads the extension and ends at once (a short notebook run by nbclient,
    a benchmark's child) must not end while the driver thread is inside the driver: the GPU
    machine's such child ended with a failing status, its work done. Here the thread is held
    inside a stand-in for the context's making until the main thread has reached its end."""
    marker = tmp_path / "context-made"
    out = run_python(PRELUDE + textwrap.dedent(f"""
        import atexit
        ending = threading.Event()
        def retain(device):
            ending.wait(30)   # inside the driver when the interpreter begins to exit
            time.sleep(0.2)
            open({str(marker)!r}, "w").close()
            return 1
        driver.retain_primary = retain
        ip.run_line_magic("load_ext", "cudamagic")
        atexit.register(ending.set)  # after %load_ext's: the exit's first step lets it go
        print("done")
    """), env={"CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache")})
    assert out.strip().splitlines()[-1] == "done"
    assert marker.exists(), "the process ended while the driver thread was inside the driver"


@pytest.mark.parametrize("where", ["the cell's wait", "the fork's wait"])
def test_a_ctrl_c_while_waiting_for_the_warm_up_leaves_a_later_fork_safe(cache, tmp_path, where):
    """Ctrl-C while a %%cuda cell waits for the held warm-up (a join() interrupted so can say the
    thread ended while it still imports: CPython issue 45274), or while a fork waits for it
    (CPython drops what a fork's hook raises): the fork still waits, and the child can import
    what the warm-up was importing."""
    out = run_python(PRELUDE + _holding(tmp_path) + textwrap.dedent(f"""
        import signal
        where = {where!r}
        def interrupt(then_release):
            arrived.wait(60)
            arrived.clear()
            os.kill(os.getpid(), signal.SIGINT)
            if then_release:
                builtins.RELEASE_IMPORT.set()
        if where == "the cell's wait":
            threading.Thread(target=interrupt, args=(False,)).start()
            try:
                magic._WARMUP.wait()   # as the cell does
            except KeyboardInterrupt:
                print("cell interrupted", flush=True)
            threading.Thread(target=lambda: (arrived.wait(60), builtins.RELEASE_IMPORT.set())
                             ).start()
        else:
            threading.Thread(target=interrupt, args=(True,)).start()
        def in_child():
            import cm_hold, cudamagic.pipeline.steps  # noqa: F401 - where the lock was held
            return 0
        print(json.dumps({{"child": fork_and_reap(in_child)}}))
    """), env={"CUDAMAGIC_CACHE_DIR": str(cache)})
    assert json.loads(out.strip().splitlines()[-1]) == {"child": 0}, out
