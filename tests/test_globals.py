"""A module's __constant__/__device__ variables listed from the CUBIN and typed by the compiler in
the one compile (toolchain/compile/probe.py), without a GPU (tests/test_gpu_globals.py writes and reads
them on one). Issue 27 item A1 and issue 29 items 5 and 6."""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pytest

import cudamagic
from cudamagic.errors import NameResolutionError, NoDeviceError
from cudamagic.launch.encode import pack_args
from cudamagic.store.cache import KernelCache
from cudamagic.toolchain.compile.probe import TypeGap
from cudamagic.toolchain.binary.variables import find

from .test_image import GLOBALS_SOURCE


def _types(module):
    return {v.cxx_name: (v.dtype, v.shape) for v in module.globals}


def test_module_globals_are_listed_with_their_types():
    module = cudamagic.build(GLOBALS_SOURCE, arch="sm_90", use_cache=False)
    got = {v.cxx_name: (v.name, v.size, v.space, v.dtype, v.shape) for v in module.globals}
    assert got == {
        "coeffs": ("coeffs", 64, "constant", "float32", (16,)),
        "limits": ("limits", 8, "constant", "int32", (2,)),
        "counter": ("counter", 4, "global", "int32", ()),
        "table": ("table", 120, "global", "float64", (3, 5)),
        "initialised": ("initialised", 4, "global", "int32", ()),
        "file_local": ("file_local", 4, "global", "int32", ()),
        "ns::scale": ("_ZN2ns5scaleE", 4, "global", "float32", ()),
        # a variable template's explicit instance
        "zero<float>": ("_Z4zeroIfE", 4, "global", "float32", ()),
    }
    assert {v.cxx_name: v.ctype for v in module.globals}["table"] == "double [3][5]"


_USE = 'extern "C" __global__ void use(float* o) {{ o[0] = {}; }}\n'

# (the cell's variables, options, wanted {C++ name: (dtype, shape)}): each row is a class of
# wrong answer the regular expression over the cell gave (issue 27 A1, issue 29 item 6)
CASES = {
    "a commented-out declaration above the real one": (
        "// __constant__ double w[4];\n__constant__ float w[8];\n" + _USE.format("w[1]"), [],
        {"w": ("float32", (8,))}),
    "a declaration in a block comment": (
        "/* __device__ double w[4]; */ __device__ float w[8];\n" + _USE.format("w[1]"), [],
        {"w": ("float32", (8,))}),
    "a declaration in an #ifdef branch that is not compiled": (
        "#ifdef WIDE\n__device__ double v[4];\n#else\n__device__ float v[4];\n#endif\n"
        + _USE.format("v[1]"), [], {"v": ("float32", (4,))}),
    "the #ifdef branch an option compiles": (
        "#ifdef WIDE\n__device__ double v[4];\n#else\n__device__ float v[4];\n#endif\n"
        + _USE.format("v[1]"), ["-DWIDE"], {"v": ("float64", (4,))}),
    "one name in two namespaces": (
        "namespace a { __device__ float s; }\nnamespace b { __device__ int s[4]; }\n"
        + _USE.format("a::s + b::s[1]"), [],
        {"a::s": ("float32", ()), "b::s": ("int32", (4,))}),
    "an array sized by its initialiser": (
        "__constant__ int a[] = {4, 5};\n" + _USE.format("a[1]"), [], {"a": ("int32", (2,))}),
    "an array sized by a macro": (
        "#define N 6\n__device__ float m[N][N + 1];\n" + _USE.format("m[1][2]"), [],
        {"m": ("float32", (6, 7))}),
    "an array sized by an option's macro": (
        "__device__ float m[N];\n" + _USE.format("m[1]"), ["-DN=3"], {"m": ("float32", (3,))}),
    "an array of a typedef'd element": (
        "typedef unsigned short u16;\nusing i64 = long long;\n__device__ u16 t[3];\n"
        "__device__ i64 big;\n" + _USE.format("t[1] + big"), [],
        {"t": ("uint16", (3,)), "big": ("int64", ())}),
    "a type spelled through a macro": (
        "#define REAL double\n__device__ REAL r[2];\n" + _USE.format("r[1]"), [],
        {"r": ("float64", (2,))}),
    "several declarators, an alignment and a pointer": (
        "__device__ __align__(16) float al[4], *p, third[2][3];\n"
        + _USE.format("al[0] + *p + third[1][2]"), [],
        {"al": ("float32", (4,)), "p": ("uint64", ()), "third": ("float32", (2, 3))}),
    "const and volatile elements, a half": (
        "#include <cuda_fp16.h>\n__device__ const volatile unsigned char cv[3] = {1, 2, 3};\n"
        "__device__ __half h[2];\n" + _USE.format("cv[1] + (float)h[1]"), [],
        {"cv": ("uint8", (3,)), "h": ("float16", (2,))}),
    "types written with decltype": (
        "__device__ float x[3];\n__device__ decltype(x) y;\n__device__ decltype(1.0) z[2];\n"
        + _USE.format("x[0] + y[1] + z[1]"), [],
        {"x": ("float32", (3,)), "y": ("float32", (3,)), "z": ("float64", (2,))}),
    "a struct is its bytes": (
        "struct P { int x; float y; };\n__device__ P pt;\n" + _USE.format("pt.y"), [],
        {"pt": (None, (8,))}),
    "a variable a macro declares is its bytes, not a guess": (
        "#define DECLARE(n) __device__ double n[2];\nDECLARE(mv)\n" + _USE.format("mv[1]"),
        [], {"mv": (None, (16,))}),
}


@pytest.mark.parametrize("source, options, wanted", CASES.values(), ids=list(CASES))
def test_each_type_is_the_compilers(source, options, wanted):
    module = cudamagic.build(source, arch="sm_90", use_cache=False, options=options)
    assert _types(module) == wanted


def test_a_type_the_compiler_gave_no_dtype_for_says_why():
    module = cudamagic.build(CASES["a struct is its bytes"][0], arch="sm_90", use_cache=False)
    (pt,) = module.globals
    assert (pt.ctype, pt.gap) == ("P", TypeGap.NOT_ARITHMETIC)
    module = cudamagic.build(CASES["a variable a macro declares is its bytes, not a guess"][0],
                             arch="sm_90", use_cache=False)
    (mv,) = module.globals
    assert (mv.ctype, mv.gap) == (None, TypeGap.NOT_ASKED)


ANONYMOUS = ("namespace { namespace b { __constant__ int a; } }\n"
             "namespace { __device__ float q[3]; }\n" + _USE.format("b::a + q[1]"))


def test_a_variable_in_an_anonymous_namespace_has_one_name_and_is_found_without_it(no_gpu):
    module = cudamagic.build(ANONYMOUS, arch="sm_90", use_cache=False)
    got = {v.cxx_name: (v.dtype, v.shape) for v in module.globals}
    assert got == {"(anonymous namespace)::b::a": ("int32", ()),
                   "(anonymous namespace)::q": ("float32", (3,))}
    assert find(module.globals, "b::a").cxx_name == "(anonymous namespace)::b::a"
    assert find(module.globals, "(anonymous namespace)::b::a").dtype == "int32"
    assert find(module.globals, "q").shape == (3,)
    with pytest.raises(NoDeviceError):
        module.get_global("b::a")  # found; the device is what is missing


VARIABLE_TEMPLATE = ("namespace z { template <class T> __device__ T tv = T(3); }\n"
                     + _USE.format("1.0f"))


def test_a_variable_template_instance_is_a_name_expression(tmp_path, no_gpu):
    """-n "&z::tv<float>": NVRTC instantiates the variable; it is listed, reached by the
    expression with and without the &, and a hit restores it like a kernel."""
    cache = KernelCache(tmp_path / "cache")
    try:
        first = cudamagic.build(VARIABLE_TEMPLATE, ["&z::tv<float>", "&z::tv<double>"],
                                arch="sm_90", cache=cache)
        again = cudamagic.build(VARIABLE_TEMPLATE, ["&z::tv<float>", "&z::tv<double>"],
                                arch="sm_90", cache=cache)
    finally:
        cache.close()
    assert not first.hit and again.hit
    for module in (first, again):
        assert _types(module) == {"z::tv<float>": ("float32", ()),
                                  "z::tv<double>": ("float64", ())}
        assert module.variable_expressions == {"&z::tv<float>": "_ZN1z2tvIfEE",
                                               "&z::tv<double>": "_ZN1z2tvIdEE"}
        for name in ("&z::tv<float>", "z::tv<float>", "_ZN1z2tvIfEE"):
            assert find(module.globals, name, module.variable_expressions).dtype == "float32"
        assert "&z::tv<float>" not in module.kernels and list(module.kernels) == ["use"]
        with pytest.raises(NoDeviceError):
            module.get_global("&z::tv<double>")


def test_a_module_that_travels_keeps_its_variables_types():
    """A module pickled to a Dask worker: the types come with it (they were uint8 there)."""
    source = VARIABLE_TEMPLATE + CASES["one name in two namespaces"][0].replace("use", "use2")
    module = cudamagic.build(source, ["&z::tv<float>"], arch="sm_90", use_cache=False)
    arrived = pickle.loads(pickle.dumps(module))
    assert arrived is not module
    assert _types(arrived) == _types(module) == {
        "a::s": ("float32", ()), "b::s": ("int32", (4,)), "z::tv<float>": ("float32", ())}
    assert arrived.variable_expressions == {"&z::tv<float>": "_ZN1z2tvIfEE"}


def test_get_global_names_what_there_is_and_needs_a_gpu(no_gpu):
    module = cudamagic.build(GLOBALS_SOURCE, arch="sm_90", use_cache=False)
    with pytest.raises(NameResolutionError, match="coeffs, limits"):
        module.get_global("coefs")
    with pytest.raises(NoDeviceError):
        module.get_global("coeffs")
    with pytest.raises(NoDeviceError):
        module.get_global("ns::scale")  # found by its C++ name; the device is what is missing


def test_a_cubin_from_elsewhere_has_no_types_and_says_so():
    module = cudamagic.build(GLOBALS_SOURCE, arch="sm_90", use_cache=False)
    loaded = cudamagic.load_cubin(module.cubin)
    assert {v.gap for v in loaded.globals} == {TypeGap.NO_SOURCE}
    assert all(v.dtype is None and v.shape == (v.size,) for v in loaded.globals)


def test_a_stored_variable_expression_that_lies_is_a_damaged_entry(tmp_path):
    """A stored map that gives &z::tv<float> the double instance's symbol is never served:
    the entry is bad, the cell compiles again, and NVRTC's own map serves."""
    import dataclasses

    names = ["&z::tv<float>", "&z::tv<double>"]
    cache = KernelCache(tmp_path / "cache")
    try:
        first = cudamagic.build(VARIABLE_TEMPLATE, names, arch="sm_90", cache=cache)
        record, _ = cache.get(first.key)
        lie = {**record.lowered, "&z::tv<float>": "_ZN1z2tvIdEE"}
        cache.put(first.key, dataclasses.replace(record, lowered=lie))
        again = cudamagic.build(VARIABLE_TEMPLATE, names, arch="sm_90", cache=cache)
    finally:
        cache.close()
    assert not again.hit and "does not match its CUBIN" in again.report.miss_reason
    assert again.variable_expressions["&z::tv<float>"] == "_ZN1z2tvIfEE"


def test_the_magic_takes_a_variable_as_a_name_expression(tmp_path, monkeypatch):
    """%%cuda -n "&z::tv<float>": the cell runs, its kernels are pushed, the variable is the
    module's (not pushed: it is no callable)."""
    from .test_magic import _shell

    ip = _shell(tmp_path, monkeypatch)
    ip.run_cell_magic("cuda", '-q -n "&z::tv<float>"', VARIABLE_TEMPLATE)
    module = ip.user_ns["cuda_module"]
    assert callable(ip.user_ns["use"]) and "&z::tv<float>" not in module.kernels
    assert module.variable_expressions == {"&z::tv<float>": "_ZN1z2tvIfEE"}
    assert not any(k.startswith("z_tv") for k in ip.user_ns)


# What a new user porting CuPy RawModule code met (from test_user_tries.py): a variable given as a name expression
VARIABLES = r"""
template <typename T> __device__ T table[4];
__constant__ float coeffs[8];
extern "C" __global__ void rd(float* o) { o[0] = table<float>[0] + coeffs[1]; }
template <typename T> __global__ void k(T* o) { o[0] = table<T>[1]; }
"""


@pytest.mark.parametrize("names", [["table<float>"], ["coeffs"], ["k<float>", "table<float>"],
                                   ["table<double>"], ["&table<double>"]])
def test_a_variable_given_as_a_name_expression_is_taken_as_nvrtc_takes_it(tmp_path, names):
    """NVRTC's nvrtcAddNameExpression takes a variable (and instantiates a variable template's
    instance no code uses): the module lists it, typed, and reaches it by the expression."""
    module = cudamagic.build(VARIABLES, names, arch="sm_90", cache=tmp_path)
    variables = [n for n in names if not n.startswith("k<")]
    assert set(module.variable_expressions) == set(variables)
    assert all(v not in module.kernels for v in variables)
    for v in variables:
        found = find(module.globals, v, module.variable_expressions)
        assert found.dtype == ("float64" if "double" in v else "float32")
        assert found.shape == ((8,) if v == "coeffs" else (4,))


def test_without_the_name_expression_the_variable_is_listed(tmp_path):
    module = cudamagic.build(VARIABLES, ["k<float>"], arch="sm_90", cache=tmp_path)
    assert {"table<float>", "coeffs"} <= {v.cxx_name for v in module.globals}


# get_global as a MemoryPointer (issue 29 item 3; from test_parity_more.py)
# ---- item 3: get_global is a cupy.cuda.MemoryPointer, as CuPy's RawModule gives it ----

VIEW_SOURCE = r"""
__device__ float x[100];
__constant__ int coeffs[4] = {1, 2, 3, 4};
extern "C" __global__ void bump(int n) { int i = threadIdx.x; if (i < n) x[i] += coeffs[i % 4]; }
"""


class _Owner:
    """Stands in for the module (what must stay alive while the memory is used)."""


def _view(dtype=None):
    from cudamagic.toolchain.binary.variables import Variable, device_global

    var = Variable("x", "x", 400, "global", "float32", (100,))
    owner = _Owner()
    return device_global(var, 0x7F0000004000, 0, dtype, owner), owner


def test_the_global_view_is_a_memory_pointer_and_keeps_the_array_interface():
    from cupy.cuda import memory

    view, owner = _view()
    assert isinstance(view, memory.MemoryPointer)
    assert (view.ptr, view.device_id, view.mem.size) == (0x7F0000004000, 0, 400)
    import gc
    import weakref

    alive = weakref.ref(owner)
    del owner
    gc.collect()
    assert alive() is not None  # the module stays alive while the pointer (or CuPy's arrays
    # over it) does
    assert view.__cuda_array_interface__ == {"shape": (100,), "typestr": "<f4",
                                             "data": (0x7F0000004000, False), "strides": None,
                                             "version": 3}
    assert "x global float32[100] at 0x7f0000004000 on device 0" in repr(view)
    assert _view(np.uint8)[0].shape == (400,)


def test_cupy_ndarray_takes_the_view_as_its_memptr():
    """``cupy.ndarray((100,), cupy.float32, mod.get_global("x"))``: CuPy's constructor takes
    only a MemoryPointer there (a plain view was "Cannot convert DeviceGlobal to
    cupy.cuda.memory.MemoryPointer"); making the array touches no device."""
    import cupy

    from cudamagic.toolchain.binary.variables import DeviceGlobal

    view, _ = _view()
    array = cupy.ndarray((100,), cupy.float32, view)
    assert (array.data.ptr, array.shape, array.dtype) == (0x7F0000004000, (100,), np.float32)
    assert array.data is view
    plain = DeviceGlobal(view.variable, 0x7F0000004000, 0, None, None)
    with pytest.raises(TypeError, match="MemoryPointer"):
        cupy.ndarray((100,), cupy.float32, plain)


def test_the_view_passes_as_a_pointer_argument():
    module = cudamagic.build('extern "C" __global__ void k(float* p) {}', use_cache=False)
    view, _ = _view()
    assert pack_args("k", module["k"].params, [view]) == [struct.pack("<Q", 0x7F0000004000)]


@pytest.mark.gpu
def test_ported_get_global_code_runs_unchanged():
    import cupy

    module = cudamagic.build(VIEW_SOURCE, use_cache=False)
    x = cupy.ndarray((100,), cupy.float32, module.get_global("x"))
    x[...] = cupy.arange(100, dtype=cupy.float32)
    module["bump"]((1,), (128,), (100,))
    expected = np.arange(100, dtype=np.float32) + np.tile([1, 2, 3, 4], 25)
    assert x.get().tolist() == expected.tolist()
    assert cupy.asarray(module.get_global("coeffs")).get().tolist() == [1, 2, 3, 4]


# --- globals lookup ---
# module.globals (issue 31 item 4): still a tuple in the CUBIN's order (code that indexes or
# iterates it keeps working), looked up by name as well, with a repr that names a few and counts
# the rest instead of printing every variable (a CCCL cell holds a thousand: a 414 KB repr).
import pytest

import cudamagic
from cudamagic.errors import NameResolutionError
from cudamagic.toolchain.binary import variables as V

SOURCE = "namespace ns { __device__ double scale; }\n" + "".join(
    f"__constant__ float c{i}[{i + 1}];\n" for i in range(30)) + (
    'extern "C" __global__ void k(float* x) { x[0] = c0[0] + c29[0] + ns::scale; }\n')


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    return cudamagic.build(SOURCE, cache=tmp_path_factory.mktemp("cache"))


def test_a_tuple_in_the_cubins_order_also_looked_up_by_name(module):
    g = module.globals
    assert isinstance(g, tuple) and len(g) == 31
    assert g[0] is tuple(g)[0] and list(g[:2]) == list(tuple(g)[:2])
    assert g["c3"].size == 16 and g["c3"] is next(v for v in g if v.name == "c3")
    assert g["ns::scale"].name == "_ZN2ns5scaleE" and g["_ZN2ns5scaleE"].cxx_name == "ns::scale"
    assert "c29" in g and "nothing" not in g and g[0] in g
    assert g.get("nothing") is None and g.get("c1").size == 8
    with pytest.raises(NameResolutionError, match="and 21 more"):
        g["nothing"]


def test_its_repr_names_a_few_and_counts_the_rest(module):
    text = repr(module.globals)
    assert text.startswith("<31 variables: ") and text.endswith(f"and {31 - V.SHOWN} more>")
    assert len(text) < 200, len(text)
    assert repr(V.Variables()) == "<0 variables>"


_NAMED = ('namespace ns { __device__ double w[3]; }\n__device__ float w[2];\n'
          'namespace { __device__ int an; }\n' + _USE.format("w[1] + ns::w[1] + an"))


# a name as C++ writes it -> the variable it names: a fully qualified name (::ns::w) named
# none ("this module holds no __constant__ or __device__ variable named '::ns::w'")
@pytest.mark.parametrize("name, wanted", [
    ("::w", "w"), ("::ns::w", "ns::w"), ("&::ns::w", "ns::w"), (":: ns::w", "ns::w"),
    ("::an", "(anonymous namespace)::an"), ("ns::w", "ns::w"), ("w", "w"),
])
def test_a_variable_is_found_by_its_fully_qualified_name(name, wanted):
    module = cudamagic.build(_NAMED, arch="sm_90", use_cache=False)
    assert module.globals[name].cxx_name == wanted
    assert name in module.globals
    with pytest.raises(NameResolutionError):
        module.globals["::" + name.lstrip(":& ") + "x"]
