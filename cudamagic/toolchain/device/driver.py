"""The CUDA driver: contexts, libraries, enumeration, attributes, launches.

The calls a build and a restore make go straight to the driver library (``libcuda.so.1``)
through ctypes: importing cuda.bindings' driver module in a fresh process (its Cython module
setup) costs more than a whole warm restore is allowed (docs/performance.md has both). Launches use CuPy's typed binding when CuPy is loaded, else cuda.bindings.
Every call goes through :func:`check`, which turns a status into a typed error.

Nothing is loaded until first use, except where ``%load_ext cudamagic`` starts the driver and
makes device 0's primary context in a background thread (:func:`retain_primary`). A CUBIN is loaded
as a *library* (``cuLibraryLoadData``): the driver puts it into each device's context lazily,
once per device, on first use there.
"""

from __future__ import annotations

import ctypes
import enum
import functools
import sys
from dataclasses import dataclass

from ...core.process import InTest, at_fork, cached, held
from ...core.forksafe import ForkSafeLock, WaitedSection
from ...errors import ContextPoisonedError, ForkedCudaError, LaunchError, NoDeviceError

__all__ = ["check", "available", "device_count", "current_device", "ensure_context", "Library",
           "launch", "fast_launch", "compute_capability", "sm_of", "device_sm", "driver_version", "device_name",
           "kernel_attributes", "kernel_function", "set_max_dynamic_shared", "device_getter",
           "DeviceLimits", "device_limits", "max_active_blocks", "ExtendedLaunch", "launch_ex",
           "retain_primary", "mem_alloc", "mem_free", "copy_to_device", "copy_to_host",
           "synchronize", "Sticky", "sticky_of", "lost_contexts", "note_lost", "lost_text",
           "first_telling", "forked_after_start", "current_sm"]

_INVALID_CONTEXT = 201
_NOT_INITIALIZED = 3  # CUDA_ERROR_NOT_INITIALIZED
_CC_MAJOR, _CC_MINOR = 75, 76  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR/MINOR
# CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, _COOPERATIVE_LAUNCH, _CLUSTER_LAUNCH
_SM_COUNT, _COOPERATIVE_LAUNCH, _CLUSTER_LAUNCH = 16, 95, 120
# CUlaunchAttributeID: CU_LAUNCH_ATTRIBUTE_COOPERATIVE, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
_ATTR_COOPERATIVE, _ATTR_CLUSTER_DIMENSION = 2, 4
_FUNC_ATTRIBUTES = {  # CUfunction_attribute
    "max_threads_per_block": 0, "static_shared_bytes": 1, "const_bytes": 2, "local_bytes": 3,
    "registers": 4, "ptx_version": 5, "binary_version": 6, "cache_mode_ca": 7,
    "max_dynamic_shared_bytes": 8, "preferred_shared_memory_carveout": 9,
}

_p, _u, _i = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int
_PROTOTYPES = {
    "cuInit": [_u], "cuDeviceGetCount": [ctypes.POINTER(_i)],
    "cuDeviceGet": [ctypes.POINTER(_i), _i],
    "cuDeviceGetAttribute": [ctypes.POINTER(_i), _i, _i],
    "cuDeviceGetName": [ctypes.c_char_p, _i, _i], "cuDriverGetVersion": [ctypes.POINTER(_i)],
    "cuCtxGetCurrent": [ctypes.POINTER(_p)], "cuCtxGetDevice": [ctypes.POINTER(_i)],
    "cuCtxSetCurrent": [_p], "cuDevicePrimaryCtxRetain": [ctypes.POINTER(_p), _i],
    "cuLibraryLoadData": [ctypes.POINTER(_p), ctypes.c_char_p, _p, _p, _u, _p, _p, _u],
    "cuLibraryGetKernelCount": [ctypes.POINTER(_u), _p],
    "cuLibraryEnumerateKernels": [ctypes.POINTER(_p), _u, _p],
    "cuKernelGetName": [ctypes.POINTER(ctypes.c_char_p), _p],
    "cuLibraryGetKernel": [ctypes.POINTER(_p), _p, ctypes.c_char_p],
    "cuLibraryGetModule": [ctypes.POINTER(_p), _p],
    "cuKernelGetFunction": [ctypes.POINTER(_p), _p],
    "cuKernelGetAttribute": [ctypes.POINTER(_i), _i, _p, _i],
    "cuKernelSetAttribute": [_i, _i, _p, _i],
    "cuGetErrorName": [_i, ctypes.POINTER(ctypes.c_char_p)],
    "cuGetErrorString": [_i, ctypes.POINTER(ctypes.c_char_p)],
    "cuLaunchKernel": [_p, _u, _u, _u, _u, _u, _u, _u, _p, _p, _p],
    "cuLaunchKernelEx": [_p, _p, _p, _p],
    "cuOccupancyMaxActiveBlocksPerMultiprocessor": [ctypes.POINTER(_i), _p, _i, ctypes.c_size_t],
    "cuLibraryGetGlobal": [_p, _p, _p, ctypes.c_char_p],
    "cuMemAlloc_v2": [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t],
    "cuMemFree_v2": [ctypes.c_uint64],
    "cuMemcpyHtoD_v2": [ctypes.c_uint64, _p, ctypes.c_size_t],
    "cuMemcpyDtoH_v2": [_p, ctypes.c_uint64, ctypes.c_size_t],
    "cuCtxSynchronize": [],
}


class _LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute`` (cuda.h): an id, padding to 8 bytes, a 64-byte value union (here
    its first words: the cooperative flag, or the cluster's x, y, z)."""

    _fields_ = [("id", _u), ("pad", ctypes.c_char * 4), ("value", _u * 16)]


class _LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig`` (cuda.h)."""

    _fields_ = [("gridDimX", _u), ("gridDimY", _u), ("gridDimZ", _u), ("blockDimX", _u),
                ("blockDimY", _u), ("blockDimZ", _u), ("sharedMemBytes", _u), ("hStream", _p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", _u)]


class _Driver:
    """``libcuda.so.1`` with the prototypes this module uses, each looked up once."""

    def __init__(self) -> None:
        self._lib: object = ctypes.CDLL("libcuda.so.1")

    def refuse(self, why: str) -> None:
        """Every call from now on raises :class:`~cudamagic.errors.ForkedCudaError` (a child
        forked after CUDA started): the functions looked up are forgotten, so each lookup
        comes to :class:`_Refused`; nothing is added to the calls of a process that may use
        CUDA."""
        self.__dict__.clear()
        self._lib = _Refused(why)

    def __getattr__(self, name: str):
        fn = getattr(self._lib, name)
        fn.argtypes = _PROTOTYPES[name]
        fn.restype = ctypes.c_int
        inside = functools.partial(_CALLS.call, fn)  # a fork waits for it (see _CALLS)
        setattr(self, name, inside)
        return inside


class _Refused:
    """The driver library in a child forked after CUDA started in its parent: every function
    looked up raises."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __getattr__(self, name: str):
        raise ForkedCudaError(self.why)


#: Every call of this module into the driver's library: a fork waits for the calls inside and
#: holds new ones back until it is made. A build asks the driver for the current device on
#: whatever thread it runs (its default -arch); a child forked while one was inside the
#: library inherits the library's locks as that thread held them, and the library's own code
#: that still runs in the child (its fork and exit handlers) may wait on them for ever: the
#: likely cause of the one child of 20 hung in tests/test_store_fork.py's threads-building case
#: on the H100, where three threads build (here no driver is loaded: it never hung)
_CALLS = WaitedSection("the CUDA driver", 5.0)


@cached(1)
def _lib() -> _Driver:
    return _Driver()


def _error_name(status: int) -> tuple[str, str]:
    name, text = ctypes.c_char_p(), ctypes.c_char_p()
    try:
        _lib().cuGetErrorName(status, ctypes.byref(name))
        _lib().cuGetErrorString(status, ctypes.byref(text))
    except (OSError, AttributeError, ForkedCudaError):  # pragma: no cover - no driver to ask
        pass
    return ((name.value or b"").decode() or f"CUresult {status}", (text.value or b"").decode())


class Sticky(enum.IntEnum):
    """CUDA's sticky errors, by the number the driver (``CUresult``) and the runtime
    (``cudaError_t``) both give them: after one, the context is lost until the process ends."""

    ECC_UNCORRECTABLE = 214
    ILLEGAL_ADDRESS = 700
    LAUNCH_TIMEOUT = 702
    ASSERT = 710
    HARDWARE_STACK_ERROR = 714
    ILLEGAL_INSTRUCTION = 715
    MISALIGNED_ADDRESS = 716
    INVALID_ADDRESS_SPACE = 717
    INVALID_PC = 718
    LAUNCH_FAILED = 719


# the devices whose context a sticky error lost in this process, and the error
_lost: dict[int, Sticky] = held(__name__, "_lost", {})


def lost_contexts() -> dict[int, Sticky]:
    """Devices whose context this process lost (``%cuda_info`` shows them), with the error."""
    return dict(_lost)


def note_lost(code: Sticky, device: int | None = None) -> int:
    """Remember that a device's context is lost (the current one where ``device`` is None, or
    the only one in use; -1 where that cannot be told); returns the device."""
    if device is None:
        device = -1
        value = ctypes.c_int(-1)
        try:
            if _lib().cuCtxGetDevice(ctypes.byref(value)) == 0:
                device = value.value
        except (OSError, ForkedCudaError):  # pragma: no cover - no driver, or not here
            pass
        if device < 0 and len(_primary) == 1:
            device = next(iter(_primary))
    _lost.setdefault(device, code)
    return device


# the devices whose lost context has been explained in full once (later errors say it short)
_told: set[int] = held(__name__, "_told", set())


def first_telling(device: int) -> bool:
    """True the first time a device's lost context is to be explained (then in full: what
    happened, what to do, what finds the cause); later errors say it in one line."""
    # a device that could not be told (-1: no context current on the asking thread) is any
    # device: an error said for it, then for device 0 once a context became current (CuPy's,
    # made meanwhile), is the same loss told twice (the H100 run of 3d381b3 showed the full
    # advice again)
    first = device not in _told and -1 not in _told and not (device == -1 and _told)
    _told.add(device)
    return first


def sticky_of(exc: BaseException | None) -> Sticky | None:
    """The sticky error an exception carries, whichever library raised it: cudamagic's
    ``ContextPoisonedError`` (``code``), CuPy's ``CUDARuntimeError``/``CUDADriverError``
    (``status``), a cuda.bindings ``CUresult``/``cudaError_t`` among its arguments; its cause
    and context are looked through."""
    seen = 0
    while exc is not None and seen < 8:
        values = [a for a in getattr(exc, "args", ()) if type(a).__name__ in _BINDINGS_ENUMS]
        if type(exc).__name__ in _CUPY_ERRORS:
            values.append(getattr(exc, "status", None))
        if isinstance(exc, ContextPoisonedError):
            values.append(exc.code)
        for value in values:
            code = Sticky._value2member_map_.get(value) if isinstance(value, int) else None
            if code is not None:
                return code  # type: ignore[return-value]
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


_BINDINGS_ENUMS = ("CUresult", "cudaError_t")  # cuda.bindings' status enums (int subclasses)
_CUPY_ERRORS = ("CUDARuntimeError", "CUDADriverError")  # CuPy's, with the number as .status


def lost_text(code: Sticky, device: int, earlier: bool = False) -> str:
    """What a lost context means, and what to do (``earlier``: the short form, for errors
    after the first)."""
    where = f"device {device}" if device >= 0 else "the device"
    if earlier:
        return (f"the CUDA context of {where} was lost earlier (CUDA_ERROR_{code.name}), as said "
                "above: restart the notebook kernel")
    return (f"the CUDA context of {where} is lost (CUDA_ERROR_{code.name}: a kernel faulted); "
            "every CUDA call in this process now fails, CuPy's and any library's too: restart "
            "the notebook kernel (the compiled kernels stay cached)")


def check(status: int, what: str) -> None:
    """Raise the error that a driver status means (nothing for success).

    :raises ContextPoisonedError: a sticky error (the kernel faulted; restart the notebook kernel).
    :raises LaunchError: any other driver error.
    """
    if status == 0:
        return
    if int(status) == _NOT_INITIALIZED and _fork_child:
        # a child whose cuInit passed though an ancestor had started CUDA: the driver says
        # what FORKED says
        raise ForkedCudaError(f"{what} failed with CUDA_ERROR_NOT_INITIALIZED: {FORKED}")
    name, text = _error_name(int(status))
    if int(status) in Sticky._value2member_map_:
        code = Sticky(int(status))
        device = note_lost(code)
        first = first_telling(device)
        raise ContextPoisonedError(f"{what} failed: {lost_text(code, device, not first)}.",
                                   code=int(code), device=device, repeated=not first)
    if name == "CUDA_ERROR_NO_BINARY_FOR_GPU":
        raise LaunchError(f"{what} failed: the CUBIN was built for another GPU architecture than "
                          "this device's (a module that travelled to another machine, or "
                          "--arch): build it for this GPU's sm_XX (%cuda_info shows it)")
    raise LaunchError(f"{what} failed with {name}" + (f": {text}" if text else ""))


_init_lock = ForkSafeLock()
# filled once: why the driver is unavailable, or None (None: CUDA started in this process, and
# a child forked from now on cannot use it)
_init_result: list[str | None] = held(__name__, "_init_result", [])

#: Why a child forked after CUDA started in its parent cannot use CUDA. The driver's state does
#: not survive a fork: in such a child its calls fail with CUDA_ERROR_NOT_INITIALIZED (CuPy's
#: with cudaErrorInitializationError), seen on the GPU machine even after only a cache hit.
FORKED = ("CUDA cannot be used in this process: it is a child forked after CUDA started in its "
          "parent, and the CUDA driver does not survive a fork. Building kernels and serving "
          "them from the cache work here; to launch them, start the worker processes with "
          "multiprocessing's 'spawn' or 'forkserver' method "
          "(multiprocessing.get_context('spawn'), or mp_context= for concurrent.futures), or "
          "fork before the parent's first CUDA call")

# this process is a forked child (of any parent); and, once CUDA is known to be unusable here
# for that reason, FORKED
_fork_child: list[bool] = []
_refused: list[str] = []


def _after_fork_in_child() -> None:
    """The child of a fork: where CUDA had started in the parent, every driver call here is
    refused with :data:`FORKED` (a grandchild inherits the refusal)."""
    _fork_child[:] = [True]
    if _init_result == [None]:  # the parent's cuInit succeeded
        _init_result[:] = [FORKED]
        _refused[:] = [FORKED]
        _lib().refuse(FORKED)


def _forget_fork() -> None:
    _fork_child.clear()
    _refused.clear()


at_fork(__name__, "_refused", after_in_child=_after_fork_in_child, test=_forget_fork,
        covers=("_fork_child",))


def forked_after_start() -> bool:
    """Whether this process is a child forked after CUDA started in its parent (which may
    build and serve hits, but not launch)."""
    return bool(_refused)


def _init() -> str | None:
    """Initialize the driver once; returns why it is unavailable, or None. A caller that comes
    while another thread initializes (``%load_ext`` starts it in the background) waits for it."""
    if _init_result:
        return _init_result[0]
    with _init_lock:
        if not _init_result:
            _init_result.append(_first_init())
    return _init_result[0]


def _first_init() -> str | None:
    try:
        lib = _lib()
    except OSError as exc:
        return f"the CUDA driver library could not be loaded ({exc})"
    count = ctypes.c_int(0)
    for what, call in (("cuInit", lambda: lib.cuInit(0)),
                       ("cuDeviceGetCount", lambda: lib.cuDeviceGetCount(ctypes.byref(count)))):
        status = call()
        if status == _NOT_INITIALIZED and (_fork_child or what == "cuInit"):
            # CUDA started in an ancestor through another library (CuPy): the driver says so.
            # cuInit itself answers NOT_INITIALIZED only there, also where this module was first
            # imported after the fork (no fork hook of ours ran: seen on the H200, a child of a
            # parent that had only used CuPy)
            _refused[:] = [FORKED]
            return FORKED
        if status != 0:
            return f"{what} failed with {_error_name(status)[0]}"
    return None if count.value > 0 else "the CUDA driver reports no device"


def available() -> bool:
    """True when a CUDA driver and at least one device are there."""
    return _init() is None


def _require() -> _Driver:
    why = _init()
    if _refused:
        raise ForkedCudaError(_refused[0])
    if why is not None:
        raise NoDeviceError(f"no CUDA device is available: {why}. Compiling, caching and "
                            "name resolution work without one; launching a kernel needs a GPU.")
    return _lib()


def _out(ctype, fn, *args, what: str):
    value = ctype()
    check(fn(ctypes.byref(value), *args), what)
    return value.value


def device_count() -> int:
    """Number of CUDA devices (0 without a driver)."""
    if not available():
        return 0
    return _out(ctypes.c_int, _lib().cuDeviceGetCount, what="cuDeviceGetCount")


def driver_version() -> str | None:
    """The driver's CUDA version (``"13.0"``), or None without a driver."""
    if not available():
        return None
    v = _out(ctypes.c_int, _lib().cuDriverGetVersion, what="cuDriverGetVersion")
    return f"{v // 1000}.{v % 1000 // 10}"


def _device(ordinal: int) -> int:
    return _out(ctypes.c_int, _require().cuDeviceGet, ordinal, what="cuDeviceGet")


def device_name(device: int) -> str:
    """A device's name (``"NVIDIA H200"``)."""
    buf = ctypes.create_string_buffer(256)
    check(_require().cuDeviceGetName(buf, 256, _device(device)), "cuDeviceGetName")
    return buf.value.decode()


def compute_capability(device: int) -> tuple[int, int]:
    """``(major, minor)`` of a device."""
    lib, dev = _require(), _device(device)
    return (_out(ctypes.c_int, lib.cuDeviceGetAttribute, _CC_MAJOR, dev, what="cuDeviceGetAttribute"),
            _out(ctypes.c_int, lib.cuDeviceGetAttribute, _CC_MINOR, dev, what="cuDeviceGetAttribute"))


def sm_of(major: int, minor: int) -> int:
    """The SM number of a compute capability: ``major * 10 + minor`` (9.0 -> 90, 12.1 -> 121),
    as nvcc's ``sm_XY`` and ``__CUDA_ARCH__`` (``major * 100 + minor * 10``) count."""
    return major * 10 + minor


def device_sm(device: int) -> int:
    """The SM number of a device (:func:`sm_of` its compute capability)."""
    return sm_of(*compute_capability(device))


# the last answer of current_sm(), kept by a forked child
_last_sm: list[int] = held(__name__, "_last_sm", [])


def current_sm() -> int | None:
    """The SM number of the current device; None without a GPU. In a child forked after CUDA
    started in its parent, where the driver cannot be asked, the parent's last answer (None if
    it never asked): the child's builds then hit the parent's entries."""
    if not forked_after_start() and available():
        _last_sm[:] = [device_sm(current_device())]
        return _last_sm[0]
    if forked_after_start() and _last_sm:  # (available() may have found it out just now)
        return _last_sm[0]
    return None


def current_device() -> int:
    """The device CuPy (when imported) or the current context points at; 0 otherwise."""
    lib = _require()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        return int(cupy.cuda.runtime.getDevice())
    if _out(ctypes.c_void_p, lib.cuCtxGetCurrent, what="cuCtxGetCurrent"):
        return _out(ctypes.c_int, lib.cuCtxGetDevice, what="cuCtxGetDevice")
    return 0


_primary: dict[int, int] = held(__name__, "_primary", {}, test=InTest.KEPT)
_primary_lock = ForkSafeLock()


def retain_primary(device: int) -> int:
    """The device's primary context (the one CuPy and the runtime use), made once per process
    and kept; a caller that comes while another thread makes it waits for that one."""
    lib = _require()
    with _primary_lock:
        ctx = _primary.get(device)
        if ctx is None:
            ctx = _primary[device] = _out(ctypes.c_void_p, lib.cuDevicePrimaryCtxRetain,
                                          _device(device), what="cuDevicePrimaryCtxRetain")
    return ctx


def ensure_context(device: int) -> None:
    """Make the device's primary context current here."""
    ctx = retain_primary(device)
    lib = _lib()
    if _out(ctypes.c_void_p, lib.cuCtxGetCurrent, what="cuCtxGetCurrent") != ctx:
        check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


@dataclass
class Library:
    """A CUBIN loaded through ``cuLibraryLoadData`` (context-independent); ``handle`` is its
    ``CUlibrary``, and ``image`` keeps the bytes the driver read alive."""

    handle: int
    image: bytes

    @classmethod
    def load(cls, cubin: bytes) -> "Library":
        """Load a CUBIN; the driver puts it into each device's context on first use there."""
        lib = _require()
        handle = ctypes.c_void_p()
        check(lib.cuLibraryLoadData(ctypes.byref(handle), cubin, None, None, 0, None, None, 0),
              "cuLibraryLoadData")
        return cls(handle.value or 0, cubin)  # success: never NULL

    def kernel_count(self) -> int:
        """How many kernels the driver finds in the library (one call)."""
        return _out(ctypes.c_uint, _lib().cuLibraryGetKernelCount, self.handle,
                    what="cuLibraryGetKernelCount")

    def kernel_names(self) -> list[str]:
        """Every kernel's symbol, as the driver enumerates them."""
        lib = _lib()
        count = self.kernel_count()
        kernels = (ctypes.c_void_p * max(count, 1))()
        check(lib.cuLibraryEnumerateKernels(kernels, count, self.handle),
              "cuLibraryEnumerateKernels")
        names = []
        for k in kernels[:count]:
            names.append(_out(ctypes.c_char_p, lib.cuKernelGetName, k,
                              what="cuKernelGetName").decode())
        return names

    def global_(self, symbol: str) -> tuple[int, int]:
        """``(device address, bytes)`` of a ``__constant__``/``__device__`` variable in the
        current context (``cuLibraryGetGlobal``)."""
        ptr, size = ctypes.c_uint64(), ctypes.c_size_t()
        check(_lib().cuLibraryGetGlobal(ctypes.byref(ptr), ctypes.byref(size), self.handle,
                                        symbol.encode()), f"cuLibraryGetGlobal({symbol})")
        return ptr.value, size.value

    def module(self) -> int:
        """The library's ``CUmodule`` in the current context: loads it there now (one call,
        whatever the kernel count; each kernel's code follows on its first use)."""
        return _out(ctypes.c_void_p, _lib().cuLibraryGetModule, self.handle,
                    what="cuLibraryGetModule")

    def kernel(self, symbol: str) -> int:
        """The ``CUkernel`` handle (an address) of one symbol."""
        return _out(ctypes.c_void_p, _lib().cuLibraryGetKernel, self.handle, symbol.encode(),
                    what=f"cuLibraryGetKernel({symbol})")


def kernel_function(kernel: int) -> int:
    """The ``CUfunction`` of a ``CUkernel`` in the current context (loads it there)."""
    return _out(ctypes.c_void_p, _require().cuKernelGetFunction, kernel,
                what="cuKernelGetFunction")


def kernel_attributes(kernel: int, device: int) -> dict[str, int]:
    """Registers, shared/local/constant memory and the block-size limit of a kernel on a device."""
    lib, dev = _require(), _device(device)
    return {name: _out(ctypes.c_int, lib.cuKernelGetAttribute, attr, kernel, dev,
                       what="cuKernelGetAttribute") for name, attr in _FUNC_ATTRIBUTES.items()}


def set_max_dynamic_shared(kernel: int, device: int, nbytes: int) -> None:
    """Raise a kernel's dynamic shared memory limit (needed above 48 KiB)."""
    check(_require().cuKernelSetAttribute(_FUNC_ATTRIBUTES["max_dynamic_shared_bytes"], nbytes,
                                          kernel, _device(device)), "cuKernelSetAttribute")


def device_getter():
    """The fastest way to ask for the current device: CuPy's own call once CuPy is imported."""
    cupy = sys.modules.get("cupy")
    if cupy is not None and available():
        return cupy.cuda.runtime.getDevice
    return current_device  # raises NoDeviceError where there is no GPU


def fast_launch():
    """The cheapest ``cuLaunchKernel`` to call from Python, as ``f(function, gx, gy, gz, bx, by,
    bz, shared_mem, stream, params_address, extra)`` taking plain ints; it raises on failure.

    With CuPy imported that is CuPy's own typed driver binding (a C call with no argument
    conversion: less per launch than cuda.bindings' general wrapper, and less again than
    ctypes; benchmarks/launch_overhead.py, numbers in docs/performance.md). Without CuPy,
    cuda.bindings.
    """
    cupy_driver = sys.modules.get("cupy_backends.cuda.api.driver")
    if cupy_driver is not None and hasattr(cupy_driver, "launchKernel"):
        return cupy_driver.launchKernel
    from cuda.bindings import driver as cu

    launch_kernel, success, function = cu.cuLaunchKernel, cu.CUresult.CUDA_SUCCESS, cu.CUfunction

    def bindings_launch(fn, *rest):
        # rest: cuLaunchKernel's own arguments after the function, as launchKernel takes them
        status = launch_kernel(function(fn), *rest)
        if status[0] is not success:
            raise LaunchError(getattr(status[0], "name", str(status[0])))
    return bindings_launch


def launch(kernel: int, grid: tuple[int, int, int], block: tuple[int, int, int],
           shared_mem: int, stream: int, params_address: int, device: int, what: str) -> None:
    """Launch a ``CUkernel`` with a ``void*[]`` of arguments, checked (the slow path).

    After a failed fast launch it says exactly what went wrong. A thread with no current
    context (a new thread that never touched CuPy) gets the device's primary context and one
    retry.

    :raises ContextPoisonedError, LaunchError: the driver refused the launch.
    """
    lib = _require()
    args = (kernel, *grid, *block, shared_mem, stream, params_address, None)
    status = lib.cuLaunchKernel(*args)
    if status == _INVALID_CONTEXT:
        ensure_context(device)
        status = lib.cuLaunchKernel(*args)
    check(status, what)


@dataclass(frozen=True)
class DeviceLimits:
    """What a device allows the launches :mod:`cudamagic.launch.extended` makes.

    Attributes
    ----------
    ordinal : int
    name : str
    sm_count : int
        Streaming multiprocessors (``CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT``).
    cooperative, clusters : bool
        Whether it makes cooperative launches, and thread-block cluster launches.
    """

    ordinal: int
    name: str
    sm_count: int
    cooperative: bool
    clusters: bool

    def describe(self) -> str:
        """``device 0 (NVIDIA H200, 132 SMs)`` for messages."""
        return f"device {self.ordinal} ({self.name}, {self.sm_count} SMs)"


@cached(None)
def device_limits(device: int) -> DeviceLimits:
    """A device's SM count and launch capabilities (asked once per device)."""
    lib, dev = _require(), _device(device)

    def attribute(attr: int) -> int:
        return _out(ctypes.c_int, lib.cuDeviceGetAttribute, attr, dev, what="cuDeviceGetAttribute")

    return DeviceLimits(device, device_name(device), attribute(_SM_COUNT),
                        bool(attribute(_COOPERATIVE_LAUNCH)), bool(attribute(_CLUSTER_LAUNCH)))


def max_active_blocks(device: int, kernel: int, threads: int, shared_mem: int) -> int:
    """How many blocks of ``threads`` threads with ``shared_mem`` bytes of dynamic shared memory
    one SM of the device holds at once (``cuOccupancyMaxActiveBlocksPerMultiprocessor``; a
    ``CUkernel`` is asked in the device's primary context)."""
    ensure_context(device)
    return _out(ctypes.c_int, _require().cuOccupancyMaxActiveBlocksPerMultiprocessor, kernel,
                threads, shared_mem, what="cuOccupancyMaxActiveBlocksPerMultiprocessor")


@dataclass(frozen=True)
class ExtendedLaunch:
    """What one ``cuLaunchKernelEx`` call launches: the shape, the stream and the attributes.

    Attributes
    ----------
    grid, block : tuple of 3 int
    shared_mem : int
        Dynamic shared memory, in bytes.
    stream : int
        The ``CUstream`` handle (0: the legacy default stream).
    cluster : tuple of 3 int or None
        Thread-block cluster dimensions (None: no cluster attribute).
    cooperative : bool or None
        A cooperative launch; None (only before :func:`cudamagic.launch.extended.launch_extended`
        decides) takes what the kernel's CUBIN says.
    """

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    stream: int
    cluster: tuple[int, int, int] | None = None
    cooperative: bool | None = None


def launch_config(launch: ExtendedLaunch) -> _LaunchConfig:
    """The ``CUlaunchConfig`` of a ``cuLaunchKernelEx`` call, its attributes kept alive on it."""
    grid, block, cluster = launch.grid, launch.block, launch.cluster
    cooperative, shared_mem, stream = launch.cooperative, launch.shared_mem, launch.stream
    attrs = []
    if cooperative:
        attrs.append(_LaunchAttribute(id=_ATTR_COOPERATIVE, value=(_u * 16)(1)))
    if cluster is not None:
        attrs.append(_LaunchAttribute(id=_ATTR_CLUSTER_DIMENSION, value=(_u * 16)(*cluster)))
    array = (_LaunchAttribute * max(len(attrs), 1))(*attrs)
    config = _LaunchConfig(*grid, *block, shared_mem, stream or None,
                           ctypes.cast(array, ctypes.POINTER(_LaunchAttribute)) if attrs else None,
                           len(attrs))
    config._keep = array  # the driver reads the attributes through config.attrs
    return config


def launch_ex(kernel: int, device: int, params_address: int, launch: ExtendedLaunch,
              what: str) -> None:
    """``cuLaunchKernelEx`` of a ``CUkernel``, with the cluster-dimension and cooperative
    attributes where given; checked, with a context made current and one retry for a thread
    that had none (as :func:`launch`).

    :raises ContextPoisonedError, LaunchError: the driver refused the launch.
    """
    lib = _require()
    config = launch_config(launch)
    status = lib.cuLaunchKernelEx(ctypes.byref(config), kernel, params_address, None)
    if status == _INVALID_CONTEXT:
        ensure_context(device)
        status = lib.cuLaunchKernelEx(ctypes.byref(config), kernel, params_address, None)
    how = " cooperatively" if launch.cooperative else ""
    cluster = launch.cluster
    check(status, f"{what}{how}{f' in clusters of {cluster}' if cluster else ''}")


def mem_alloc(nbytes: int) -> int:
    """A device allocation of exactly ``nbytes`` (at least 1) in the current context: the
    address."""
    ptr = ctypes.c_uint64(0)
    check(_require().cuMemAlloc_v2(ctypes.byref(ptr), max(int(nbytes), 1)), "cuMemAlloc")
    return int(ptr.value)


def mem_free(ptr: int) -> None:
    """Free a :func:`mem_alloc` allocation."""
    check(_require().cuMemFree_v2(ptr), "cuMemFree")


def copy_to_device(ptr: int, data: bytes) -> None:
    """Copy host bytes to device memory at ``ptr`` (synchronous)."""
    if data:
        check(_require().cuMemcpyHtoD_v2(ptr, data, len(data)), "cuMemcpyHtoD")


def copy_to_host(ptr: int, nbytes: int) -> bytes:
    """``nbytes`` of device memory at ``ptr`` as host bytes (synchronous: it waits for the
    work before it on the legacy stream)."""
    buf = ctypes.create_string_buffer(nbytes)
    if nbytes:
        check(_require().cuMemcpyDtoH_v2(buf, ptr, nbytes), "cuMemcpyDtoH")
    return buf.raw


def synchronize() -> None:
    """Wait for the current context's work (a kernel's fault surfaces here)."""
    check(_require().cuCtxSynchronize(), "cuCtxSynchronize")
