"""The compile thread: the stack NVRTC needs whatever the program set, and a child forked during
a compile refused NVRTC with a clear error instead of waiting for ever. Each case runs in a
fresh interpreter (a crash or a hang there is the failure, bounded by a timeout)."""

from __future__ import annotations

import pytest

from .conftest import run_python

# a template instantiated 200 levels deep: NVRTC's front end recurses once per level
DEEP = """
template <int N> struct D { static constexpr int v = D<N - 1>::v + 1; };
template <> struct D<0> { static constexpr int v = 0; };
extern "C" __global__ void k(int* p) { *p = D<200>::v; }
"""


@pytest.mark.parametrize("stack", [32 << 10, 256 << 10, 1 << 20, 0])
def test_a_deep_instantiation_compiles_whatever_stack_size_the_program_set(stack):
    """After threading.stack_size(1 << 20) the compile thread died of SIGSEGV, and the whole
    interpreter with it; the program's own setting is given back unchanged."""
    out = run_python(
        "import threading\n"
        f"threading.stack_size({stack})\n"
        "from cudamagic.toolchain.compile.nvrtc import compile_cubin\n"
        f"r = compile_cubin({DEEP!r}, [], ['-arch=sm_90'], trace=False)\n"
        "print(len(r.cubin) > 0, threading.stack_size())\n", timeout=120)
    assert out.split() == ["True", str(stack)]


# the parent builds a cell (cached), then forks while a thread is inside NVRTC's front end:
# its open of a header the test holds (tests/held_open.py) keeps it there until the fork is
# done; the child reports on its own build of the cached cell and of a new one
_FORK_DURING_COMPILE = """
import os, sys, threading, time
import cudamagic
from cudamagic.errors import ToolchainError
from cudamagic.toolchain.compile.nvrtc import compile_cubin
from tests.held_open import HeldOpen, LeaseUnavailable

cache, folder = sys.argv[1], sys.argv[2]
cudamagic.build('extern "C" __global__ void cached(int* p) {}', cache=cache)
try:
    held = HeldOpen(os.path.join(folder, "held.h"))
except LeaseUnavailable as exc:
    print("skip:", exc)
    sys.exit(0)
worker = threading.Thread(target=compile_cubin, args=(
    '#include "held.h"\\n__global__ void k() {}\\n', [], ["-arch=sm_90", "-I" + folder]))
worker.start()
if not held.opened(60):
    print("NVRTC never opened the held header")
    sys.exit(0)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    said = []
    said.append("hit" if cudamagic.build('extern "C" __global__ void cached(int* p) {}',
                                          cache=cache).hit else "compiled")
    try:
        cudamagic.build('extern "C" __global__ void fresh(int* p) {}', cache=cache)
        said.append("compiled")
    except ToolchainError as exc:
        said.append("refused: " + str(exc))
    os.write(w, "|".join(said).encode())
    os._exit(0)
held.release()  # the parent's compile goes on; the child's copy of NVRTC's lock stays held
os.close(w)
worker.join(120)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    print("the child hung")
    sys.exit(0)
print(os.read(r, 65536).decode())
after = os.fork()
if after == 0:  # forked with no compile in flight: compiles as any process
    try:
        cudamagic.build('extern "C" __global__ void later(int* p) {}', cache=cache)
        os._exit(0)
    except BaseException:
        os._exit(3)
print("later", os.waitpid(after, 0)[1])
"""


def test_a_child_forked_during_a_compile_is_refused_nvrtc_not_left_waiting(tmp_path):
    """The fork copies NVRTC's lock held by the compiling thread: the child's first compile
    waited for ever. Now a probe finds the lock held and the compile raises ToolchainError
    saying why and what to do, its cached cells still serve, and a child forked with no compile
    in flight compiles. The fork happens while the parent's NVRTC waits to open a header the
    test holds, whatever the machine's speed or load."""
    code = (_FORK_DURING_COMPILE.replace("sys.argv[1]", repr(str(tmp_path / "cache")))
            .replace("sys.argv[2]", repr(str(tmp_path))))
    out = run_python(code, timeout=240).strip().splitlines()
    if out[0].startswith("skip:"):
        pytest.skip(f"the race is made with a file lease: {out[0]}")
    assert out[0] not in ("the child hung", "NVRTC never opened the held header"), out
    hit, refused = out[0].split("|", 1)
    assert hit == "hit"
    assert refused.startswith("refused: NVRTC cannot be used in this process: it was forked "
                              "while another thread of its parent was inside NVRTC"), refused
    assert "'spawn' or 'forkserver'" in refused
    assert out[1] == "later 0"


# what NVRTC's log says on each attempt -> what the compile gives
_PTXAS_NULL = "ptxas fatal   : Output file '(null)' could not be opened"
ATTEMPTS = {
    "once, then compiled": ([_PTXAS_NULL], "compiled"),
    "twice": ([_PTXAS_NULL, _PTXAS_NULL], "ToolchainError"),
    "the cell's own ptxas error": (["ptxas error   : Entry function 'k' uses too much shared "
                                    "data"], "CompileError"),
}


@pytest.mark.parametrize("case", list(ATTEMPTS))
def test_a_compile_failing_outside_the_cells_code_is_never_the_cells_error(monkeypatch, case):
    """'ptxas fatal : Output file (null) could not be opened' was reported as the cell's
    CompileError. NVRTC cannot be made to fail so here: its program call is stood in for on the
    failing attempts only; the last attempt is NVRTC's own."""
    from cudamagic.errors import CompileError, ToolchainError
    from cudamagic.toolchain.compile import nvrtc

    logs, outcome = ATTEMPTS[case]
    real, said = nvrtc._program, list(logs)

    def failing(*args):
        if said:
            log = said.pop(0)
            raise CompileError(f"NVRTC could not compile cell.cu:\n{log}", log)
        return real(*args)

    monkeypatch.setattr(nvrtc, "_program", failing)
    try:
        nvrtc.compile_cubin('extern "C" __global__ void k() {}', [], ["-arch=sm_90"],
                            trace=False)
        got = "compiled"
    except ToolchainError as exc:
        got = "ToolchainError"
        assert "outside the cell's code" in str(exc) and "(null)" in str(exc)
    except CompileError:
        got = "CompileError"
    assert got == outcome
