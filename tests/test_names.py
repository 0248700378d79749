"""Canonical forms: a name expression and both demanglers' outputs must agree where they can."""

from __future__ import annotations

import pytest

from cudamagic.cxx import parse
from cudamagic.cxx.compare import compare
from cudamagic.cxx.quick import quick_equal
from cudamagic.cxx.parse import canonical, parse_demangled, parse_expression
from cudamagic.cxx.pyname import python_name, valid_python_name

# Spellings the text cannot decide (docs/resolution.md): enumerator vs cast, default template args,
# and a value of another type than the demangled one: ``flags<double, 0, false>`` gives int 0 where
# the symbol holds unsigned int 0, ``lits<(char)66, -1, 0>`` int -1 and 0 where it holds long long
# -1 and unsigned long long 0. Equal once converted, but the mangling of a ``template <auto V>``
# argument is the same, and there the kernel would hold int: only the typed reading makes them the
# same kernel, and the symbol cannot say which reading holds.
UNDECIDABLE = {"mode<geo::v2::Mode::Exact>", "plain_enum<geo::v2::P1>", "defaults<>",
               "defaults<double>", "flags<double, 0, false>", "lits<(char)66, -1, 0>"}


def test_both_demanglers_give_one_canonical_signature(rows):
    for r in rows:
        cuf = parse_demangled(r.cufilt, placeholders=True)
        lib = parse_demangled(r.libstdcxx, placeholders=False)
        assert (cuf.name, cuf.params) == (lib.name, lib.params), r.expression


def test_expression_matches_its_own_demangled_name_unless_undecidable(rows):
    for r in rows:
        want = parse_expression(r.expression)
        got = parse_demangled(r.cufilt, placeholders=True)
        same = want.name == got.name and (want.params is None or want.params == got.params)
        assert same == (r.expression not in UNDECIDABLE), r.expression


def test_expression_never_matches_another_symbols_name(rows):
    # a spelling may only be equal to the demangled names of its own symbol
    for r in rows:
        want = parse_expression(r.expression)
        for other in rows:
            if other.symbol == r.symbol:
                continue
            sig = parse_demangled(other.libstdcxx)
            same = want.name == sig.name and (want.params is None or want.params == sig.params)
            assert not same, (r.expression, other.libstdcxx)


@pytest.mark.parametrize("symbol_text, expression", [
    # cu++filt's real outputs on the GPU machine (CUDA 13.0), from the core issue
    ("void my_sqrt<float>(T1 *, int)", "my_sqrt<float>"),
    ("void ns::scale<float, (int)3>(T1 *, int)", "ns::scale<float, 3>"),
    ("void scale<float, (int)-1>(T1 *, int)", "scale<float,-1>"),
    ("void flag<double, (bool)1>(T1 *, unsigned int)", "flag<double, true>"),
    ("void h<unsigned int, (unsigned int)5>(T1 *)", "h<unsigned, 5u>"),
    ("void ns::st<ns::S>(T1, T1 *)", "::ns::st< ns::S >"),
    ("plain", "plain"),
])
def test_issue_examples_from_cufilt(symbol_text, expression):
    assert parse_demangled(symbol_text, placeholders=True).name == parse_expression(expression).name


def test_placeholders_take_the_template_arguments():
    sig = parse_demangled("void ns::st<ns::S>(T1, T1 *)", placeholders=True)
    assert sig.params == ("ns::S", "ns::S*")
    pack = parse_demangled("void pack<int, float, double>(T1...)", placeholders=True)
    assert pack.params == ("int", "float", "double")


@pytest.mark.parametrize("a, b", [
    ("unsigned", "unsigned int"), ("long int", "long"), ("signed", "int"),
    ("short int", "short"), ("long unsigned int", "unsigned long"),
    ("const float *", "float const*"), ("k< 0x1F >", "k<31>"), ("k<'A'>", "k<(char)65>"),
    ("k<(long long)-1>", "k<-1ll>"), ("k<complex<float> >", "k<complex<float>>"),
    ("k<(bool)0>", "k<false>"), ("k<1'000>", "k<1000>"),
])
def test_equal_spellings(a, b):
    assert canonical(a) == canonical(b)


@pytest.mark.parametrize("a, b", [
    ("k<my_size>", "k<unsigned long>"),     # an alias: not decidable from text
    ("k<Tag::B>", "k<(Tag)1>"),             # an enumerator against a cast
    ("k<signed char>", "k<char>"),          # distinct types
    ("k<float*>", "k<float>"),
    ("k<1>", "k<-1>"),
    ("k<'A'>", "k<65>"),                    # char 65 and int 65: two kernels of template <auto V>
    ("k<(bool)2>", "k<2>"),                 # (bool)2 is true
    ("k<5u>", "k<5>"),
])
def test_unequal_spellings(a, b):
    assert canonical(a) != canonical(b)


def test_cast_expression_gives_parameters():
    sig = parse_expression("(void(*)(float *, int))overloaded")
    assert sig.name == "overloaded" and sig.params == ("float*", "int")


@pytest.mark.parametrize("expr, name", [
    ("saxpy<float>", "saxpy_float"), ("ns::scale<float, 3>", "ns_scale_float_3"),
    ("ns::scale<float, (int)3>", "ns_scale_float_3"), ("shift<float, -3>", "shift_float_m3"),
    ("fill<unsigned>", "fill_unsigned_int"),
    ("(void(*)(double*))overloaded", "overloaded_double_ptr"),
    ("k<complex<float>>", "k_complex_float"), ("pack<>", "pack"), ("lambda", "lambda_"),
    ("k<1>", "k_1"),
])
def test_python_names(expr, name):
    assert python_name(expr) == name
    assert python_name(expr).isidentifier()


@pytest.mark.parametrize("name, ok", [
    ("saxpy_float", True), ("_private", True), ("k_1", True), ("not an identifier; rm -rf", False),
    ("1k", False), ("", False), ("lambda", False), ("match", False), ("_", False),
    ("k-1", False), ("caf\u00e9", True), (None, False), ("a\u00b7b\n", False),
])
def test_valid_python_name(name, ok):
    assert valid_python_name(name) is ok


@pytest.mark.parametrize("expr, name", [
    ("t<(bool)2>", "t_true"), ("t<true>", "t_true"), ("t<2>", "t_2"), ("t<0x10>", "t_16"),
    ("t<'a'>", "t_char_97"), ("t<97>", "t_97"), ("t<5u>", "t_5u"), ("t<(unsigned)5>", "t_5u"),
    ("t<-1ll>", "t_m1ll"), ("t<(short)-1>", "t_short_m1"), ("k<S<(short)70000>>", "k_S_short_4464"),
    ("mode<(geo::Mode)1>", "mode_geo_Mode_1"), ("k<float const*>", "k_float_const_ptr"),
    ("k<const float *>", "k_float_const_ptr"), ("match", "match_"), ("k<N + 1>", "k_N_1"),
])
def test_python_names_of_typed_values(expr, name):
    assert python_name(expr) == name and valid_python_name(name)


@pytest.mark.parametrize("want, got, verdict", [
    ("t<1>", "void t<1>()", "equal"),
    ("t<1>", "void t<2>()", "contradiction"),
    ("t<(bool)2>", "void t<true>()", "equal"),
    ("t<(bool)2>", "void t<1>()", "undecidable"),       # an int parameter, or auto (then t<true>)
    ("t<(bool)2>", "void t<2>()", "contradiction"),     # (bool)2 is true: as int, 1
    ("t<'\\xff'>", "void t<(char)-1>()", "equal"),
    ("t<'\\xff'>", "void t<255>()", "contradiction"),
    ("t<'\\xff'>", "void t<-1>()", "undecidable"),
    ("t<(short)70000>", "void t<(short)4464>()", "equal"),
    ("t<(short)70000>", "void t<70000>()", "contradiction"),
    ("t<(short)70000>", "void t<4464>()", "undecidable"),
    ("t<(unsigned)-1>", "void t<4294967295u>()", "equal"),
    ("t<(unsigned)-1>", "void t<-1>()", "undecidable"),       # back to int: -1
    ("t<(unsigned)-1>", "void t<4294967295l>()", "undecidable"),
    ("t<(unsigned)-1>", "void t<-1l>()", "contradiction"),
    ("t<(unsigned long)-1>", "void t<(unsigned long)18446744073709551615>()", "equal"),
    ("t<(unsigned char)300>", "void t<(unsigned char)44>()", "equal"),
    ("t<(int)true>", "void t<1>()", "equal"),
    ("t<(int)true>", "void t<true>()", "undecidable"),
    ("t<-1>", "void t<-1ll>()", "undecidable"),
    ("t<-1>", "void t<18446744073709551615ull>()", "undecidable"),  # -1 as unsigned long long
    ("t<2147483648>", "void t<2147483648l>()", "equal"),            # too big for int: long
    ("t<0x80000000>", "void t<2147483648u>()", "equal"),            # hex: unsigned int first
    ("t<-2147483648>", "void t<-2147483648>()", "undecidable"),     # long -2^31 against int
    ("k<float>", "void k<double>()", "contradiction"),
    ("k<size_t>", "void k<unsigned long>()", "equal"),   # NVRTC declares size_t: LP64 here
    ("k<size_t>", "void k<unsigned int>()", "contradiction"),
    ("k<ptrdiff_t>", "void k<long>()", "equal"),
    ("k<ns::size_t>", "void k<unsigned long>()", "undecidable"),  # another size_t
    ("k<my_size>", "void k<unsigned long>()", "undecidable"),
    ("k<S<1>>", "void k<S<2> >()", "contradiction"),
    ("k<Alias<1>>", "void k<S<1> >()", "undecidable"),
    ("mode<Mode::B>", "void mode<(Mode)1>()", "undecidable"),
    ("mode<(Mode)0>", "void mode<(Mode)1>()", "contradiction"),
    ("mode<(Mode)2>", "void mode<(Mode)1>()", "undecidable"),       # enum E : bool
    ("d<>", "void d<float, 4>()", "undecidable"),
    ("d<double>", "void d<float, 4>()", "contradiction"),
    ("ns::inl<3>", "void ns::v1::inl<3>()", "undecidable"),        # an inline namespace
    ("f<1>", "void g<1>()", "contradiction"),
    ("(void(*)(float*))f", "f(float*)", "equal"),
    ("(void(*)(const int))f<int>", "void f<int>(int)", "equal"),
    ("(void(*)(double*))f", "f(float*)", "contradiction"),
    ("(void(*)(my_t*))f", "f(float*)", "undecidable"),
    ("t<1.5f>", "void t<(float)[3fc00000]>()", "undecidable"),
    ("k<float* __restrict__>", "void k<float* restrict>()", "equal"),
    ("k<volatile const float*>", "void k<float const volatile*>()", "equal"),
    ("k<void(int)>", "void k<void (int)>()", "equal"),      # a function type, not a cast
    ("k<void(*)(int)>", "void k<void (*)(int)>()", "equal"),
    ("k<int[3]>", "void k<int [3]>()", "equal"),
    ("k<int(3)>", "void k<3>()", "equal"),                  # a functional cast
    ("k<3>", "void k<int>()", "contradiction"),
    ("k<int>", "void k<3>()", "contradiction"),
    ("k<N>", "void k<3>()", "undecidable"),                 # a constant
])
def test_compare_verdicts(want, got, verdict):
    assert compare(parse_expression(want), parse_demangled(got))[0] == verdict
    assert not quick_equal(want, got) or verdict == "equal"


@pytest.mark.parametrize("expr, demangled, quick", [
    ("k<5>", "void k<5>(float*, int)", True), ("k<5>", "void k<(int)5>(T1 *, int)", True),
    ("ns::k<float, 5u, true>", "void ns::k<float, (unsigned int)5, (bool)1>(T1)", True),
    ("k<-1ll>", "void k<(long long)-1>()", True), ("c_kernel", "c_kernel", True),
    ("k<2147483648>", "void k<2147483648>()", False),     # long for C++, int for libstdc++
    ("k<-2147483648>", "void k<-2147483648>()", False),
    ("k<5>", "void k<5u>()", False), ("k<05>", "void k<05>()", False),
    ("k<-1u>", "void k<-1u>()", False),                   # -1u is 4294967295u
    ("k<(char)97>", "void k<(char)97>()", False),          # parsed instead
    ("k<1>(void (*", "void k<1>(void (*)(int))", False),
    ("k< 5 >", "void k<5>()", False),
])
def test_quick_equal(expr, demangled, quick):
    assert quick_equal(expr, demangled) is quick
    if quick:
        assert compare(parse_expression(expr), parse_demangled(demangled, True))[0] == "equal"


def _shape(sig):
    def arg(a):
        return (type(a).__name__, a.key, a.exact, getattr(a, "closed", None),
                getattr(a, "template", None),
                None if getattr(a, "args", None) is None else tuple(map(arg, a.args)))

    parts = None if sig.parts is None else tuple(
        (ident, None if args is None else tuple(map(arg, args))) for ident, args in sig.parts)
    return sig.name, sig.exact, parts, sig.params


def _fast_and_full_agree(text, demangled=False, placeholders=False):
    if demangled:
        fast = parse._fast_demangled(text, placeholders)
        full = parse._full_demangled(text, placeholders)
    else:
        fast, full = parse._fast_expression(text), parse._full_expression(text)
    if fast is not None:
        assert _shape(fast) == _shape(full), text
    return fast is not None


def test_fast_path_agrees_with_the_full_parser(rows):
    from hypothesis import given, settings, strategies as st

    from .test_resolution_property import name_expression

    taken = []
    for r in rows:
        taken.append(_fast_and_full_agree(r.expression))
        taken.append(_fast_and_full_agree(r.cufilt, True, True))
        taken.append(_fast_and_full_agree(r.libstdcxx, True, False))
    assert sum(taken) > len(taken) // 2  # the fast path takes most of them

    words = st.sampled_from(["int", "unsigned", "unsigned int", "long long", "float", "T", "N",
                             "true", "false", "signed char", "char", "bool", "const", "S"])
    number = st.builds(lambda m, v, s: f"{m}{v}{s}", st.sampled_from(["", "-", "- "]),
                       st.sampled_from(["0", "7", "08", "010", "2147483647", "2147483648",
                                        "4294967296", "9223372036854775808",
                                        "18446744073709551615", "0x1F"]),
                       st.sampled_from(["", "u", "l", "ul", "ll", "ull", "LL", "U", "lu"]))
    cast = st.builds(lambda t, n: f"({t}){n}", words, number)
    arg = st.one_of(words, number, cast)
    args = st.lists(arg, max_size=3).map(", ".join)
    name = st.sampled_from(["k", "ns::k", "a::b::k", "void", "const"])

    @settings(max_examples=400, deadline=None, database=None, derandomize=True)
    @given(name, args, st.booleans(), st.sampled_from(["", "(T1 *, int)", "(float*)", "()"]),
           name_expression())
    def check(n, a, placeholders, params, generated):
        _fast_and_full_agree(f"{n}<{a}>")
        _fast_and_full_agree(f" {n} < {a} > ")
        _fast_and_full_agree(f"void {n}<{a}>{params}", True, placeholders)
        _fast_and_full_agree(f"{n}<{a}>{params}", True, placeholders)
        _fast_and_full_agree(generated)
        # one text, read as an expression and as a demangled name: the text-only check says
        # equal only where the parsed comparison does
        for e, d in [(f"{n}<{a}>", f"void {n}<{a}>{params}"), (generated, generated)]:
            if quick_equal(e, d):
                verdict = compare(parse_expression(e), parse_demangled(d, placeholders))[0]
                assert verdict == "equal", (e, d)

    check()


# --- integers beyond Python's int->str limit (issue 17, group 5) ------------------------------

HUGE = ["1" * 5000, "9" * 4301, "-" + "1" * 5000, "1" + "0" * 5000 + "ull", "(long long)" + "9" * 5000,
        "(short)-" + "7" * 4400, "static_cast<int>(" + "3" * 5000 + ")", "0x" + "f" * 5000,
        "0" + "7" * 5000, "0b" + "1" * 5000, "1'" + "0" * 5000]


@pytest.mark.parametrize("literal", HUGE, ids=lambda s: f"{s[:14]}..{len(s)}")
def test_a_literal_of_thousands_of_digits_is_unknown_not_an_exception(literal):
    from cudamagic.cxx.parse import canonical, parse_demangled, parse_expression
    from cudamagic.cxx.pyname import python_name

    for expr in (f"k<{literal}>", f"k<S<{literal}>, float>", f"(void(*)(int))k<{literal}>"):
        sig = parse_expression(expr)
        assert not sig.exact  # never equal to anything: NVRTC decides
        assert python_name(expr).isidentifier()
        canonical(expr)
    for text in (f"void k<{literal}>()", f"void k<(int){literal}>(T{'1' * 5000})"):
        assert not parse_demangled(text, True).exact


@pytest.mark.parametrize("literal", HUGE[:6], ids=lambda s: f"{s[:14]}..{len(s)}")
def test_a_name_expression_with_thousands_of_digits_is_a_compile_error(literal):
    import cudamagic
    from cudamagic.errors import CompileError

    with pytest.raises(CompileError, match="integer constant is too large|too large"):
        cudamagic.build("template <long long N> __global__ void k() {}\n", [f"k<{literal}>"],
                        use_cache=False)
