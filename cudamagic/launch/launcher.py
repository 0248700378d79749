"""The launch function generated per kernel from its parameter table, and its device hooks.

Generated (as CuPy and Numba generate their launchers) because a Python loop over per-argument
packers costs more per launch than the generated code (benchmarks/launch_overhead.py;
docs/performance.md has both). The common argument types (``ParamSpec.direct``) are packed
with one ``struct.pack_into``; every other value goes to the checked path's converter for its
parameter (:mod:`.encode`), so the first call and every later call, the fast and the slow path,
give the same bytes.
"""

from __future__ import annotations

import ctypes
import functools
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.process import held
from ..toolchain.device import driver
from .encode import CONVERTERS, check_dims, check_shared_mem, pack_args, stream_handle
from ..toolchain.binary.image import LaunchNeeds
from .extended import always_extended, check_extended, launch_extended
from .params import ParamSpec, SlotKind, nan_checked, layout_error

__all__ = ["LaunchHooks", "Launcher", "generate_launcher"]

_get_ident = threading.get_ident
_U32 = 2**32 - 1
# shared memory (static and dynamic together) a block may use without raising the kernel's limit
SHARED_PER_BLOCK_DEFAULT = 48 * 1024


class NoSuchType:
    """Stands for CuPy's ndarray and Stream where CuPy is not imported: nothing is of this type."""


class NullStream:
    ptr = 0


@dataclass(frozen=True)
class LaunchHooks:
    """What a generated launcher calls beyond Python: the device side (stand-ins in the tests).

    Attributes
    ----------
    array_type, stream_type : type
        CuPy's ``ndarray`` and ``Stream`` (their pointer and handle are read straight off), or
        a type nothing is of.
    current_device : callable
        ``() -> int``.
    current_stream : callable
        ``() -> object`` with the handle as ``.ptr`` (CuPy's current stream).
    handles : dict
        device -> the kernel's handle there, for the launch's lookup.
    load : callable
        ``(device) -> handle``: loads the kernel on a device (first launch there).
    launch : callable or None
        ``cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra)``
        taking plain ints, raising on failure; None:
        :func:`cudamagic.toolchain.device.driver.fast_launch` on first use.
    relaunch : callable
        ``(fn, device, grid, block, shared_mem, stream)``: the checked launch after ``launch``
        raised; it says what went wrong.
    raise_shared_limit : callable
        ``(device, nbytes)``: lets the kernel take ``nbytes`` of dynamic shared memory.
    other_thread : callable
        ``(kernel, grid, block, args, shared_mem, stream, cluster, cooperative)``: a launch
        from another thread than the launcher's (each thread packs into its own buffer).
    launch_ex : callable
        ``(fn, device, params, launch, what)`` (``launch`` an
        :class:`~cudamagic.toolchain.device.driver.ExtendedLaunch`): ``cuLaunchKernelEx`` with the
        cluster-dimension and cooperative attributes, checked.
    occupancy : callable
        ``(device, fn, threads, shared_mem) -> int``: blocks of this kernel one SM holds at
        once (the driver's ``cuOccupancyMaxActiveBlocksPerMultiprocessor``).
    device_limits : callable
        ``(device) -> DeviceLimits``: SMs, and whether cooperative and cluster launches work.
    """

    array_type: type
    stream_type: type
    current_device: Callable[[], int]
    current_stream: Callable[[], Any]
    handles: dict[int, int]
    load: Callable[[int], int]
    launch: Callable[..., Any] | None
    relaunch: Callable[..., None]
    raise_shared_limit: Callable[[int, int], None]
    other_thread: Callable[..., None]
    launch_ex: Callable[..., None] = driver.launch_ex
    occupancy: Callable[[int, int, int, int], int] = driver.max_active_blocks
    device_limits: Callable[[int], driver.DeviceLimits] = driver.device_limits
    #: dynamic shared memory a launch may take before the limit is raised: 48 KiB less the
    #: kernel's static ``__shared__`` arrays (the driver's default counts both together)
    dynamic_shared_default: int = SHARED_PER_BLOCK_DEFAULT


@dataclass(frozen=True)
class Launcher:
    """A generated launch function and the parameter buffer it fills (kept alive with it)."""

    run: Callable[..., None]
    buffer: ctypes.Array
    pointers: ctypes.Array
    source: str = field(repr=False)

    @property
    def address(self) -> int:
        """The ``void*[]`` the driver reads each parameter through."""
        return ctypes.addressof(self.pointers)


def _fast_form(spec: ParamSpec, env: dict[str, Any], sample: Any) -> tuple[str, str, str]:
    """How the generated launcher takes one argument as it is: ``(test, value, code)``, the test
    that its type is one ``struct`` packs exactly with ``code``, and the expression packed.

    A slot with one code (every typed one) tests all its direct types. An ``extern "C"`` slot
    has a code per type (an int or a float in a 4-byte slot): the launcher takes the group of
    the first call's argument (a C parameter has one type), and any other type through the
    checked path, which gives the same bytes, more slowly. A slot with no direct form (half,
    bfloat16, complex, structs) has no test: its converter runs on every call.
    """
    i, a = spec.index, f"a{spec.index}"
    pointer = spec.kind is SlotKind.POINTER or (spec.kind is SlotKind.UNTYPED and spec.size == 8
                                         and (type(sample) is env["ND"] or sample is None
                                              or spec.direct_code(sample) is None))
    if pointer:
        if spec.kind is SlotKind.POINTER and spec.dtype is not None:
            env[f"D{i}"] = spec.dtype
            return f"type({a}) is ND and {a}.dtype is D{i}", f"{a}.data.ptr", "Q"
        return f"type({a}) is ND", f"{a}.data.ptr", "Q"
    if not spec.direct:
        return "", "", ""
    code = spec.direct_code(sample) if spec.kind is SlotKind.UNTYPED else None
    code = code or spec.code
    group = [t for t, c in spec.direct if c == code]
    terms = []
    for j, typ in enumerate(group):
        if j == 3:  # the common types by identity, the rest by one set lookup
            env[f"S{i}"] = frozenset(group[3:])
            terms.append(f"t in S{i}")
            break
        env[f"T{i}_{j}"] = typ
        nan = f" and {a} == {a}" if nan_checked(typ, code) else ""
        terms.append(f"{'(t := type(' + a + '))' if j == 0 else 't'} is T{i}_{j}{nan}")
    return f"({' or '.join(terms)})", a, code


def _dims_lines(what: str, names: str, first: int = 1) -> list[str]:
    """Generated code that reads a launch dimension: 1 to 3 ints inline (a sequence pattern is
    the fewest bytecodes for it: this runs on every launch), anything else through
    :func:`~.encode.check_dims` (NumPy ints; it says what is wrong).

    The length ``first`` (the first call's: a kernel is called with one shape) is tried first:
    each pattern tried and missed costs machine instructions on every launch (callgrind:
    docs/performance.md).
    The bound is a literal: a constant costs less than a global.
    """
    x, y, z = names.split(", ")
    ok = [f"type({v}) is int and 0 < {v} <= {_U32}" for v in (x, y, z)]
    cases = {1: [f"        case ({x},) if {ok[0]}:", f"            {y} = {z} = 1"],
             2: [f"        case ({x}, {y}) if {ok[0]} and {ok[1]}:", f"            {z} = 1"],
             3: [f"        case ({x}, {y}, {z}) if {' and '.join(ok)}:", "            pass"]}
    order = [first, *(n for n in (1, 2, 3) if n != first)] if first in cases else [1, 2, 3]
    return [f"    match {what}:", *(line for n in order for line in cases[n]),
            "        case _:", f"            {names} = dims(name, '{what}', {what})"]


#: the last launch a generated launcher made, ``(kernel, grid, block)``: the crash advice names
#: it (one store per launch)
LAST_LAUNCH: list[Any] = [None]
held(__name__, "LAST_LAUNCH", LAST_LAUNCH, clear=lambda: LAST_LAUNCH.__setitem__(0, None))
#: set by a launch of a kernel whose CUBIN calls ``vprintf``: the shell synchronizes after the
#: cell, so that the device's printf buffer is flushed into that cell's output
PRINT_PENDING: list[bool] = [False]
held(__name__, "PRINT_PENDING", PRINT_PENDING,
     clear=lambda: PRINT_PENDING.__setitem__(0, False))


def generate_launcher(name: str, specs: Sequence[ParamSpec], hooks: LaunchHooks,
                      sample: Sequence[Any] = (), shape: tuple[int, int] = (1, 1),
                      needs: LaunchNeeds = LaunchNeeds(), prints: bool = False) -> Launcher:
    """The launch function of one kernel, generated from its parameter table.

    Where every argument is of a type its slot packs as it is (``ParamSpec.direct``), one type test each and
    one ``struct.pack_into`` fill the buffer; anything else, or a value ``struct`` refuses (out
    of range), goes through the checked path (:func:`pack_args`), which gives the same bytes or
    says what is wrong. ``sample`` (the first call's arguments) picks the group of an
    ``extern "C"`` slot. Order: arguments, grid, block, shared memory, stream, then the device,
    so every argument error is raised before (and without) a GPU.

    ``needs`` is what the CUBIN says the launch needs: a kernel with grid-wide sync or
    compile-time cluster dimensions is launched through :func:`~.extended.launch_extended` every
    time; any other takes ``cuLaunchKernel``, and the extended launch only where a call asks
    for a cluster or a cooperative launch (so an ordinary launch pays for neither).
    """
    error = layout_error(name, specs)
    if error is not None:
        raise error
    size = max((s.offset + s.size for s in specs), default=0)
    buf = (ctypes.c_char * max(size, 1))()
    ptrs = (ctypes.c_void_p * max(len(specs), 1))()
    for s in specs:
        ptrs[s.index] = ctypes.addressof(buf) + s.offset
    env = _launcher_globals(name, specs, hooks, buf)
    env["address"] = ctypes.addressof(ptrs)
    env["extended"] = functools.partial(launch_extended, name, needs, hooks, env["address"], {})
    env["check_extended"] = functools.partial(check_extended, name, needs=needs)
    sample = tuple(sample) if len(sample) == len(specs) else (None,) * len(specs)
    tests, values, fmt, converted, pos = [], [], "<", [], 0
    for spec in sorted(specs, key=lambda s: s.offset):
        test, value, code = _fast_form(spec, env, sample[spec.index])
        fmt += (f"{spec.offset - pos}x" if spec.offset > pos else "") + (code or f"{spec.size}x")
        tests += [test] if test else []
        values += [value] if value else []
        if not code:  # no direct form: the slot's converter, written after the pack
            env[f"C{spec.index}"] = functools.partial(CONVERTERS[spec.kind], name, spec)
            env[f"W{spec.index}"] = struct.Struct(f"<{spec.size}s").pack_into
            converted.append(f"W{spec.index}(buf, {spec.offset}, C{spec.index}(a{spec.index}))")
        pos = spec.offset + spec.size
    env["pack"] = struct.Struct(fmt).pack_into
    source = _launcher_source(len(specs), shape, " and ".join(tests) or "True",
                              [f"pack(buf, 0{''.join(', ' + v for v in values)})", *converted],
                              always_extended(needs), prints)
    exec(compile(source, f"<cudamagic launcher for {name}>", "exec"), env)
    return Launcher(env["launch_kernel"], buf, ptrs, source)


def _launcher_globals(name: str, specs: Sequence[ParamSpec], hooks: LaunchHooks,
                      buf: ctypes.Array) -> dict[str, Any]:
    """What a generated launcher reads as globals: the hooks, the buffer, the slow paths."""
    env: dict[str, Any] = {
        "name": name, "ND": hooks.array_type, "ST": hooks.stream_type,
        "buf": buf, "handles": hooks.handles, "load": hooks.load,
        "current_device": hooks.current_device, "current_stream": hooks.current_stream,
        "relaunch": hooks.relaunch, "ZERO": 0, "Extended": driver.ExtendedLaunch,
        "with_shared": functools.partial(_with_shared, name, hooks),
        "struct_error": struct.error, "dims": check_dims,
        "get_ident": _get_ident, "OWNER": _get_ident(), "other_thread": hooks.other_thread,
        "repack": functools.partial(_write, name, specs, buf=buf),
        "LAST": LAST_LAUNCH, "PRINTED": PRINT_PENDING,
    }
    env["launch"] = hooks.launch or _first_launch(env)
    return env


def _launcher_source(nargs: int, shape: tuple[int, int], fast_test: str, packs: list[str],
                     special: bool = False, prints: bool = False) -> str:
    """The text of a generated launcher (see :func:`generate_launcher`)."""
    names = f"{', '.join(f'a{i}' for i in range(nargs))}{',' if nargs == 1 else ''}"
    # a tuple of another length fails to unpack (no len() call on the common path)
    unpack = [f"        try: {names} = args", "        except ValueError: repack(args)"] \
        if nargs else ["        if args: repack(args)"]
    return "\n".join([
        "def launch_kernel(self, grid, block, args=(), shared_mem=0, stream=None, cluster=None,",
        "                  cooperative=None):",
        # the buffer is this thread's: another thread takes its own launcher
        "    if get_ident() != OWNER:",
        "        return other_thread(self, grid, block, args, shared_mem, stream, cluster,",
        "                            cooperative)",
        "    if type(args) is tuple:",
        *unpack,
        f"        if {fast_test}:",
        "            try:",
        *[f"                {p}" for p in packs],
        "            except (struct_error, OverflowError):",
        "                repack(args)  # a value out of range: the checked path says which",
        "        else:",
        "            repack(args)  # another type: the checked path converts it or says why",
        "    else:",
        "        repack(args)  # a list, or a wrong count",
        *_dims_lines("grid", "gx, gy, gz", shape[0]),
        *_dims_lines("block", "bx, by, bz", shape[1]),
        *(_extended_lines() if special else _dispatch_lines()),
        "    LAST[0] = (self, grid, block)",
        *(["    PRINTED[0] = True"] if prints else []),
        "",
    ])


def _dispatch_lines() -> list[str]:
    """The end of an ordinary kernel's launcher: ``cuLaunchKernel``, and the extended launch
    only where the call asks for a cluster or a cooperative launch."""
    return [
        # CPython keeps a single int 0, so `is ZERO` is one test for the common shared_mem=0
        "    if stream is None and shared_mem is ZERO and cluster is None and cooperative is None:",
        "        device = current_device()",
        # a dict subscript is cheaper than a .get() call; the except costs only when raised
        "        try: fn = handles[device]",
        "        except KeyError: fn = load(device)",
        "        st = current_stream().ptr",
        "    elif type(stream) is ST and shared_mem is ZERO and cluster is None "
        "and cooperative is None:",
        "        st = stream.ptr",
        "        device = current_device()",
        "        try: fn = handles[device]",
        "        except KeyError: fn = load(device)",
        "    elif cluster is None and cooperative is None:",
        "        # another stream, or dynamic shared memory: checked before the device",
        "        shared_mem, st, device, fn = with_shared(shared_mem, stream)",
        "    else:",
        *[f"    {line}" for line in _extended_lines()],
        "    try:",
        "        launch(fn, gx, gy, gz, bx, by, bz, shared_mem, st, address, 0)",
        "    except Exception:",
        "        relaunch(fn, device, (gx, gy, gz), (bx, by, bz), shared_mem, st)",
    ]


def _extended_lines() -> list[str]:
    """The end of a launcher that takes ``cuLaunchKernelEx``: every check before the device."""
    return [
        "    cluster, cooperative = check_extended(cluster, cooperative, (gx, gy, gz))",
        "    shared_mem, st, device, fn = with_shared(shared_mem, stream)",
        "    return extended(fn, device, Extended((gx, gy, gz), (bx, by, bz), shared_mem, st,",
        "                                         cluster, cooperative))",
    ]


def _with_shared(name: str, hooks: LaunchHooks, shared_mem: Any,
                 stream: Any) -> tuple[int, int, int, int]:
    """The launch's ``(shared_mem, stream, device, function)`` where it asks for dynamic shared
    memory: both checked before the device is asked, the kernel's limit raised where its static
    and dynamic shared memory together pass 48 KiB."""
    shared_mem = check_shared_mem(name, shared_mem)
    st = None if stream is None else stream_handle(name, stream)
    device = hooks.current_device()
    fn = hooks.handles.get(device)
    if fn is None:
        fn = hooks.load(device)
    if shared_mem > hooks.dynamic_shared_default:
        hooks.raise_shared_limit(device, shared_mem)
    return shared_mem, hooks.current_stream().ptr if st is None else st, device, fn


def _first_launch(env: dict[str, Any]) -> Callable[..., Any]:
    """A stand-in for the driver's launch that looks it up on first use (importing the driver
    binding is left to the first launch) and puts it in the launcher's globals."""
    def first(*args: Any) -> Any:
        env["launch"] = driver.fast_launch()
        return env["launch"](*args)
    return first


def _write(name: str, specs: Sequence[ParamSpec], args: Any, *, buf: ctypes.Array) -> None:
    """Fill the parameter buffer through the checked path (every argument, every check)."""
    for spec, blob in zip(specs, pack_args(name, specs, args)):
        struct.pack_into(f"<{spec.size}s", buf, spec.offset, blob)
