"""Relocatable device code and LTO IR linked by nvJitLink into an executable CUBIN, no GPU."""

from __future__ import annotations

import struct

import pytest

import cudamagic
from cudamagic.errors import LinkError, OptionError
from cudamagic.store import KernelCache
from cudamagic.toolchain.compile import link as link_mod
from cudamagic.toolchain.binary.image import read_cubin
from cudamagic.toolchain.binary.elf import ET_EXEC, ET_REL, elf_type

# a kernel that launches kernels (dynamic parallelism), a template parent, and a __device__
# function the parent calls: each needs the device runtime or a link to be launchable
DYNAMIC = r"""
extern "C" __global__ void child(int* x) { x[threadIdx.x] = threadIdx.x * 2; }
extern "C" __global__ void parent(int* x) { if (threadIdx.x == 0) child<<<1, 32>>>(x); }
template <typename T> __global__ void tchild(T* x) { x[threadIdx.x] += T(1); }
template <typename T> __global__ void tparent(T* x) { if (threadIdx.x == 0) tchild<T><<<1, 32>>>(x); }
template __global__ void tparent<float>(float*);
"""
NO_RUNTIME = r"""
__device__ __noinline__ int twice(int v) { return 2 * v; }
extern "C" __global__ void plain(int* x) { x[threadIdx.x] = twice(threadIdx.x); }
"""
LINKED = [["-rdc=true"], ["--relocatable-device-code=true"], ["-dc"], ["-dlto"],
          ["-rdc=true", "-dlto"], ["-dc", "-lineinfo"], ["-dlto", "-G"]]


def _nvrtc_only(source, options):
    """What NVRTC alone gives for these options (no link): the module's unlinked image."""
    from cudamagic.toolchain.compile.nvrtc import compile_cubin
    from cudamagic.core.toolkit import toolkit

    incs = [f"-I{d}" for d in toolkit().include_dirs]
    return compile_cubin(source, [], ["-arch=sm_90", *incs, *options], trace=False).cubin


@pytest.mark.parametrize("options", LINKED)
def test_relocatable_builds_are_linked_into_an_executable_cubin(tmp_path, options):
    module = cudamagic.build(DYNAMIC, ["tparent<float>"], options=options, arch="sm_90",
                             cache=tmp_path)
    assert elf_type(module.cubin) == ET_EXEC
    # the user's kernels enumerate; the device runtime's helper kernels are not the user's
    assert sorted(module.kernels) == ["child", "parent", "tparent<float>"]
    assert {"child", "parent", "_Z7tparentIfEvPT_", "_Z6tchildIfEvPT_"} <= set(
        module.image.symbols)
    assert module["tparent<float>"].symbol == "_Z7tparentIfEvPT_"
    assert "link" in module.report.timings
    # the cache keeps the linked CUBIN: a hit serves it as it is
    again = cudamagic.build(DYNAMIC, ["tparent<float>"], options=options, arch="sm_90",
                            cache=tmp_path)
    assert again.hit and again.cubin == module.cubin
    record, _ = KernelCache.wrap(tmp_path).get(module.key)
    assert elf_type(record.cubin) == ET_EXEC


def test_a_template_instantiated_by_other_code_is_not_said_to_be_uncompiled(recwarn):
    """tchild has no -n, but tparent<float> launches tchild<float>, so its instance is in the
    CUBIN: the hint that a template is not compiled is decided from the CUBIN's kernels, not
    from the source; a template nothing instantiates still gets it."""
    lonely = "template <typename T> __global__ void lonely(T* x) { x[0] = T(0); }\n"
    module = cudamagic.build(DYNAMIC + lonely, ["tparent<float>"], options=["-rdc=true"],
                             arch="sm_90", use_cache=False)
    assert "_Z6tchildIfEvPT_" in module.image.symbols
    said = [w for w in module.report.warnings if "not compiled" in w]
    assert len(said) == 1 and "template lonely is not compiled" in said[0], said
    assert not any("tchild" in str(w.message) for w in recwarn.list)


def test_nvrtc_alone_makes_what_the_driver_cannot_launch():
    """The reason for the link: NVRTC's -rdc output is relocatable (ELF type 1) and -dlto's is
    not a CUBIN at all."""
    assert elf_type(_nvrtc_only(DYNAMIC, ["-rdc=true"])) == ET_REL
    assert elf_type(_nvrtc_only(DYNAMIC, ["-dlto"])) is None


def test_the_device_runtime_is_linked_only_where_it_is_needed(tmp_path):
    dynamic = cudamagic.build(DYNAMIC, options=["-rdc=true"], arch="sm_90", use_cache=False)
    plain = cudamagic.build(NO_RUNTIME, options=["-rdc=true"], arch="sm_90", use_cache=False)
    assert any(link_mod.from_device_runtime(s) for s in dynamic.image.symbols)
    assert not any(link_mod.from_device_runtime(s) for s in plain.image.symbols)
    assert plain.image.symbols == ("plain",)
    # the one search over all the names finds what the symbol-by-symbol rule finds
    assert link_mod.device_runtime_kernels(dynamic.image.symbols) == {
        s for s in dynamic.image.symbols if link_mod.from_device_runtime(s)}
    assert link_mod.device_runtime_kernels(plain.image.symbols) == frozenset()
    assert not set(dynamic.kernels) & {s for s in dynamic.image.symbols
                                       if link_mod.from_device_runtime(s)}
    assert any("LaunchDevice" in s for s in link_mod.undefined_symbols(
        _nvrtc_only(DYNAMIC, ["-rdc=true"])))
    assert link_mod.undefined_symbols(_nvrtc_only(NO_RUNTIME, ["-rdc=true"])) == []


def test_whole_program_builds_are_not_linked(tmp_path):
    module = cudamagic.build(NO_RUNTIME, arch="sm_90", use_cache=False)
    assert "link" not in module.report.timings
    assert elf_type(module.cubin) == ET_EXEC


def test_launch_needs_read_through_a_linked_call_graph():
    """Grid synchronisation in a __device__ function of relocatable code: the kernel's own
    records do not show it, the call graph the link keeps does."""
    source = r"""
    #include <cooperative_groups.h>
    __device__ __noinline__ void wait_for_grid() { cooperative_groups::this_grid().sync(); }
    extern "C" __global__ void step(int* x) { x[0] = 1; wait_for_grid(); x[1] = 2; }
    extern "C" __global__ void block(int* x) { cooperative_groups::this_thread_block().sync(); }
    """
    module = cudamagic.build(source, options=["-rdc=true"], arch="sm_90", use_cache=False)
    launch = {k.symbol: k.launch.grid_sync for k in module.image.kernels}
    assert launch == {"step": True, "block": False}
    assert module.image.kernel("step").info is not None


def test_an_unlinked_cubin_in_the_cache_is_not_served(tmp_path):
    """An entry cached before builds were linked holds relocatable code the driver cannot
    launch: it is a miss, compiled again and replaced by the linked CUBIN."""
    module = cudamagic.build(NO_RUNTIME, options=["-rdc=true"], arch="sm_90", cache=tmp_path)
    cache = KernelCache.wrap(tmp_path)
    record, _ = cache.get(module.key)
    import dataclasses

    cache.put(module.key, dataclasses.replace(record, cubin=_nvrtc_only(NO_RUNTIME,
                                                                         ["-rdc=true"])))
    again = cudamagic.build(NO_RUNTIME, options=["-rdc=true"], arch="sm_90", cache=tmp_path)
    assert not again.hit and "relocatable" in again.report.miss_reason.lower()
    assert elf_type(again.cubin) == ET_EXEC
    assert elf_type(cache.get(module.key)[0].cubin) == ET_EXEC


def test_a_link_that_fails_says_why_and_caches_nothing(tmp_path):
    source = r"""
    extern __device__ int defined_nowhere(int);
    extern "C" __global__ void k(int* x) { x[0] = defined_nowhere(x[1]); }
    """
    with pytest.raises(LinkError, match="defined_nowhere") as info:
        cudamagic.build(source, options=["-rdc=true"], arch="sm_90", cache=tmp_path)
    assert "nvJitLink could not link" in str(info.value)
    assert len(KernelCache.wrap(tmp_path)) == 0


def test_without_nvjitlink_the_option_is_refused_with_how_to_get_it(tmp_path, monkeypatch):
    def missing():
        raise LinkError("linking device code needs nvJitLink, which could not be loaded "
                        "(ImportError: no libnvJitLink); install it with "
                        "`pip install nvidia-nvjitlink` (a cudamagic dependency)")

    monkeypatch.setattr(link_mod, "_nvjitlink", missing)
    with pytest.raises(LinkError, match="pip install nvidia-nvjitlink"):
        cudamagic.build(DYNAMIC, options=["-rdc=true"], arch="sm_90", cache=tmp_path)
    assert len(KernelCache.wrap(tmp_path)) == 0


def test_a_missing_nvjitlink_library_is_said_plainly(monkeypatch):
    """The real loader's message when cuda.bindings cannot find libnvJitLink."""
    import builtins

    real_import = builtins.__import__

    def no_nvjitlink(name, *args, **kwargs):
        if name == "cuda.bindings" and "nvjitlink" in (args[2] or ()):
            raise ImportError("libnvJitLink.so.13: cannot open shared object file")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_nvjitlink)
    with pytest.raises(LinkError, match="pip install nvidia-nvjitlink"):
        link_mod._nvjitlink()


def test_dlto_is_no_longer_refused_but_ptx_still_is():
    cudamagic.build(NO_RUNTIME, options=["-dlto"], arch="sm_90", use_cache=False)
    with pytest.raises(OptionError, match="no CUBIN"):
        cudamagic.build(NO_RUNTIME, options=["-ptx"], arch="sm_90", use_cache=False)


def test_linked_cubin_records_agree_with_the_unlinked_ones():
    """Parameter records survive the link: the launch reads them from the linked CUBIN."""
    source = r"""
    template <typename T> __global__ void axpy(T a, const T* x, T* y, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += a * x[i]; }
    template __global__ void axpy<double>(double, const double*, double*, int);
    """
    linked = cudamagic.build(source, ["axpy<double>"], options=["-rdc=true"], arch="sm_90",
                             use_cache=False)
    whole = cudamagic.build(source, ["axpy<double>"], arch="sm_90", use_cache=False)
    sym = "_Z4axpyIdEvT_PKS0_PS0_i"
    assert [(p.offset, p.size) for p in linked.image.kernel(sym).params] == \
        [(p.offset, p.size) for p in whole.image.kernel(sym).params] == \
        [(0, 8), (8, 8), (16, 8), (24, 4)]
    assert struct.unpack_from("<H", linked.cubin, 16)[0] == ET_EXEC


# the options -> whether the build was linked (the last of -rdc=true/-rdc=false counts, as NVRTC)
RDC_ORDER = {("-rdc=true",): True, ("-rdc=true", "-rdc=false"): False,
             ("-rdc=false", "-rdc=true"): True, ("-rdc=true", "-rdc=false", "-rdc=true"): True,
             ("--relocatable-device-code=true", "--relocatable-device-code=false"): False,
             ("-rdc=false",): False}


@pytest.mark.parametrize("options", list(RDC_ORDER), ids=" ".join)
def test_the_last_rdc_option_decides_whether_the_build_is_linked(tmp_path, options):
    """-rdc=true -rdc=false was reported as 'linked with nvJitLink' although NVRTC made
    whole-program code and nothing was linked."""
    import cudamagic
    from cudamagic.toolchain.compile.link import relocatable

    assert relocatable(options) is RDC_ORDER[options]
    mod = cudamagic.build('extern "C" __global__ void k(int* p) { *p = 1; }\n',
                          options=list(options), cache=tmp_path)
    assert mod.report.linked is RDC_ORDER[options]
    assert any(k == "linked with" for k, _ in mod.report.facts) is RDC_ORDER[options]


# --- -dlto keeps the code-generation options (issue 29 item 7), by the machine code ---
# Issue 29, item 7: a ``-dlto`` build makes the machine code its options ask for.
#
# With ``-dlto`` NVRTC writes LTO IR and nvJitLink generates the code, so every option that
# shapes code must reach nvJitLink. Each row builds one small kernel with ``-dlto`` and the option,
# and with ``-dlto`` alone, disassembles both CUBINs (``cuobjdump -sass`` from the
# ``nvidia-cuda-cuobjdump`` wheel, with ``nvdisasm`` from ``nvidia-cuda-nvdisasm``; no GPU) and
# asserts what the option changes in the instructions: each row's check holds with the option and
# fails without it, and the ``-dlto`` build agrees with the ``-rdc=true`` build (ptxas compiled that
# one with the option NVRTC was given).
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

import cudamagic
from cudamagic.toolchain.binary.image import read_cubin
from cudamagic.toolchain.compile.link import CodeGeneration, Flag, code_generation


def _tool_dir() -> Path:
    import nvidia

    for root in nvidia.__path__:
        for d in sorted(Path(root).glob("cu*/bin"), reverse=True):
            if (d / "cuobjdump").is_file() and (d / "nvdisasm").is_file():
                return d
    raise AssertionError("cuobjdump and nvdisasm are in the test extra (nvidia-cuda-cuobjdump, "
                         "nvidia-cuda-nvdisasm): pip install -e '.[test]'")


def sass(cubin: bytes) -> str:
    """The CUBIN's machine code as ``cuobjdump -sass`` writes it."""
    tools = _tool_dir()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        Path(path).write_bytes(cubin)
        done = subprocess.run([str(tools / "cuobjdump"), "-sass", path], capture_output=True,
                              text=True, env={"PATH": str(tools)}, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def opcodes(cubin: bytes) -> list[str]:
    """Each instruction's opcode with its modifiers (``FMUL.FTZ``), in order."""
    return re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass(cubin))


MULADD = 'extern "C" __global__ void k(float* x, float a, float b) ' \
         '{ x[threadIdx.x] = x[threadIdx.x] * a + b; }'
MUL = 'extern "C" __global__ void k(float* x, float a) { x[threadIdx.x] *= a; }'
DIV = 'extern "C" __global__ void k(float* x, float a) { x[threadIdx.x] /= a; }'
SQRT = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = sqrtf(x[threadIdx.x]); }'
SIN = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = sinf(x[threadIdx.x]); }'
# 24 values live at once: 32 registers unless the compiler is told otherwise
PRESSURE = ('extern "C" __global__ void k(float* x) { float v[24]; '
            '_Pragma("unroll") for (int j = 0; j < 24; ++j) v[j] = x[threadIdx.x + 32 * j]; '
            'float s = 0; _Pragma("unroll") for (int j = 0; j < 24; ++j) s += v[j] * v[23 - j]; '
            '_Pragma("unroll") for (int j = 0; j < 24; ++j) x[threadIdx.x + 32 * j] = v[j] + s; }')


def _registers(cubin: bytes) -> int:
    res = read_cubin(cubin).kernel("k").resources
    assert res is not None
    return res.registers


def _sections(cubin: bytes) -> str:
    tools = _tool_dir()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        Path(path).write_bytes(cubin)
        return subprocess.run([str(tools / "cuobjdump"), "-elf", path], capture_output=True,
                              text=True, env={"PATH": str(tools)}, timeout=60).stdout


Check = Callable[[bytes], bool]
# (the options, the kernel, what the option makes true of its code)
ROWS: list[tuple[list[str], str, str, Check]] = [
    (["--fmad=false"], MULADD, "no FFMA: a multiply and an add",
     lambda c: "FFMA" not in opcodes(c) and "FMUL" in opcodes(c)),
    (["-fmad=false"], MULADD, "no FFMA (the one-dash spelling)",
     lambda c: "FFMA" not in opcodes(c)),
    (["--ftz=true"], MUL, "FMUL.FTZ", lambda c: "FMUL.FTZ" in opcodes(c)),
    (["-prec-div=false"], DIV, "an approximate division: no call to the IEEE slow path",
     lambda c: not any(o.startswith(("CALL", "BSSY")) for o in opcodes(c))),
    (["-prec-sqrt=false"], SQRT, "MUFU.SQRT, no reciprocal square root refinement",
     lambda c: "MUFU.SQRT" in opcodes(c) and "MUFU.RSQ" not in opcodes(c)),
    (["-use_fast_math"], SIN, "sinf as the hardware MUFU.SIN",
     lambda c: "MUFU.SIN" in opcodes(c)),
    (["-use_fast_math"], MUL, "-use_fast_math flushes denormals: FMUL.FTZ",
     lambda c: "FMUL.FTZ" in opcodes(c)),
    (["-use_fast_math", "--ftz=false"], SIN, "an explicit --ftz=false wins over fast math",
     lambda c: "MUFU.SIN" in opcodes(c) and not any(".FTZ" in o for o in opcodes(c))),
    (["-maxrregcount=24"], PRESSURE, "at most 24 registers (sm_90's floor)",
     lambda c: _registers(c) <= 24),
    (["-lineinfo"], MUL, "line information (.nv_debug_line_sass)",
     lambda c: ".nv_debug_line_sass" in _sections(c)),
    (["-G"], MUL, "debug information (.debug_info)", lambda c: ".debug_info" in _sections(c)),
]


def _cubin(source: str, options: list[str], arch: str = "sm_90") -> bytes:
    return cudamagic.build(source, options=options, arch=arch, use_cache=False).cubin


@pytest.mark.parametrize("options, source, what, check", ROWS,
                         ids=[" ".join(r[0]) + ": " + r[2] for r in ROWS])
def test_a_dlto_link_makes_the_code_each_option_asks_for(options, source, what, check):
    assert not check(_cubin(source, ["-dlto"])), f"-dlto alone already gives {what}"
    assert check(_cubin(source, ["-dlto", *options])), f"-dlto {' '.join(options)}: not {what}"
    # ptxas made the -rdc=true build from NVRTC's own PTX with the option: the same answer
    assert check(_cubin(source, ["-rdc=true", *options]))


def test_a_dlto_link_is_for_the_build_s_arch():
    assert read_cubin(_cubin(MUL, ["-dlto"], arch="sm_80")).sm == 80


def test_the_fmad_false_dlto_link_is_the_rdc_build_s_arithmetic():
    """The issue's case: the fractal's kernel: -dlto --fmad=false was byte-identical to -dlto."""
    plain, off = _cubin(MULADD, ["-dlto"]), _cubin(MULADD, ["-dlto", "--fmad=false"])
    assert plain != off
    arith = {"FFMA", "FMUL", "FADD"}
    assert [o for o in opcodes(off) if o in arith] == \
        [o for o in opcodes(_cubin(MULADD, ["-rdc=true", "--fmad=false"])) if o in arith]


# what NVRTC's options say to nvJitLink: NVRTC lets an explicit switch win over -use_fast_math
# wherever it stands, and the last of two spellings of one switch win (both seen in its SASS)
TABLE = [
    ([], ()),
    (["-DX=1", "-lineinfo", "-std=c++17"], ("-lineinfo",)),
    (["--fmad=false"], ("-fma=0",)),
    (["-fmad=true", "--fmad=false"], ("-fma=0",)),
    (["--ftz=true", "-prec-div=false", "--prec-sqrt=false"],
     ("-ftz=1", "-prec-div=0", "-prec-sqrt=0")),
    (["-use_fast_math"], ("-fma=1", "-ftz=1", "-prec-div=0", "-prec-sqrt=0")),
    (["--fmad=false", "--use_fast_math"], ("-fma=0", "-ftz=1", "-prec-div=0", "-prec-sqrt=0")),
    (["--maxrregcount=32", "-maxrregcount=40"], ("-maxrregcount=40",)),
    (["-G", "--generate-line-info"], ("-g", "-lineinfo")),
    (["-Xptxas=-O1", "--ptxas-options=-v"], ("-Xptxas=-O1", "-Xptxas=-v")),
]


@pytest.mark.parametrize("options, expected", TABLE)
def test_nvrtc_options_as_nvjitlink_options(options, expected):
    assert code_generation(options).nvjitlink_options() == expected


def test_code_generation_is_a_record_of_enums():
    assert code_generation(["--ftz=true"]) == CodeGeneration(flags=((Flag.FTZ, True),))


@pytest.mark.gpu
def test_a_dlto_fmad_false_kernel_gives_numpy_s_float32_results_exactly():
    """The issue's fractal in small: a multiply then an add, each rounded to float32, as NumPy
    computes them; with contraction (-dlto alone) the one rounding of an FMA differs somewhere."""
    import cupy as cp
    import numpy as np

    rng = np.random.default_rng(29)
    x = rng.standard_normal(1 << 16).astype(np.float32)
    a, b = np.float32(1.1), np.float32(-0.3)
    expected = x * a + b  # NumPy: float32 multiply, rounded, then float32 add
    results = {}
    for options in (["-dlto", "--fmad=false"], ["-dlto"]):
        k = cudamagic.build(MULADD.replace("x[threadIdx.x]", "x[blockIdx.x * blockDim.x + "
                                                            "threadIdx.x]"),
                            options=options, use_cache=False)["k"]
        d = cp.asarray(x)
        k((x.size // 256,), (256,), (d, a, b))
        results[" ".join(options)] = d.get()
    assert results["-dlto --fmad=false"].tobytes() == expected.tobytes()
    assert results["-dlto"].tobytes() != expected.tobytes()


# the cell's own variables, two of them named like the device runtime's internals: a link with
# libcudadevrt.a adds the runtime's 289 variables (error tables, printf strings), never the cell's
OWN_VARIABLES = DYNAMIC + r"""
__device__ float _weights[4];
__constant__ int cudart_flags;
"""


@pytest.mark.parametrize("options", [["-rdc=true"], ["-dc"], ["-dlto"]])
def test_globals_of_a_linked_module_are_the_cells_not_the_device_runtimes(tmp_path, options):
    module = cudamagic.build(OWN_VARIABLES, options=options, arch="sm_90", cache=tmp_path)
    assert len(module.image.globals) > 200  # the runtime was linked: its variables are there
    assert sorted(g.name for g in module.globals) == ["_weights", "cudart_flags"]
    assert sorted(g.name for g in module.report.globals) == ["_weights", "cudart_flags"]
    again = cudamagic.build(OWN_VARIABLES, options=options, arch="sm_90", cache=tmp_path)
    assert again.hit and sorted(g.name for g in again.globals) == ["_weights", "cudart_flags"]
