"""Which kernels synchronise the grid, read from the PTX a compile assembled (issue 27 item C).

A kernel that synchronises the grid must be launched cooperatively, with a grid that fits on the
device at once; any other kernel may have any grid. The CUBIN alone tells them apart only by a
cooperative-groups barrier record beside a trap, which ``cuda::std::optional::value()`` and
``array::at()`` next to a block barrier have too, and a ``-G`` CUBIN not at all. The compile's
PTX says it: grid sync reads the driver's grid workspace (``%envreg1``/``%envreg2``) and traps
without a cooperative launch. Each kernel's answer is asserted on a miss, on a hit (a fresh cache
object over the same folder) and after a pickle round trip, for an optimised and a ``-G`` build.
"""

from __future__ import annotations

import dataclasses
import pickle

import pytest

import cudamagic
from cudamagic import KernelCache
from cudamagic.store import decode_entry, encode_entry
from cudamagic.toolchain.binary.image import read_cubin
from cudamagic.toolchain.binary.ptx import GridSyncTable, grid_syncs

from .conftest import run_python

HEADERS = r"""
#include <cooperative_groups.h>
#include <cuda/std/optional>
#include <cuda/std/array>
namespace cg = cooperative_groups;
__device__ __noinline__ void grid_sync_fn() { cg::this_grid().sync(); }
"""

# kernel -> (its code, whether it synchronises the grid)
KERNELS = {
    "grid_direct": ("cg::this_grid().sync(); x[0] = 1;", True),
    "grid_called": ("x[0] = 1; grid_sync_fn(); x[1] = 2;", True),
    "grid_arrive": ("auto g = cg::this_grid(); auto t = g.barrier_arrive(); x[0] = 1; "
                    "g.barrier_wait(static_cast<decltype(t)&&>(t));", True),
    "grid_printf": ('printf("%d\\n", n); cg::this_grid().sync(); x[0] = 1;', True),
    "block_sync": ("cg::this_thread_block().sync(); x[0] = 1;", False),
    "optional_value": ("cuda::std::optional<int> o; if (n) o = n; "
                       "cg::this_thread_block().sync(); x[blockIdx.x] = o.value();", False),
    "array_at_syncthreads": ("cuda::std::array<int, 4> a{}; __syncthreads(); x[0] = a.at(n);",
                             False),
    "array_at_block_sync": ("cuda::std::array<int, 4> a{}; cg::this_thread_block().sync(); "
                            "x[0] = a.at(n);", False),
    "plain_trap": ("if (n) __trap(); x[0] = 1;", False),
    "trap_block_sync": ("cg::this_thread_block().sync(); if (n) __trap(); x[0] = 1;", False),
    # runs with or without a cooperative launch: launched as any kernel, unless asked
    "guarded_grid_sync": ("auto g = cg::this_grid(); if (g.is_valid()) g.sync(); x[0] = 1;",
                          False),
    "grid_rank": ("__syncthreads(); x[cg::this_grid().thread_rank()] = 1;", False),
    "grid_is_valid": ("x[0] = cg::this_grid().is_valid();", False),
    "tile_sync": ("auto t = cg::tiled_partition<32>(cg::this_thread_block()); "
                  "x[0] = t.shfl_down(x[0], 1); t.sync(); if (n) __trap();", False),
    "cluster_sync": ("cg::this_cluster().sync(); x[0] = cuda::std::array<int, 2>{}.at(n);",
                     False),
}
# what a -G build says where it differs: its grid_group::sync keeps its own validity check
DEBUG = {**KERNELS, "guarded_grid_sync": (KERNELS["guarded_grid_sync"][0], True)}


def _cell(kernels: dict[str, tuple[str, bool]]) -> str:
    return HEADERS + "".join(f'extern "C" __global__ void {name}(int* x, int n) {{ {code} }}\n'
                             for name, (code, _) in kernels.items())


BUILDS = {"optimised": ([], KERNELS), "-G": (["-G"], DEBUG)}
WAYS = ("miss", "hit", "pickled")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each build's module on a miss, on a hit from a fresh cache object, and pickled."""
    out = {}
    for build, (options, kernels) in BUILDS.items():
        folder = tmp_path_factory.mktemp("grid_sync")
        miss = cudamagic.build(_cell(kernels), options=["-std=c++17", *options],
                               cache=KernelCache(folder))
        hit = cudamagic.build(_cell(kernels), options=["-std=c++17", *options],
                              cache=KernelCache(folder))
        assert not miss.hit and hit.hit
        out[build] = {"miss": miss, "hit": hit, "pickled": pickle.loads(pickle.dumps(hit))}
    return out


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("build, kernel, syncs", [
    (build, name, syncs) for build, (_, kernels) in BUILDS.items()
    for name, (_, syncs) in kernels.items()])
def test_grid_sync_is_what_the_kernel_does(built, build, kernel, syncs, way):
    """Before (read from the CUBIN alone, 820ff15) 48 of these 90 rows failed: optional_value,
    array_at_block_sync, trap_block_sync, tile_sync and cluster_sync were taken for grid sync
    (True) in the optimised build, and every kernel with a cooperative-groups barrier was None
    (cannot tell) in the -G one."""
    assert built[build][way][kernel].launch_needs.grid_sync is syncs


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_100", "sm_120"])
def test_every_target_reads_the_same(arch):
    """The PTX's reading holds for each target NVRTC compiles for (the table above is sm_90)."""
    rows = ("grid_called", "block_sync", "trap_block_sync", "guarded_grid_sync")
    cell = HEADERS.replace("#include <cuda/std/optional>\n#include <cuda/std/array>\n", "") + \
        "".join(f'extern "C" __global__ void {k}(int* x, int n) {{ {KERNELS[k][0]} }}\n'
                for k in rows)
    mod = cudamagic.build(cell, arch=arch, use_cache=False)
    assert mod.image.grid_sync is not None
    assert {k: mod[k].launch_needs.grid_sync for k in rows} == {k: KERNELS[k][1] for k in rows}


def test_a_pickled_kernel_keeps_the_answer(built):
    k = pickle.loads(pickle.dumps(built["optimised"]["hit"]["optional_value"]))
    assert k.launch_needs.grid_sync is False


# a call through a pointer: the PTX cannot say whom it calls, so the CUBIN's records decide
POINTER_CELL = HEADERS + r"""
__device__ void (*volatile sync_ptr)() = grid_sync_fn;
extern "C" __global__ void via_pointer(int* x) { sync_ptr(); x[0] = 1; }
extern "C" __global__ void optional_value(int* x, int n) {
  cuda::std::optional<int> o; if (n) o = n; cg::this_thread_block().sync(); x[0] = o.value(); }
"""


def test_a_kernel_the_ptx_cannot_tell_about_is_read_from_the_cubin(tmp_path):
    mod = cudamagic.build(POINTER_CELL, options=["-std=c++17"], cache=KernelCache(tmp_path))
    table = mod.image.grid_sync
    assert table is not None and table.unknown == {"via_pointer"}
    cubin_rule = read_cubin(mod.cubin).kernel("via_pointer").launch.grid_sync
    for m in (mod, cudamagic.build(POINTER_CELL, options=["-std=c++17"],
                                   cache=KernelCache(tmp_path))):
        assert m["via_pointer"].launch_needs.grid_sync is cubin_rule
        assert m["optional_value"].launch_needs.grid_sync is False


def test_an_entry_written_before_the_table_reads_the_cubin(tmp_path):
    """An entry without the field (an older cudamagic's, same format) is served as before:
    its CUBIN's records decide."""
    cell = _cell({k: KERNELS[k] for k in ("grid_direct", "optional_value", "block_sync")})
    cache = KernelCache(tmp_path)
    mod = cudamagic.build(cell, cache=cache)
    record, _ = cache.get(mod.key)
    assert record is not None and record.grid_sync == GridSyncTable(frozenset({"grid_direct"}))
    older = decode_entry(encode_entry(dataclasses.replace(record, grid_sync=None)))
    assert older.grid_sync is None
    cache.put(mod.key, older)
    again = cudamagic.build(cell, cache=KernelCache(tmp_path))
    assert again.hit and again.image.grid_sync is None
    assert [again[k].launch_needs.grid_sync for k in ("grid_direct", "optional_value",
                                                      "block_sync")] == [True, True, False]


def _counting_links(monkeypatch) -> list[bool]:
    """Each nvJitLink link from now on, as whether it asked for PTX."""
    from cudamagic.toolchain.compile import link

    real, links = link.link, []

    def counted(*args, **kw):
        links.append(bool(kw.get("emit_ptx")))
        return real(*args, **kw)

    monkeypatch.setattr(link, "link", counted)
    return links


def test_a_dlto_build_reads_the_ptx_of_one_more_link(tmp_path, monkeypatch):
    """-dlto: NVRTC makes LTO IR and no PTX, nvJitLink a CUBIN or PTX per link; where the
    CUBIN's records leave grid sync open (a block barrier beside a trap) one more link makes
    the PTX. Before, optional_value read True."""
    links = _counting_links(monkeypatch)
    cell = _cell({k: KERNELS[k] for k in ("grid_direct", "optional_value", "block_sync")})
    mod = cudamagic.build(cell, options=["-dlto", "-std=c++17"], cache=KernelCache(tmp_path))
    assert links == [False, True] and mod.image.grid_sync is not None
    for m in (mod, cudamagic.build(cell, options=["-dlto", "-std=c++17"],
                                   cache=KernelCache(tmp_path))):
        assert {k: m[k].launch_needs.grid_sync for k in ("grid_direct", "optional_value",
                                                         "block_sync")} == \
            {"grid_direct": True, "optional_value": False, "block_sync": False}


def test_a_dlto_build_the_cubin_answers_links_once(monkeypatch):
    links = _counting_links(monkeypatch)
    cell = _cell({k: KERNELS[k] for k in ("plain_trap", "array_at_syncthreads")})
    mod = cudamagic.build(cell, options=["-dlto", "-std=c++17"], use_cache=False)
    assert links == [False] and mod.image.grid_sync is None
    assert not any(k.launch_needs.grid_sync for k in mod.values())


def test_an_rdc_build_reads_the_ptx(tmp_path):
    cell = _cell({k: KERNELS[k] for k in ("grid_called", "optional_value")})
    mod = cudamagic.build(cell, options=["-rdc=true", "-std=c++17"], use_cache=False)
    assert mod.image.grid_sync is not None
    assert mod["grid_called"].launch_needs.grid_sync is True
    assert mod["optional_value"].launch_needs.grid_sync is False


def _ptx_of(source: str) -> bytes:
    """PTX as NVRTC makes it for a virtual architecture (what ``nvcc -ptx`` gives)."""
    from cuda.bindings import nvrtc

    from cudamagic.core.toolkit import toolkit

    _, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"cell.cu", 0, [], [])
    opts = [b"-arch=compute_90", b"-std=c++17",
            *(b"-I" + d.encode() for d in toolkit().include_dirs)]
    try:
        assert int(nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]) == 0
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        buf = bytearray(size)
        nvrtc.nvrtcGetPTX(prog, buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return bytes(buf)


def test_ptx_from_elsewhere_is_read():
    """load_cubin of PTX text: nvJitLink compiles it, and the PTX says which kernels sync."""
    cell = _cell({k: KERNELS[k] for k in ("grid_called", "optional_value", "block_sync")})
    mod = cudamagic.load_cubin(_ptx_of(cell), arch="sm_90", cache=None)
    assert {k: mod[k].launch_needs.grid_sync for k in ("grid_called", "optional_value",
                                                       "block_sync")} == \
        {"grid_called": True, "optional_value": False, "block_sync": False}
    assert pickle.loads(pickle.dumps(mod))["optional_value"].launch_needs.grid_sync is False


# PTX shapes NVRTC does not make from a cell, each with what grid_syncs says of its entry:
# comments and strings are not code, %envreg10 is not %envreg1, a call to a function the PTX
# does not define leaves the entry out, the driver's system calls do not
_FUNC = ".visible .func f()\n{\n\t%s\n\tret;\n}\n"
_ENTRY = ".visible .entry k(\n\t.param .u64 k_param_0\n)\n.maxntid 128, 1, 1\n{\n%s\n\tret;\n}\n"
PTX_ROWS = {
    "reads and traps": (_ENTRY % "\tmov.u32 %r1, %envreg1;\n\t@%p1 trap;", True),
    "reads, a callee traps": (_FUNC % "trap;" + _ENTRY % "\tmov.u32 %r1, %envreg2;\n"
                              "\tcall.uni \n\tf, \n\t(\n\t);", True),
    "reads, asserts": (_ENTRY % "\tmov.u32 %r1, %envreg1;\n\tcall.uni __assertfail, (a, b);",
                       True),
    "in comments only": (_ENTRY % "\t// mov.u32 %r1, %envreg1;\n\t/* trap; */", False),
    "in a string only": ('.file 1 "/tmp/{x//y/%envreg1 trap;"\n' + _ENTRY % "\tret;", False),
    "another env register": (_ENTRY % "\tmov.u32 %r1, %envreg10;\n\ttrap;", False),
    "a name ending in trap": (_ENTRY % "\tmov.u32 %r1, %envreg1;\n\tmov.u64 %rd1, untrap;",
                              False),
    "a labelled trap": (_ENTRY % "\tmov.u32 %r1, %envreg1;\n$L__BB0_2: trap;", True),
    "a function named trap": (".visible .func trap()\n{\n\tret;\n}\n" + _ENTRY %
                              "\tmov.u32 %r1, %envreg1;\n\tcall.uni trap, ();", False),
    "printf": (".extern .func (.param .b32 r) vprintf(.param .b64 a, .param .b64 b);\n"
               + _ENTRY % "\tcall.uni (retval0), vprintf, (param0, param1);", False),
    "recursion": (".visible .func f();\n" + _FUNC % "call.uni f, ();" + _ENTRY %
                  "\tcall.uni f, ();", False),
    "an extern function": (".extern .func g();\n" + _ENTRY % "\tcall.uni g, ();", None),
    "a call through a register": (_ENTRY % "\tcall (retval0), %rd4, (param0), proto_0;", None),
    "a call this reader cannot follow": (_ENTRY % "\tcall.uni (retval0, 7;", None),
}


@pytest.mark.parametrize("ptx, says", PTX_ROWS.values(), ids=PTX_ROWS.keys())
def test_grid_syncs_reads_ptx_as_code(ptx, says):
    got = grid_syncs(ptx.encode())
    assert got.get("k") is says and ("k" in got) is (says is not None)


@pytest.mark.parametrize("value", [
    [], {"syncing": []}, {"syncing": [], "unknown": [1]}, {"syncing": "k", "unknown": []},
    {"syncing": [], "unknown": [], "more": []}])
def test_a_damaged_table_is_a_damaged_entry(value):
    with pytest.raises(ValueError):
        GridSyncTable.from_json(value)


# -- on a GPU (the H200): the large grid of a kernel taken for grid sync before, and grid sync --

GPU_CELL = HEADERS + r"""
extern "C" __global__ void optional_value(int* x, int n) {
  cuda::std::optional<int> o; if (n) o = n + blockIdx.x; cg::this_thread_block().sync();
  if (threadIdx.x == 0) x[blockIdx.x] = o.value(); }
// every block adds 1 to one counter; after the grid barrier each block reads the total
extern "C" __global__ void grid_count(int* counter, int* seen) {
  if (threadIdx.x == 0) atomicAdd(counter, 1);
  cg::this_grid().sync();
  if (threadIdx.x == 0) seen[blockIdx.x] = atomicAdd(counter, 0); }
"""


@pytest.mark.gpu
def test_a_block_barrier_kernel_takes_a_grid_larger_than_the_device_holds(tmp_path):
    """optional::value() beside a block barrier: not grid sync, so 100 000 blocks of 256
    threads (far more than an H200 holds at once) launch as any kernel and every block's value
    is right; the grid-sync kernel is still launched cooperatively (a plain launch of it would
    trap) and every block sees every block's count. Both from a miss and from a hit."""
    code = f"""
import json, cupy as cp, cudamagic
from cudamagic.toolchain.device import driver
out = []
for _ in range(2):
    mod = cudamagic.build({GPU_CELL!r}, options=["-std=c++17"], cache={str(tmp_path)!r})
    blocks = 100_000
    x = cp.full(blocks, -1, cp.int32)
    mod["optional_value"]((blocks,), (256,), (x, cp.int32(7)))
    ok_large = bool((x == cp.arange(blocks, dtype=cp.int32) + 7).all())
    k = mod["grid_count"]
    device = driver.current_device()
    most = driver.max_active_blocks(device, k._handle(device), 128, 0) * \\
        driver.device_limits(device).sm_count
    counter, seen = cp.zeros(1, cp.int32), cp.zeros(most, cp.int32)
    k((most,), (128,), (counter, seen))
    cp.cuda.Device().synchronize()
    out.append([mod.hit, mod["optional_value"].launch_needs.grid_sync, blocks > most,
                k.launch_needs.grid_sync, ok_large, bool((seen == most).all())])
print(json.dumps(out))
"""
    got = __import__("json").loads(run_python(code).strip().splitlines()[-1])
    assert got == [[False, False, True, True, True, True], [True, False, True, True, True, True]]


def test_a_lineinfo_build_with_headers_in_odd_folders(tmp_path):
    """A -lineinfo build (the one tool runs make) whose grid sync sits in a header, in a folder
    whose name holds an open brace and a comment's start: NVRTC names it in a quoted .file line
    (after the code; the hand-made row "in a string only" puts one before it). A quote in the
    name is no case: NVRTC writes it unescaped and its own ptxas refuses the PTX."""
    folder = tmp_path / "in{side" / "*x"  # an open brace, and /* in the path
    folder.mkdir(parents=True)
    (folder / "gs.cuh").write_text(
        "#include <cooperative_groups.h>\n"
        "__device__ __noinline__ void gs() { cooperative_groups::this_grid().sync(); }\n")
    cell = ('#include "gs.cuh"\n#include <cuda/std/optional>\n'
            'extern "C" __global__ void called(int* x) { gs(); x[0] = 1; }\n'
            'extern "C" __global__ void optional_value(int* x, int n) {\n'
            '  cuda::std::optional<int> o; if (n) o = n;\n'
            '  cooperative_groups::this_thread_block().sync(); x[0] = o.value(); }\n')
    mod = cudamagic.build(cell, options=["-lineinfo", f"-I{folder}"], use_cache=False)
    assert mod.image.grid_sync is not None and not mod.image.grid_sync.unknown
    assert mod["called"].launch_needs.grid_sync is True
    assert mod["optional_value"].launch_needs.grid_sync is False
