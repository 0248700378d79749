"""One kernel as a Python callable: argument checks and packing, then ``cuLaunchKernel``.

The CUBIN says how many parameters a kernel takes and where each lies in the parameter buffer
(:mod:`cudamagic.image`); the demangled signature says their types where the kernel has one.
Arguments are checked and packed against both before anything reaches the GPU, so the checks
run (and are tested) without one. Python scalars take the parameter's own type: ``int`` to an
``int`` parameter is an int32, ``float`` to a ``float`` parameter a float32.
"""

from __future__ import annotations

import ctypes
import re
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import driver
from .errors import LaunchError
from .image import KernelImage
from .names import Signature, Signatures

if TYPE_CHECKING:  # pragma: no cover
    from .session import Module

__all__ = ["Kernel", "ParamSpec", "param_specs", "pack_args"]

# canonical builtin type -> numpy dtype
_get_ident = threading.get_ident
_SCALAR_DTYPES = {
    "bool": "?", "char": "i1", "signed char": "i1", "unsigned char": "u1", "short": "i2",
    "unsigned short": "u2", "int": "i4", "unsigned int": "u4", "long": "i8",
    "unsigned long": "u8", "long long": "i8", "unsigned long long": "u8", "float": "f4",
    "double": "f8", "__half": "f2", "half": "f2", "wchar_t": "i4", "char16_t": "u2",
    "char32_t": "u4", "__nv_bfloat16": None,
}
_COMPLEX = re.compile(r"(?:^|::)complex<(float|double)>$")


def _dtype_of(ctype: str) -> np.dtype | None:
    """The numpy dtype of a canonical C++ type, where it has one."""
    if ctype in _SCALAR_DTYPES:
        code = _SCALAR_DTYPES[ctype]
        return np.dtype(code) if code else None
    m = _COMPLEX.search(ctype)
    if m:
        return np.dtype("c8" if m.group(1) == "float" else "c16")
    return None


@dataclass(frozen=True)
class ParamSpec:
    """How one kernel parameter is checked and packed.

    Attributes
    ----------
    index, offset, size : int
        Position, byte offset in the parameter buffer, byte size (from the CUBIN).
    ctype : str or None
        Canonical C++ type from the signature; None where the kernel has none (``extern "C"``).
    kind : str
        ``"pointer"``, ``"scalar"`` (a builtin number type), ``"value"`` (a struct or vector type
        passed by value: bytes of its size) or ``"untyped"``.
    dtype : numpy.dtype or None
        The scalar's dtype, or a pointer's pointee dtype where known.
    const : bool
        A pointer to const (read-only arrays are accepted).
    """

    index: int
    offset: int
    size: int
    ctype: str | None
    kind: str
    dtype: np.dtype | None
    const: bool = False

    def describe(self) -> str:
        """``parameter 2 (float* x)``-style text for messages."""
        return f"parameter {self.index} ({self.ctype or f'{self.size} bytes'})"


def param_specs(image: KernelImage, signature: Signature | None) -> tuple[ParamSpec, ...] | None:
    """Parameter specs from the CUBIN's records and, where it matches, the signature.

    Returns None where the CUBIN carries no parameter records (nothing can be checked).
    """
    if image.params is None:
        return None
    types: Sequence[str | None] = [None] * len(image.params)
    if signature is not None and signature.params is not None \
            and len(signature.params) == len(image.params):
        types = signature.params
    specs = []
    for p, ctype in zip(image.params, types):
        if ctype is None:
            specs.append(ParamSpec(p.ordinal, p.offset, p.size, None, "untyped", None))
        elif ctype.endswith("*") or ctype.endswith("*__restrict__"):
            pointee = ctype.rsplit("*", 1)[0]
            const = pointee.endswith(" const") or pointee.endswith("const")
            base = pointee[:-len("const")].rstrip() if const else pointee
            specs.append(ParamSpec(p.ordinal, p.offset, p.size, ctype, "pointer",
                                   _dtype_of(base), const))
        elif _dtype_of(ctype) is not None and _dtype_of(ctype).itemsize == p.size:
            specs.append(ParamSpec(p.ordinal, p.offset, p.size, ctype, "scalar", _dtype_of(ctype)))
        else:
            specs.append(ParamSpec(p.ordinal, p.offset, p.size, ctype, "value", None))
    return tuple(specs)


def _fail(kernel: str, spec: ParamSpec, message: str, exc: type = TypeError) -> Exception:
    return exc(f"{kernel}: {spec.describe()}: {message}")


def _device_pointer(kernel: str, spec: ParamSpec, value: Any) -> int:
    if value is None:
        return 0
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is None and hasattr(value, "__dlpack_device__") and not hasattr(value, "__array_interface__"):
        cai = _from_dlpack(kernel, spec, value)
    if cai is None:
        if hasattr(value, "__array_interface__") or hasattr(value, "__array__"):
            raise _fail(kernel, spec, f"got a host array ({type(value).__name__}); a pointer "
                                      "parameter needs device memory: copy it first, e.g. "
                                      "cupy.asarray(x)")
        raise _fail(kernel, spec, f"got {type(value).__name__} {value!r:.40}; a pointer parameter "
                                  "takes a CUDA array (CuPy, PyTorch, anything with "
                                  "__cuda_array_interface__ or DLPack) or None")
    ptr, readonly = cai["data"]
    dtype = np.dtype(cai["typestr"])
    if spec.dtype is not None and dtype != spec.dtype:
        raise _fail(kernel, spec, f"got an array of {dtype} where the kernel reads "
                                  f"{spec.dtype} elements")
    if readonly and not spec.const:
        raise _fail(kernel, spec, "got a read-only array for a pointer the kernel may write "
                                  "through (declare it const, or pass a writable copy)",
                    ValueError)
    return int(ptr or 0)


def _from_dlpack(kernel: str, spec: ParamSpec, value: Any) -> dict:
    device_type, _ = value.__dlpack_device__()
    if int(device_type) not in (2, 3, 13):  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
        raise _fail(kernel, spec, f"got a DLPack array on device type {int(device_type)}, not "
                                  "CUDA memory")
    import cupy  # only for DLPack producers without __cuda_array_interface__

    return cupy.from_dlpack(value).__cuda_array_interface__


def _scalar(kernel: str, spec: ParamSpec, value: Any) -> Any:
    dtype = spec.dtype
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, np.generic):
        if not np.can_cast(value.dtype, dtype, "same_kind") and not (
                dtype.kind in "iu" and value.dtype.kind in "iub"):
            raise _fail(kernel, spec, f"got a {value.dtype} scalar, which does not convert "
                                      f"safely to {spec.ctype}")
        value = value.item()
    if isinstance(value, bool) or dtype.kind == "b":
        if not isinstance(value, (bool, int)):
            raise _fail(kernel, spec, f"got {type(value).__name__}; a bool parameter takes "
                                      "True/False")
        return np.array(bool(value) if dtype.kind == "b" else int(value), dtype)
    if dtype.kind in "iu":
        if not isinstance(value, int):
            raise _fail(kernel, spec, f"got {type(value).__name__} {value!r:.40} for an integer "
                                      "parameter")
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise _fail(kernel, spec, f"{value} does not fit in {spec.ctype} "
                                      f"[{info.min}, {info.max}]", ValueError)
        return np.array(value, dtype)
    if dtype.kind == "f":
        if not isinstance(value, (int, float)):
            raise _fail(kernel, spec, f"got {type(value).__name__} {value!r:.40} for a "
                                      "floating-point parameter")
        with np.errstate(over="ignore"):
            out = np.array(value, dtype)
        if np.isinf(out) and not np.isinf(float(value)):
            raise _fail(kernel, spec, f"{value!r} does not fit in {spec.ctype}", ValueError)
        return out
    if dtype.kind == "c":
        if not isinstance(value, (int, float, complex)):
            raise _fail(kernel, spec, f"got {type(value).__name__} for a complex parameter")
        return np.array(value, dtype)
    raise _fail(kernel, spec, f"cannot pass {type(value).__name__}")


def _value_bytes(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    elif isinstance(value, (np.generic, np.ndarray)) and getattr(value, "size", 1) >= 1 \
            and not hasattr(value, "__cuda_array_interface__"):
        data = np.ascontiguousarray(value).tobytes()
    elif isinstance(value, complex) and spec.size in (8, 16):
        data = np.array(value, "c8" if spec.size == 8 else "c16").tobytes()
    else:
        raise _fail(kernel, spec, f"got {type(value).__name__}; a by-value "
                                  f"{spec.ctype or 'parameter'} takes a NumPy scalar or "
                                  f"structured value, or {spec.size} raw bytes")
    if len(data) != spec.size:
        raise _fail(kernel, spec, f"got {len(data)} bytes, the kernel takes {spec.size}",
                    ValueError)
    return data


def _untyped(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """No signature (``extern "C"``): arrays are pointers, Python numbers take the slot's size."""
    if value is None or hasattr(value, "__cuda_array_interface__") or (
            hasattr(value, "__dlpack_device__") and not hasattr(value, "__array_interface__")):
        if spec.size != 8:
            raise _fail(kernel, spec, f"got an array for a {spec.size}-byte parameter")
        return struct.pack("<Q", _device_pointer(kernel, spec, value))
    if isinstance(value, bool):
        return int(value).to_bytes(spec.size, "little")
    if isinstance(value, int) and spec.size in (1, 2, 4, 8):
        code = {1: "i1", 2: "i2", 4: "i4", 8: "i8"}[spec.size]
        return _scalar(kernel, ParamSpec(spec.index, spec.offset, spec.size, f"int{spec.size * 8}",
                                         "scalar", np.dtype(code)), value).tobytes()
    if isinstance(value, float) and spec.size in (4, 8):
        return np.array(value, "f4" if spec.size == 4 else "f8").tobytes()
    return _value_bytes(kernel, spec, value)


def _arg_bytes(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """One argument checked against its parameter, as the bytes the kernel receives."""
    if spec.kind == "pointer":
        return struct.pack("<Q", _device_pointer(kernel, spec, value))
    if spec.kind == "scalar":
        return _scalar(kernel, spec, value).tobytes()
    if spec.kind == "value":
        return _value_bytes(kernel, spec, value)
    return _untyped(kernel, spec, value)


def _count_error(kernel: str, specs: Sequence[ParamSpec], args: Any) -> TypeError:
    if not isinstance(args, (tuple, list)):
        return TypeError(f"{kernel}: args must be a tuple or list of arguments, "
                         f"got {type(args).__name__}")
    return TypeError(f"{kernel} takes {len(specs)} argument{'s' if len(specs) != 1 else ''}"
                     f" ({', '.join(s.ctype or '?' for s in specs)}), got {len(args)}")


def pack_args(kernel: str, specs: Sequence[ParamSpec], args: Sequence[Any]) -> list[bytes]:
    """Check every argument against its parameter and return each one's bytes.

    :raises TypeError: wrong count, a host array for a pointer, a dtype that is not the pointee's,
        a value of the wrong kind.
    :raises ValueError: a scalar out of range, a read-only array for a non-const pointer.
    """
    if not isinstance(args, (tuple, list)) or len(args) != len(specs):
        raise _count_error(kernel, specs, args)
    return [_arg_bytes(kernel, spec, value) for spec, value in zip(specs, args)]


# type -> (pointer, dtype) for array types whose fields can be read without building a
# __cuda_array_interface__ dict (CuPy's is rebuilt on every access); filled on first launch
_FAST_ARRAYS: dict[type, Callable[[Any], tuple[int, np.dtype]]] = {}


def _register_fast_arrays() -> None:
    cupy = sys.modules.get("cupy")
    if cupy is not None and cupy.ndarray not in _FAST_ARRAYS:
        _FAST_ARRAYS[cupy.ndarray] = lambda a: (a.data.ptr, a.dtype)  # always writable


def _packer(kernel: str, spec: ParamSpec, buf: ctypes.Array) -> Callable[[Any], None]:
    """A function that writes one argument into the parameter buffer.

    It takes the common case (a CuPy array of the right dtype, a Python number in range) in a
    few hundred nanoseconds and hands everything else to :func:`_arg_bytes`, which does every
    check and says exactly what is wrong.
    """
    off = spec.offset
    pack_into = struct.pack_into

    def checked(value: Any) -> None:
        blob = _arg_bytes(kernel, spec, value)
        ctypes.memmove(ctypes.addressof(buf) + off, blob, len(blob))

    if spec.kind == "pointer":
        want = spec.dtype
        fast = _FAST_ARRAYS

        def pointer(value: Any) -> None:
            get = fast.get(type(value))
            if get is not None:
                ptr, dtype = get(value)
                if want is None or dtype == want:
                    pack_into("<Q", buf, off, ptr)
                    return
            checked(value)
        return pointer
    if spec.kind == "scalar" and spec.dtype.kind in "iu":
        info = np.iinfo(spec.dtype)
        lo, hi, fmt = int(info.min), int(info.max), "<" + spec.dtype.char

        def integer(value: Any) -> None:
            if type(value) is int and lo <= value <= hi:
                pack_into(fmt, buf, off, value)
            else:
                checked(value)
        return integer
    if spec.kind == "scalar" and spec.dtype.kind == "f" and spec.dtype.itemsize in (4, 8):
        ffmt = "<f" if spec.dtype.itemsize == 4 else "<d"

        def floating(value: Any) -> None:
            if type(value) is float or type(value) is int:
                try:
                    pack_into(ffmt, buf, off, value)
                    return
                except OverflowError:
                    pass
            checked(value)
        return floating
    if spec.kind == "untyped" and spec.size in (4, 8):
        ifmt, ufmt = ("<i", "<f") if spec.size == 4 else ("<q", "<d")
        fast_arrays = _FAST_ARRAYS

        def by_size(value: Any) -> None:
            t = type(value)
            try:
                if t is int:
                    pack_into(ifmt, buf, off, value)
                    return
                if t is float:
                    pack_into(ufmt, buf, off, value)
                    return
            except (struct.error, OverflowError):
                pass
            get = fast_arrays.get(t)
            if get is not None and spec.size == 8:
                pack_into("<Q", buf, off, get(value)[0])
                return
            checked(value)
        return by_size
    return checked


def _dims(name: str, what: str, value: Any) -> tuple[int, int, int]:
    """A launch dimension as three positive ints (fast for tuples of ints)."""
    if type(value) is tuple:
        if len(value) == 1:
            x = value[0]
            if type(x) is int and x > 0:
                return (x, 1, 1)
        elif len(value) == 3:
            x, y, z = value
            if type(x) is int and type(y) is int and type(z) is int and x > 0 and y > 0 and z > 0:
                return value
    if isinstance(value, (int, np.integer)):
        value = (int(value),)
    if not isinstance(value, (tuple, list)) or not 1 <= len(value) <= 3:
        raise TypeError(f"{name}: {what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    dims = tuple(int(v) for v in value) + (1,) * (3 - len(value))
    if any(d < 1 for d in dims):
        raise ValueError(f"{name}: every {what} dimension must be at least 1, got {value!r}")
    return dims  # type: ignore[return-value]


class Kernel:
    """A kernel of a built module, callable as ``kernel(grid, block, args, shared_mem=0, stream=None)``.

    Attributes
    ----------
    name_expression : str
        The user's exact string (or the plain name of an ``extern "C"`` kernel).
    symbol : str
        The mangled name in the CUBIN.
    python_name : str
        The identifier it is pushed under in the notebook.
    signature : str
        The demangled signature.
    resolved_by : str
        ``"nvrtc"``, ``"stored"``, ``"demangled"`` or ``"extern-c"``.
    params : tuple of ParamSpec or None
    """

    def __init__(self, module: "Module", name_expression: str, symbol: str, python_name: str,
                 signatures: Signatures, resolved_by: str, image: KernelImage) -> None:
        self.module = module
        self.name_expression = name_expression
        self.symbol = symbol
        self.python_name = python_name
        self.signature = signatures.text(symbol)
        self.resolved_by = resolved_by
        self._signatures = signatures
        self._image = image
        self._params: tuple[ParamSpec, ...] | None | bool = False  # False: not read yet
        self._handles: dict[int, int] = {}  # device -> CUkernel (an address)
        self._functions: dict[int, int] = {}  # device -> the handle launches use
        self._shared_limit: dict[int, int] = {}
        self._launchers: dict[int, tuple[int, tuple[Callable[[Any], None], ...], tuple]] = {}
        self._runs: dict[int, Callable[[Any, Any, Any, int, Any], None]] = {}
        self._lock = threading.Lock()

    @property
    def params(self) -> tuple[ParamSpec, ...] | None:
        """How each parameter is checked and packed (read from the CUBIN and the signature on
        first use, so a restore of many kernels parses only those that are called)."""
        if self._params is False:
            self._params = param_specs(self._image, self._signatures[self.symbol])
        return self._params  # type: ignore[return-value]

    def __repr__(self) -> str:
        return (f"<cudamagic.Kernel {self.name_expression!r} symbol={self.symbol!r} "
                f"resolved_by={self.resolved_by!r}>")

    def _handle(self, device: int, context_ready: bool = False) -> int:
        handle = self._handles.get(device)
        if handle is None:
            with self._lock:
                if not context_ready:
                    driver.ensure_context(device)
                handle = self._handles[device] = self.module._library().kernel(self.symbol)
                self._functions[device] = handle
        return handle

    def function(self, device: int | None = None, context_ready: bool = False) -> int:
        """The kernel's ``CUfunction`` in a device's context, loading the module there if needed."""
        device = driver.current_device() if device is None else device
        return driver.kernel_function(self._handle(device, context_ready))

    def attributes(self, device: int | None = None) -> dict[str, int]:
        """Registers, static shared, local and constant memory, and max threads per block."""
        device = driver.current_device() if device is None else device
        return driver.kernel_attributes(self._handle(device), device)

    def _launcher(self) -> tuple[int, tuple[Callable[[Any], None], ...], tuple]:
        """This thread's ``void*[]`` address, packers, and the buffers they fill."""
        launcher = self._launchers.get(threading.get_ident())
        if launcher is None:
            specs = self.params or ()
            size = max((p.offset + p.size for p in self._image.params or ()), default=0)
            data = (ctypes.c_char * max(size, 1))()
            ptrs = (ctypes.c_void_p * max(len(specs), 1))()
            for i, spec in enumerate(specs):
                ptrs[i] = ctypes.addressof(data) + spec.offset
            _register_fast_arrays()
            packers = tuple(_packer(self.name_expression, spec, data) for spec in specs)
            launcher = (ctypes.addressof(ptrs), packers, (data, ptrs))  # keeps both alive
            # by thread: a thread id reused after a thread ends takes over a dead thread's buffers
            self._launchers[threading.get_ident()] = launcher
        return launcher

    def __call__(self, grid: Any, block: Any, args: Sequence[Any] = (), shared_mem: int = 0,
                 stream: Any = None) -> None:
        """Launch the kernel (asynchronously, on ``stream``: CuPy's current one by default).

        :raises TypeError, ValueError: an argument that does not fit its parameter (checked
            before the launch, no GPU needed).
        :raises NoDeviceError: no CUDA device is available.
        :raises ContextPoisonedError: the context is unusable after a kernel fault.
        :raises LaunchError: the driver refused the launch.
        """
        run = self._runs.get(_get_ident())
        if run is None:
            run = self._make_run()
        run(grid, block, args, shared_mem, stream)

    def _make_run(self) -> Callable[[Any, Any, Any, int, Any], None]:
        """This thread's launch function, with everything it needs bound as locals.

        A launch is the one hot path (benchmarks/launch_overhead.py): no attribute lookups or
        method calls that can be done once are done per launch.
        """
        name, params = self.name_expression, self.params
        if params is None:
            raise LaunchError(f"{name}: the CUBIN carries no parameter records for {self.symbol}; "
                              "cudamagic cannot pack its arguments safely")
        address, packers, (buf, _) = self._launcher()
        nargs = len(packers)
        functions, handles, handle_for = self._functions, self._handles, self._handle
        shared_limit = self._shared_limit
        dims, count_error, stream_handle = _dims, _count_error, _stream_handle
        get_device, get_stream = driver.device_getter(), driver.stream_getter()
        fast = driver.fast_launch() if "cupy_backends.cuda.api.driver" in sys.modules else None

        def run(grid: Any, block: Any, args: Any, shared_mem: int, stream: Any) -> None:
            nonlocal fast
            # the common launch shapes without a call; anything else through dims()
            if type(grid) is tuple and len(grid) == 1 and type(grid[0]) is int and grid[0] > 0:
                g = (grid[0], 1, 1)
            else:
                g = dims(name, "grid", grid)
            if type(block) is tuple and len(block) == 1 and type(block[0]) is int and block[0] > 0:
                b = (block[0], 1, 1)
            else:
                b = dims(name, "block", block)
            if (type(args) is not tuple and type(args) is not list) or len(args) != nargs:
                raise count_error(name, params, args)
            for pack, value in zip(packers, args):
                pack(value)
            device = get_device()
            fn = functions.get(device)
            if fn is None:
                handle_for(device)
                fn = functions[device]
            if shared_mem > 49152 and shared_limit.get(device, 0) < shared_mem:
                driver.set_max_dynamic_shared(handle_for(device), device, shared_mem)
                shared_limit[device] = shared_mem
            if fast is None:
                fast = driver.fast_launch()
            st = get_stream() if stream is None else stream_handle(stream)
            try:
                fast(fn, g[0], g[1], g[2], b[0], b[1], b[2], shared_mem, st, address, 0)
            except Exception:
                # nothing was launched: the checked path retries where a thread has no
                # context, or raises the error that says what went wrong
                driver.launch(handles[device], g, b, shared_mem, st, address, device,
                              f"launching {name}")

        express = _express_path(name, params, run, address, buf,
                                functions, get_device, fast)
        self._runs[threading.get_ident()] = express or run
        return express or run


_STRUCT_CODES = {"i1": "b", "u1": "B", "i2": "h", "u2": "H", "i4": "i", "u4": "I", "i8": "q",
                 "u8": "Q", "f4": "f", "f8": "d"}


def _express_path(name: str, specs: Sequence[ParamSpec], checked_run: Callable, address: int,
                  buf: ctypes.Array, functions: dict[int, int], get_device: Callable,
                  launch: Callable | None) -> Callable | None:
    """A launch function generated for this kernel's parameters, for the common call: CuPy
    arrays of the pointee's dtype, Python numbers, 1-D grid and block, CuPy's current stream.

    One ``struct.pack_into`` writes every argument (ints out of range make it fail), and the
    launch goes straight to CuPy's typed binding. Any other call, or any doubt, goes to
    ``checked_run``, which does every check and says what is wrong. Generated per kernel (as
    CuPy and Numba generate their launchers) because a Python-level loop over per-argument
    packers costs about 1 us a launch (benchmarks/launch_overhead.py). None where it does not
    apply (no CuPy, or a parameter it does not take).
    """
    cupy = sys.modules.get("cupy")
    if cupy is None or launch is None or not specs:
        return None
    fmt, pos, guards, values, late = "<", 0, [], [], []
    env: dict[str, Any] = {"ND": cupy.ndarray, "checked_run": checked_run, "buf": buf,
                           "functions": functions, "get_device": get_device, "launch": launch,
                           "get_stream": cupy.cuda.get_current_stream, "address": address,
                           "struct_error": struct.error, "pack_i": struct.Struct("<i").pack_into,
                           "pack_f": struct.Struct("<f").pack_into}
    for i, spec in enumerate(specs):
        if spec.offset < pos:
            return None
        fmt += f"{spec.offset - pos}x" if spec.offset > pos else ""
        if spec.kind == "pointer" and spec.size == 8:
            fmt += "Q"
            if spec.dtype is not None:
                env[f"D{i}"] = spec.dtype
                guards.append(f"type(a{i}) is ND and a{i}.dtype is D{i}")
            else:
                guards.append(f"type(a{i}) is ND")
            values.append(f"a{i}.data.ptr")
        elif spec.kind == "scalar" and spec.dtype.str[1:] in _STRUCT_CODES \
                and spec.dtype.itemsize == spec.size:
            code = _STRUCT_CODES[spec.dtype.str[1:]]
            fmt += code
            guards.append(f"(type(a{i}) is float or type(a{i}) is int)" if code in "fd"
                          else f"type(a{i}) is int")
            values.append(f"a{i}")
        elif spec.kind == "untyped" and spec.size == 8:
            # no signature (extern "C"): an 8-byte slot takes a CuPy array here, as a pointer
            fmt += "Q"
            guards.append(f"type(a{i}) is ND")
            values.append(f"a{i}.data.ptr")
        elif spec.kind == "untyped" and spec.size == 4:
            # a 4-byte slot: a Python int as int32 or a float as float32, as the checked path
            # does; the type picks the format, so the value is packed on its own
            fmt += "4x"
            guards.append(f"(type(a{i}) is int or type(a{i}) is float)")
            late.append(f"(pack_i if type(a{i}) is int else pack_f)(buf, {spec.offset}, a{i})")
        else:
            return None
        pos = spec.offset + spec.size
    env["pack"] = struct.Struct(fmt).pack_into
    names = ", ".join(f"a{i}" for i in range(len(specs)))
    src = f"""
def express(grid, block, args, shared_mem, stream):
    if (stream is None and shared_mem == 0 and type(args) is tuple and len(args) == {len(specs)}
            and type(grid) is tuple and len(grid) == 1 and type(block) is tuple
            and len(block) == 1):
        {names}{"," if len(specs) == 1 else ""} = args
        gx = grid[0]
        bx = block[0]
        if (type(gx) is int and type(bx) is int and gx > 0 and bx > 0
                and {" and ".join(guards)}):
            fn = functions.get(get_device())
            if fn is not None:
                try:
                    pack(buf, 0, {", ".join(values)}){"".join(chr(10) + " " * 20 + x for x in late)}
                    launch(fn, gx, 1, 1, bx, 1, 1, 0, get_stream().ptr, address, 0)
                    return
                except (struct_error, OverflowError):
                    pass  # a number that does not fit: the checked path says which
                except Exception:
                    pass  # a launch the driver refused: the checked path says why
    checked_run(grid, block, args, shared_mem, stream)
"""
    exec(compile(src, f"<cudamagic launcher for {name}>", "exec"), env)
    return env["express"]


def _stream_handle(stream: Any) -> int:
    if stream is None:
        return driver.current_stream()
    if isinstance(stream, int):
        return stream
    for attr in ("ptr", "cuda_stream", "handle"):
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    raise TypeError(f"stream must be a CuPy or PyTorch stream, an object with __cuda_stream__, "
                    f"or a raw handle (int), got {type(stream).__name__}")
