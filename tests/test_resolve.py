"""Resolution: stored map verified against the image, demangling where it decides, never a guess."""

from __future__ import annotations

import pytest

from cudamagic.cxx.parse import parse_demangled
from cudamagic.cxx.signatures import Signatures
from cudamagic.cxx.resolve import plain_kernels, resolve

from .test_names import UNDECIDABLE
import functools
import cudamagic
from cudamagic.toolchain.compile.nvrtc import compile_cubin
from cudamagic.toolchain.binary.demangle import CuFilt, LibStdCxx, find_cufilt
from cudamagic.errors import NameResolutionError
from cudamagic.cxx.pyname import python_name


def _kernels(rows, column: str):
    placeholders = column == "cufilt"
    return {r.symbol: parse_demangled(getattr(r, column), placeholders) for r in rows}


@pytest.mark.parametrize("column", ["cufilt", "libstdcxx"])
def test_without_stored_map_decidable_ones_resolve_exactly(rows, column):
    res = resolve([r.expression for r in rows], _kernels(rows, column))
    truth = {r.expression: r.symbol for r in rows}
    got = {x.name_expression: x.symbol for x in res.resolved}
    assert all(x.resolved_by == "demangled" for x in res.resolved)
    assert got == {e: s for e, s in truth.items() if e not in UNDECIDABLE}  # never a wrong symbol
    assert {u.name_expression for u in res.unresolved} == UNDECIDABLE
    assert (res.unresolved or res.stale)


def test_stored_map_is_taken_when_its_symbols_exist(rows):
    truth = {r.expression: r.symbol for r in rows}
    res = resolve(list(truth), _kernels(rows, "cufilt"), stored=truth)
    assert not (res.unresolved or res.stale)
    assert {x.name_expression: x.symbol for x in res.resolved} == truth
    # verified where the demangled name decides; accepted unverified where it cannot
    assert {x.name_expression: x.resolved_by for x in res.resolved} == {
        e: "stored-unverified" if e in UNDECIDABLE else "stored" for e in truth}


def test_stored_symbol_missing_from_image_is_stale(rows):
    truth = {r.expression: r.symbol for r in rows}
    kernels = _kernels(rows, "cufilt")
    del kernels[truth["fill<float>"]]
    res = resolve(["fill<float>", "fill<int>"], kernels, stored=truth)
    assert res.stale == ("fill<float>",) and (res.unresolved or res.stale)


def test_overloads_need_a_cast(rows):
    kernels = _kernels(rows, "cufilt")
    res = resolve(["overloaded"], kernels)
    assert res.unresolved[0].reason.startswith("it matches 2 kernels")
    assert len(res.unresolved[0].candidates) == 2


def test_unknown_expression_lists_close_candidates(rows):
    res = resolve(["fil<float>"], _kernels(rows, "libstdcxx"))
    assert res.unresolved and any("fill<float>" in c for c in res.unresolved[0].candidates)


def test_plain_kernels_are_extern_c_and_unique_non_templates(rows):
    kernels = Signatures({r.symbol: r.cufilt for r in rows}, placeholders=True)
    plain = {p.name_expression: p for p in plain_kernels(kernels, set())}
    assert set(plain) == {"c_kernel"}  # "overloaded" has two kernels: not plain
    assert plain["c_kernel"].resolved_by == "extern-c"
    assert len(kernels._parsed) == 3  # template instances were not parsed to find that out


def _swapped(truth, a, b):
    out = dict(truth)
    out[a], out[b] = truth[b], truth[a]
    return out


@pytest.mark.parametrize("column", ["cufilt", "libstdcxx"])
@pytest.mark.parametrize("a, b", [
    ("fill<float>", "fill<double>"), ("shift<float, 3>", "shift<float, -3>"),
    ("mode<(geo::v2::Mode)0>", "lits<'a', 123456789012LL, 18446744073709551615ull>")])
def test_swapped_stored_map_is_stale(rows, column, a, b):
    truth = {r.expression: r.symbol for r in rows}
    res = resolve([a, b, "fill<int>"], _kernels(rows, column), stored=_swapped(truth, a, b))
    assert res.stale == (a, b) and (res.unresolved or res.stale)
    assert all("contradicts it" in why for why in res.stale_reasons)
    assert [(x.name_expression, x.resolved_by) for x in res.resolved] == [("fill<int>", "stored")]


def test_swap_the_names_cannot_decide_is_accepted_unverified(rows):
    # defaults<> may be defaults<double, 4> (default arguments are not in the text), and an
    # enumerator may be any value: these swaps are not caught (undecidable, not contradicted);
    # defaults<double> against defaults<float, 4> is
    truth = {r.expression: r.symbol for r in rows}
    stored = _swapped(truth, "defaults<>", "defaults<double>")
    stored = _swapped(stored, "mode<geo::v2::Mode::Exact>", "mode<(geo::v2::Mode)0>")
    res = resolve(["defaults<>", "defaults<double>", "mode<geo::v2::Mode::Exact>"],
                  _kernels(rows, "cufilt"), stored=stored)
    assert res.stale == ("defaults<double>",)
    assert "template argument 1: double is not float" in res.stale_reasons[0]
    assert {x.name_expression: x.resolved_by for x in res.resolved} == {
        "defaults<>": "stored-unverified", "mode<geo::v2::Mode::Exact>": "stored-unverified"}


@pytest.fixture(scope="module")
def small_cubin():
    from cudamagic.toolchain.compile.nvrtc import compile_cubin

    source = ("template <int N> __global__ void t() {}\n"
              "template <auto V> __global__ void a() {}\n"
              "template <typename T> __global__ void k(T*) {}\n")
    exprs = ["t<1>", "t<2>", "a<1>", "a<1u>", "a<(bool)1>", "k<float>", "k<double>",
             "k<unsigned long>"]
    return compile_cubin(source, exprs, ["-arch=sm_90"])


def _image_kernels(built):
    from cudamagic.toolchain.binary.demangle import LibStdCxx
    from cudamagic.toolchain.binary.image import read_cubin

    symbols = list(read_cubin(built.cubin).symbols)
    return Signatures(dict(zip(symbols, LibStdCxx().demangle(symbols))), placeholders=False)


def test_stored_map_from_nvrtc_is_verified_and_a_swapped_one_is_stale(small_cubin):
    truth = small_cubin.lowered
    kernels = _image_kernels(small_cubin)
    res = resolve(list(truth), kernels, stored=truth)
    assert not (res.unresolved or res.stale) and {x.resolved_by for x in res.resolved} == {"stored"}
    assert {x.name_expression: x.symbol for x in res.resolved} == truth
    for a, b in [("t<1>", "t<2>"), ("k<float>", "k<double>"), ("t<2>", "a<1u>")]:
        res = resolve([a, b], kernels, stored=_swapped(truth, a, b))
        assert res.stale == (a, b), (a, b, res)
    # int 1 against unsigned 1 or true: the same kernel if the parameter is unsigned or bool, and
    # the symbol cannot say it is auto; such a swap is served unverified, never called verified
    for a, b in [("a<1>", "a<1u>"), ("a<1>", "a<(bool)1>")]:
        res = resolve([a, b], kernels, stored=_swapped(truth, a, b))
        assert {x.resolved_by for x in res.resolved} == {"stored-unverified"}, (a, b, res)


def test_alias_in_a_stored_map_is_accepted_unverified(small_cubin):
    kernels = _image_kernels(small_cubin)
    stored = {"k<my_size_t>": small_cubin.lowered["k<unsigned long>"],
              "k<my_float>": small_cubin.lowered["k<float>"]}
    res = resolve(list(stored), kernels, stored=stored)
    assert not (res.unresolved or res.stale) and {x.resolved_by for x in res.resolved} == {"stored-unverified"}


@pytest.mark.parametrize("expr, verdict", [
    ("add<size_t>", "contradiction"), ("add<ptrdiff_t>", "contradiction"),
    ("add<unsigned int>", "equal")])
def test_size_t_is_what_this_target_makes_it(expr, verdict):
    """size_t is unsigned long on 64-bit Linux (NVRTC declares it so): never 'may be an alias of
    unsigned int', and an instance for unsigned int is not the kernel add<size_t> names."""
    from cudamagic.cxx.compare import compare
    from cudamagic.cxx.parse import parse_demangled, parse_expression

    got, why = compare(parse_expression(expr), parse_demangled("void add<unsigned int>(unsigned int*)"))
    assert got == verdict
    assert "alias" not in why
    if verdict == "contradiction":
        assert "on this target" in why


def test_a_misspelled_plain_kernel_is_named(compiler):
    import cudamagic
    from cudamagic.errors import CompileError

    source = "__global__ void kernel(float* x) {}\ntemplate <class T> __global__ void t(T* x) {}\n"
    for wrong in ("kernal", "Kernel", "kernell"):
        with pytest.raises(CompileError) as info:
            cudamagic.build(source, [wrong], use_cache=False)
        assert "a non-template kernel needs no -n" in str(info.value)
        assert "did you mean kernel?" in str(info.value)


# --------------------------------------------------------------------------------------------------
# Issue 9, item 2: the examples that resolved to a wrong kernel, through ``load_cubin``.
#
# Each CUBIN is built by the real NVRTC; its ``lowered`` map is the truth. Before the typed model,
# ``t<(bool)2>`` took ``t<2>``'s symbol (NVRTC: ``t<1>``), ``t<'\xff'>`` took ``t<255>``'s (NVRTC:
# -1, char is signed), ``t<(short)70000>`` took ``t<70000>``'s (NVRTC: 4464), and the same for
# ``template <auto V>`` with ``(unsigned)-1``, ``(unsigned long)-1``, ``(unsigned char)300`` and
# ``(int)true``. Now a typed ``int`` parameter makes them undecidable (the symbol ``t<1>`` cannot say
# whether the parameter is ``int`` or ``auto``, and for ``auto`` it would be ``t<true>``): an error
# listing the candidates. With ``auto`` they are decided, and right.

SOURCE = r"""
template <int V> __global__ void t() {}
template <auto V> __global__ void a() {}
"""
OPTIONS = ["-arch=sm_90", "-std=c++17"]

# expression -> the wrong kernel's expression it took before (its look-alike with the cast dropped)
TYPED = {"t<(bool)2>": "t<2>", "t<'\\xff'>": "t<255>", "t<(short)70000>": "t<70000>"}
AUTO = {"a<(bool)2>": "a<2>", "a<'\\xff'>": "a<255>", "a<(short)70000>": "a<70000>",
        "a<(unsigned)-1>": "a<-1>", "a<(unsigned long)-1>": "a<-1>",
        "a<(unsigned char)300>": "a<300>", "a<(int)true>": "a<true>"}


def _demanglers():
    out = [pytest.param(LibStdCxx(), id="libstdc++")]
    path = find_cufilt()
    out.append(pytest.param(CuFilt(path) if path else None, id="cu++filt",
                            marks=pytest.mark.skipif(not path, reason="no cu++filt here")))
    return out


@functools.lru_cache(maxsize=None)
def _built(expr: str):
    """A CUBIN of ``expr`` and its look-alike (the kernel the old code gave it)."""
    return compile_cubin(SOURCE, [(TYPED | AUTO)[expr], expr], OPTIONS)


@pytest.mark.parametrize("demangler", _demanglers())
@pytest.mark.parametrize("expr", list(TYPED))
def test_typed_parameter_cast_is_undecidable_not_wrong(demangler, expr):
    built = _built(expr)
    assert built.lowered[expr] != built.lowered[TYPED[expr]]
    with pytest.raises(NameResolutionError) as info:
        cudamagic.load_cubin(built.cubin, [expr], demangler=demangler)
    message = str(info.value)
    assert "cannot decide" in message
    assert demangler.demangle([built.lowered[expr]])[0] in message  # the candidate is named


@pytest.mark.parametrize("demangler", _demanglers())
@pytest.mark.parametrize("expr", list(AUTO))
def test_auto_parameter_cast_resolves_to_nvrtcs_kernel(demangler, expr):
    built = _built(expr)
    pair = [expr, AUTO[expr]]
    mod = cudamagic.load_cubin(built.cubin, pair, demangler=demangler)
    assert {e: mod[e].symbol for e in pair} == {e: built.lowered[e] for e in pair}
    assert {mod[e].resolved_by for e in pair} == {"demangled"}
    # two kernels, two Python names: none taken from the look-alike
    assert mod.kernels[expr].python_name != mod.kernels[AUTO[expr]].python_name


@pytest.mark.parametrize("expr, name, lookalike", [
    ("t<(bool)2>", "t_true", "t_2"), ("a<(bool)2>", "a_true", "a_2"),
    ("a<'\\xff'>", "a_char_m1", "a_255"), ("t<(short)70000>", "t_short_4464", "t_70000"),
    ("a<(unsigned)-1>", "a_4294967295u", "a_m1"),
    ("a<(unsigned long)-1>", "a_18446744073709551615ul", "a_m1"),
    ("a<(unsigned char)300>", "a_unsigned_char_44", "a_300"), ("a<(int)true>", "a_1", "a_true"),
])
def test_python_names_come_from_the_evaluated_value(expr, name, lookalike):
    assert python_name(expr) == name
    assert python_name(AUTO.get(expr) or TYPED[expr]) == lookalike


# What a new user porting CuPy RawModule code met (from test_user_tries.py): a launch attribute is not a kernel's name
# where kernel authors put launch attributes: between void and the name (CUDA's guide), or
# before void; each with one or two arguments
ATTRIBUTES = ["__launch_bounds__(256)", "__launch_bounds__(256, 2)", "__launch_bounds__( 128 )",
              "__cluster_dims__(2, 1, 1)", "__maxnreg__(32)", "__noinline__"]
PLACES = ["__global__ void {a} k", "__global__ {a} void k", "{a} __global__ void k"]


@pytest.mark.parametrize("attribute", ATTRIBUTES)
@pytest.mark.parametrize("place", PLACES)
def test_a_launch_attribute_is_not_read_as_the_kernels_name(tmp_path, attribute, place):
    from cudamagic.cxx.kernel_names import plain_kernels, template_kernels

    declaration = place.format(a=attribute) + "(float* x) { x[threadIdx.x] = 1.0f; }"
    template = "template <typename T>\n" + declaration.replace("float", "T")
    assert template_kernels(template) == ["k"] and plain_kernels(template) == []
    assert plain_kernels(declaration) == ["k"] and template_kernels(declaration) == []
    if attribute == "__noinline__":
        return  # a function attribute NVRTC refuses on a kernel; the reading is what counts
    without = cudamagic.build(template, arch="sm_90", cache=tmp_path)
    assert any("template k is not compiled" in w for w in without.report.warnings)
    assert not any("__" in w.split("template ")[-1][:20] for w in without.report.warnings)
    built = cudamagic.build(template, ["k<float>"], arch="sm_90", cache=tmp_path)
    assert not any("is not compiled" in w for w in built.report.warnings)
