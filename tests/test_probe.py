"""The type probe (toolchain/compile/probe.py) attacked: which names the token reading asks about, and
that a probe never makes a cell fail, never hides the cell's own error, never costs a second
compile where the cell's code is the one at fault, and costs one more compile only where its
own questions break."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

import cudamagic
from cudamagic.errors import CompileError, OptionError
from cudamagic.toolchain.compile.nvrtc import compile_cubin
from cudamagic.cxx.declared import CandidateKind, candidates, tokens
from cudamagic.toolchain.compile.probe import TypeGap, decode_type

V, C = CandidateKind.VARIABLE, CandidateKind.EXTERN_C

# (a cell's text, the names it asks about): what the token reading finds, and what it must not
READING = {
    "comments and strings hide nothing real and add nothing": (
        '// __device__ int a;\n/* __constant__ int b; */\nconst char* s = "__device__ int c;";\n'
        "__device__ int d;\n", [("::d", V)]),
    "a raw string and a character literal": (
        'auto r = R"x(__device__ int e; )" )x";\nchar q = \'"\';\n__device__ int f;\n',
        [("::f", V)]),
    "a preprocessor line with a splice and a block comment": (
        "#define M __device__ int g; \\\n  __device__ int h; /* still\n the directive */\n"
        "__device__ int i;\n", [("::i", V)]),
    "namespaces: nested, inline, anonymous, a::b": (
        "namespace a { namespace b { __device__ int x; } }\ninline namespace v1 { __device__ int y; }\n"
        "namespace { __constant__ int z; }\nnamespace c::d { __device__ int w; }\n",
        [("::a::b::x", V), ("::v1::y", V), ("::z", V), ("::c::d::w", V)]),
    "function bodies and class bodies are not namespace scope": (
        "struct S { int m; static int n; };\n__device__ int f(int k) { __shared__ int t[4]; "
        "return k; }\n__device__ int after;\n", [("::after", V)]),
    "declarators: several, extents, initialisers, qualifiers": (
        "static __device__ __align__(8) unsigned long long p[2][3] = {}, *q, r = 1;\n"
        "__constant__ int s[] = {1, 2};\n__device__ int ns::t = 3;\n",
        [("::p", V), ("::q", V), ("::r", V), ("::s", V), ("::ns::t", V)]),
    "extern C kernels, in a block and one by one; C++ kernels are not asked": (
        'extern "C" __global__ void k1(int) {}\nextern "C" { __global__ void k2(float* x) {} '
        "__device__ int cv; }\n__global__ void cpp(int) {}\ntemplate <class T> __global__ void t(T) {}\n",
        [("::k1", C), ("::k2", C), ("::cv", V)]),
    "a macro's invocation without a semicolon before a declaration": (
        "DECLARE(x)\n__device__ float y;\nMACRO() extern \"C\" __global__ void k(float v) {}\n",
        [("::y", V), ("::k", C)]),
    "variable templates: declared (not asked), instantiated (asked by its id)": (
        "template <class T> __device__ T tv;\ntemplate __device__ float tv<float>;\n"
        "template __device__ int tv<3 + 1>;\n",
        [("::tv<float>", V), ("::tv<3+1>", V)]),
    "object-like macros expand, function-like ones and #undef'd ones do not": (
        '#define CONST __constant__\n#define BEGIN namespace m {\n#define END }\n'
        "#define DECL(n) __device__ int n;\n#define A B\n#define B A\n"
        "BEGIN CONST float c[2]; END\nDECL(x)\n#undef CONST\nCONST int d;\nA __device__ int e;\n",
        [("::m::c", V), ("::e", V)]),
    # a decltype's parentheses were taken for a function's: y and z were not asked about
    "types written with decltype": (
        "__device__ float x[3];\n__device__ decltype(x) y;\n__constant__ decltype(1.0) z[2];\n"
        "__device__ decltype(x[0] + 1) (f)(int);\n",
        [("::x", V), ("::y", V), ("::z", V)]),
    "a lambda and a brace initialiser": (
        "__device__ auto f = [] __device__ (int x) { return x; };\n__device__ int g{4};\n",
        [("::f", V), ("::g", V)]),
}


@pytest.mark.parametrize("source, wanted", READING.values(), ids=list(READING))
def test_the_token_reading_asks_about_the_cells_declarations(source, wanted):
    assert [(c.qualified, c.kind) for c in candidates(source)] == wanted


def test_the_reading_is_linear_and_bounded():
    # adversarial sizes: 100 000 declarations ask nothing (over the bound), an unclosed
    # comment or string ends the reading, deep braces do not recurse
    many = "".join(f"__device__ int v{i};\n" for i in range(100_000))
    assert candidates(many) == []
    assert candidates("__device__ int a; /* never closed") [0].qualified == "::a"
    assert candidates("__device__ int a; \"never closed") [0].qualified == "::a"
    assert candidates("{" * 50_000 + "}" * 50_000 + "__device__ int z;")[0].name == "z"
    assert tokens("a\\\nb") == ["ab"]


def _doubling(depth: int, width: int = 2) -> str:
    return "#define M0 x\n" + "".join(
        f"#define M{i} " + " ".join([f"M{i - 1}"] * width) + "\n" for i in range(1, depth + 1))


# (a cell whose macros multiply each other's tokens): the token reading expanded each use of
# an object-like macro whole, so a use NVRTC never expands (an #if 0 branch) cost 2**depth
# tokens: 37 s and 157 MB at depth 22, hours at 30, before NVRTC was called
MACRO_BOMBS = {
    "tokens doubling 30 times, used in an #if 0 branch": _doubling(30) + "#if 0\nM30\n#endif\n",
    "tokens tripling 20 times": _doubling(20, 3) + "#if 0\nM20\n#endif\n",
    "a thousand-token macro of thousand-token macros, used a few times": (
        "#define W " + "x " * 1000 + "\n#define WW " + "W " * 1000 + "\n#define WWW "
        + "WW " * 1000 + "\n#if 0\nWWW WWW WWW\n#endif\n"),
    "the chain used in a string and a comment, then live": _doubling(26)
    + '#if 0\nconst char* s = "M26"; /* M26 */ M26\n#endif\n',
}


@pytest.mark.parametrize("bomb", MACRO_BOMBS.values(), ids=list(MACRO_BOMBS))
def test_macros_that_multiply_cost_the_reading_a_bounded_time(bomb):
    # in a child: the unbounded reading would not end in a test's lifetime
    code = ("import sys, time; from cudamagic.cxx.declared import candidates; t = time.monotonic()"
            "; c = candidates(sys.stdin.read()); print(time.monotonic() - t, c[-1].qualified)")
    out = subprocess.run([sys.executable, "-c", code], input=bomb + "__device__ float w[2];\n",
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert out[1] == "::w" and float(out[0]) < 5


def test_a_cell_with_a_macro_bomb_in_dead_code_builds_typed():
    source = (MACRO_BOMBS["tokens doubling 30 times, used in an #if 0 branch"]
              + "__device__ float w[2];\n" + _K.replace("ok", "w"))
    code = ("import sys, cudamagic; m = cudamagic.build(sys.stdin.read(), arch='sm_90', "
            "use_cache=False); print(m.globals['w'].dtype)")
    out = subprocess.run([sys.executable, "-c", code], input=source, capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    assert out == ["float32"]


@pytest.mark.parametrize("mangled, wanted", [
    ("A8_f", ("float32", (8,))), ("A3_A5_d", ("float64", (3, 5))), ("A3_VKh", ("uint8", (3,))),
    ("Kf", ("float32", ())), ("Pf", ("uint64", ())), ("A2_6__half", ("float16", (2,))),
    ("A_i", ("int32", ())), ("1P", (None, ())), ("A4_N2ns1PE", (None, (4,))), ("n", (None, ())),
    ("y", ("uint64", ())), ("x", ("int64", ())), ("b", ("bool", ())), ("c", ("int8", ())),
])
def test_a_mangled_type_decodes_to_its_dtype_and_extents(mangled, wanted):
    assert decode_type(mangled) == wanted


class _Counting:
    """compile_cubin, counting the compiles and keeping each one's source."""

    def __init__(self) -> None:
        self.sources: list[str] = []

    def __call__(self, source, *args, **kwargs):
        self.sources.append(source)
        return compile_cubin(source, *args, **kwargs)


_K = 'extern "C" __global__ void k(float* o) { o[0] = ok[1]; }\n'

# (the cell, options, compiles, whether a note says so, ok's dtype): a probe that breaks costs
# one more compile and loses only its own answers; with C++14 (no auto template parameter) the
# probe is not added at all
BREAKS = {
    "nothing breaks": ("__device__ float ok[2];\n" + _K, [], 1, False, "float32"),
    "a dead branch's namespace is a struct in the live code": (
        "#if 0\nnamespace qq { __device__ int x; }\n#endif\nstruct qq { int y; };\n"
        "__device__ float ok[2];\n" + _K, [], 2, True, "float32"),
    "one name in a dead branch and in an anonymous namespace": (
        "#if 0\n__device__ int v;\n#endif\nnamespace { __device__ float v[3]; }\n"
        "__device__ float ok[2];\n" + _K.replace("ok[1]", "ok[1] + v[1]"), [], 2, True,
        "float32"),
    "C++14": ("__device__ float ok[2];\n" + _K, ["-std=c++14"], 1, False, None),
    "a __managed__ variable beside (NVRTC refuses it in decltype and as a template argument)": (
        "__managed__ int m[4];\n__device__ __managed__ float mm;\n__device__ float ok[2];\n"
        + _K, [], 1, False, "float32"),
    # a cell's own macros named as the probe's words were: NVRTC macro-expands name expressions
    # too, so each cost a second compile and every type (ok's bytes, k untyped) before the
    # probe's identifiers were reserved ones
    **{f"the cell defines {m.split()[0]} as a macro": (
        f"#define {m}\n__device__ float ok[2];\n" + _K, [], 1, False, "float32")
       for m in ("T float", "V 4", "none 1", "ty 1", "en 2")},
    "a macro names the variable": (
        "#define ok real_ok\n__device__ float ok[2];\n" + _K, [], 1, False, "float32"),
    # a cell's own function-like macro named decltype answered every type question: ok, a
    # float[2], was served as one float64 (the sizes agree), or as its bytes
    **{f"the cell defines {m}": (
        "__device__ float ok[2];\n" + _K + f"#define {m}\n", [], 1, False, "float32")
       for m in ("decltype(x) double", "decltype(x) int")},
    # a cell ending in a #line directive renumbered the probe's lines, or named them another
    # file: its failing fallback was taken for the cell's own error (the cell did not compile,
    # NVRTC's words quoting the probe), or every probe was dropped (ok lost its type)
    **{f"a probe that breaks after a cell ending in {tail.strip()}": (
        "#if 0\nnamespace qq { __device__ int x; }\n#endif\nstruct qq { int y; };\n"
        "__device__ float ok[2];\n" + _K + tail, [], 2, True, "float32")
       for tail in ('#line 1 "other.cu"\n', '# 7 "x.h"\n', "#line 3\n", "#line 2147483647\n")},
}


@pytest.mark.parametrize("source, options, compiles, noted, dtype", BREAKS.values(),
                         ids=list(BREAKS))
def test_a_probe_that_breaks_costs_one_compile_and_its_own_answers(source, options, compiles,
                                                                   noted, dtype):
    from cudamagic.pipeline.steps import build_module, options_from_args

    compiler = _Counting()
    module = build_module(source, options_from_args(options, [], "sm_90", no_cache=True),
                          compiler=compiler)
    assert len(compiler.sources) == compiles
    assert any("compiled 2 times" in w for w in module.warnings) is noted
    ok = [v for v in module.globals if v.cxx_name in ("ok", "real_ok")]
    assert [v.dtype for v in ok] == [dtype]
    if dtype is None:
        assert ok[0].gap is TypeGap.NOT_ASKED


# the cell's own errors: raised after one compile, in the words of a compile without the probe
OWN_ERRORS = {
    "a typo in a kernel": ("__device__ float ok[2];\n" + _K.replace("o[0]", "oo[0]"), []),
    "a typo in a variable's type": ("__device__ flaot ok[2];\n" + _K, []),
    "a name expression that names nothing": ("__device__ float ok[2];\n" + _K, ["nothing<int>"]),
    "a cell cut short inside a namespace": ("namespace a { __device__ float ok[2];\n", []),
}


@pytest.mark.parametrize("source, names", OWN_ERRORS.values(), ids=list(OWN_ERRORS))
def test_the_cells_own_error_is_its_own(source, names):
    from cudamagic.pipeline.steps import build_module, options_from_args

    compiler = _Counting()
    with pytest.raises(CompileError) as probed:
        build_module(source, options_from_args([], names, "sm_90", no_cache=True),
                     compiler=compiler)
    with pytest.raises(CompileError) as plain:
        compile_cubin(source, names, ["-arch=sm_90"], trace=False)
    assert "__cudamagic" not in str(probed.value)
    assert str(probed.value) == str(plain.value)
    assert len(compiler.sources) <= 2  # a second, plain compile only where a probe took part


# (the cell, its options): warnings made errors, by an option or a pragma; the probe's uses of a
# variable turned NVRTC's "declared but never referenced" into "set but never used" (the
# cell's error read differently) or into nothing (the failing cell compiled): such a compile is
# now checked by one without the probe, whose error is the cell's
ELEVATED = {
    "-Werror=all-warnings": ("static __device__ int unused_v;\n__device__ float ok[2];\n" + _K,
                             ["-Werror=all-warnings"]),
    "-Werror=all-warnings, the variable in an anonymous namespace": (
        "namespace { __device__ int unused_v; }\n__device__ float ok[2];\n" + _K,
        ["-Werror=all-warnings"]),
    "--diag-error=177": ("static __device__ int unused_v;\n__device__ float ok[2];\n" + _K,
                         ["--diag-error=177"]),
    "a pragma makes 177 an error": (
        "#pragma nv_diag_error 177\nnamespace { __device__ int unused_v; }\n"
        "__device__ float ok[2];\n" + _K, []),
}


@functools.cache
def _nvrtc_takes(option: str) -> bool:
    """Whether the running NVRTC knows ``option`` (asked: NVRTC 13.0 has no
    ``-Werror=all-warnings``, 13.5 has)."""
    try:
        compile_cubin("__global__ void k() {}", [], ["-arch=sm_90", option], trace=False)
    except OptionError:
        return False
    return True


def _needs_options_nvrtc_takes(options) -> None:
    for option in options:
        if not _nvrtc_takes(option):
            pytest.skip(f"this NVRTC does not know {option}")


@pytest.mark.parametrize("source, options", ELEVATED.values(), ids=list(ELEVATED))
def test_a_warning_made_an_error_reads_as_without_the_probe(source, options):
    from cudamagic.pipeline.steps import build_module, options_from_args

    _needs_options_nvrtc_takes(options)
    with pytest.raises(CompileError) as probed:
        build_module(source, options_from_args(options, [], "sm_90", no_cache=True))
    with pytest.raises(CompileError) as plain:
        compile_cubin(source, [], ["-arch=sm_90", *options], trace=False)
    assert str(probed.value) == str(plain.value)


@pytest.mark.parametrize("elevating", ["-Werror=all-warnings", "--diag-error=177"])
def test_a_good_cell_whose_warnings_are_errors_keeps_its_types(elevating):
    from cudamagic.pipeline.steps import build_module, options_from_args

    _needs_options_nvrtc_takes([elevating])
    compiler = _Counting()
    module = build_module("__device__ float ok[2];\n" + _K,
                          options_from_args([elevating], [], "sm_90",
                                            no_cache=True), compiler=compiler)
    assert [v.dtype for v in module.globals] == ["float32"]
    assert module["k"].params[0].ctype == "float*"
    assert len(compiler.sources) == 2 and not module.warnings  # the probed one and the check


def _dead_namespaces(n: int) -> str:
    """A cell whose ``n`` names each fail the probe: declared in a dead branch's namespace
    that is a struct in the live code."""
    dead = "".join(f"namespace q{i} {{ __device__ int x; }}\n" for i in range(n))
    live = "".join(f"struct q{i} {{ int y; }};\n" for i in range(n))
    return f"#if 0\n{dead}#endif\n{live}__device__ float ok[2];\n" + _K


@pytest.mark.parametrize("failing", [1, 12])
@pytest.mark.parametrize("reworded", [False, True])
def test_the_probe_reads_a_failed_compile_by_its_records_not_its_message(monkeypatch, failing,
                                                                         reworded):
    """The probe tells its own failed questions from the cell's error by the error's records
    (CompileError.errors), not by reading the message: a reworded message changes nothing, and
    twelve failed questions (a log longer than the message shows) cost one more compile, as
    one does (the message showed the first error only, so each cost a compile of its own)."""
    from cudamagic.pipeline.steps import build_module, options_from_args
    from cudamagic.toolchain.compile import nvrtc

    if reworded:
        monkeypatch.setattr(nvrtc, "compile_error_message", lambda *a: "NVRTC said no")
    compiler = _Counting()
    module = build_module(_dead_namespaces(failing),
                          options_from_args([], [], "sm_90", no_cache=True), compiler=compiler)
    assert len(compiler.sources) == 2
    assert [v.dtype for v in module.globals if v.cxx_name == "ok"] == ["float32"]


def test_a_compile_error_lists_its_errors_by_cell_line_and_name_expression():
    with pytest.raises(CompileError) as info:
        compile_cubin("__global__ void k() { int a = ; }\ntemplate <class T> __global__ void t() {}"
                      "\n__global__ void z() { undefined_thing(); }\n", ["t<nope>"],
                      ["-arch=sm_90"], line_offset=10)
    from cudamagic.errors import LogError

    assert info.value.errors[:1] == (LogError(line=11),)
    assert LogError(line=13) in info.value.errors
    assert LogError(expression="t<nope>") in info.value.errors


@pytest.mark.parametrize("cell, names", [
    ("template <int N> __global__ void k(float* x) { x[0] = N; }\n", ["k<1>"]),
    ("__global__ void plain(float* x) { x[0] = 1; }\n", []),
])
def test_a_cell_the_probe_asks_nothing_about_demangles_nothing_for_it(cell, names, monkeypatch):
    """A miss whose cell declares no variable and no extern "C" kernel asks the probe nothing,
    so the probe's answers demangle none of the CUBIN's symbols (a CCCL cell's are hundreds:
    9 ms of each edit's miss on the CUB cell): the demangler the answers use is never called."""
    import cudamagic.pipeline.typed as typed

    class Refusing:
        def demangle(self, symbols):
            raise AssertionError(f"the probe's answers demangled {len(symbols)} symbols")

    monkeypatch.setattr(typed, "concrete_demangler", lambda: Refusing())
    module = cudamagic.build(cell, names, use_cache=False)
    assert len(module.kernels) == 1
