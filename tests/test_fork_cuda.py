"""A child forked after CUDA started in its parent (multiprocessing's and concurrent.futures'
default on Linux before Python 3.14): it builds and serves cache hits, and only a launch fails,
with cudamagic's error saying why and which start method to use.

The driver does not survive a fork: on the GPU machine such a child's build raised the driver's
``cuCtxGetCurrent failed with CUDA_ERROR_NOT_INITIALIZED`` (after only a cache hit in the
parent) or CuPy's ``cudaErrorInitializationError`` (after a launch). Here CUDA's start is
simulated: ``libcuda.so.1`` is stood in for (tests/stand_in_driver.py) and everything above it is
the package's own; tests/test_gpu_fork.py does the same on a GPU for real.
"""

from __future__ import annotations

import json
import sys

import pytest

from .conftest import run_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork: Linux")

_CHILD = r"""
import json, os, sys
import cudamagic
from cudamagic.errors import ForkedCudaError
from cudamagic.toolchain.device import driver
from tests.stand_in_driver import StandInCuda, install

CASE, cache = sys.argv[1], sys.argv[2]
CACHED = 'extern "C" __global__ void cached(int n) {}\n'
cuda = install(StandInCuda(cc=(8, 6), started=CASE == "another library started CUDA"))
if CASE == "another library started CUDA":
    # cudamagic never asked the driver in the parent: its builds name their arch
    parent = cudamagic.build(CACHED, arch="sm_90", cache=cache)
else:
    cudamagic.build(CACHED, cache=cache)  # CUDA starts here: the GPU's arch is asked
    parent = cudamagic.build(CACHED, cache=cache)
    assert parent.hit and cuda.calls.count("cuInit") == 1
kernel = parent["cached"]
if CASE == "after a launch":
    # what a launch leaves in the parent: the kernel's launcher, holding CuPy's
    # current-device call (CuPy is imported and the driver answers), and its handle
    import cupy
    kernel._make_launcher((1,))
    kernel._handles[0] = 0xdead

def attempt(fn):
    try:
        return ["ok", fn()]
    except Exception as exc:
        return [type(exc).__name__, str(exc)]

def child_says():
    hit = cudamagic.build(CACHED, **({"arch": "sm_90"} if CASE.startswith("another") else {}),
                          cache=cache)
    fresh = cudamagic.build('extern "C" __global__ void fresh(int n) {}\n', cache=cache)
    said = {"hit": hit.hit, "hit arch": hit.report.arch, "fresh arch": fresh.report.arch,
            "launch": attempt(lambda: kernel(1, 1, (1,))),
            "fresh launch": attempt(lambda: fresh["fresh"](1, 1, (1,))),
            "available": driver.available(), "devices": driver.device_count()}
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a grandchild: still no CUDA
        os.write(w, json.dumps(attempt(lambda: kernel(1, 1, (1,)))).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    said["grandchild launch"] = json.loads(os.read(r, 1 << 16))
    return said

r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        said = child_says()
    except BaseException as exc:
        said = {"child raised": f"{type(exc).__name__}: {exc}"}
    os.write(w, json.dumps(said).encode())
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
said = json.loads(os.read(r, 1 << 20))
said["parent available"] = driver.available()
print(json.dumps(said))
"""

# how CUDA started in the parent -> the arch the child's builds take (the parent's GPU's, where
# the parent asked it; cudamagic's default where another library started CUDA)
CASES = {
    "a cache hit": "sm_86",
    "after a launch": "sm_86",
    "another library started CUDA": "sm_90",
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_child_forked_after_cuda_started_builds_and_hits_and_only_a_launch_fails(tmp_path,
                                                                                 case):
    code = (_CHILD.replace("sys.argv[1]", repr(case))
            .replace("sys.argv[2]", repr(str(tmp_path / "cache"))))
    said = json.loads(run_python(code, timeout=240).strip().splitlines()[-1])
    assert "child raised" not in said, said
    arch = CASES[case]
    assert said["hit"] and (said["hit arch"], said["fresh arch"]) == (arch, arch), said
    for launch in ("launch", "fresh launch", "grandchild launch"):
        kind, message = said[launch]
        assert kind == "ForkedCudaError", (launch, said[launch])
        assert "forked after CUDA started in its parent" in message
        assert "'spawn' or 'forkserver'" in message
    assert (said["available"], said["devices"]) == (False, 0)
    assert said["parent available"]


_BEFORE = r"""
import json, os
import cudamagic
from cudamagic.toolchain.device import driver
from tests.stand_in_driver import StandInCuda, install

cuda = install(StandInCuda(cc=(8, 6)))
r, w = os.pipe()
if os.fork() == 0:  # forked before any CUDA call: the child starts CUDA itself
    os.write(w, json.dumps([driver.available(), driver.device_sm(0)]).encode())
    os._exit(0)
os.close(w)
os.wait()
print(os.read(r, 1024).decode())
"""


def test_a_child_forked_before_cuda_started_uses_cuda():
    """Only a fork after CUDA started is refused: a child forked before its parent's first CUDA
    call starts CUDA itself."""
    assert json.loads(run_python(_BEFORE).strip().splitlines()[-1]) == [True, 86]


_REAL = r"""
import json, os, sys
import cupy
import cudamagic

CASE, cache = sys.argv[1], sys.argv[2]
SRC = 'extern "C" __global__ void inc(int* p) { p[threadIdx.x] += 1; }\n'
x = cupy.zeros(4, dtype=cupy.int32)  # CuPy starts CUDA
if CASE != "CuPy started CUDA":
    module = cudamagic.build(SRC, cache=cache)
    module = cudamagic.build(SRC, cache=cache)  # a hit
    if CASE == "after a launch":
        module["inc"](1, 4, (x,))
        cupy.cuda.runtime.deviceSynchronize()

def attempt(fn):
    try:
        return ["ok", fn()]
    except Exception as exc:
        return [type(exc).__name__, str(exc)]

r, w = os.pipe()
pid = os.fork()
if pid == 0:
    said = {}
    try:
        hit = cudamagic.build(SRC, cache=cache)
        fresh = cudamagic.build('extern "C" __global__ void dec(int* p) { p[0] -= 1; }\n',
                                cache=cache)
        said = {"hit": hit.hit, "fresh": not fresh.hit,
                "launch": attempt(lambda: hit["inc"](1, 4, (x,))),
                "fresh launch": attempt(lambda: fresh["dec"](1, 1, (x,))),
                "gpu_available": cudamagic.gpu_available()}
        if CASE != "CuPy started CUDA":  # the parent's own kernel object
            said["parent's kernel"] = attempt(lambda: module["inc"](1, 4, (x,)))
    except BaseException as exc:
        said["child raised"] = f"{type(exc).__name__}: {exc}"
    os.write(w, json.dumps(said).encode())
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
said = json.loads(os.read(r, 1 << 20))
module = cudamagic.build(SRC, cache=cache)
module["inc"](1, 4, (x,))  # the parent still launches
said["parent x"] = x.get().tolist()
print(json.dumps(said))
"""

# how CUDA started in the parent -> what the parent's x holds after its own launches
REAL = {"a cache hit": [1, 1, 1, 1], "after a launch": [2, 2, 2, 2],
        "CuPy started CUDA": [1, 1, 1, 1]}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(REAL))
def test_on_a_gpu_a_child_forked_after_cuda_started_builds_hits_and_is_refused_a_launch(
        tmp_path, case):
    """The fork for real: the child's build of the parent's cell hits, a new cell compiles, and
    each launch raises ForkedCudaError; the parent launches on."""
    code = (_REAL.replace("sys.argv[1]", repr(case))
            .replace("sys.argv[2]", repr(str(tmp_path / "cache"))))
    said = json.loads(run_python(code, timeout=240).strip().splitlines()[-1])
    assert "child raised" not in said, said
    assert said["hit"] == (case != "CuPy started CUDA") and said["fresh"], said
    for launch in ("launch", "fresh launch", "parent's kernel"):
        if launch not in said:
            continue
        assert said[launch][0] == "ForkedCudaError", (launch, said)
        assert "'spawn' or 'forkserver'" in said[launch][1]
    assert said["gpu_available"] is False
    assert said["parent x"] == REAL[case], said


_IMPORTED_AFTER = r"""
import json, os
from cudamagic.toolchain.device import driver
from tests.stand_in_driver import StandInCuda, install

install(StandInCuda(cc=(8, 6), started=True))  # another library (CuPy) started CUDA
r, w = os.pipe()
if os.fork() == 0:
    driver._forget_fork()  # as where cudamagic's driver module is first imported after the fork
    try:
        driver.device_sm(0)
        said = ["ok"]
    except Exception as exc:
        said = [type(exc).__name__, str(exc)]
    os.write(w, json.dumps(said).encode())
    os._exit(0)
os.close(w)
os.wait()
print(os.read(r, 4096).decode())
"""


def test_a_child_whose_driver_module_came_after_the_fork_is_told_about_the_fork():
    """On the H200, a child of a parent that had only used CuPy (cudamagic's driver module not
    yet imported, so no fork hook of ours ran) got NoDeviceError 'cuInit failed with
    CUDA_ERROR_NOT_INITIALIZED'; cuInit answers that only in such a child: ForkedCudaError."""
    said = json.loads(run_python(_IMPORTED_AFTER).strip().splitlines()[-1])
    assert said[0] == "ForkedCudaError", said
    assert "'spawn' or 'forkserver'" in said[1]
