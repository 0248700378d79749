"""Occupancy arithmetic: hand-derived cases, CUDA's own calculator header, and the driver's
recorded answers.

Three oracles, each able to catch what the others cannot:

- cases worked out by hand from the rules (docs/timing.md lists them), one per limit;
- ``cuda_occupancy.h``, the calculator NVIDIA ships with the runtime headers, compiled here with
  the C compiler (where both are present) and asked the same questions for every architecture
  with a limits table, over many generated kernels;
- the driver's answers recorded on the GPU machine (tests/fixtures/occupancy/*.json, written by
  scripts/record_occupancy.py), for the kernels whose CUBINs the driver read.
"""

from __future__ import annotations

import base64
import ctypes
import itertools
import json
import random
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

import cudamagic
from cudamagic.toolchain.device import occupancy as occ
from cudamagic.toolchain.binary.image import read_cubin
from cudamagic.toolchain.device.occupancy import KernelUsage, compute
from cudamagic.errors import OccupancyError
from cudamagic.view.bench import occupancy_html, occupancy_text

from .conftest import FIXTURES, REPO

RECORDED = sorted((FIXTURES / "occupancy").glob("*.json"))
KIB = 1024


# --- by hand: one case per rule ----------------------------------------------------------------

# (sm, registers, static shared, max threads, barriers, block, dynamic, carveout)
#   -> (blocks per SM, what limits it)
HAND = [
    # 32 regs: 1024 a warp, 16 warps a sub-partition, 64 an SM: 8 blocks of 8 warps
    ((90, 32, 0, None, 1, 256, 0, None), (8, ("warps", "registers"))),
    # 254 regs: 8128 -> 8192 a warp, 2 warps a sub-partition, 8 an SM: one block of 8 warps
    ((90, 254, 0, None, 1, 256, 0, None), (1, ("registers",))),
    # 16 warps of 8192 registers: 131072 > 65536 a block: no launch
    ((90, 254, 0, None, 1, 512, 0, None), (0, ("registers",))),
    # 40 KiB + 1 KiB reserved a block into 164 KiB: 4 blocks
    ((80, 12, 40 * KIB, None, 1, 128, 0, None), (4, ("shared memory",))),
    # sm_86 holds 48 warps: 12 blocks of 4
    ((86, 10, 0, None, 1, 128, 0, None), (12, ("warps",))),
    # sm_89 holds 24 blocks at most
    ((89, 10, 0, None, 1, 32, 0, None), (24, ("blocks",))),
    # sm_75: 20 + 20 KiB a block (256-byte units, nothing reserved) into 64 KiB: one block
    ((75, 16, 20 * KIB, None, 1, 64, 20 * KIB, None), (1, ("shared memory",))),
    # six named barriers on sm_90: 2 * 32 / 6 = 10 blocks
    ((90, 10, 0, None, 6, 32, 0, None), (10, ("barriers",))),
    # carveout 25 %: 57 KiB rounds up to the 64 KiB setting; 5 KiB blocks: 12
    ((90, 12, 4 * KIB, None, 1, 128, 0, 25), (12, ("shared memory",))),
    # carveout 0 %: grown to the 8 KiB setting that holds one 5 KiB block
    ((90, 12, 4 * KIB, None, 1, 128, 0, 0), (1, ("shared memory",))),
    # __launch_bounds__(128): the driver counts 8 blocks of 256, but such a launch fails
    ((90, 10, 0, 128, 0, 256, 0, None), (8, ("warps",))),
    # 227 KiB is all a block may have on sm_90: 228 KiB of dynamic shared memory is too much
    ((90, 10, 0, None, 1, 32, 228 * KIB, None), (0, ("shared memory",))),
    # 99 KiB of dynamic shared memory on sm_86 fits (opted in), one block
    ((86, 10, 0, None, 1, 32, 99 * KIB, None), (1, ("shared memory",))),
]


@pytest.mark.parametrize("question,answer", HAND, ids=[f"sm{q[0]}-r{q[1]}-s{q[2]}-b{q[5]}-d{q[6]}"
                                                       f"-c{q[7]}" for q, _ in HAND])
def test_hand_computed_cases(question, answer):
    sm, regs, static, most, barriers, block, dyn, carveout = question
    usage = KernelUsage(registers=regs, static_shared_bytes=static, max_threads=most,
                        barriers=barriers)
    got = compute(usage, block, dyn, sm=sm, carveout=carveout)
    assert (got.active_blocks, got.limited_by) == answer
    assert got.launches == (got.active_blocks > 0 and (most is None or block <= most))
    assert (got.reason != "") == (not got.launches)


def test_a_dynamic_size_over_the_kernels_limit_does_not_fit():
    usage = KernelUsage(registers=12, static_shared_bytes=48 * KIB)
    # the default limit is 48 KiB less the static shared memory: here 0
    assert compute(usage, 128, 8 * KIB, sm=90, max_dynamic_shared=0).active_blocks == 0
    raised = compute(usage, 128, 8 * KIB, sm=90)  # cudamagic raises it for the launch
    assert raised.active_blocks == 4 and raised.launches


def test_best_block_size_is_the_largest_of_equals():
    # 254 registers on sm_90: 32, 64, 128 and 256 threads all hold 256 threads an SM
    usage = KernelUsage(registers=254)
    t = occ.table(usage, sm=90)
    assert t.best == {0: 256}
    assert t.at(256).occupancy == 8 / 64
    assert t.at(512).active_blocks == 0 and not t.at(512).launches


def test_max_block_size_follows_registers_and_bounds():
    assert KernelUsage(registers=254).max_block_size(occ.arch_limits(90)) == 256
    assert KernelUsage(registers=64).max_block_size(occ.arch_limits(90)) == 1024
    assert KernelUsage(registers=10, max_threads=768).max_block_size(occ.arch_limits(90)) == 768


@pytest.mark.parametrize("bad,message", [
    (dict(block_size=0), "block size 0"), (dict(block_size=2.5), "block size 2.5"),
    (dict(block_size=True), "block size True"),
    (dict(dynamic_shared_bytes=-1), "dynamic shared memory -1"),
    (dict(carveout=101), "carveout 101"), (dict(sm=61), "no occupancy limits table for sm_61"),
])
def test_bad_questions_say_what(bad, message):
    args = {"kernel": KernelUsage(registers=8), "block_size": 128, "sm": 90, **bad}
    with pytest.raises(OccupancyError, match=message) as info:
        compute(**args)
    assert isinstance(info.value, cudamagic.CudaMagicError)


def test_every_nvrtc_target_but_the_newest_has_a_table():
    from cudamagic.toolchain.compile.nvrtc import supported_archs

    targets = set(supported_archs())
    # sm_88, sm_107 and sm_110 have no published limits this project could check: they say so
    missing = sorted(targets - set(occ.known_archs()))
    assert set(missing) <= {88, 107, 110}, missing
    with pytest.raises(OccupancyError, match="no occupancy limits table for sm_110"):
        occ.arch_limits(110)


# --- the fixture CUBIN's records ---------------------------------------------------------------

def test_usage_read_from_the_cubin():
    image = read_cubin((FIXTURES / "fixture.cubin").read_bytes())
    usages = {k.symbol: occ.usage_of(k) for k in image.kernels}
    fill = usages["_Z4fillIfEvPT_S0_i"]
    assert fill.registers == image.kernel("_Z4fillIfEvPT_S0_i").resources.registers
    assert fill.static_shared_bytes == 0 and fill.max_threads is None
    assert all(u.registers > 0 for u in usages.values())


def test_launch_bounds_and_barriers_from_a_built_cubin():
    from cudamagic.toolchain.compile.nvrtc import compile_cubin

    src = ('extern "C" __global__ void __launch_bounds__(192, 2) lb(float* x) { x[0] = 1; }\n'
           'extern "C" __global__ void nb(float* x) { asm volatile("bar.sync 7, 64;"); x[0]=1; }\n'
           'extern "C" __global__ void none(float* x) { x[0] = 1; }\n')
    image = read_cubin(compile_cubin(src, [], ["-arch=sm_90"], trace=False).cubin)
    got = {k.symbol: occ.usage_of(k) for k in image.kernels}
    assert got["lb"].max_threads == 192 and got["none"].max_threads is None
    assert got["nb"].barriers == 8 and got["none"].barriers == 0


# --- CUDA's calculator header, compiled here ---------------------------------------------------

_WRAPPER = r"""
#include <cuda_occupancy.h>
int occ(int major, int minor, int threads_sm, long shared_sm, long optin, long reserved,
        int regs, long static_shared, int func_threads, int barriers, int carveout, int block,
        long dyn, long max_dyn, int* out) {
  cudaOccDeviceProp p; memset(&p, 0, sizeof p);
  p.computeMajor = major; p.computeMinor = minor; p.maxThreadsPerBlock = 1024;
  p.maxThreadsPerMultiprocessor = threads_sm; p.regsPerBlock = 65536;
  p.regsPerMultiprocessor = 65536; p.warpSize = 32; p.sharedMemPerBlock = 48 * 1024;
  p.sharedMemPerMultiprocessor = shared_sm; p.numSms = 1; p.sharedMemPerBlockOptin = optin;
  p.reservedSharedMemPerBlock = reserved;
  cudaOccFuncAttributes a; memset(&a, 0, sizeof a);
  a.maxThreadsPerBlock = func_threads; a.numRegs = regs; a.sharedSizeBytes = static_shared;
  a.partitionedGCConfig = PARTITIONED_GC_OFF; a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
  a.maxDynamicSharedSizeBytes = max_dyn; a.numBlockBarriers = barriers;
  cudaOccDeviceState s; memset(&s, 0, sizeof s);
  s.cacheConfig = CACHE_PREFER_NONE; s.carveoutConfig = carveout;
  cudaOccResult r; memset(&r, 0, sizeof r);
  int status = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, block, dyn);
  out[0] = r.activeBlocksPerMultiprocessor; out[1] = r.blockLimitWarps;
  out[2] = r.blockLimitRegs; out[3] = r.blockLimitSharedMem; out[4] = r.blockLimitBlocks;
  out[5] = r.blockLimitBarriers;
  return status;
}
"""


def _header_dir() -> Path | None:
    from cudamagic.core.toolkit import toolkit

    for d in toolkit().include_dirs:
        if (Path(d) / "cuda_occupancy.h").is_file():
            return Path(d)
    return None


@pytest.fixture(scope="module")
def calculator(tmp_path_factory):
    cc, include = shutil.which("cc") or shutil.which("gcc"), _header_dir()
    if cc is None or include is None:
        pytest.skip("needs a C compiler and cuda_occupancy.h (the nvidia-cuda-runtime wheel's)")
    folder = tmp_path_factory.mktemp("occ")
    (folder / "w.c").write_text(_WRAPPER)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-I{include}", "-o", str(folder / "w.so"),
                    str(folder / "w.c")], check=True, capture_output=True)
    lib = ctypes.CDLL(str(folder / "w.so"))
    lib.occ.argtypes = [ctypes.c_int] * 3 + [ctypes.c_long] * 3 + [ctypes.c_int, ctypes.c_long] \
        + [ctypes.c_int] * 4 + [ctypes.c_long] * 2 + [ctypes.POINTER(ctypes.c_int)]
    return lib


def _ask_header(lib, sm: int, usage: KernelUsage, block: int, dyn: int, carveout):
    arch = occ.arch_limits(sm)
    out = (ctypes.c_int * 6)()
    # cudamagic's launch raises the kernel's dynamic limit to what a launch above 48 KiB asks
    max_dyn = max(dyn, arch.shared_per_block - usage.static_shared_bytes)
    status = lib.occ(sm // 10, sm % 10, arch.max_threads_per_sm, arch.shared_per_sm,
                     arch.shared_per_block_optin, arch.reserved_shared_per_block, usage.registers,
                     usage.static_shared_bytes, usage.max_threads or 1024, usage.barriers,
                     -1 if carveout is None else carveout, block, dyn, max_dyn, out)
    return status, list(out)


def _generated_usages(seed: int, n: int) -> list[KernelUsage]:
    rng = random.Random(seed)
    usages = [KernelUsage(registers=r, static_shared_bytes=s, barriers=b)
              for r, s, b in itertools.product((0, 8, 32, 37, 64, 128, 200, 255),
                                               (0, 100, 4 * KIB, 47 * KIB), (0, 1, 5))]
    usages += [KernelUsage(registers=rng.randint(1, 255),
                           static_shared_bytes=rng.choice([0, rng.randint(1, 48 * KIB)]),
                           barriers=rng.randint(0, 16)) for _ in range(n)]
    return usages


def _header_version() -> int:
    """``CUDART_VERSION`` of the toolkit whose calculator header is compiled (13050: 13.5)."""
    text = (_header_dir() / "cuda_runtime_api.h").read_text(errors="replace")
    return int(re.search(r"#define\s+CUDART_VERSION\s+(\d+)", text).group(1))


# an architecture whose rules changed in the calculator header -> (the CUDART_VERSION of the
# header the table follows, what changed): an older header is not the table's oracle there
# (the H200's 13.0 header disagreed on sm_103)
NEWER_RULES = {103: (13050, "13.5's header counts one named barrier per resident block on "
                            "sm_10x past sm_100 (cudaOccMaxBlocksPerSMBlockBarrierLimit)")}


@pytest.mark.parametrize("sm", occ.known_archs())
def test_arithmetic_matches_the_calculator_header(calculator, sm):
    if sm in NEWER_RULES and _header_version() < NEWER_RULES[sm][0]:
        pytest.skip(f"the calculator header here is CUDART_VERSION {_header_version()}; the "
                    f"sm_{sm} table follows {NEWER_RULES[sm][0]}'s: {NEWER_RULES[sm][1]}")
    rng = random.Random(sm)
    blocks = [32, 64, 96, 128, 160, 256, 384, 512, 640, 768, 1024, 1, 33, 1000]
    dyns = [0, 1, 1000, 8 * KIB, 40 * KIB, 64 * KIB, 99 * KIB, 160 * KIB, 227 * KIB]
    checked = 0
    for usage in _generated_usages(sm, 40):
        for block, dyn in zip(rng.sample(blocks * 3, 20), rng.sample(dyns * 3, 20)):
            carveout = rng.choice([None, None, 0, 10, 50, 100])
            status, want = _ask_header(calculator, sm, usage, block, dyn, carveout)
            got = compute(usage, block, dyn, sm=sm, carveout=carveout)
            if status != 0:  # the header refuses a carveout that maps to no setting
                continue
            header_limits = dict(zip(("warps", "registers", "shared memory", "blocks",
                                      "barriers"), want[1:]))
            ours = {k: (2**31 - 1 if v is None else v) for k, v in got.limits.items()}
            assert (got.active_blocks, ours) == (want[0], header_limits), (sm, usage, block,
                                                                          dyn, carveout)
            checked += 1
    assert checked > 1000


# --- the driver's answers, recorded on the GPU machine -----------------------------------------

def _recorded_cubins(record: dict) -> dict[str, bytes]:
    return {"fixture.cubin": (FIXTURES / "fixture.cubin").read_bytes(),
            "heavy": base64.b64decode(record["heavy_cubin"])}


def check_recording(record: dict) -> int:
    """Compare every recorded driver answer with the arithmetic; the number compared."""
    sm, sizes = record["sm"], record["block_sizes"]
    images = {name: read_cubin(data) for name, data in _recorded_cubins(record).items()}
    compared, wrong = 0, []
    for k in record["kernels"]:
        assert "error" not in k, k
        usage = occ.usage_of(images[k["cubin"]].kernel(k["symbol"]))
        attrs = k["attributes"]
        assert (usage.registers, usage.static_shared_bytes) == (attrs["num_regs"],
                                                              attrs["shared_size_bytes"])
        assert usage.max_block_size(occ.arch_limits(sm)) == attrs["max_threads_per_block"], k
        for key, answers in k["rows"].items():
            dyn, carveout = key.split(":")
            carve = None if carveout == "default" else int(carveout)
            # the script raised the kernel's dynamic limit for the default carveout's rows only
            limit = None if carve is None else attrs["max_dynamic_shared_size_bytes"]
            for block, want in zip(sizes, answers):
                got = compute(usage, block, int(dyn), sm=sm, carveout=carve,
                              max_dynamic_shared=limit).active_blocks
                if got != (want if isinstance(want, int) else 0):
                    wrong.append((k["symbol"], key, block, want, got))
                compared += 1
        for dyn, answer in k["potential"].items():
            if len(answer) == 2:
                rows = [compute(usage, b, int(dyn), sm=sm) for b in sizes]
                best = occ.best_block_size(rows)
                blocks = next((r.active_blocks for r in rows if r.block_size == best), 0)
                if [blocks * record["device"]["multiprocessor_count"], best] != answer:
                    wrong.append((k["symbol"], f"potential {dyn}", answer, [blocks, best]))
    assert not wrong, f"{len(wrong)} of {compared} differ, first: {wrong[:10]}"
    return compared


@pytest.mark.skipif(not RECORDED, reason="no recorded driver answers yet: run "
                    "scripts/record_occupancy.py on the GPU machine and put its JSON in "
                    "tests/fixtures/occupancy/")
@pytest.mark.parametrize("path", RECORDED, ids=[p.name for p in RECORDED])
def test_arithmetic_matches_the_recorded_driver(path):
    record = json.loads(path.read_text())
    assert check_recording(record) > 1000


class _ArithmeticDriver:
    """The record script's driver side, answered by the arithmetic: checks the script's JSON
    reaches the checker whole (the GPU machine's run is the real one)."""

    def __init__(self) -> None:
        self.attrs: dict[int, dict] = {}

    def device(self) -> dict:
        return {"name": "stand-in", "compute_capability_major": 9,
                "compute_capability_minor": 0, "multiprocessor_count": 132}

    def functions(self, cubin: bytes, symbols):
        image = read_cubin(cubin)
        usages = {s: occ.usage_of(image.kernel(s)) for s in symbols}
        return {s: SimpleNamespace(usage=u, carveout=None, limit=48 * KIB - u.static_shared_bytes)
                for s, u in usages.items()}

    def attributes(self, fn) -> dict:
        u = fn.usage
        return {"num_regs": u.registers, "shared_size_bytes": u.static_shared_bytes,
                "max_threads_per_block": u.max_block_size(occ.arch_limits(90)),
                "max_dynamic_shared_size_bytes": 48 * KIB - u.static_shared_bytes}

    def set_attribute(self, fn, name, value):
        if name == "PREFERRED_SHARED_MEMORY_CARVEOUT":
            fn.carveout = None if value == -1 else value
        elif fn.usage.static_shared_bytes + value > occ.arch_limits(90).shared_per_block_optin:
            return "CUDA_ERROR_INVALID_VALUE"
        else:
            fn.limit = value
        return None

    def active(self, fn, block, dyn):
        return compute(fn.usage, block, dyn, sm=90, carveout=fn.carveout,
                       max_dynamic_shared=fn.limit).active_blocks

    def potential(self, fn, dyn):
        rows = [compute(fn.usage, b, dyn, sm=90) for b in occ.DEFAULT_BLOCK_SIZES]
        best = occ.best_block_size(rows)
        return [132 * next((r.active_blocks for r in rows if r.block_size == best), 0), best]


def test_the_record_script_writes_what_the_check_reads(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("record_occupancy",
                                                  REPO / "scripts" / "record_occupancy.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "Recorder", _ArithmeticDriver)
    out = tmp_path / "occ.json"
    assert script.main([str(out)]) == 0
    record = json.loads(out.read_text())
    assert {k["cubin"] for k in record["kernels"]} == {"fixture.cubin", "heavy"}
    assert len(record["kernels"]) == 42 + len(read_cubin(base64.b64decode(
        record["heavy_cubin"])).kernels)
    assert check_recording(record) > 10000
    # one answer changed is found
    record["kernels"][-1]["rows"]["0:default"][3] += 1
    with pytest.raises(AssertionError, match="1 of"):
        check_recording(record)


# --- views -------------------------------------------------------------------------------------

def test_text_view_names_the_limit_and_the_best_block():
    t = occ.table(KernelUsage(registers=254), sm=90, dynamic_shared=(0, 8 * KIB))
    text = occupancy_text(t)
    assert "sm_90" in text and "computed" in text
    assert "best block size 256" in text
    assert "registers" in text
    assert "does not launch" in text  # 512 threads and more


def test_html_view_has_the_plot_and_the_table():
    t = occ.table(KernelUsage(registers=64, static_shared_bytes=20 * KIB), sm=80)
    html = occupancy_html(t)
    assert html.count("<svg") == 1 and "</svg>" in html
    assert "<table" in html and "shared memory" in html


def test_a_terminal_shows_the_occupancy_table_not_the_record(no_gpu):
    """IPython's text form of ``kernel.occupancy()`` (a terminal, a notebook's text/plain) is the
    table ``print()`` gives, not the dataclass's repr of every row."""
    from IPython.core.formatters import PlainTextFormatter

    src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.f; }\n'
    table = cudamagic.build(src, use_cache=False)["k"].occupancy()
    text = PlainTextFormatter()(table)
    assert text == str(table) and "best block size" in text and "Occupancy(" not in text


# --- the forms people write: taken, or refused clearly ---------------------------------------

@pytest.fixture(scope="module")
def typed_kernel(tmp_path_factory):
    src = 'extern "C" __global__ void __launch_bounds__(256) k(float* x) { x[0] = 1.0f; }\n'
    return cudamagic.build(src, cache=tmp_path_factory.mktemp("cache"))["k"]


def _numpy():
    return pytest.importorskip("numpy")


# what people pass to kernel.occupancy -> the block sizes and dynamic sizes of the rows
FORMS = {
    "occupancy(256)": (lambda k: k.occupancy(256), [(256, 0)]),
    "occupancy([128, 256])": (lambda k: k.occupancy([128, 256]), [(128, 0), (256, 0)]),
    "occupancy(range(64, 193, 64))": (lambda k: k.occupancy(range(64, 193, 64)),
                                      [(64, 0), (128, 0), (192, 0)]),
    "a NumPy array of block sizes": (lambda k: k.occupancy(_numpy().array([128, 256])),
                                     [(128, 0), (256, 0)]),
    "a NumPy int block size": (lambda k: k.occupancy(_numpy().int64(128)), [(128, 0)]),
    "occupancy(128, dynamic_shared=49152)": (
        lambda k: k.occupancy(128, dynamic_shared=49152), [(128, 49152)]),
    "occupancy(128, dynamic_shared=[0, 1024])": (
        lambda k: k.occupancy(128, dynamic_shared=[0, 1024]), [(128, 0), (128, 1024)]),
    "sm=90": (lambda k: k.occupancy(128, sm=90), [(128, 0)]),
    "sm='90'": (lambda k: k.occupancy(128, sm="90"), [(128, 0)]),
    "sm='sm_90'": (lambda k: k.occupancy(128, sm="sm_90"), [(128, 0)]),
    "sm='SM_90a'": (lambda k: k.occupancy(128, sm="SM_90a"), [(128, 0)]),
    "a 0-d NumPy array (raised a raw TypeError: iteration over a 0-d array)": (
        lambda k: k.occupancy(_numpy().array(128)), [(128, 0)]),
    "device as a NumPy int": (lambda k: k.occupancy(128, device=_numpy().int64(0)), [(128, 0)]),
    "max_dynamic_shared as a NumPy int": (
        lambda k: k.occupancy(128, dynamic_shared=65536, max_dynamic_shared=_numpy().int32(0)),
        [(128, 65536)]),
    "max_dynamic_shared (documented)": (
        lambda k: k.occupancy(128, dynamic_shared=65536, max_dynamic_shared=49152),
        [(128, 65536)]),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_the_forms_people_write_are_taken(no_gpu, typed_kernel, form):
    """Each raised TypeError, NumPy's ambiguous-truth ValueError, or said 'no table for
    sm_sm_90'."""
    ask, rows = FORMS[form]
    got = ask(typed_kernel)
    assert [(r.block_size, r.dynamic_shared_bytes) for r in got.rows] == rows


def test_max_dynamic_shared_is_the_limit_asked_about(no_gpu, typed_kernel):
    raised = typed_kernel.occupancy(128, dynamic_shared=65536).rows[0]
    left = typed_kernel.occupancy(128, dynamic_shared=65536, max_dynamic_shared=49152).rows[0]
    assert raised.active_blocks > 0 and left.active_blocks == 0


# what people pass that means nothing -> the words of the OccupancyError
REFUSED = {
    "sm=90.7": (lambda k: k.occupancy(128, sm=90.7), "give the architecture as 90"),
    "sm='sm90x'": (lambda k: k.occupancy(128, sm="sm90x"), "give the architecture as 90"),
    "sm=True": (lambda k: k.occupancy(128, sm=True), "give the architecture as 90"),
    "a float block size": (lambda k: k.occupancy(128.0), "give an int, or a list"),
    "a block size as text": (lambda k: k.occupancy("128"), "give an int, or a list"),
    "an empty list": (lambda k: k.occupancy([]), "the list is empty"),
    "a 2-D NumPy array": (lambda k: k.occupancy(_numpy().ones((2, 2), int)),
                          "give an int, or a list"),
    "a NumPy float": (lambda k: k.occupancy(_numpy().float64(128)), "give an int, or a list"),
    "a float dynamic size": (lambda k: k.occupancy(128, dynamic_shared=1.5),
                             "give an int, or a list"),
    # each was taken: a limit of -5 bytes in the row's words, 1.5 as if none, "x" a raw TypeError
    "a negative max_dynamic_shared": (lambda k: k.occupancy(128, max_dynamic_shared=-5),
                                      "max_dynamic_shared=-5: give the kernel's"),
    "a float max_dynamic_shared": (lambda k: k.occupancy(128, max_dynamic_shared=1.5),
                                   "max_dynamic_shared=1.5: give"),
    "max_dynamic_shared as text": (lambda k: k.occupancy(128, max_dynamic_shared="48k"),
                                   "max_dynamic_shared='48k': give"),
    "max_dynamic_shared=True": (lambda k: k.occupancy(128, max_dynamic_shared=True),
                                "max_dynamic_shared=True: give"),
    # each was taken, and without a GPU answered as if it named one
    "device as text": (lambda k: k.occupancy(128, device="0"), "device='0': give the GPU's"),
    "a negative device": (lambda k: k.occupancy(128, device=-1), "device=-1: give"),
    "device=True": (lambda k: k.occupancy(128, device=True), "device=True: give"),
}


@pytest.mark.parametrize("form", list(REFUSED))
def test_forms_that_mean_nothing_are_refused_clearly(no_gpu, typed_kernel, form):
    ask, words = REFUSED[form]
    with pytest.raises(OccupancyError, match=words):
        ask(typed_kernel)


# block sizes asked -> the rows the text shows: the text showed only the sizes of its own list
# (32, 64, 128, 192...) among those asked, and the best, so 96, 160 and 1000 were dropped in
# silence, and 1025 too, which does not launch
ASKED = {
    "sizes off the usual list": ([96, 160, 224, 1000], ["96", "160", "224", "1000"]),
    "a size that does not launch": ([1024, 1025], ["1024", "1025"]),
    "one size": (200, ["200"]),
}


@pytest.mark.parametrize("case", list(ASKED))
def test_the_text_shows_every_block_size_asked(no_gpu, typed_kernel, case):
    asked, shown = ASKED[case]
    lines = str(typed_kernel.occupancy(asked)).splitlines()
    rows = lines[lines.index(next(x for x in lines if x.lstrip().startswith("block"))) + 1:]
    assert [r.split()[0] for r in rows] == shown, lines


def test_a_default_sweep_stays_short_and_large_sizes_read_as_sizes(no_gpu, typed_kernel):
    text = str(typed_kernel.occupancy(dynamic_shared=[0, 1 << 40]))
    assert "(every block size in .rows: 64 rows)" in text
    assert "dynamic shared 1.0 TiB: no block size launches" in text  # was "1073741824 KiB"


def test_the_register_rule_checks_the_spread_block_alone_and_answers_as_before():
    """A block's registers are checked as if its warps were spread over every sub-partition,
    which is never fewer than the block's own: checking the block's own count as well (as the
    rule did) changes no answer over every architecture, register count and block size."""
    from cudamagic.toolchain.device import occupancy as occ

    for sm in occ.known_archs():
        arch = occ.arch_limits(sm)
        for regs in (1, 24, 32, 40, 64, 72, 96, 128, 160, 200, 255):
            usage = occ.KernelUsage(registers=regs, static_shared_bytes=0, max_threads=None,
                                    barriers=0)
            for block in range(32, arch.max_threads_per_block + 1, 32):
                warps = block // 32
                per_warp = -(-regs * 32 // arch.register_unit) * arch.register_unit
                spread = per_warp * -(-warps // arch.sub_partitions) * arch.sub_partitions
                both = max(per_warp * warps, spread) > arch.registers_per_block
                row = occ.compute(usage, block, sm=sm)
                assert both == (spread > arch.registers_per_block), (sm, regs, block)
                if both:  # the rule still refuses what does not fit
                    assert row.active_blocks == 0 and not row.launches, (sm, regs, block)
