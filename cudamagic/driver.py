"""The CUDA driver, through cuda.bindings: contexts, libraries, enumeration, launches.

Every call goes through :func:`check`, which turns ``(status, *values)`` into the values or a
typed error. The driver is loaded on first use only (``%load_ext cudamagic`` loads nothing). A
CUBIN is loaded as a *library* (``cuLibraryLoadData``): the driver loads it into each context
lazily, once per device, on the first launch there.
"""

from __future__ import annotations

import functools
import sys
import threading
from dataclasses import dataclass

from .errors import ContextPoisonedError, LaunchError, NoDeviceError

__all__ = ["check", "available", "device_count", "current_device", "ensure_context",
           "Library", "current_stream", "launch", "compute_capability", "driver_version"]

# Errors after which the context is unusable until the process ends (CUDA's "sticky" errors).
_STICKY = {"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_MISALIGNED_ADDRESS",
           "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_INVALID_ADDRESS_SPACE",
           "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ASSERT",
           "CUDA_ERROR_LAUNCH_TIMEOUT", "CUDA_ERROR_ECC_UNCORRECTABLE"}


def _cu():
    from cuda.bindings import driver as cu

    return cu


def check(result, what: str):
    """``(status, *values)`` from cuda.bindings -> the value(s); a failure raises.

    :raises ContextPoisonedError: a sticky error (the kernel faulted; restart the notebook kernel).
    :raises LaunchError: any other driver error.
    """
    status, *values = result if isinstance(result, tuple) else (result,)
    if int(status) != 0:
        name = getattr(status, "name", str(status))
        if name in _STICKY:
            raise ContextPoisonedError(
                f"{what} failed with {name}: a kernel faulted and this process's CUDA context "
                "can no longer be used. Every later CUDA call in this notebook will fail too: "
                "restart the notebook kernel (the compiled kernels stay cached).")
        _, text = _cu().cuGetErrorString(status)
        raise LaunchError(f"{what} failed with {name}"
                          + (f": {text.decode()}" if text else ""))
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@functools.lru_cache(maxsize=1)
def _init() -> str | None:
    """Initialize the driver once; returns why it is unavailable, or None."""
    try:
        cu = _cu()
        status, = cu.cuInit(0)
    except Exception as exc:  # no libcuda.so at all
        return f"the CUDA driver library could not be loaded ({exc})"
    if int(status) != 0:
        return f"cuInit failed with {getattr(status, 'name', status)}"
    status, count = cu.cuDeviceGetCount()
    if int(status) != 0 or count == 0:
        return "the CUDA driver reports no device"
    return None


def available() -> bool:
    """True when a CUDA driver and at least one device are there."""
    return _init() is None


def _require() -> None:
    why = _init()
    if why is not None:
        raise NoDeviceError(f"no CUDA device is available: {why}. Compiling, caching and "
                            "name resolution work without one; launching a kernel needs a GPU.")


def device_count() -> int:
    """Number of CUDA devices (0 without a driver)."""
    if not available():
        return 0
    return check(_cu().cuDeviceGetCount(), "cuDeviceGetCount")


def driver_version() -> str | None:
    """The driver's CUDA version (``"13.0"``), or None without a driver."""
    if not available():
        return None
    v = check(_cu().cuDriverGetVersion(), "cuDriverGetVersion")
    return f"{v // 1000}.{v % 1000 // 10}"


def device_name(device: int) -> str:
    """A device's name (``"NVIDIA H200"``)."""
    _require()
    cu = _cu()
    dev = check(cu.cuDeviceGet(device), "cuDeviceGet")
    return check(cu.cuDeviceGetName(256, dev), "cuDeviceGetName").split(b"\0")[0].decode()


def compute_capability(device: int) -> tuple[int, int]:
    """``(major, minor)`` of a device."""
    _require()
    cu = _cu()
    attr = cu.CUdevice_attribute
    major = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
                  "cuDeviceGetAttribute")
    minor = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
                  "cuDeviceGetAttribute")
    return major, minor


def current_device() -> int:
    """The device CuPy (when imported) or the current context points at; 0 otherwise."""
    _require()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        return int(cupy.cuda.runtime.getDevice())
    cu = _cu()
    ctx = check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if int(ctx) != 0:
        return int(check(cu.cuCtxGetDevice(), "cuCtxGetDevice"))
    return 0


_primary: dict[int, object] = {}
_primary_lock = threading.Lock()


def ensure_context(device: int) -> None:
    """Make the device's primary context (the one CuPy and the runtime use) current here."""
    _require()
    cu = _cu()
    with _primary_lock:
        ctx = _primary.get(device)
        if ctx is None:
            dev = check(cu.cuDeviceGet(device), "cuDeviceGet")
            ctx = _primary[device] = check(cu.cuDevicePrimaryCtxRetain(dev),
                                           "cuDevicePrimaryCtxRetain")
    current = check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if int(current) != int(ctx):
        check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


@dataclass
class Library:
    """A CUBIN loaded through ``cuLibraryLoadData`` (context-independent)."""

    handle: object

    @classmethod
    def load(cls, cubin: bytes) -> "Library":
        """Load a CUBIN; the driver puts it into each device's context on first use there."""
        _require()
        handle = check(_cu().cuLibraryLoadData(cubin, None, None, 0, None, None, 0),
                       "cuLibraryLoadData")
        return cls(handle)

    def kernel_names(self) -> list[str]:
        """Every kernel's symbol, as the driver enumerates them."""
        cu = _cu()
        count = check(cu.cuLibraryGetKernelCount(self.handle), "cuLibraryGetKernelCount")
        kernels = check(cu.cuLibraryEnumerateKernels(count, self.handle),
                        "cuLibraryEnumerateKernels")
        return [check(cu.cuKernelGetName(k), "cuKernelGetName").decode() for k in kernels]

    def kernel(self, symbol: str):
        """The ``CUkernel`` handle of one symbol."""
        return check(_cu().cuLibraryGetKernel(self.handle, symbol.encode()),
                     f"cuLibraryGetKernel({symbol})")

    def unload(self) -> None:
        """Unload the library from every context."""
        check(_cu().cuLibraryUnload(self.handle), "cuLibraryUnload")


def kernel_function(kernel):
    """The ``CUfunction`` of a ``CUkernel`` in the current context (loads it there)."""
    return check(_cu().cuKernelGetFunction(kernel), "cuKernelGetFunction")


def param_info(kernel, count: int) -> list[tuple[int, int]]:
    """``(offset, size)`` of each parameter, as the driver reports them."""
    cu = _cu()
    return [tuple(int(x) for x in check(cu.cuKernelGetParamInfo(kernel, i), "cuKernelGetParamInfo"))
            for i in range(count)]


def kernel_attributes(kernel, device: int) -> dict[str, int]:
    """Registers, shared/local/constant memory and the block-size limit of a kernel on a device."""
    cu = _cu()
    a = cu.CUfunction_attribute
    wanted = {
        "registers": a.CU_FUNC_ATTRIBUTE_NUM_REGS,
        "static_shared_bytes": a.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
        "local_bytes": a.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
        "const_bytes": a.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES,
        "max_threads_per_block": a.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        "max_dynamic_shared_bytes": a.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
    }
    return {k: int(check(cu.cuKernelGetAttribute(v, kernel, device), "cuKernelGetAttribute"))
            for k, v in wanted.items()}


def set_max_dynamic_shared(kernel, device: int, nbytes: int) -> None:
    """Raise a kernel's dynamic shared memory limit (needed above 48 KiB)."""
    cu = _cu()
    check(cu.cuKernelSetAttribute(
        cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes, kernel,
        device), "cuKernelSetAttribute")


def device_getter():
    """The fastest way to ask for the current device: CuPy's own call once CuPy is imported."""
    cupy = sys.modules.get("cupy")
    if cupy is not None and available():
        return cupy.cuda.runtime.getDevice
    return current_device  # raises NoDeviceError where there is no GPU


def stream_getter():
    """The fastest way to ask for the current stream's handle."""
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        get = cupy.cuda.get_current_stream
        return lambda: get().ptr
    return current_stream


def current_stream() -> int:
    """CuPy's current stream handle when CuPy is imported, else the default stream (0)."""
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        return int(cupy.cuda.get_current_stream().ptr)
    return 0


_INVALID_CONTEXT = 201


def fast_launch():
    """The cheapest ``cuLaunchKernel`` to call from Python, as ``f(function, gx, gy, gz, bx, by,
    bz, shared_mem, stream, params_address, extra)`` taking plain ints; it raises on failure.

    With CuPy imported that is CuPy's own typed driver binding (a C call with no argument
    conversion: about 1 us less per launch than cuda.bindings' general wrapper, and 3.5 us less
    than ctypes, on an H200 host; benchmarks/launch_overhead.py). Without CuPy, cuda.bindings.
    """
    cupy_driver = sys.modules.get("cupy_backends.cuda.api.driver")
    if cupy_driver is not None and hasattr(cupy_driver, "launchKernel"):
        return cupy_driver.launchKernel
    cu = _cu()
    launch_kernel, success = cu.cuLaunchKernel, cu.CUresult.CUDA_SUCCESS

    def bindings_launch(function, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra):
        status = launch_kernel(function, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra)
        if status[0] is not success:
            raise LaunchError(getattr(status[0], "name", str(status[0])))
    return bindings_launch


def launch(kernel, grid: tuple[int, int, int], block: tuple[int, int, int],
           shared_mem: int, stream: int, params_address: int, device: int, what: str) -> None:
    """Launch a ``CUkernel`` with a ``void*[]`` of arguments, through cuda.bindings, checked.

    The slow path: after a failed fast launch it says exactly what went wrong. A thread with no
    current context (a new thread that never touched CuPy) gets the device's primary context
    and one retry.

    :raises ContextPoisonedError, LaunchError: the driver refused the launch.
    """
    cu = _cu()
    result = cu.cuLaunchKernel(kernel, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                               shared_mem, stream, params_address, 0)
    if int(result[0]) == _INVALID_CONTEXT:
        ensure_context(device)
        result = cu.cuLaunchKernel(kernel, grid[0], grid[1], grid[2], block[0], block[1],
                                   block[2], shared_mem, stream, params_address, 0)
    check(result, what)
