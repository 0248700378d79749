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
        "from cudamagic.toolchain.nvrtc import compile_cubin\n"
        f"r = compile_cubin({DEEP!r}, [], ['-arch=sm_90'], trace=False)\n"
        "print(len(r.cubin) > 0, threading.stack_size())\n", timeout=120)
    assert out.split() == ["True", str(stack)]


# a cell whose compile spends most of a second in NVRTC's front end, where NVRTC holds its lock
HEAVY = "\n".join(
    ["template <int N> struct D { static constexpr int v = D<N - 1>::v + 1; };",
     "template <> struct D<0> { static constexpr int v = 0; };",
     *(f"template <int M> struct E{i} {{ static constexpr int v = D<M>::v + {i}; }}; "
       f"__device__ int g{i} = E{i}<{100 + i % 100}>::v;" for i in range(300)),
     'extern "C" __global__ void heavy(int* p) { *p = g1; }'])

# the parent builds a cell (cached), then forks while a thread is inside NVRTC compiling
# another; the child reports on its own build of the cached cell and of a new one
_FORK_DURING_COMPILE = """
import os, sys, threading, time
import cudamagic
try:
    from cudamagic.errors import ToolchainError
except ImportError:  # a version without it: the child hangs, as it was found
    ToolchainError = Exception
from cudamagic.toolchain import nvrtc

cache = sys.argv[1]
cudamagic.build('extern "C" __global__ void cached(int* p) {}', cache=cache)
inside = threading.Event()
real = nvrtc._program
def entered(*args):  # the thread's compile says when it enters NVRTC
    inside.set()
    return real(*args)
nvrtc._program = entered
worker = threading.Thread(target=cudamagic.build, args=(HEAVY,), kwargs={"cache": cache})
worker.start()
inside.wait(60)
time.sleep(0.1)
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
    in flight compiles."""
    code = (f"HEAVY = {HEAVY!r}\n"
            + _FORK_DURING_COMPILE.replace("sys.argv[1]", repr(str(tmp_path / "cache"))))
    out = run_python(code, timeout=240).strip().splitlines()
    assert out[0] != "the child hung", out
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
    from cudamagic.toolchain import nvrtc

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
