"""Issue 29, item 7: a ``-dlto`` build makes the machine code its options ask for.

With ``-dlto`` NVRTC writes LTO IR and nvJitLink generates the code, so every option that
shapes code must reach nvJitLink. Each row builds one small kernel with ``-dlto`` and the option,
and with ``-dlto`` alone, disassembles both CUBINs (``cuobjdump -sass`` from the
``nvidia-cuda-cuobjdump`` wheel, with ``nvdisasm`` from ``nvidia-cuda-nvdisasm``; no GPU) and
asserts what the option changes in the instructions: each row's check holds with the option and
fails without it, and the ``-dlto`` build agrees with the ``-rdc=true`` build (ptxas compiled that
one with the option NVRTC was given).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

import cudamagic
from cudamagic.toolchain.image import read_cubin
from cudamagic.toolchain.link import CodeGeneration, Flag, code_generation


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
