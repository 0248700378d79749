"""Kernels with planted bugs, each with its fix, the tool that finds it, the launch and where
the bug is: shared by the GPU tests (tests/test_gpu_debug.py), the fixture recorder
(scripts/record_tool_fixtures.py) and the parser tests' expectations (tests/fixtures/tools/).

Each source is a cell's body as ``%%cuda`` gets it: NVRTC's line N (``cell.cu:N``) is the
cell's line N + 1 (the magic's own line comes first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# the magic line above each cell: NVRTC's line numbers plus this are the cell's
LINE_OFFSET = 1


@dataclass(frozen=True)
class Planted:
    """One planted bug.

    Attributes
    ----------
    name : str
        The kernel (extern "C") and the fixture's name.
    tool : str
        The compute-sanitizer tool that finds it.
    source, fixed : str
        The buggy cell and the fixed one.
    line : int
        The NVRTC line (cell.cu) of the bug; the cell's line is ``line + LINE_OFFSET``.
    kind : str
        The FindingKind's name the finding must have.
    space, access : str
        The Space / Access names ("" where the tool does not say).
    grid, block : int
    args : tuple of (str, object)
        Each argument: ``("f32", n)`` a float32 array of n zeros, ``("i32", v)`` an int.
    uninitialized : tuple of int
        Arrays left fresh in the child (initcheck).
    """

    name: str
    tool: str
    source: str
    fixed: str
    line: int
    kind: str
    space: str = ""
    access: str = ""
    grid: int = 1
    block: int = 256
    args: tuple = ()
    uninitialized: tuple[int, ...] = field(default=())
    also: tuple[int, ...] = ()  # other NVRTC lines the tool may name first (a race's two ends)


PLANTED = (
    Planted("oob_write", "memcheck", """\
extern "C" __global__ void oob_write(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    x[i + n] = 1.0f;
}
""", """\
extern "C" __global__ void oob_write(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 1.0f;
}
""", 3, "OUT_OF_BOUNDS", "GLOBAL", "WRITE", args=(("f32", 256), ("i32", 4096))),
    # the fixed launch passes n = 256 (see fixed_args)
    Planted("oob_shared", "memcheck", """\
extern "C" __global__ void oob_shared(float* out, int n) {
    __shared__ float tile[32];
    tile[threadIdx.x % 32] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x + n];
}
""", """\
extern "C" __global__ void oob_shared(float* out, int n) {
    __shared__ float tile[32];
    tile[threadIdx.x % 32] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = tile[(threadIdx.x + n) % 32];
}
""", 5, "OUT_OF_BOUNDS", "SHARED", "READ", block=32, args=(("f32", 32), ("i32", 1 << 20))),
    Planted("race", "racecheck", """\
extern "C" __global__ void race(float* out) {
    __shared__ float s[256];
    s[threadIdx.x] = threadIdx.x;
    out[threadIdx.x] = s[(threadIdx.x + 32) % blockDim.x];
}
""", """\
extern "C" __global__ void race(float* out) {
    __shared__ float s[256];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 32) % blockDim.x];
}
""", 4, "RACE", "SHARED", args=(("f32", 256),), also=(3,)),
    Planted("uninit", "initcheck", """\
extern "C" __global__ void uninit(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 2.0f;
}
""", """\
extern "C" __global__ void uninit(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 2.0f;
}
""", 3, "UNINITIALIZED", "GLOBAL", "READ", args=(("f32", 256), ("f32", 256), ("i32", 256)),
        uninitialized=(0,)),
    Planted("divergent", "synccheck", """\
extern "C" __global__ void divergent(float* out) {
    if (threadIdx.x < 16) {
        __syncthreads();
    }
    out[threadIdx.x] = 1.0f;
}
""", """\
extern "C" __global__ void divergent(float* out) {
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}
""", 3, "BARRIER", block=32, args=(("f32", 32),)),
)


def fixed_args(p: Planted) -> tuple:
    """The fixed launch's arguments: the buggy one's, with an out-of-range count brought back
    in range (initcheck's fix is initialising the input: no array left fresh)."""
    if p.name == "oob_write":
        return (("f32", 256), ("i32", 256))
    return p.args


# the crash kernels: run in the notebook's own process (a real Jupyter kernel) by the GPU tests
ASSERT_SOURCE = """\
#include <cuda/std/cassert>
extern "C" __global__ void check_positive(const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) assert(x[i] >= 0.0f);
}
"""
ILLEGAL_SOURCE = """\
extern "C" __global__ void wild(int* p) {
    int* q = (int*)(0xdead0000ull + 4096ull * threadIdx.x);
    *q = p[0];
}
"""
PRINTF_SOURCE = """\
extern "C" __global__ void hello(int n) {
    if (threadIdx.x < 2) printf("hello %d from thread %d\\n", n, threadIdx.x);
}
extern "C" __global__ void silent(float* x) { x[threadIdx.x] = 0.0f; }
"""
# profiling: a memory-bound copy and a compute-bound kernel
#: the profiled launches' length: 64 Mi floats, so the copy runs long enough on an H200 to be
#: bound by DRAM (at 16 Mi it took 55 us, 44 % of DRAM's peak, below its SM figure)
PROFILE_N = 1 << 26

PROFILE_SOURCE = """\
extern "C" __global__ void copy(const float* a, float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[i];
}
extern "C" __global__ void burn(float* x, int n, int steps) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    for (int s = 0; s < steps; ++s) v = v * 1.0000001f + 0.5f;
    x[i] = v;
}
"""
