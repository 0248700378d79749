"""On a GPU: launches against NumPy, driver enumeration against the ELF table, cu++filt.

Marked ``gpu``: skipped with a reason where there is no CUDA device (CI, the development
machines). Run on the GPU machine with ``python -m pytest -m gpu``.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import cudamagic
from cudamagic.toolchain.device import driver
from cudamagic.toolchain.binary.demangle import default_demangler
from cudamagic.toolchain.binary.image import read_cubin

from .conftest import FIXTURES, fixture_rows, run_python
from .test_magic import CELL as MAGIC_CELL

pytestmark = pytest.mark.gpu

SOURCE = r"""
#include <cupy/complex.cuh>
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
namespace ns { template <typename T, int K> __global__ void scale(T* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= K; } }
template <typename T> __global__ void cexp(complex<T>* z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) z[i] = exp(z[i]); }
extern "C" __global__ void fill(float* x, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v; }
"""
EXPRS = ["saxpy<float>", "saxpy<double>", "ns::scale<float, 3>", "cexp<float>", "cexp<double>"]

RUN = r"""
import json, numpy as np, cupy as cp, cudamagic
mod = cudamagic.build(SOURCE, EXPRS, cache=CACHE)
n = 1000
rng = np.random.default_rng(0)
out = {"hit": mod.hit, "how": sorted({k.resolved_by for k in mod.kernels.values()})}
for t in (np.float32, np.float64):
    x, y = rng.random(n).astype(t), rng.random(n).astype(t)
    dx, dy = cp.asarray(x), cp.asarray(y)
    mod["saxpy<%s>" % ("float" if t == np.float32 else "double")]((4,), (256,), (2.5, dx, dy, n))
    out[t.__name__] = bool(np.allclose(cp.asnumpy(dy), 2.5 * x + y, rtol=1e-6))
x = rng.random(n).astype(np.float32); dx = cp.asarray(x)
mod["ns::scale<float, 3>"]((4,), (256,), (dx, n))
out["scale"] = bool(np.array_equal(cp.asnumpy(dx), x * np.float32(3)))
for t in (np.complex64, np.complex128):
    z = (rng.random(n) + 1j * rng.random(n)).astype(t); dz = cp.asarray(z)
    mod["cexp<%s>" % ("float" if t == np.complex64 else "double")]((4,), (256,), (dz, n))
    out[t.__name__] = bool(np.allclose(cp.asnumpy(dz), np.exp(z), rtol=1e-5))
d = cp.zeros(n, cp.float32)
mod["fill"]((4,), (256,), (d, 7.0, n))
out["fill"] = bool((cp.asnumpy(d) == 7).all())
print(json.dumps(out))
"""


def test_kernels_equal_numpy_fresh_process_and_from_cache(tmp_path):
    code = f"SOURCE = {SOURCE!r}\nEXPRS = {EXPRS!r}\nCACHE = {str(tmp_path)!r}\n" + RUN
    first = json.loads(run_python(code).strip().splitlines()[-1])
    second = json.loads(run_python(code).strip().splitlines()[-1])
    for res, hit in ((first, False), (second, True)):
        assert res.pop("hit") is hit
        # a miss takes NVRTC's map; a restore in a fresh process verifies the stored one
        assert res.pop("how") == (["extern-c", "stored"] if hit else ["extern-c", "nvrtc"])
        assert res == {"float32": True, "float64": True, "scale": True, "complex64": True,
                       "complex128": True, "fill": True}


def test_namespace_callables_through_ipython(tmp_path):
    code = r'''
import json, numpy as np, cupy as cp
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "cudamagic")
ip.run_cell_magic("cuda", '-n "saxpy<float>" -n "ns::scale<float, 3>"', CELL)
x = cp.arange(10, dtype=cp.float32); y = cp.ones(10, dtype=cp.float32)
ip.user_ns["saxpy_float"]((1,), (32,), (2.0, x, y, 10))
print(json.dumps({"ok": bool((cp.asnumpy(y) == 2 * np.arange(10) + 1).all()),
                  "hit": ip.user_ns["cuda_module"].hit}))
'''
    env = {"CUDAMAGIC_CACHE_DIR": str(tmp_path)}
    for hit in (False, True):
        out = json.loads(run_python(f"CELL = {MAGIC_CELL!r}\n" + code, env).strip().splitlines()[-1])
        assert out == {"ok": True, "hit": hit}


def test_driver_enumeration_equals_elf(tmp_path):
    for cubin in ((FIXTURES / "fixture.cubin").read_bytes(),
                  cudamagic.build(SOURCE, EXPRS, cache=tmp_path).cubin):
        lib = driver.Library.load(cubin)
        assert sorted(lib.kernel_names()) == sorted(read_cubin(cubin).symbols)
    # a build lists kernels from the ELF table (the driver's list is the same: above) and
    # fetches each kernel's handle on its first call
    mod = cudamagic.build(SOURCE, EXPRS, cache=tmp_path)


def _param_info(kernel: int, count: int) -> list[tuple[int, int]]:
    """``(offset, size)`` of each parameter, as the driver reports them."""
    from cuda.bindings import driver as cu

    out = []
    for i in range(count):
        err, offset, size = cu.cuKernelGetParamInfo(cu.CUkernel(kernel), i)
        assert err == cu.CUresult.CUDA_SUCCESS, err
        out.append((offset, size))
    return out


def test_driver_parameter_info_equals_elf_records():
    cubin = (FIXTURES / "fixture.cubin").read_bytes()
    driver.ensure_context(0)
    lib = driver.Library.load(cubin)
    for k in read_cubin(cubin).kernels:
        got = _param_info(lib.kernel(k.symbol), len(k.params))
        assert got == [(p.offset, p.size) for p in k.params], k.symbol


def test_cufilt_is_used_and_gives_the_recorded_outputs():
    d = default_demangler()
    assert d.name == "cu++filt"
    rows = fixture_rows()
    assert d.demangle([r.symbol for r in rows]) == [r.cufilt for r in rows]


LAUNCH_SRC = r"""
template <typename T> __global__ void axpb(T a, const T* x, T* y, T b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + b; }
__global__ void big_shared(int* out, int n) {
  extern __shared__ int buf[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = i;
  __syncthreads();
  int s = 0; for (int i = 0; i < n; ++i) s += buf[i];
  if (threadIdx.x == 0) out[0] = s; }
__global__ void fault(int* p) { p[threadIdx.x] = 1; }
__global__ void which_device(int* out) { }
"""


@pytest.fixture(scope="module")
def launch_mod(tmp_path_factory):
    return cudamagic.build(LAUNCH_SRC, ["axpb<float>", "axpb<double>"],
                           cache=tmp_path_factory.mktemp("launch"))


def _check_axpb(k, x, y, n, dtype, **kw):
    import cupy as cp

    k(((n + 127) // 128,), (128,), (2.0, x, y, 0.5, n), **kw)
    cp.cuda.get_current_stream().synchronize()
    kw.get("stream") and getattr(kw["stream"], "synchronize", lambda: None)()
    xs = cp.asnumpy(x) if hasattr(x, "get") else x.cpu().numpy()
    ys = cp.asnumpy(y) if hasattr(y, "get") else y.cpu().numpy()
    assert np.allclose(ys, dtype(2.0) * xs + dtype(0.5))


def test_python_scalars_take_the_parameter_type(launch_mod):
    import cupy as cp

    n = 1000
    for expr, dt in (("axpb<float>", np.float32), ("axpb<double>", np.float64)):
        x = cp.arange(n, dtype=dt)
        y = cp.zeros(n, dtype=dt)
        _check_axpb(launch_mod[expr], x, y, n, dt)


def test_non_default_stream(launch_mod):
    import cupy as cp

    n = 4096
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        x = cp.arange(n, dtype=cp.float32)
        y = cp.zeros(n, dtype=cp.float32)
    launch_mod["axpb<float>"](((n + 127) // 128,), (128,), (2.0, x, y, 0.5, n), stream=s)
    s.synchronize()
    assert np.allclose(cp.asnumpy(y), 2 * np.arange(n, dtype=np.float32) + 0.5)
    with s:  # CuPy's current stream is the default
        launch_mod["axpb<float>"](((n + 127) // 128,), (128,), (3.0, x, y, 0.0, n))
    s.synchronize()
    assert np.allclose(cp.asnumpy(y), 3 * np.arange(n, dtype=np.float32))


def test_pytorch_tensors_and_stream(tmp_path):
    # in a fresh process: some pytest plugins (jaxtyping's import hook) break torch's import
    code = f"""
import json, torch, cudamagic
mod = cudamagic.build({LAUNCH_SRC!r}, ["axpb<float>"], cache={str(tmp_path)!r})
n = 2048
x = torch.arange(n, dtype=torch.float32, device="cuda")
y = torch.zeros(n, dtype=torch.float32, device="cuda")
ts = torch.cuda.Stream()
mod["axpb<float>"](((n + 127) // 128,), (128,), (2.0, x, y, 0.5, n), stream=ts)
ts.synchronize()
ok = bool(torch.allclose(y.cpu(), 2 * torch.arange(n, dtype=torch.float32) + 0.5))
try:
    mod["axpb<float>"]((1,), (1,), (2.0, x.double(), y, 0.5, n))
    refused = None
except TypeError as err:
    refused = str(err)
print(json.dumps({{"ok": ok, "refused": refused}}))
"""
    try:
        out = json.loads(run_python(code).strip().splitlines()[-1])
    except AssertionError as err:
        if "No module named 'torch'" in str(err):
            pytest.skip("PyTorch is not installed")
        raise
    assert out["ok"] and "float64 where the kernel reads float32" in out["refused"]


def test_dlpack_only_arrays(launch_mod):
    import cupy as cp

    class OnlyDLPack:
        def __init__(self, a):
            self._a = a

        def __dlpack__(self, **kw):
            return self._a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self._a.__dlpack_device__()

    n = 512
    x = cp.arange(n, dtype=cp.float32)
    y = cp.zeros(n, dtype=cp.float32)
    launch_mod["axpb<float>"](((n + 127) // 128,), (128,), (2.0, OnlyDLPack(x), OnlyDLPack(y), 0.5, n))
    assert np.allclose(cp.asnumpy(y), 2 * np.arange(n, dtype=np.float32) + 0.5)


def test_real_arrays_are_checked(launch_mod):
    import cupy as cp

    k = launch_mod["axpb<float>"]
    y = cp.zeros(4, cp.float32)
    with pytest.raises(TypeError, match="host array"):
        k((1,), (4,), (1.0, np.zeros(4, np.float32), y, 0.0, 4))
    with pytest.raises(TypeError, match="float64 where the kernel reads float32"):
        k((1,), (4,), (1.0, cp.zeros(4, cp.float64), y, 0.0, 4))
    with pytest.raises(ValueError, match="does not fit"):
        k((1,), (4,), (1.0, y, y, 0.0, 2 ** 40))


def test_dynamic_shared_memory_above_48k(launch_mod):
    import cupy as cp

    n = 20000  # 80 000 bytes of dynamic shared memory
    out = cp.zeros(1, cp.int32)
    launch_mod["big_shared"]((1,), (256,), (out, n), shared_mem=n * 4)
    assert int(out.get()[0]) == n * (n - 1) // 2


def test_kernel_attributes_and_report(launch_mod):
    from cudamagic.view.widget import report_with_attributes

    attrs = launch_mod["axpb<float>"].attributes()
    assert attrs["registers"] > 0 and attrs["max_threads_per_block"] >= 128
    report = report_with_attributes(launch_mod)
    assert "registers" in report.columns and all(r.attributes for r in report.rows)
    # the report's numbers (read off the CUBIN) are the driver's
    for row in report.rows:
        driver_says = launch_mod[row.name_expression].attributes()
        assert {k: driver_says[k] for k in row.attributes} == row.attributes, row.name_expression


def test_every_device(tmp_path):
    import cupy as cp

    count = cp.cuda.runtime.getDeviceCount()
    if count < 2:
        pytest.skip("one GPU: the two-GPU machine runs this")
    mod = cudamagic.build(LAUNCH_SRC, ["axpb<float>"], cache=tmp_path)
    n = 1000
    for dev in range(count):
        with cp.cuda.Device(dev):
            x = cp.arange(n, dtype=cp.float32)
            y = cp.zeros(n, dtype=cp.float32)
            mod["axpb<float>"](((n + 127) // 128,), (128,), (2.0, x, y, 0.5, n))
            cp.cuda.Device(dev).synchronize()
            assert y.device.id == dev
            assert np.allclose(cp.asnumpy(y), 2 * np.arange(n, dtype=np.float32) + 0.5)
    assert sorted(mod["axpb<float>"]._handles) == list(range(count))  # loaded once per device


def test_a_fault_says_the_context_is_gone(tmp_path):
    code = f"""
import json, cupy as cp, cudamagic
from cudamagic.errors import ContextPoisonedError
mod = cudamagic.build({LAUNCH_SRC!r}, cache={str(tmp_path)!r})
x = cp.zeros(4, cp.int32)
mod["fault"]((1,), (32,), (None,))  # writes through a null pointer
try:
    for _ in range(100):
        mod["which_device"]((1,), (1,), (x,))
        cp.cuda.runtime.deviceSynchronize()
    print(json.dumps({{"raised": None}}))
except ContextPoisonedError as err:
    print(json.dumps({{"raised": "ContextPoisonedError", "message": str(err)}}))
except Exception as err:
    # CuPy's synchronize may see the fault first; the next cudamagic launch must still say so
    try:
        mod["which_device"]((1,), (1,), (x,))
        print(json.dumps({{"raised": type(err).__name__, "then": None}}))
    except ContextPoisonedError as err2:
        print(json.dumps({{"raised": "ContextPoisonedError", "message": str(err2)}}))
"""
    out = json.loads(run_python(code).strip().splitlines()[-1])
    assert out["raised"] == "ContextPoisonedError", out
    assert "restart the notebook kernel" in out["message"]


_NAN_BITS = {"f2": (0x7C01, 0x7E00, 0xFD55), "f4": (0x7F800001, 0x7FC00000, 0xFFA12345),
             "f8": (0x7FF0000000000001, 0x7FF8000000000000, 0xFFF123456789ABCD)}


def _echo_cases() -> list[tuple[str, object, bytes]]:
    """(kernel, value, the bytes it must receive) at the edges of every parameter type, in
    Python and NumPy forms (the property tests in test_param_encoding.py cover the range)."""
    from .test_kernel import COMPLEX, FLOATS, INT128, INTEGERS, OTHERS, oracle

    cases: list[tuple[str, object]] = [(e, v) for e in INT128 for v in (
        0, 1, 2**64 + 5, np.uint64(2**64 - 1), (1 << 127) - 1,
        *(((-1, -(1 << 127), np.int64(-2**63))) if INT128[e] == "i16" else ((1 << 128) - 1,)))]
    for expr, code in INTEGERS.items():
        dt = np.dtype(code)
        lo, hi = (0, 1) if code == "?" else (int(np.iinfo(dt).min), int(np.iinfo(dt).max))
        for v in sorted({lo, hi, lo + 1, hi - 1, 0, 1} | ({-1} if lo < 0 else set())):
            cases += [(expr, v), (expr, np.array(v, dt)[()])]
    for expr, code in FLOATS.items():
        dt, fi = np.dtype(code), np.finfo(code)
        for v in (float(fi.max), -float(fi.max), float(fi.tiny), float(fi.smallest_subnormal),
                  0.0, -0.0, math.inf, -math.inf, math.nan, 1 / 3):
            cases += [(expr, v), (expr, np.array(v, dt)[()])]
        cases += [(expr, np.frombuffer(b.to_bytes(dt.itemsize, "little"), dt)[0])
                  for b in _NAN_BITS[code]]  # NaN payloads, signalling NaNs: NumPy form
    for expr, code in COMPLEX.items():
        cases += [(expr, complex(1.5, -2.25)), (expr, np.array(complex(3, 4), code)[()]),
                  (expr, complex(math.inf, math.nan))]
    bf16 = "echo<__nv_bfloat16>"
    cases += [(bf16, x) for x in (1.0, 1.00390625, 1.01171875, -2.5, 3.3895313892515355e38,
                                  2.0**-133, math.inf, -0.0, math.nan)]
    cases += [(bf16, np.float32(1.5)), (bf16, b"\x81\x7f")]
    cases += [(e, bytes(range(1, 1 + int(OTHERS[e][1:])))) for e in OTHERS if e != bf16]
    codes = {**INTEGERS, **INT128, **FLOATS, **COMPLEX, **OTHERS}
    typed = [(e, v, v if codes[e].startswith("V") else oracle(codes[e], v)) for e, v in cases]
    return [(e, v, w) for e, v, w in typed + _untyped_echo_cases() if isinstance(w, bytes)]


def _untyped_echo_cases() -> list[tuple[str, object, bytes]]:
    """The same for ``extern "C"`` kernels: each slot size, Python and NumPy values."""
    from .test_kernel import UNTYPED, untyped_oracle

    untyped = []
    for expr, size in UNTYPED.items():
        values: list[object] = [bytes(range(size))]
        if size <= 8:
            lo, hi = -(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1
            values += [lo, hi, -1, 0, np.array(2**(8 * size) - 1, f"u{size}")[()],
                       np.array(lo, f"i{size}")[()]]
        if size in (2, 4, 8):
            values += [np.frombuffer(b.to_bytes(size, "little"), f"f{size}")[0]
                       for b in _NAN_BITS[f"f{size}"]]
        if size in (4, 8):
            values += [1 / 3, -0.0, float(np.finfo(f"f{size}").max)]
        untyped += [(expr, v, v if isinstance(v, bytes) else untyped_oracle(size, v))
                    for v in values]
    return untyped


def test_every_value_reaches_the_kernel_exactly(tmp_path):
    """Issue 14: an echo kernel per type writes back what it received, byte for byte: edges of
    every type, Python and NumPy forms, a kernel's first call (default stream, 1-D grid) and a
    later call (a non-default CuPy stream, 2-D grid and block); extern "C" kernels too."""
    import cupy as cp

    from .test_kernel import ECHO_EXPRS, ECHO_SOURCE, fresh

    mod = cudamagic.build(ECHO_SOURCE, ECHO_EXPRS, cache=tmp_path)
    # the same CUBIN without its source: its extern "C" kernels pack by slot size (a built
    # cell's take the types their source declares, which the typed cases cover)
    foreign = cudamagic.load_cubin(mod.cubin)
    untyped = {e for e, _, _ in _untyped_echo_cases()}
    stream = cp.cuda.Stream(non_blocking=True)
    calls = [((1,), (1,), None), ((2, 3), (4, 8), stream)]  # first call, later call
    cases, mismatches, launches = _echo_cases(), [], 0
    for expr, value, want in cases:
        k = fresh((foreign if expr in untyped else mod)[expr])
        pointee = k.params[1].dtype if k.params[1].dtype is not None else np.dtype("u1")
        for grid, block, st in calls:
            raw = cp.full(len(want), 0xAB, cp.uint8)  # a byte the kernel does not write: 0xAB
            cp.cuda.get_current_stream().synchronize()  # before a non-blocking stream reads it
            k(grid, block, (value, raw.view(pointee)), stream=st)
            (st or cp.cuda.get_current_stream()).synchronize()
            got = raw.get().tobytes()
            launches += 1
            if got != want:
                mismatches.append((expr, repr(value), "stream" if st else "default",
                                   want.hex(), got.hex()))
    print(f"echo: {len(cases)} cases, {launches} launches, {len(mismatches)} mismatches")
    for m in mismatches:
        print("  mismatch:", *m)
    assert not mismatches


SPILLS = r"""
extern "C" __global__ void __launch_bounds__(1024, 2) spills(const float* x, float* y, int n) {
  float acc[40];
  #pragma unroll
  for (int j = 0; j < 40; ++j) acc[j] = x[threadIdx.x * 40 + j];
  for (int it = 0; it < n; ++it) {
    #pragma unroll
    for (int j = 0; j < 40; ++j) acc[j] = acc[j] * acc[(j * 7 + 3) % 40] + acc[(j + 1) % 40];
  }
  float s = 0;
  #pragma unroll
  for (int j = 0; j < 40; ++j) s += acc[j];
  y[threadIdx.x] = s; }
"""


def test_cubin_resources_equal_the_drivers_attributes(tmp_path):
    """Issue 11 item 7: what attributes() reads from the CUBIN without a GPU is what the driver
    reports: shared arrays, a local array, register spills, __constant__ data, plain kernels."""
    from .test_image import RESOURCES

    modules = [cudamagic.build(RESOURCES, cache=tmp_path), cudamagic.build(SPILLS, cache=tmp_path),
               cudamagic.build(LAUNCH_SRC, ["axpb<float>"], cache=tmp_path),
               cudamagic.load_cubin(FIXTURES / "fixture.cubin", ["fill<float>", "vec<float4>"])]
    rows, differ = [], []
    for mod in modules:
        for k in {k.symbol: k for k in mod.kernels.values()}.values():
            cubin, drv = k.resources.as_dict(), k.attributes()
            rows.append((k.symbol, cubin, {key: drv[key] for key in cubin}))
            if {key: drv[key] for key in cubin} != cubin:
                differ.append(k.symbol)
    for symbol, cubin, drv in rows:
        print(f"  {symbol[:40]:40} cubin {cubin}  driver {drv}")
    print(f"attributes: {len(rows)} kernels, {len(differ)} differ")
    assert not differ
    assert any(c["local_bytes"] for _, c, _ in rows) and any(c["const_bytes"] for _, c, _ in rows)
    assert any(c["static_shared_bytes"] for _, c, _ in rows)
