"""What showing a report costs on a cache hit: the timing and occupancy fold works out one table
per distinct usage (its content the same as each kernel's own table), reads each kernel's own
records only (what a hit cell imports is tests/test_import_cost.py's)."""

from __future__ import annotations

import re
import struct

import pytest

import cudamagic
from cudamagic.toolchain.device import occupancy as occ
from cudamagic.toolchain.binary.image import _Elf, read_cubin
from cudamagic.view import bench

from .conftest import FIXTURES, REPO

# kernels that ask an SM for different things, some alike: the same template at three values,
# a __launch_bounds__, static shared memory, named barriers, and more than eight kernels
_SOURCE = r"""
template <int N> __global__ void same(float* x) { x[threadIdx.x] += N; }
__global__ void __launch_bounds__(128) bounded(float* x) { x[threadIdx.x] *= 2.0f; }
__global__ void shared_big(float* x) {
  __shared__ float s[8192]; s[threadIdx.x] = x[threadIdx.x]; __syncthreads();
  x[threadIdx.x] = s[(threadIdx.x + 1) % 8192]; }
extern "C" __global__ void barriers(float* x) { asm volatile("bar.sync 5, 64;"); x[0] = 1; }
template <int N> __global__ void heavy(double* x, int n) {
  double a[N];
  for (int i = 0; i < N; ++i) a[i] = x[(threadIdx.x + i) % n];
  double s = 0; for (int i = 0; i < N; ++i) s += a[i] * a[(i * 7) % N];
  x[threadIdx.x] = s; }
"""
_NAMES = ["same<1>", "same<2>", "same<3>", "bounded", "shared_big", "heavy<4>", "heavy<64>",
          "same<4>", "same<5>"]


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    return cudamagic.build(_SOURCE, _NAMES, cache=cudamagic.KernelCache(
        tmp_path_factory.mktemp("cache")))


def _kernels(mod) -> list:
    seen: dict = {}
    for k in mod.kernels.values():
        seen.setdefault(k.symbol, k)
    return list(seen.values())


def _note_of(kernel) -> str:
    """What the fold must say of one kernel: worked out from its own table, as a user gets it
    from ``kernel.occupancy(sm=...)``."""
    t = occ.table(kernel, sm=occ.cubin_sm(kernel))
    best = t.best.get(0, 0)
    if not best:
        return f"{kernel.python_name}: no block size launches"
    at = t.at(best)
    return (f"{kernel.python_name}: best block size {best} ({at.occupancy:.0%} occupancy, "
            f"limited by {', '.join(at.limited_by)})")


def test_the_fold_says_of_each_kernel_what_its_own_table_says(module):
    page = bench.timing_fold(module)
    notes = re.findall(r"<li>([^<]*)</li>", page)
    kernels = _kernels(module)
    shown = kernels[:bench.FOLD_KERNELS]
    assert notes[:len(shown)] == [_note_of(k) for k in shown]
    assert notes[len(shown):] == [f"{len(kernels) - len(shown)} more kernels: kernel.occupancy() "
                                  "for each"]
    assert page.count("<polyline") == len(shown)
    # the usages differ where the sources do: the test covers more than one table
    assert len({occ.usage_of(k) for k in shown}) >= 4


def test_kernels_that_ask_alike_share_one_table(module, monkeypatch):
    asked = []
    real = occ.table
    monkeypatch.setattr(occ, "table", lambda *a, **kw: asked.append(a[0]) or real(*a, **kw))
    bench.timing_fold(module)
    shown = _kernels(module)[:bench.FOLD_KERNELS]
    distinct = {(occ.usage_of(k), occ.cubin_sm(k)) for k in shown}
    assert len(asked) == len(distinct) < len(shown)


def _bounded_cubins() -> list:
    from cudamagic.toolchain.compile.nvrtc import compile_cubin

    src = ('extern "C" __global__ void __launch_bounds__(192, 2) lb(float* x) { x[0] = 1; }\n'
           'extern "C" __global__ void __launch_bounds__(1024) big(float* x) { x[0] = 1; }\n'
           'extern "C" __global__ void nb(float* x) { asm volatile("bar.sync 7, 64;"); x[0]=1; }\n'
           'extern "C" __global__ void none(float* x) { x[0] = 1; }\n')
    return [(FIXTURES / "fixture.cubin").read_bytes(),
            compile_cubin(src, [], ["-arch=sm_90"], trace=False).cubin]


@pytest.mark.parametrize("which", [0, 1])
def test_usage_reads_the_kernels_own_records_not_its_launch_needs(which, monkeypatch):
    data = _bounded_cubins()[which]
    # the reference: the block limit as the launch reads it
    expected = {}
    for k in read_cubin(data).kernels:
        dims = k.launch.max_threads
        expected[k.symbol] = None if dims is None else dims[0] * dims[1] * dims[2]
    monkeypatch.setattr(_Elf, "launch_needs", lambda *a: pytest.fail(
        "usage_of walked the call graph and scanned the code"))
    got = {k.symbol: occ.usage_of(k).max_threads for k in read_cubin(data).kernels}
    assert got == expected
    assert which == 0 or (got["lb"], got["big"], got["none"]) == (192, 1024, None)


def test_launch_needs_scan_code_only_where_a_grid_barrier_could_be(monkeypatch):
    """The report reads each shown kernel's launch needs: a kernel without cooperative-groups
    records has its code left unscanned, and the answers stay the reading's own."""
    from .test_image import GRID_SYNC, LAUNCH_SOURCE

    image = read_cubin(cudamagic.build(LAUNCH_SOURCE, arch="sm_90", options=["-std=c++17"],
                                       use_cache=False).cubin)
    scanned = []
    real = _Elf._traps
    monkeypatch.setattr(_Elf, "_traps", lambda self, name: scanned.append(name) or real(self, name))
    assert {k.symbol for k in image.kernels if k.launch.grid_sync} == \
        GRID_SYNC | {"block_sync_traps"}
    assert scanned and not {"traps", "syncthreads", "atomic_spin", "grid_valid"} & set(scanned)


def test_a_kernel_that_calls_nothing_needs_no_function_table():
    from .test_image import CLUSTER_SOURCE

    image = read_cubin(cudamagic.build(CLUSTER_SOURCE, arch="sm_90", use_cache=False).cubin)
    dims = {k.symbol: k.launch.cluster_dims for k in image.kernels}
    assert (dims["pair"], dims["box"], dims["plain"]) == ((2, 1, 1), (2, 3, 4), None)
    assert "functions" not in image._elf.__dict__  # every FUNC symbol's name, never read


def _traps_reference(code: bytes) -> bool:
    """The trap reading as one loop over every instruction's low halfword."""
    from cudamagic.toolchain.binary.image import _OPCODE_BPT, _OPCODE_MASK

    return any(w & _OPCODE_MASK == _OPCODE_BPT
               for (w,) in struct.iter_unpack("<H14x", code[:len(code) // 16 * 16]))


def test_the_trap_search_agrees_with_one_loop_over_every_instruction():
    """Random code with traps, near misses (the right first byte, another opcode; a trap's bytes
    off the instruction boundary; a trap in a trailing partial instruction) planted."""
    import random
    import types

    rng = random.Random(21)
    for case in range(600):
        n = rng.randrange(0, 40)
        code = bytearray(rng.getrandbits(8) for _ in range(16 * n + rng.choice((0, 0, 5, 15))))
        for _ in range(rng.randrange(0, 4)):
            at = rng.randrange(0, max(len(code) - 1, 1)) if code else 0
            if len(code) >= 2:
                word = rng.choice((0x095C, 0xF95C, 0x195C, 0x0A5C, 0x085C, 0x5C09))
                if rng.random() < 0.5:
                    at -= at % 16
                code[at:at + 2] = word.to_bytes(2, "little")[:len(code) - at]
        code = bytes(code)
        elf = types.SimpleNamespace(section=lambda name: (0, 0, 0, len(code)), data=code)
        assert _Elf._traps(elf, "k") == _traps_reference(code), (case, code.hex())


# --- rows made for what is shown ---------------------------------------------------------------

def _rows(n: int):
    from cudamagic.view.report import KernelRow, KernelRows

    made = []

    def make(i):
        made.append(i)
        return KernelRow(f"k_{i}", f"k<{i}>", f"_Z1kILi{i}EEvv", f"void k<{i}>()", "nvrtc")
    return KernelRows(range(n), make), made


def test_lazy_rows_read_like_the_tuple_of_the_same_rows():
    import pickle

    for n in (0, 1, 2, 7, 60):
        rows, made = _rows(n)
        assert len(rows) == n and made == []  # len makes none
        full = tuple(_rows(n)[0])
        for start in (None, -n - 3, -2, -1, 0, 1, n // 2, n, n + 4):
            for stop in (None, -n - 1, -1, 0, 2, n // 2, n, n + 9):
                for step in (None, 1, 2, 3, -1, -2):
                    assert rows[start:stop:step] == full[start:stop:step], (n, start, stop, step)
        for i in range(-n, n):
            assert rows[i] == full[i]
        for i in (n, -n - 1):
            with pytest.raises(IndexError):
                rows[i]
        assert rows == full and list(rows) == list(full) and (n == 0 or rows != full + full[:1])
        assert len(set(made)) == len(made) == n  # each row made once, however often read
        again = pickle.loads(pickle.dumps(rows))  # a travelling report carries them made
        assert type(again) is tuple and again == full


def test_a_shown_report_of_many_kernels_makes_the_rows_it_shows(monkeypatch):
    from cudamagic.view.report import SHOWN_ROWS, html_body, text_body

    rows, made = _rows(1000)
    report = _report(rows)
    text_body(report, SHOWN_ROWS)
    html_body(report, SHOWN_ROWS)
    assert report.columns and sorted(set(made)) == list(range(SHOWN_ROWS))
    assert str(report).count("\n  k_") == 1000  # print(report) lists them all


def _report(rows):
    from .test_report import make

    return make(0).__class__(**{**make(0).__dict__, "rows": rows})


def test_a_hit_makes_no_row_before_the_report_is_shown(module, monkeypatch):
    from cudamagic.view import report as R

    made = []
    real = R.KernelRow.__init__
    monkeypatch.setattr(R.KernelRow, "__init__", lambda self, *a, **kw: made.append(a[0]) or
                        real(self, *a, **kw))
    hit = cudamagic.build(_SOURCE, _NAMES, cache=cudamagic.KernelCache(module.report.cache_dir))
    assert hit.hit and made == []
    assert [r.python_name for r in hit.report.rows[:2]] == made == [
        k.python_name for k in list(hit.kernels.values())[:2]]


def test_lazy_rows_never_carry_resources():
    from cudamagic.view.report import KernelRow, KernelRows

    rows = KernelRows([0], lambda i: KernelRow("k", "k", "k", "k", "nvrtc", attributes={}))
    with pytest.raises(ValueError, match="carry no resources"):
        rows[0]


# --- the shadowing check -----------------------------------------------------------------------

def test_a_name_hides_a_builtin_exactly_where_python_has_one():
    import builtins
    import types

    from cudamagic.shell.magic import CudaMagics

    candidates = sorted(set(dir(builtins)) | {"saxpy_float", "k_1", "builtins", "print_",
                                              "__name__", "__doc__", "__loader__", "maxx"})
    kernel = types.SimpleNamespace(name_expression="k<1>")
    names = {"cuda_module": object(), **{n: kernel for n in candidates}}
    shell = types.SimpleNamespace(_shell=lambda: types.SimpleNamespace(user_ns={"len": 3}))
    said = CudaMagics._warn_shadowing(shell, names)
    hidden = {m.group(1) for m in map(re.compile(r"the kernel name '(\w+)' hides").match, said)
              if m}
    assert hidden == {n for n in candidates if hasattr(builtins, n) and n != "len"}
    assert sum("'len' replaces the notebook's variable of type int" in s for s in said) == 1


def test_a_curve_shared_by_kernels_is_drawn_as_each_would_be_alone():
    import random

    rng = random.Random(5)
    curves = [[(b, rng.choice((0.25, 0.5, 1.0))) for b in range(32, 1025, 32)] for _ in range(3)]
    # alike kernels share one list; equal curves in lists of their own; curves of one length
    series = [("a", curves[0]), ("b", curves[0]), ("c", list(curves[0])), ("d", curves[1]),
              ("e", curves[2]), ("f", curves[1])]
    page = bench.svg_lines(series, x_label="x", y_label="y", y_max=1.0)
    points = re.findall(r'<polyline[^>]* points="([^"]*)"', page)
    alone = [re.findall(r'<polyline[^>]* points="([^"]*)"', bench.svg_lines(
        [(label, list(pts))] + [(f"{label}{i}", c) for i, c in enumerate(curves)],
        x_label="x", y_label="y", y_max=1.0))[0] for label, pts in series]
    assert points == alone and len(set(points)) == 3


def test_the_fold_makes_only_the_kernels_it_draws(module, monkeypatch):
    from cudamagic.launch import kernel as K

    hit = cudamagic.build(_SOURCE, _NAMES, cache=cudamagic.KernelCache(module.report.cache_dir))
    made = []
    real = K.Kernel.__init__
    monkeypatch.setattr(K.Kernel, "__init__", lambda self, *a, **kw: made.append(kw.get(
        "symbol")) or real(self, *a, **kw))
    page = bench.timing_fold(hit)
    assert hit.hit and len(made) == len(set(made)) == bench.FOLD_KERNELS < len(hit.kernels)
    assert page == bench.timing_fold(module)  # what a module whose kernels are all made shows


def test_launch_needs_ask_for_debug_info_only_where_a_grid_barrier_is(monkeypatch):
    from .test_image import LAUNCH_SOURCE

    image = read_cubin(cudamagic.build(LAUNCH_SOURCE, arch="sm_90", options=["-std=c++17"],
                                       use_cache=False).cubin)
    asked = []
    real = _Elf.section
    monkeypatch.setattr(_Elf, "section", lambda self, name: asked.append(name) or real(self, name))
    plain = [k for k in image.kernels if k.symbol in ("traps", "syncthreads", "grid_valid")]
    assert [k.launch.grid_sync for k in plain] == [False] * 3
    assert ".debug_info" not in asked
