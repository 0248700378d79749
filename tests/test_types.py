"""The integer model (cudamagic.cxx.types) against the compiler: NVRTC says each type's width,
sign and promotion, and what its built-in typedefs stand for. One syntax-only compile asserts
every row of the model with static_assert; a row that is wrong fails the compile and names it."""

from __future__ import annotations

import pytest

from cudamagic.cxx import types
from cudamagic.errors import CompileError
from cudamagic.toolchain.compile.nvrtc import _compile

_PRELUDE = """
template <class A, class B> struct same { static constexpr bool value = false; };
template <class A> struct same<A, A> { static constexpr bool value = true; };
"""


def _asserts() -> list[str]:
    out = []
    for name, s in types.SCALARS.items():
        if s.name in ("__half", "half", "__nv_bfloat16", "nv_bfloat16"):
            continue  # CUDA's headers' types: their size is checked by the launch tests
        out.append(f'static_assert(sizeof({name}) == {s.size}, "{name}: size {s.size}");')
        if s.kind is types.ScalarKind.INT and s.signed is not None:
            out.append(f'static_assert(({name})(-1) {"<" if s.signed else ">"} ({name})0, '
                       f'"{name}: signed={s.signed}");')
        if s.is_integer and s.promoted is not None:
            out.append(f'static_assert(same<decltype(+({name})0), {s.promoted}>::value, '
                       f'"{name}: promoted to {s.promoted}");')
        if s.is_integer:
            out.append(f'static_assert(({name})({s.hi}ull + 1ull) == ({name})({s.lo}ll) || '
                       f'same<{name}, bool>::value, "{name}: wraps past {s.hi} to {s.lo}");')
    for alias, meant in types.TYPEDEFS.items():
        out.append(f'static_assert(same<{alias}, {meant}>::value, "{alias} is {meant}");')
    return out


def test_the_model_is_what_nvrtc_compiles():
    source = _PRELUDE + "\n".join(_asserts()) + "\n__global__ void k() {}\n"
    try:
        _compile(source, [], ["-arch=sm_90", "-std=c++20", "-fdevice-syntax-only"], "t.cu", 0)
    except CompileError as exc:
        pytest.fail(f"the integer model disagrees with NVRTC:\n{exc}")


@pytest.mark.parametrize("name", sorted(types.INTEGERS))
def test_wrap_and_range_agree(name):
    s = types.integer(name)
    assert s.fits(s.lo) and s.fits(s.hi) and not s.fits(s.hi + 1) and not s.fits(s.lo - 1)
    for v in (s.lo, s.hi, 0, 1):
        assert s.wrap(v) == v
    if s.kind is types.ScalarKind.INT:
        assert s.wrap(s.hi + 1) == s.lo and s.wrap(s.lo - 1) == s.hi


@pytest.mark.parametrize("words, spelled", [
    (["unsigned"], "unsigned int"), (["long", "unsigned", "int"], "unsigned long"),
    (["signed"], "int"), (["long", "long"], "long long"), (["short", "int"], "short"),
    (["unsigned", "char"], "unsigned char"), (["char"], "char"), (["long", "double"],
                                                                   "long double"),
    (["float", "int"], None), (["unsigned", "__int128"], "unsigned __int128")])
def test_builtin_words_spell_one_canonical_type(words, spelled):
    assert types.builtin_type(words) == spelled


def test_numpy_codes_are_the_widths():
    np = pytest.importorskip("numpy")
    for s in types.SCALARS.values():
        if s.dtype is not None:
            assert np.dtype(s.dtype).itemsize == s.size, s
