"""Record the driver's occupancy answers on this GPU, for tests/test_occupancy.py to check the
arithmetic of cudamagic.toolchain.device.occupancy against on machines without one.

Usage (on the GPU machine, from the repository root)::

    python scripts/record_occupancy.py OUT.json

For every kernel of tests/fixtures/fixture.cubin and of a CUBIN built here with heavy register
and shared memory use (``__launch_bounds__``, ``__maxnreg__``, large static shared arrays, named
barriers), for block sizes 32..1024 in steps of 32 and several dynamic shared memory sizes (and,
for the built kernels, several shared memory carveouts), it writes what
``cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags`` and ``cuOccupancyMaxPotentialBlockSize``
answer, each kernel's attributes, the device's attributes, and the built CUBIN itself (base64),
so that the test reads the very records the driver read. A dynamic size above 48 KiB is asked
after raising the kernel's limit to it, as a cudamagic launch of that size does.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: kernels whose limits are registers, shared memory, launch bounds or barriers
HEAVY = r"""
template <int N> __global__ void regs(const float* __restrict__ in, float* out, int n) {
  float acc[N];
  #pragma unroll
  for (int j = 0; j < N; ++j) acc[j] = in[(threadIdx.x + j * 7) % n];
  #pragma unroll
  for (int r = 0; r < 4; ++r) {
    #pragma unroll
    for (int j = 0; j < N; ++j) acc[j] = acc[j] * acc[(j + r + 1) % N] + in[(j * 13 + r) % n];
  }
  float s = 0.f;
  #pragma unroll
  for (int j = 0; j < N; ++j) s += acc[j] * (j + 1);
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
template <int BYTES> __global__ void smem(float* out) {
  __shared__ float tile[BYTES / 4];
  tile[threadIdx.x % (BYTES / 4)] = threadIdx.x;
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = tile[(threadIdx.x * 7) % (BYTES / 4)];
}
extern "C" __global__ void __launch_bounds__(256, 2) bounded_256_2(float* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1.f; }
extern "C" __global__ void __launch_bounds__(128) bounded_128(float* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1.f; }
extern "C" __global__ void __launch_bounds__(768, 1) bounded_768_1(float* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1.f; }
extern "C" __global__ void __maxnreg__(32) maxnreg_32(const float* __restrict__ in, float* out, int n) {
  float acc[24];
  #pragma unroll
  for (int j = 0; j < 24; ++j) acc[j] = in[(threadIdx.x + j) % n];
  float s = 0.f;
  #pragma unroll
  for (int j = 0; j < 24; ++j) s += acc[j] * acc[(j * 5) % 24];
  out[threadIdx.x] = s; }
extern "C" __global__ void __maxnreg__(40) maxnreg_40(const float* __restrict__ in, float* out, int n) {
  float acc[40];
  #pragma unroll
  for (int j = 0; j < 40; ++j) acc[j] = in[(threadIdx.x + j) % n];
  float s = 0.f;
  #pragma unroll
  for (int j = 0; j < 40; ++j) s += acc[j] * acc[(j * 7) % 40];
  out[threadIdx.x] = s; }
extern "C" __global__ void barriers_6(float* out) {
  asm volatile("bar.sync 5, 64;"); out[threadIdx.x] = 1.f; }
extern "C" __global__ void barriers_16(float* out) {
  asm volatile("bar.sync 15, 64;"); out[threadIdx.x] = 1.f; }
extern "C" __global__ void dynamic_only(float* out) {
  extern __shared__ float buf[];
  buf[threadIdx.x] = threadIdx.x; __syncthreads(); out[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x]; }
"""
HEAVY_NAMES = ["regs<16>", "regs<24>", "regs<48>", "regs<64>", "regs<96>", "regs<160>", "smem<4096>", "smem<20480>",
               "smem<40960>", "smem<49152>"]

BLOCK_SIZES = list(range(32, 1025, 32))
DYNAMIC = [0, 1024, 8 * 1024, 32 * 1024, 48 * 1024, 64 * 1024, 100 * 1024, 160 * 1024,
           200 * 1024]
CARVEOUTS = [0, 25, 50, 75, 100]
CARVEOUT_DYNAMIC = [0, 8 * 1024]

_DEVICE_ATTRIBUTES = ["MULTIPROCESSOR_COUNT", "MAX_THREADS_PER_MULTIPROCESSOR",
                      "MAX_BLOCKS_PER_MULTIPROCESSOR", "MAX_THREADS_PER_BLOCK",
                      "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", "MAX_SHARED_MEMORY_PER_BLOCK",
                      "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", "RESERVED_SHARED_MEMORY_PER_BLOCK",
                      "MAX_REGISTERS_PER_MULTIPROCESSOR", "MAX_REGISTERS_PER_BLOCK", "WARP_SIZE",
                      "L2_CACHE_SIZE", "CLOCK_RATE", "MEMORY_CLOCK_RATE",
                      "GLOBAL_MEMORY_BUS_WIDTH", "COMPUTE_CAPABILITY_MAJOR",
                      "COMPUTE_CAPABILITY_MINOR"]
_FUNC_ATTRIBUTES = ["MAX_THREADS_PER_BLOCK", "SHARED_SIZE_BYTES", "CONST_SIZE_BYTES",
                    "LOCAL_SIZE_BYTES", "NUM_REGS", "MAX_DYNAMIC_SHARED_SIZE_BYTES",
                    "PREFERRED_SHARED_MEMORY_CARVEOUT"]


def _ok(result, what: str):
    from cuda.bindings import driver as cu

    status, *values = result
    if status != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what}: {status.name}")
    return values[0] if len(values) == 1 else values


class Recorder:
    """The driver on device 0: its primary context, libraries and occupancy calls."""

    def __init__(self) -> None:
        from cuda.bindings import driver as cu

        self.cu = cu
        _ok(cu.cuInit(0), "cuInit")
        self.dev = _ok(cu.cuDeviceGet(0), "cuDeviceGet")
        ctx = _ok(cu.cuDevicePrimaryCtxRetain(self.dev), "cuDevicePrimaryCtxRetain")
        _ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def device(self) -> dict:
        """The device's name and the attributes the occupancy arithmetic and timing use."""
        cu = self.cu
        name = _ok(cu.cuDeviceGetName(256, self.dev), "cuDeviceGetName")
        out = {"name": name.split(b"\0")[0].decode(),
               "driver": _ok(cu.cuDriverGetVersion(), "cuDriverGetVersion")}
        for attr in _DEVICE_ATTRIBUTES:
            out[attr.lower()] = _ok(cu.cuDeviceGetAttribute(
                getattr(cu.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{attr}"), self.dev), attr)
        return out

    def functions(self, cubin: bytes, symbols: list[str]) -> dict[str, object]:
        """symbol -> CUfunction of a CUBIN loaded as a library."""
        cu = self.cu
        lib = _ok(cu.cuLibraryLoadData(cubin, None, None, 0, None, None, 0), "cuLibraryLoadData")
        out = {}
        for s in symbols:
            k = _ok(cu.cuLibraryGetKernel(lib, s.encode()), f"cuLibraryGetKernel({s})")
            out[s] = _ok(cu.cuKernelGetFunction(k), "cuKernelGetFunction")
        return out

    def attributes(self, fn) -> dict[str, int]:
        """The function's attributes, as the driver reports them."""
        cu = self.cu
        return {a.lower(): _ok(cu.cuFuncGetAttribute(
            getattr(cu.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{a}"), fn), a)
            for a in _FUNC_ATTRIBUTES}

    def set_attribute(self, fn, name: str, value: int) -> str | None:
        """Set one function attribute; the driver's error name where it refuses."""
        status, = self.cu.cuFuncSetAttribute(
            fn, getattr(self.cu.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}"), value)
        return None if status == self.cu.CUresult.CUDA_SUCCESS else status.name

    def active(self, fn, block: int, dynamic: int) -> int | str:
        """Active blocks per SM, or the driver's error name."""
        cu = self.cu
        status, n = cu.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
            fn, block, dynamic, cu.CUoccupancy_flags.CU_OCCUPANCY_DEFAULT)
        return int(n) if status == cu.CUresult.CUDA_SUCCESS else status.name

    def potential(self, fn, dynamic: int) -> list:
        """``[min grid, block size]`` from cuOccupancyMaxPotentialBlockSize, or its error."""
        cu = self.cu
        status, grid, block = cu.cuOccupancyMaxPotentialBlockSize(fn, None, dynamic, 0)
        return [int(grid), int(block)] if status == cu.CUresult.CUDA_SUCCESS else [status.name]


def record_kernel(rec: Recorder, cubin_name: str, symbol: str, fn, carveouts: bool) -> dict:
    """One kernel's attributes and its occupancy at every block size and dynamic size."""
    attrs = rec.attributes(fn)
    default_dynamic = attrs["max_dynamic_shared_size_bytes"]
    rows: dict[str, list] = {}
    potential: dict[str, list] = {}
    refused: dict[str, str] = {}
    for dyn in DYNAMIC:
        if dyn > default_dynamic:  # a cudamagic launch of this size raises the limit first
            why = rec.set_attribute(fn, "MAX_DYNAMIC_SHARED_SIZE_BYTES", dyn)
            if why:
                refused[str(dyn)] = why
                continue
        rows[f"{dyn}:default"] = [rec.active(fn, b, dyn) for b in BLOCK_SIZES]
        potential[str(dyn)] = rec.potential(fn, dyn)
    rec.set_attribute(fn, "MAX_DYNAMIC_SHARED_SIZE_BYTES", default_dynamic)
    if carveouts:
        for carveout in CARVEOUTS:
            rec.set_attribute(fn, "PREFERRED_SHARED_MEMORY_CARVEOUT", carveout)
            for dyn in CARVEOUT_DYNAMIC:
                rows[f"{dyn}:{carveout}"] = [rec.active(fn, b, dyn) for b in BLOCK_SIZES]
        rec.set_attribute(fn, "PREFERRED_SHARED_MEMORY_CARVEOUT", -1)
    return {"cubin": cubin_name, "symbol": symbol, "attributes": attrs, "rows": rows,
            "potential": potential, "refused_dynamic": refused}


def build_heavy(sm: int) -> bytes:
    """The heavy kernels' CUBIN for this device's architecture (NVRTC, no cache)."""
    from cudamagic.toolchain.compile.nvrtc import compile_cubin

    return compile_cubin(HEAVY, HEAVY_NAMES, [f"-arch=sm_{sm}", "-std=c++17"], trace=False).cubin


def main(argv: list[str] | None = None) -> int:
    """Record and write the JSON; print a one-line summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where to write the JSON")
    args = parser.parse_args(argv)
    from cudamagic.toolchain.binary.image import read_cubin

    rec = Recorder()
    device = rec.device()
    sm = device["compute_capability_major"] * 10 + device["compute_capability_minor"]
    fixture = (REPO / "tests" / "fixtures" / "fixture.cubin").read_bytes()
    heavy = build_heavy(sm)
    cubins = {"fixture.cubin": fixture, "heavy": heavy}
    kernels = []
    for name, data in cubins.items():
        image = read_cubin(data)
        if image.sm != sm:
            print(f"skipping {name}: built for sm_{image.sm}, this device is sm_{sm}")
            continue
        fns = rec.functions(data, list(image.symbols))
        for symbol, fn in fns.items():
            try:
                kernels.append(record_kernel(rec, name, symbol, fn, carveouts=name == "heavy"))
            except Exception as exc:  # noqa: BLE001 - one kernel's failure keeps the others
                kernels.append({"cubin": name, "symbol": symbol, "error": repr(exc)})
    out = {"recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "device": device, "sm": sm, "block_sizes": BLOCK_SIZES, "dynamic": DYNAMIC,
           "heavy_source": HEAVY, "heavy_names": HEAVY_NAMES,
           "heavy_cubin": base64.b64encode(heavy).decode(), "kernels": kernels}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    rows = sum(len(r) for k in kernels for r in k.get("rows", {}).values())
    print(f"{device['name']} sm_{sm}: {len(kernels)} kernels, {rows} occupancy answers -> "
          f"{args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
