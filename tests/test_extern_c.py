"""extern "C" kernels take the types their source declares (issue 20 item 4): NVRTC says them in
the one compile (toolchain/compile/probe.py: decltype of the entity, checked to be the entity the CUBIN
symbol is), the entry stores them, and arguments pack as for C++ kernels. No GPU: the packed
bytes are read from the checked path, as the launcher would send."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

import cudamagic
from cudamagic.launch.encode import pack_args
from cudamagic.launch.params import SlotKind
from cudamagic.store.cache import KernelCache

SOURCE = r"""
extern "C" __global__ void fill(float* x, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v; }
extern "C" {
__global__ void mixed(double d, long l, unsigned char c, short s, bool b, unsigned u) {}
__global__ void none() {}
}
namespace ns { extern "C" __global__ void hidden(float v) {} }
template <class T> __global__ void tfill(T* x, T v, int n) {}
"""

# (kernel, arguments, the bytes of each scalar argument as its declared type)
CASES = [
    ("fill", (None, 1, 5), [struct.pack("<f", 1.0), struct.pack("<i", 5)]),
    ("fill", (None, 2.5, True), [struct.pack("<f", 2.5), struct.pack("<i", 1)]),
    ("fill", (None, np.float32(3), np.int32(-2)), [struct.pack("<f", 3.0), struct.pack("<i", -2)]),
    ("mixed", (1, 2, 200, -3, True, 4_000_000_000),
     [struct.pack("<d", 1.0), struct.pack("<q", 2), bytes([200]), struct.pack("<h", -3),
      b"\x01", struct.pack("<I", 4_000_000_000)]),
]


@pytest.fixture(scope="module")
def module():
    return cudamagic.build(SOURCE, ["tfill<float>"], use_cache=False)


@pytest.mark.parametrize("name, args, scalars", CASES)
def test_extern_c_scalars_pack_as_declared(module, name, args, scalars):
    k = module[name]
    packed = pack_args(name, k.params, args)
    assert [b for b, a in zip(packed, args) if a is not None] == scalars


def test_the_declared_types_are_the_sources(module):
    assert [p.ctype for p in module["fill"].params] == ["float*", "float", "int"]
    assert [p.ctype for p in module["mixed"].params] == [
        "double", "long", "unsigned char", "short", "bool", "unsigned int"]
    assert module["fill"].resolved_by == "extern-c"
    rows = {r.name_expression: r.signature for r in module.report.rows}
    assert rows["fill"] == "void fill(float*, float, int)"


def test_a_value_out_of_the_declared_range_is_refused(module):
    with pytest.raises(ValueError, match="unsigned char"):
        pack_args("mixed", module["mixed"].params, (1, 2, 300, 0, False, 0))
    with pytest.raises(TypeError):
        pack_args("fill", module["fill"].params, (None, 1.5, 2.5))  # a float for the int


def test_an_extern_c_kernel_inside_a_namespace_is_typed(module):
    # ns::hidden is extern "C" inside a namespace: asked as ::ns::hidden
    assert [p.ctype for p in module["hidden"].params] == ["float"]
    assert len(module) == 5


_FILL = 'extern "C" __global__ void fill(float* x, float v, int n) { if (n) x[0] = v; }\n'

# (the cell, its options, the extern "C" kernel's symbol, the parameter types it must get):
# each row is a class the separate type-reading compile over the cell's text got wrong or lost
# (issue 27 A1); None: nothing is known, and the kernel takes arguments by their slots' sizes
EXTERN_C = {
    "an unrelated global kernel of the same name": (
        'namespace a { extern "C" __global__ void k(int x, int* y) { y[0] = x; } }\n'
        "__global__ void k(float, float*) {}\n", [], "k", ["int", "int*"]),
    "the cell's own #define of the probe's parameter name": (
        "#define F 1\n" + _FILL, [], "fill", ["float*", "float", "int"]),
    "an option's macro of the probe's parameter name": (
        _FILL, ["-DF=1"], "fill", ["float*", "float", "int"]),
    "a last // comment ending in a backslash": (
        _FILL + "// the end \\", [], "fill", ["float*", "float", "int"]),
    "a last line that is a comment ending in a backslash, without a newline": (
        _FILL + "// x\\\n// y \\", [], "fill", ["float*", "float", "int"]),
    "a macro that opens a namespace": (
        "#define BEGIN namespace m {\n#define END }\nBEGIN\n"
        'extern "C" __global__ void g(double d) {}\nEND\n__global__ void g(float) {}\n', [],
        "g", ["double"]),
    "a kernel a macro declares extern C": (
        '#define KERNEL extern "C" __global__\nKERNEL void h(double d) {}\n', [], "h",
        ["double"]),
    "an option's macro declares it extern C": (
        "KERNEL void h(short d) {}\n", ['-DKERNEL=extern "C" __global__'], "h", ["short"]),
    # what the cell's text does not declare is not asked about: taken by its slots' sizes
    "a kernel a function-like macro declares": (
        '#define KERNEL(name) extern "C" __global__ void name(double d) {}\nKERNEL(f)\n', [],
        "f", None),
    "a C++ kernel a macro names as the extern C one's namespace hides": (
        '#define NS m\nnamespace NS { extern "C" __global__ void g(double d) {} }\n'
        "#undef NS\n__global__ void g(float) {}\n", [], "g", ["double"]),
    "an extern C block holding a kernel and a variable": (
        'extern "C" {\n__device__ int counter;\n__global__ void e(long l, bool b) '
        "{ counter += l + b; }\n}\n", [], "e", ["long", "bool"]),
}


@pytest.mark.parametrize("source, options, symbol, wanted", EXTERN_C.values(),
                         ids=list(EXTERN_C))
def test_extern_c_types_are_the_entitys_own(source, options, symbol, wanted):
    module = cudamagic.build(source, arch="sm_90", use_cache=False, options=options)
    params = module.kernels.signatures[symbol].params
    assert (list(params) if params is not None else None) == wanted
    for kernel in (k for k in module.kernels.values() if k.symbol == symbol):
        assert [p.ctype for p in kernel.params] == (wanted or [None] * len(kernel.params))


def test_a_hit_keeps_the_declared_types_and_an_older_entry_still_serves(tmp_path):
    cache = KernelCache(tmp_path / "cache")
    try:
        first = cudamagic.build(SOURCE, ["tfill<float>"], cache=cache)
        second = cudamagic.build(SOURCE, ["tfill<float>"], cache=cache)
        assert second.hit
        assert pack_args("fill", second["fill"].params, (None, 1, 5))[1] == struct.pack("<f", 1)
        # an entry written before the texts were stored: served, packed by size as before
        record, _ = cache.get(first.key)
        cache.put(first.key, dataclasses.replace(record, symbols=None))
        third = cudamagic.build(SOURCE, ["tfill<float>"], cache=cache)
        assert third.hit and [p.kind for p in third["fill"].params][1] is SlotKind.UNTYPED
    finally:
        cache.close()
