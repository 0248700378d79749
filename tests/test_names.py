"""Canonical forms: a name expression and both demanglers' outputs must agree where they can."""

from __future__ import annotations

import pytest

from cudamagic.names import canonical, parse_demangled, parse_expression, python_name

# Spellings the text cannot decide (DESIGN.md): enumerator vs cast, default template arguments,
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
            assert not (want.name == sig.name and (want.params is None or want.params == sig.params)), \
                (r.expression, other.libstdcxx)


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
    ("k<size_t>", "k<unsigned long>"),      # an alias: not decidable from text
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
    ("fill<unsigned>", "fill_unsigned_int"), ("(void(*)(double*))overloaded", "overloaded_double_ptr"),
    ("k<complex<float>>", "k_complex_float"), ("pack<>", "pack"), ("lambda", "lambda_"),
    ("k<1>", "k_1"),
])
def test_python_names(expr, name):
    assert python_name(expr) == name
    assert python_name(expr).isidentifier()
