"""<cmath> as the standard has it ([c.math.syn]), compiled with NVRTC: every function with
every overload, an integer argument taken as double, float with double as double, and the result
type the host's <cmath> gives (the table is checked against the host's C++ compiler too)."""

from __future__ import annotations

import itertools
import shutil
import subprocess
from dataclasses import dataclass

import pytest

import cudamagic
from cudamagic.errors import CompileError

# the arguments' types and a variable of each in the kernel
ARGS = {"int": "i", "long": "l", "unsigned": "u", "float": "f", "double": "d"}
DECLARE = "int i = n; long l = n; unsigned u = n; float f = x[0]; double d = x[1]; " \
          "int q = 0; float fp = 0; double dp = 0; long double ld = x[2];"

# name -> its parameters: "x" is a floating one (what the overloads vary), anything else a C++
# expression passed as it is; and its result: "x" the floating type the arguments make
FUNCTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    **{name: (("x",), "x") for name in (
        "acos asin atan cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 expm1 log log10 "
        "log1p log2 logb cbrt fabs sqrt erf erfc lgamma tgamma ceil floor nearbyint rint round "
        "trunc").split()},
    "ilogb": (("x",), "int"), "lrint": (("x",), "long"), "lround": (("x",), "long"),
    "llrint": (("x",), "long long"), "llround": (("x",), "long long"),
    **{name: (("x",), "bool") for name in "isfinite isinf isnan isnormal signbit".split()},
    "fpclassify": (("x",), "int"),
    **{name: (("x", "x"), "x") for name in
       "atan2 pow hypot fmod remainder copysign nextafter fdim fmax fmin".split()},
    **{name: (("x", "x"), "bool") for name in
       "isgreater isgreaterequal isless islessequal islessgreater isunordered".split()},
    "fma": (("x", "x", "x"), "x"), "hypot3": (("x", "x", "x"), "x"),
    "frexp": (("x", "&q"), "x"), "ldexp": (("x", "q"), "x"), "scalbn": (("x", "q"), "x"),
    "scalbln": (("x", "l"), "x"), "remquo": (("x", "x", "&q"), "x"),
    "nexttoward": (("x", "ld"), "x"),
}
SAME = "template <class A, class B> struct same { static constexpr bool value = false; };\n" \
       "template <class A> struct same<A, A> { static constexpr bool value = true; };\n"
CLASSIFIED = {"isfinite", "isinf", "isnan", "isnormal", "signbit", "fpclassify", "isgreater",
              "isgreaterequal", "isless", "islessequal", "islessgreater", "isunordered"}
CXX20 = {"lerp": (("x", "x", "x"), "x")}


@dataclass(frozen=True)
class Row:
    """One call: ``std::name(args)`` and the type it gives."""

    name: str
    args: tuple[str, ...]
    result: str

    def call(self, prefix: str) -> str:
        return f"{prefix}{self.name.rstrip('3')}({', '.join(self.args)})"

    def line(self, prefix: str) -> str:
        return (f"{{ auto r = {self.call(prefix)}; static_assert(same<decltype(r), "
                f"{self.result}>::value, \"{self.call(prefix)} gives {self.result}\"); sink(r); }}")


def _rows(functions: dict[str, tuple[tuple[str, ...], str]]) -> list[Row]:
    rows = []
    for name, (params, result) in functions.items():
        floating = params.count("x")
        kinds = list(ARGS) if floating < 3 else ["int", "float", "double"]
        for types in itertools.product(kinds, repeat=floating):
            made = "float" if all(t == "float" for t in types) else "double"
            given = iter(types)
            args = tuple(ARGS[next(given)] if p == "x" else p for p in params)
            rows.append(Row(name, args, made if result == "x" else result))
    rows += [Row("modf", ("f", "&fp"), "float"), Row("modf", ("d", "&dp"), "double"),
             Row("nan", ('""',), "double")]
    rows += [Row("abs", (ARGS[t],), t) for t in ("int", "long", "float", "double")]
    return rows


ROWS = _rows(FUNCTIONS)
ROWS20 = _rows(CXX20)[:-5]  # lerp's own rows (less the modf, nan and abs rows again)
# C++17's float names in std:: (std::sqrtf): the standard lists them; g++ 12's <cmath> has not
FLOAT_NAMES = [Row(name + "f", tuple("f" if p == "x" else p for p in params),
                   "float" if result == "x" else result)
               for name, (params, result) in FUNCTIONS.items()
               if name not in CLASSIFIED and name != "hypot3"] + [
    Row("modff", ("f", "&fp"), "float"), Row("nanf", ('""',), "float")]

# Where NVRTC's own functions answer otherwise than a host's: CUDA's pow(float, int) is an exact
# match, so it stays (a host's gives double); CUDA's isnan and the other three classifications
# give int on this platform, and the integers' overloads give what they give.
ON_NVRTC = {Row("pow", ("f", "i"), "double"): Row("pow", ("f", "i"), "float")} | {
    r: Row(r.name, r.args, f"decltype(::{r.name}(0.0))") for r in ROWS
    if r.name in ("isfinite", "isinf", "isnan", "signbit")}


def _kernel(rows: list[Row], prefix: str, preamble: str = "") -> str:
    lines = "\n".join(r.line(prefix) for r in rows)
    return (f"#include <cmath>\n{preamble}{SAME}template <class T> __device__ void sink(T v) "
            f"{{ volatile double s = double(v); (void)s; }}\n"
            f"extern \"C\" __global__ void k(double* x, int n) {{ {DECLARE}\n{lines}\n}}\n")


def _refused(source: str, std: str, rows: list[Row]) -> list[str]:
    """The rows NVRTC refuses in ``source`` (one line each, after the kernel's first)."""
    try:
        cudamagic.build(source, options=[f"-std={std}"], use_cache=False)
    except CompileError as e:
        first = source.splitlines().index(next(l for l in source.splitlines()
                                               if l.startswith('extern "C"'))) + 2
        lines = {err.line for err in e.errors}
        if None in lines or not lines <= set(range(first, first + len(rows))):
            raise
        return [rows[n - first].call("std::") for n in sorted(lines)]
    return []


def _device_rows(rows: list[Row]) -> list[Row]:
    return [ON_NVRTC.get(r, r) for r in rows]


@pytest.mark.parametrize("prefix, preamble, std, rows", [
    ("std::", "", "c++17", ROWS),
    ("", "using namespace std;\n", "c++20", ROWS + ROWS20),
], ids=["std-qualified", "using-namespace-std"])
def test_every_cmath_function_takes_every_arithmetic_argument(prefix, preamble, std, rows):
    rows = _device_rows(rows)
    assert _refused(_kernel(rows, prefix, preamble), std, rows) == []


def test_the_float_names_are_in_std_too():
    preamble = "static_assert(sizeof(std::float_t) == 4 && sizeof(std::double_t) == 8, \"\");\n"
    assert _refused(_kernel(FLOAT_NAMES, "std::", preamble), "c++17", FLOAT_NAMES) == []


def test_the_table_is_the_host_s_cmath():
    """The expected types are what a host's <cmath> gives: asked of its C++ compiler."""
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler to ask")
    source = _kernel(ROWS + ROWS20, "std::").replace("__device__ ", "").replace(
        "extern \"C\" __global__ ", "")
    run = subprocess.run([cxx, "-std=c++20", "-fsyntax-only", "-x", "c++", "-"], input=source,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[:3000]


INTEGERS = r"""
#include <cmath>
extern "C" __global__ void k(double* out, int n) {
    out[0] = std::sqrt(n); out[1] = std::log(10); out[2] = std::exp(1); out[3] = std::pow(n, 0.5f);
    out[4] = std::floor(n) + std::fabs(-n); out[5] = std::isnan(n); out[6] = std::hypot(3, 4, 12);
}
"""


@pytest.mark.gpu
def test_an_integer_argument_is_computed_as_double():
    import cupy as cp
    import numpy as np

    out = cp.zeros(7, cp.float64)
    cudamagic.build(INTEGERS, use_cache=False)["k"]((1,), (1,), (out, np.int32(2)))
    got = out.get().tolist()
    # double's answers (CUDA's log, exp and pow are within 2 ulp), far from float's 1e-7
    assert got[:4] == pytest.approx([np.sqrt(2.0), np.log(10.0), np.exp(1.0), np.sqrt(2.0)],
                                    rel=1e-15)
    assert got[4:] == [4.0, 0.0, 13.0]
