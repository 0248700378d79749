"""Issue 9, item 2: the examples that resolved to a wrong kernel, through ``load_cubin``.

Each CUBIN is built by the real NVRTC; its ``lowered`` map is the truth. Before the typed model,
``t<(bool)2>`` took ``t<2>``'s symbol (NVRTC: ``t<1>``), ``t<'\\xff'>`` took ``t<255>``'s (NVRTC:
-1, char is signed), ``t<(short)70000>`` took ``t<70000>``'s (NVRTC: 4464), and the same for
``template <auto V>`` with ``(unsigned)-1``, ``(unsigned long)-1``, ``(unsigned char)300`` and
``(int)true``. Now a typed ``int`` parameter makes them undecidable (the symbol ``t<1>`` cannot say
whether the parameter is ``int`` or ``auto``, and for ``auto`` it would be ``t<true>``): an error
listing the candidates. With ``auto`` they are decided, and right.
"""

from __future__ import annotations

import functools

import pytest

import cudamagic
from cudamagic.toolchain.nvrtc import compile_cubin
from cudamagic.toolchain.demangle import CuFilt, LibStdCxx, find_cufilt
from cudamagic.errors import NameResolutionError
from cudamagic.cxx.pyname import python_name

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
