"""The warm child a sanitize leaves for the next one (cudamagic/launch/warm.py): a real child
process started with the real boot, given a real module and capture. Without a GPU the child's
run ends at the missing driver; the warm child must end the same way as a cold one, whenever
its go arrives, and never run anything it was not sent. (Under compute-sanitizer, and the
second sanitize's time, on the GPU machine: tests/test_gpu_debug.py.)
"""

from __future__ import annotations

import os
import sys

import pytest

import cudamagic
from cudamagic.launch import capture as cap
from cudamagic.launch import tool_run, warm
from cudamagic.toolchain.tools import tools

CELL = 'extern "C" __global__ void f(float* x, int n) { x[0] = n; }\n'


@pytest.fixture
def run(tmp_path, monkeypatch):
    # the children see no GPU on any machine (on a GPU machine the cell's launch would run):
    # the absence simulated, not assumed
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    m = cudamagic.build(CELL, cache=str(tmp_path / "cache"))
    c = cap.Capture("f", (1, 1, 1), (1, 1, 1), 0, (
        cap.CapturedArg(0, cap.ArgKind.BYTES, bytes(8), "float*", "x"),
        cap.CapturedArg(1, cap.ArgKind.BYTES, (4).to_bytes(4, "little"), "int", "n")))
    yield m.debug.lineinfo(), c
    warm.stop_all()


def _argv(hold=None):
    """The warm child's command line (the tool's part left out: none runs without a driver);
    ``hold``: a file the child waits to see gone before it starts, so a test can send its go
    before the child is there to read it."""
    wait = f"import os, time\nwhile os.path.exists({str(hold)!r}): time.sleep(0.01)\n" \
        if hold else ""
    return lambda folder: [sys.executable, "-c", wait + warm.warm_boot(tool_run.CHILD_MODULE),
                           os.fspath(folder), str(os.getpid())]


def _cold(build, c):
    import shutil

    folder = tools.scratch_folder()
    try:
        done = tools.run_child(tool_run.write_run(folder, c, build, 0),
                               env=tool_run._child_env(), cwd=folder)
        return done.returncode, tool_run.read_placed(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _wait_reading(child, timeout=120.0):
    """Until the warm child has its FIFO open (the child's process is python under no tool)."""
    import time

    fifo = os.fspath(child.folder / "go")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fds = f"/proc/{child.proc.pid}/fd"
        try:
            if any(os.readlink(os.path.join(fds, fd)) == fifo for fd in os.listdir(fds)):
                return
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError("the warm child never opened its FIFO")


def _key():
    return warm.interpreter_key(tool_run._child_env(), tool_run._child_path(), "tool")


@pytest.mark.parametrize("go_first", [False, True], ids=["ready-then-go", "go-before-ready"])
def test_a_warm_child_ends_as_a_cold_one_whenever_its_go_comes(run, tmp_path, go_first):
    build, c = run
    hold = tmp_path / "hold"
    hold.write_text("")
    warm.keep("sanitize memcheck", _key(), _argv(hold), tool_run._child_env(),
              tool_run._child_path())
    child = warm.take("sanitize memcheck", _key())
    assert child is not None and child.alive()
    tool_run.write_run(child.folder, c, build, 0)
    if go_first:
        child.send("0")  # the child is held before its imports: the go waits in the FIFO
        hold.unlink()
        done = tools.wait_child(child.proc, timeout=120)
    else:
        hold.unlink()
        _wait_reading(child)  # its imports done, reading the FIFO
        done = child.go(0)
    placed = tool_run.read_placed(child.folder)
    child.stop()  # its folder, as a run removes it
    assert (done.returncode, placed) == _cold(build, c)
    assert done.returncode == 3 and "no CUDA device" in placed[1]


def test_a_warm_child_serves_only_the_settings_it_was_started_with(run):
    env, path = tool_run._child_env(), tool_run._child_path()
    warm.keep("sanitize memcheck", _key(), _argv(), env, path)
    first = warm._WARM["sanitize memcheck"]
    assert warm.take("sanitize racecheck", _key()) is None  # another tool's
    other = warm.interpreter_key(env, [*path, "/elsewhere"], "tool")
    assert warm.take("sanitize memcheck", other) is None  # another sys.path: stopped
    assert first.proc.poll() is not None and not first.folder.exists()
    assert warm.take("sanitize memcheck", _key()) is None  # and not kept
    warm.keep("sanitize memcheck", _key(), _argv(), env, path)
    taken = warm.take("sanitize memcheck", _key())
    assert taken is not None
    assert warm.take("sanitize memcheck", _key()) is None  # taken once
    taken.stop()  # a run would have used it, and removed its folder


def test_a_stopped_warm_child_runs_nothing_and_leaves_no_folder(run, tmp_path):
    build, c = run
    warm.keep("sanitize memcheck", _key(), _argv(), tool_run._child_env(),
              tool_run._child_path())
    child = warm._WARM["sanitize memcheck"]
    tool_run.write_run(child.folder, c, build, 0)  # files there, but no go
    warm.stop_all()
    assert child.proc.poll() is not None and not child.folder.exists()
    assert not warm._WARM


def test_a_warm_child_whose_notebook_is_gone_exits_by_itself(tmp_path):
    import subprocess

    folder = tmp_path / "w"
    folder.mkdir()
    (folder / "path.json").write_text("[" + ", ".join(f'"{p}"' for p in sys.path if p) + "]")
    os.mkfifo(folder / "go")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process id that names no process now
    child = subprocess.Popen([sys.executable, "-c", warm.warm_boot(tool_run.CHILD_MODULE),
                              str(folder), str(gone.pid)], stdout=subprocess.PIPE)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0 and not (folder / "placed.json").exists()
