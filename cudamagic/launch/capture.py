"""A launch's arguments captured by value, to be run again in another process (under
compute-sanitizer or ncu) without touching the notebook's arrays or its CUDA context.

The parent checks the arguments as a launch would (:func:`.encode.pack_args`), then copies each
device array's bytes to the host with its dtype, shape and strides; scalars and structs travel
as the exact bytes their parameter receives; streams are not taken. :func:`encode_capture` /
:func:`decode_capture` give the record a bytes form of its own (a JSON header and the arrays'
bytes, never a pickle). In the child, :func:`rebuild` allocates one device buffer per array, of
exactly its size (so a tool sees each allocation's bounds; arrays that overlap in the parent share
one), and writes the parameter buffer.
:func:`name_address` then says where an address the tool reports lies against the arguments.
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, ArgumentValueError
from .encode import read_attribute, is_dlpack_only, from_dlpack, array_interface, check_dims, \
    check_shared_mem, pack_args, show
from .params import POINTER_BYTES, ParamSpec, SlotKind, tidy_type

__all__ = ["ArgKind", "CapturedArg", "Capture", "capture", "encode_capture", "decode_capture",
           "Placement", "Where", "name_address", "extent"]

_MAGIC = b"CMCAPT1\n"
#: the most bytes a capture copies of the notebook's arrays (the child gets a copy of each)
MAX_CAPTURE_BYTES = 8 << 30

#: where the child of a tool run appends the wall-clock time of each of its steps, one JSON
#: line a run (the tests of the warm child's speed read it: docs/debugging-design.md); unset: nothing
#: written. The one cudamagic setting a tool run's child is handed (:mod:`.tool_run`)
TIMES_ENV = "CUDAMAGIC_CHILD_TIMES"


class ArgKind(enum.Enum):
    """How one argument travels."""

    ARRAY = "array"  # device memory: its bytes, rebuilt in a buffer of its own
    NULL = "null"  # a null pointer
    BYTES = "bytes"  # a scalar or struct: the exact bytes of its parameter slot


@dataclass(frozen=True)
class CapturedArg:
    """One argument as it travels.

    Attributes
    ----------
    index : int
    kind : ArgKind
    packed : bytes
        The parameter slot's bytes (for an array, the parent's address: replaced in the child).
    ctype : str or None
        The parameter's C++ type.
    label : str
        How the user wrote it (the expression in ``%cuda_sanitize``), or "".
    dtype : str or None
        An array's element type (NumPy's ``str``, e.g. ``<f4``).
    shape, strides : tuple of int
    offset : int
        Where the array's first element lies in :attr:`contents` (0 unless strides are negative).
    contents : bytes
        The array's bytes, from its lowest to its highest address.
    address : int
        The array's device address in the parent.
    copied : bool
        False: the child's buffer is left as fresh, uninitialised memory (initcheck).
    """

    index: int
    kind: ArgKind
    packed: bytes
    ctype: str | None = None
    label: str = ""
    dtype: str | None = None
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    offset: int = 0
    contents: bytes = field(default=b"", repr=False)
    address: int = 0
    copied: bool = True

    def describe(self) -> str:
        """``argument 0, x: float32[256]``: the index, the user's name, the type."""
        name = f", {self.label}" if self.label else ""
        if self.kind is ArgKind.ARRAY:
            dt = np.dtype(self.dtype).name if self.dtype else "bytes"
            what = f"{dt}[{', '.join(map(str, self.shape))}]"
        else:
            what = tidy_type(self.ctype) if self.ctype else f"{len(self.packed)} bytes"
        return f"argument {self.index}{name}: {what}"


@dataclass(frozen=True)
class Capture:
    """One launch, its arguments by value: what a child needs to run it again."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    args: tuple[CapturedArg, ...]

    @property
    def nbytes(self) -> int:
        return sum(len(a.contents) for a in self.args)


def extent(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> tuple[int, int]:
    """``(lowest byte offset, byte count)`` an array of this shape and strides covers from its
    first element (the lowest offset is negative with negative strides)."""
    if any(n == 0 for n in shape):
        return 0, 0
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + itemsize
    return lo, hi - lo


def _array_form(name: str, spec: ParamSpec, value: Any) -> tuple[int, np.dtype, tuple, tuple]:
    """``(address, dtype, shape, strides in bytes)`` of a device array argument."""
    cai = read_attribute(name, spec, value, "__cuda_array_interface__")
    if cai is None and is_dlpack_only(name, spec, value):
        cai = from_dlpack(name, spec, value)
    if cai is None:  # a cupy MemoryPointer: untyped bytes to the end of its allocation
        mem = getattr(value, "mem", None)
        size = int(getattr(mem, "size", 0)) - (int(value.ptr) - int(getattr(mem, "ptr", 0)))
        return int(value.ptr), np.dtype("u1"), (max(size, 0),), (1,)
    ptr, _, dtype = array_interface(name, spec, cai)
    shape = _ints(name, spec, "shape", cai.get("shape", ()), 0)
    strides = cai.get("strides")
    if strides is None:  # C-contiguous
        strides, step = [], dtype.itemsize
        for n in reversed(shape):
            strides.insert(0, step)
            step *= max(n, 1)
    strides = _ints(name, spec, "strides", strides, None)
    if len(strides) != len(shape):
        raise _bad(name, spec, f"strides {show(tuple(strides))} for shape {show(shape)}: one "
                               "stride per dimension")
    return ptr, dtype, shape, strides


def _bad(name: str, spec: ParamSpec, what: str) -> ArgumentValueError:
    return ArgumentValueError(f"{name}: {spec.describe()}: the array's __cuda_array_interface__ "
                              f"{what}: it does not describe memory a tool run can copy")


def _ints(name: str, spec: ParamSpec, field: str, value: Any, least: int | None
          ) -> tuple[int, ...]:
    """A shape (``least`` 0) or strides (any int) of a ``__cuda_array_interface__``, checked:
    a tuple or list of integers, each one exactly (2.7 is no extent)."""
    if not isinstance(value, (tuple, list)) or len(value) > 64 or not all(
            isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_))
            for n in value):
        raise _bad(name, spec, f"{field} {show(value)} is not a tuple of integers (at most 64)")
    out = tuple(int(n) for n in value)
    if least is not None and any(n < least for n in out):
        raise _bad(name, spec, f"{field} {show(value)} has a negative extent")
    return out


def check_launch(name: str, specs: Sequence[ParamSpec], grid: Any, block: Any,
                 args: Sequence[Any], shared_mem: Any = 0
                 ) -> tuple[tuple[int, int, int], tuple[int, int, int], int, list[bytes]]:
    """A launch checked as the launcher checks it (no GPU): the grid, the block, the dynamic
    shared memory and each argument's bytes.

    :raises ArgumentTypeError, ArgumentValueError: anything the launch would refuse.
    """
    return (check_dims(name, "grid", grid), check_dims(name, "block", block),
            check_shared_mem(name, shared_mem), pack_args(name, specs, args))


def capture(name: str, specs: Sequence[ParamSpec], grid: Any, block: Any, args: Sequence[Any],
            shared_mem: int = 0, *, copy: Callable[[int, int], bytes],
            labels: Sequence[str] = (), uninitialized: Sequence[int] = (),
            ready: Callable[[], None] = lambda: None) -> Capture:
    """The launch by value. Every argument is checked first, as a launch checks it; then
    ``ready()`` (where the caller asks for the GPU); ``copy(address, nbytes)`` -> bytes reads
    device memory (the driver's synchronous copy).

    :raises ArgumentTypeError, ArgumentValueError: an argument the launch would refuse, an
        ``uninitialized`` index that is no array argument, or more than
        :data:`MAX_CAPTURE_BYTES` to copy.
    """
    grid3, block3, shared, packed = check_launch(name, specs, grid, block, args, shared_mem)
    uninitialized = uninitialized_indices(name, specs, uninitialized)
    arrays = _array_forms(name, specs, args)
    ready()
    out = []
    for spec, value, slot in zip(specs, args, packed):
        label = labels[spec.index] if spec.index < len(labels) else ""
        if spec.index in arrays:
            ptr, dtype, shape, strides, lo, nbytes = arrays[spec.index]
            keep = spec.index not in uninitialized
            out.append(CapturedArg(spec.index, ArgKind.ARRAY, slot, spec.ctype, label,
                                   dtype=dtype.str, shape=shape, strides=strides, offset=-lo,
                                   contents=copy(ptr + lo, nbytes) if keep else bytes(0),
                                   address=ptr, copied=keep))
        elif spec.kind is SlotKind.POINTER:
            out.append(CapturedArg(spec.index, ArgKind.NULL, slot, spec.ctype, label))
        else:
            out.append(CapturedArg(spec.index, ArgKind.BYTES, slot, spec.ctype, label))
    return Capture(name, grid3, block3, shared, tuple(out))


def _array_forms(name: str, specs: Sequence[ParamSpec], args: Sequence[Any]
                 ) -> dict[int, tuple]:
    """Each array argument's ``(address, dtype, shape, strides, lowest offset, bytes)``,
    checked to describe memory that can be copied, in all at most :data:`MAX_CAPTURE_BYTES`."""
    forms: dict[int, tuple] = {}
    total = 0
    for spec, value in zip(specs, args):
        if spec.kind is SlotKind.POINTER and value is not None:
            ptr, dtype, shape, strides = _array_form(name, spec, value)
            lo, nbytes = extent(shape, strides, dtype.itemsize)
            if nbytes and not 0 <= ptr + lo <= ptr + lo + nbytes <= 1 << 64:
                raise _bad(name, spec, f"data pointer 0x{ptr:x} with shape {shape} and "
                                       f"strides {strides} reaches outside the address space")
            total += nbytes
            forms[spec.index] = (ptr, dtype, shape, strides, lo, nbytes)
    if total > MAX_CAPTURE_BYTES:
        raise ArgumentValueError(f"{name}: the arrays hold {total} bytes, more than a tool run "
                                 f"copies ({MAX_CAPTURE_BYTES >> 30} GiB): launch a smaller "
                                 "case")
    return forms


def uninitialized_indices(name: str, specs: Sequence[ParamSpec], value: Any) -> tuple[int, ...]:
    """The array arguments to leave uninitialised (an index, or a sequence of them), checked.

    :raises ArgumentValueError: one that is not the index of a pointer argument.
    """
    items = (value,) if isinstance(value, (int, np.integer)) else value
    try:
        indices = tuple(items)
    except TypeError:
        raise ArgumentValueError(f"{name}: uninitialized={show(value)}: give the indices of "
                                 "array arguments, e.g. uninitialized=(0, 2)") from None
    bad = [i for i in indices if not (isinstance(i, (int, np.integer))
                                      and not isinstance(i, (bool, np.bool_))
                                      and 0 <= i < len(specs)
                                      and specs[int(i)].kind is SlotKind.POINTER)]
    if bad:
        raise ArgumentValueError(f"{name}: uninitialized={show(value)}: {bad[0]!r} "
                                 "is not the index of a pointer argument")
    return tuple(int(i) for i in indices)


def _nbytes(a: CapturedArg) -> int:
    if a.kind is not ArgKind.ARRAY:
        return 0
    return extent(a.shape, a.strides, np.dtype(a.dtype).itemsize if a.dtype else 1)[1]


def encode_capture(c: Capture) -> bytes:
    """The capture as bytes: a magic line, the header's length, a JSON header, the arrays'
    bytes one after another."""
    header = {"kernel": c.kernel, "grid": c.grid, "block": c.block, "shared_mem": c.shared_mem,
              "args": [{"index": a.index, "kind": a.kind.value, "packed": a.packed.hex(),
                        "ctype": a.ctype, "label": a.label, "dtype": a.dtype,
                        "shape": a.shape, "strides": a.strides, "offset": a.offset,
                        "address": a.address, "copied": a.copied,
                        "length": len(a.contents)} for a in c.args]}
    head = json.dumps(header).encode()
    return _MAGIC + struct.pack("<Q", len(head)) + head + b"".join(a.contents for a in c.args)


def decode_capture(data: bytes) -> Capture:
    """The capture :func:`encode_capture` wrote.

    :raises ValueError: not such a record, or one whose parts do not add up.
    """
    if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 8:
        raise ValueError("not a cudamagic launch capture")
    (n,) = struct.unpack_from("<Q", data, len(_MAGIC))
    start = len(_MAGIC) + 8
    try:
        header = json.loads(data[start:start + n])
        pos = start + n
        args = []
        for a in header["args"]:
            length = int(a["length"])
            contents = data[pos:pos + length]
            pos += length
            arg = CapturedArg(int(a["index"]), ArgKind(a["kind"]), bytes.fromhex(a["packed"]),
                              a["ctype"], a["label"], dtype=a["dtype"], shape=tuple(a["shape"]),
                              strides=tuple(a["strides"]), offset=int(a["offset"]),
                              contents=contents, address=int(a["address"]),
                              copied=bool(a["copied"]))
            if len(contents) != length or (arg.copied and length != _nbytes(arg)):
                raise ValueError(f"argument {arg.index}'s bytes are cut short")
            args.append(arg)
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} bytes after the last argument")
        return Capture(header["kernel"], tuple(header["grid"]), tuple(header["block"]),
                       int(header["shared_mem"]), tuple(args))
    except (KeyError, TypeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"a damaged launch capture ({type(exc).__name__}: {exc})") from None


# --- in the child -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Placement:
    """Where an array argument lies in the child: its buffer's address and size."""

    index: int
    base: int
    nbytes: int


def _shared_spans(arrays: Sequence[CapturedArg]) -> dict[int, tuple[int, int]]:
    """For each array argument (by index), the parent's span ``(lowest address, bytes)`` of
    the memory it shares with the arguments whose bytes overlap its own (``k(x, x)``,
    ``k(x[:-1], x[1:])``): one buffer in the child, as one allocation in the parent.

    A group ends at the furthest byte of any member (``k(x, x[2:4])`` ends where ``x`` does), and
    an empty view inside a group (``x[10:10]``) belongs to it without ending it; the longest of
    arrays that start together comes first, so such a view is never a group's first member."""
    spans = sorted(((a.address - a.offset, _nbytes(a), a.index) for a in arrays),
                   key=lambda t: (t[0], -t[1]))
    out: dict[int, tuple[int, int]] = {}
    group: list[int] = []
    lo = hi = 0
    for start, n, index in spans:
        if group and start < hi:
            hi = max(hi, start + n)
        else:
            for i in group:
                out[i] = (lo, hi - lo)
            group, lo, hi = [], start, start + n
        group.append(index)
    for i in group:
        out[i] = (lo, hi - lo)
    return out


def rebuild(c: Capture, alloc: Callable[[int], int],
            write: Callable[[int, bytes], None]) -> tuple[list[bytes], list[Placement]]:
    """The parameter slots' bytes in the child, each array in a buffer of its own (arrays
    that overlap in the parent share one, at the same distances), and where each array lies
    (``alloc(n)`` -> address, ``write(address, bytes)``)."""
    arrays = [a for a in c.args if a.kind is ArgKind.ARRAY]
    spans = _shared_spans(arrays)
    bases: dict[tuple[int, int], int] = {}
    for span in dict.fromkeys(spans[a.index] for a in arrays):
        bases[span] = alloc(span[1])
    slots, placed = [], []
    for a in c.args:
        if a.kind is not ArgKind.ARRAY:
            slots.append(a.packed)
            continue
        span = spans[a.index]
        start = bases[span] + (a.address - a.offset - span[0])  # the array's lowest byte
        if a.copied:
            write(start, a.contents)
        placed.append(Placement(a.index, start, _nbytes(a)))
        slots.append((start + a.offset).to_bytes(POINTER_BYTES, "little"))
    return slots, placed


class Where(enum.Enum):
    """Where an address lies against an argument's buffer."""

    INSIDE = "inside"
    PAST_END = "past the end of"
    BEFORE_START = "before the start of"


@dataclass(frozen=True)
class ArgAddress:
    """An address named against the argument whose buffer is nearest."""

    arg: CapturedArg
    where: Where
    distance: int  # bytes past the end, before the start, or from the start (inside)

    def describe(self) -> str:
        n = f"{self.distance:,}".replace(",", " ")
        if self.where is Where.INSIDE:
            return f"byte {n} of {self.arg.describe()}"
        return f"{n} bytes {self.where.value} {self.arg.describe()}"


def name_address(address: int, c: Capture, placed: Sequence[Placement]) -> ArgAddress | None:
    """The argument whose buffer ``address`` lies in or nearest to (None without arrays)."""
    best: ArgAddress | None = None
    args = {a.index: a for a in c.args}
    for p in placed:
        end = p.base + p.nbytes
        if p.base <= address < end:
            return ArgAddress(args[p.index], Where.INSIDE, address - p.base)
        near = ArgAddress(args[p.index], Where.PAST_END, address - end) if address >= end \
            else ArgAddress(args[p.index], Where.BEFORE_START, p.base - address)
        if best is None or near.distance < best.distance:
            best = near
    return best


def check_options(name: str, options: dict) -> None:
    """The launch options a tool run takes: ``shared_mem``, and ``stream`` (ignored: the child
    launches on its own); any other (``cluster``, ``cooperative``) is refused before anything
    starts."""
    unknown = sorted(set(options) - {"shared_mem", "stream"})
    if unknown:
        raise ArgumentTypeError(f"{name}: {', '.join(unknown)} is not a launch option here "
                                "(shared_mem, stream)")
