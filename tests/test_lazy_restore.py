"""A hit reads each kernel's records on first use: the same answer for every thread, a fork in
the middle of a first read leaves the child working, and what is read lazily is what an eager
read gives."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import threading
import time
from unittest import mock

import pytest

from cudamagic.launch import params as params_module  # the Kernel reads its table there
from cudamagic.pipeline.steps import build_module, options_from_args
from cudamagic.toolchain.binary.image import read_cubin

from .test_fork_locks import _in_child
from cudamagic.toolchain.binary import image as image_module
from cudamagic.view import report as report_module

SOURCE = r"""
template <int N> __global__ void t(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] += N; }
extern "C" __global__ void plain(double* y, char c, short s) { y[0] = c + s; }
__constant__ float scale[4];
__device__ int counter;
"""
EXPRS = [f"t<{i}>" for i in range(6)]


@pytest.fixture
def hit(cache, compiler):
    """A module served from the cache (compiled once first)."""
    opts = options_from_args([], EXPRS)
    build_module(SOURCE, opts, cache=cache, compiler=compiler)
    mod = build_module(SOURCE, opts, cache=cache, compiler=compiler)
    assert mod.hit
    return mod


def _slow(real, delay: float = 0.02):
    """``real`` taking ``delay`` seconds: threads that start together all compute at once."""
    def slow(*args, **kwargs):
        time.sleep(delay)
        return real(*args, **kwargs)
    return slow


def test_threads_touching_one_lazy_kernel_get_one_answer(hit):
    label = EXPRS[3]
    barrier = threading.Barrier(8)
    seen: list[tuple] = []

    def touch() -> None:
        barrier.wait()
        k = hit[label]
        seen.append((k, k.image, k.params, k.image.params, k.signature,
                     hit.image.kernel(k.symbol)))

    with mock.patch.object(params_module, "param_specs", _slow(params_module.param_specs)):
        threads = [threading.Thread(target=touch) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(seen) == 8
    first = seen[0]
    for other in seen[1:]:
        assert all(a is b for a, b in zip(first, other)), "two threads got two answers"
    assert first[1] is first[5]  # the kernel's records are its image's, not a copy


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_during_a_threads_first_read_leaves_the_child_working(hit):
    """A thread is inside a kernel's first parameter read when the process forks: the child
    reads another kernel's records (and the one being read) without waiting on the parent's
    thread."""
    entered, release = threading.Event(), threading.Event()
    real = params_module.param_specs

    def held(*args, **kwargs):
        if not entered.is_set():  # the reader's call; the child's goes through
            entered.set()
            release.wait(30)
        return real(*args, **kwargs)

    a, b = hit[EXPRS[0]], hit[EXPRS[1]]
    with mock.patch.object(params_module, "param_specs", held):
        reader = threading.Thread(target=lambda: a.params)
        reader.start()
        assert entered.wait(30)
        try:
            outcome = _in_child(lambda: (b.params, b.signature, b.image.resources,
                                         b.launch_needs, hit.image.globals))
        finally:
            release.set()
            reader.join()
    assert outcome == "ok"


def test_what_is_read_lazily_is_what_the_cubin_holds(hit):
    """Every kernel's records and the module's variables, read on first use from the restored
    module, equal those of a fresh reading of the same CUBIN's every kernel at once."""
    fresh = read_cubin(hit.cubin)
    eager = {k.symbol: (k.params, k.resources, k.launch) for k in fresh.kernels}
    assert set(fresh.symbols) == {k.symbol for k in hit.kernels.values()}
    for k in hit.kernels.values():
        assert (k.image.params, k.resources, k.launch_needs) == eager[k.symbol], k.symbol
    assert [(g.name, g.size, g.space) for g in hit.image.globals] == \
        [(g.name, g.size, g.space) for g in fresh.globals]
    assert {g.name for g in hit.image.globals} >= {"scale", "counter"}
    assert [p.size for p in hit["plain"].params] == [8, 1, 2]


@pytest.mark.gpu
def test_load_takes_the_module_into_the_context_and_each_kernel_at_its_first_call(tmp_path):
    """load() is three driver calls whatever the kernel count (the library, its kernel count,
    its module in this context); a kernel's handle is looked up by its first call, which
    launches it right."""
    import cupy as cp
    import numpy as np

    from cudamagic import build

    exprs = [f"t<{i}>" for i in range(50)]
    build(SOURCE, exprs, cache=tmp_path)
    mod = build(SOURCE, exprs, cache=tmp_path)
    assert mod.hit
    assert mod.load() is mod
    assert mod._binary._lib is not None and mod._binary._lib.module() != 0
    assert all(not k._handles for k in mod.kernels.values())  # none looked up yet
    x = cp.zeros(32, dtype=cp.float32)
    mod["t<7>"]((1,), (32,), (x, 32))
    cp.cuda.Device().synchronize()
    assert np.allclose(cp.asnumpy(x), 7.0)
    assert [e for e, k in mod.kernels.items() if k._handles] == ["t<7>"]


# --- a stored map that contradicts its CUBIN is never launched, however a kernel is reached ---

TRUST_SOURCE = r"""
template <int N> __global__ void t(float* x) { x[0] = N; }
__device__ __noinline__ float twice(float v) { return 2 * v; }
__global__ void uses(float* x) { x[0] = twice(x[0]); }
extern "C" __global__ void other(float* x) { x[0] = -1; }
__device__ float table[4];
"""
TRUST_EXPRS = ["t<1>", "t<2>", "t<3>"]


def _corruptions(lowered: dict[str, str], image) -> dict[str, dict[str, str]]:
    """Stored maps that lie about the CUBIN, each in another way."""
    device_fn = next(s for s in image._elf.functions.values() if "twice" in s)
    return {
        "swapped": {**lowered, "t<1>": lowered["t<2>"], "t<2>": lowered["t<1>"]},
        "rotated": {"t<1>": lowered["t<2>"], "t<2>": lowered["t<3>"], "t<3>": lowered["t<1>"]},
        "not in the CUBIN": {**lowered, "t<2>": lowered["t<2>"].replace("Li2E", "Li7E")},
        "a device function": {**lowered, "t<3>": device_fn},
        "a variable": {**lowered, "t<1>": "table"},
        "another kernel": {**lowered, "t<2>": "other"},
        "a non-template kernel": {**lowered, "t<3>": "_Z4usesPf"},
    }


def _reached(mod, ip=None) -> dict[str, set[str]]:
    """The symbol each expression's kernel carries, by every way a user reaches one."""
    ways = {
        "module[expr]": lambda e: mod[e],
        "get_function": lambda e: mod.get_function(e),
        "kernels[expr]": lambda e: mod.kernels[e],
        "kernels.values()": lambda e: {k.name_expression: k for k in mod.kernels.values()}[e],
        "pickled": lambda e: pickle.loads(pickle.dumps(mod))[e],
    }
    if ip is not None:
        ways["pushed"] = lambda e: ip.user_ns[mod.report.rows[[r.name_expression for r in
                                                               mod.report.rows].index(e)]
                                              .python_name]
    return {e: {way(e).symbol for way in ways.values()} for e in TRUST_EXPRS}


@pytest.mark.parametrize("lie", ["swapped", "rotated", "not in the CUBIN", "a device function",
                                 "a variable", "another kernel", "a non-template kernel"])
def test_a_stored_map_that_lies_is_never_served_by_any_lazy_way(lie, cache, compiler):
    opts = options_from_args([], TRUST_EXPRS)
    first = build_module(TRUST_SOURCE, opts, cache=cache, compiler=compiler)
    truth = {e: first[e].symbol for e in TRUST_EXPRS}
    record, _ = cache.get(first.key)
    bad = _corruptions(record.lowered, first.image)[lie]
    assert bad != record.lowered
    cache.put(first.key, dataclasses.replace(record, lowered=bad))
    again = build_module(TRUST_SOURCE, opts, cache=cache, compiler=compiler)
    assert not again.hit and "does not match its CUBIN" in again.report.miss_reason
    assert len(compiler.calls) == 2  # compiled again: NVRTC's own map serves
    assert _reached(again) == {e: {truth[e]} for e in TRUST_EXPRS}
    third = build_module(TRUST_SOURCE, opts, cache=cache, compiler=compiler)
    assert third.hit and _reached(third) == {e: {truth[e]} for e in TRUST_EXPRS}


def test_the_pushed_callables_of_a_cell_whose_entry_lies_are_nvrtcs(tmp_path, monkeypatch):
    from .test_magic import _shell

    ip = _shell(tmp_path, monkeypatch)
    line = " ".join(f'-q -n "{e}"' for e in TRUST_EXPRS)
    ip.run_cell_magic("cuda", line, TRUST_SOURCE)
    first = ip.user_ns["cuda_module"]
    truth = {e: first[e].symbol for e in TRUST_EXPRS}
    from cudamagic.store import KernelCache

    store = KernelCache.wrap(str(tmp_path / "cache"))
    record, _ = store.get(first.key)
    for lie, bad in _corruptions(record.lowered, first.image).items():
        store.put(first.key, dataclasses.replace(record, lowered=bad))
        for name in [r.python_name for r in first.report.rows]:
            ip.user_ns.pop(name, None)
        ip.run_cell_magic("cuda", line, TRUST_SOURCE)
        mod = ip.user_ns["cuda_module"]
        assert not mod.hit, lie
        assert _reached(mod, ip) == {e: {truth[e]} for e in TRUST_EXPRS}, lie
        ip.run_cell_magic("cuda", line, TRUST_SOURCE)  # the entry NVRTC's compile stored
        mod = ip.user_ns["cuda_module"]
        assert mod.hit and _reached(mod, ip) == {e: {truth[e]} for e in TRUST_EXPRS}, lie
        record, _ = store.get(first.key)


def test_a_hit_makes_each_kernel_only_when_it_is_reached(hit):
    table = hit.kernels
    assert not table._made  # the report and the module made none
    assert set(table) == {*EXPRS, "plain"} and len(table) == 7 and "t<2>" in table
    assert [r.symbol for r in hit.report.rows] == [s for _, s, _, _ in table.entries()]
    back = pickle.loads(pickle.dumps(hit))  # the payload is made from the table
    assert not table._made and not back.kernels._made
    assert list(back.kernels.entries()) == list(table.entries())
    k = hit["t<2>"]
    assert list(table._made) == ["t<2>"] and k.module is hit and hit["t<2>"] is k
    assert {e: k.symbol for e, k in table.items()} == {e: s for e, s, _, _ in table.entries()}


NAMER_LABELS = ["k<1>", "k<2>", "k_1_", "lambda", "match", "get_ipython", "cuda_module", "a::b",
                "a_b", "k<1>", "x<(int)1>", "x<1>", "_", "type", "print", "k", "9lives"]


@pytest.mark.parametrize("seed", range(60))
def test_naming_a_whole_table_gives_what_naming_one_by_one_gives(seed):
    """Namer.names takes a table at once where nothing collides; whatever the table, its names
    and notes are those of Namer.name called in order."""
    import random

    from cudamagic.cxx import python_name
    from cudamagic.pipeline.naming import Namer

    rng = random.Random(seed)
    size = rng.randint(0, 12)
    labels = rng.sample(NAMER_LABELS, min(size, len(NAMER_LABELS))) if seed % 3 else \
        [f"t<{i}>" for i in range(size)]  # a third of the tables collide in nothing
    symbols = [f"_sym{rng.randint(0, 2 * size) if seed % 4 == 1 else i}"
               for i, _ in enumerate(labels)]
    stored = [python_name(label) if rng.random() < 0.7 else None for label in labels]
    items = list(zip(labels, symbols, stored))
    reserved = rng.choice([("cuda_module",), ("cuda_module", "get_ipython", "In", "print"),
                           ("k_1", "t_0")])
    bulk_notes: list[str] = []
    one_notes: list[str] = []
    bulk = Namer(reserved, bulk_notes).names(items)
    one = Namer(reserved, one_notes)
    assert bulk == [one.name(*item) for item in items], items
    assert bulk_notes == one_notes


BAD_EXPRESSIONS = [("k<1>\0", "NUL"), ("k<1>\r", "line break"), ("k<\n1>", "line break"),
                   ("", "is empty"), ("   ", "is empty"), ("k<\udc80>", "UTF-8"),
                   (b"k<1>", "expected a string"), (None, "expected a string"),
                   ("k<1>\r\n", "line break")]


@pytest.mark.parametrize("bad, said", BAD_EXPRESSIONS)
@pytest.mark.parametrize("where", [0, 17, 999])
def test_a_thousand_expressions_checked_at_once_still_refuse_each_bad_one(bad, said, where):
    """The line's expressions are checked in whole-table passes; one bad among 1000 is still
    refused, with what is wrong with it."""
    from cudamagic.errors import OptionError
    from cudamagic.core.options import BuildOptions

    exprs: list = [f"k<{i}>" for i in range(1000)]
    assert BuildOptions(name_expressions=tuple(exprs)).name_expressions == tuple(exprs)
    exprs[where] = bad
    with pytest.raises(OptionError, match=said):
        BuildOptions(name_expressions=tuple(exprs))


def _cubins() -> dict[str, bytes]:
    """CUBINs of several shapes: the GPU machine's fixture, NVRTC's for 3 targets, a linked one."""
    import cudamagic
    from .conftest import FIXTURES

    src = SOURCE + r"""
__device__ __noinline__ int deep(int* p, int n) { int a[16]; for (int i = 0; i < 16; ++i)
  a[i] = p[i] * n; return n > 0 ? deep(p, n - 1) + a[n % 16] : 0; }
__global__ void recursive(int* p) { p[0] = deep(p, p[1]); }
"""
    out = {"fixture": (FIXTURES / "fixture.cubin").read_bytes()}
    for arch in ("sm_75", "sm_90", "sm_120"):
        out[arch] = cudamagic.build(src, EXPRS, arch=arch, use_cache=False).cubin
    out["linked"] = cudamagic.build(src, EXPRS, options=["-rdc=true"], arch="sm_90",
                                    use_cache=False).cubin
    return out


def _every_section(data: bytes) -> list[tuple[str, tuple]]:
    """Every section's name and header, read one by one (an independent, plain reading)."""
    import struct

    shoff, = struct.unpack_from("<Q", data, 0x28)
    count, names = struct.unpack_from("<HH", data, 0x3C)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + 64 * i) for i in range(count)]
    table = data[heads[names][4]:heads[names][4] + heads[names][5]]
    return [(table[h[0]:table.index(b"\0", h[0])].decode(), (h[0], h[1], h[4], h[5], h[6], h[9],
                                                             h[7])) for h in heads]


def test_sections_found_by_name_are_those_a_full_reading_finds():
    """A section is found by its name without reading every name: for every section of every
    kind of CUBIN, the one a plain reading of the whole table names so (the last of a name)."""
    from cudamagic.toolchain.binary.image import info_records

    for label, data in _cubins().items():
        elf = read_cubin(data)._elf
        by_name = dict(_every_section(data))
        assert len(by_name) > 10, label
        for name, header in by_name.items():
            assert elf.section(name) == header, (label, name)
        assert elf.section(".nv.info.no_such_kernel") is None
        # the CUBIN-wide records, read in one pass, as the record reader reads them
        info = elf.section(".nv.info")
        want: dict[int, dict[int, int]] = {}
        for fmt, attr, body in info_records(data[info[2]:info[2] + info[3]]):
            if fmt == 4 and len(body) >= 8 and attr in (0x11, 0x12, 0x2F):
                want.setdefault(int.from_bytes(body[:4], "little"), {})[attr] = \
                    int.from_bytes(body[4:8], "little")
        assert elf.per_symbol == want, label


@pytest.mark.parametrize("records, want", [
    ([(4, 0x2F, 8, (7, 32))], {7: {0x2F: 32}}),
    ([(4, 0x2F, 8, (7, 32)), (4, 0x11, 8, (7, 16)), (4, 0x2F, 8, (9, 40))],
     {7: {0x2F: 32, 0x11: 16}, 9: {0x2F: 40}}),
    # other shapes among them: 12-byte steps would misread these, the record reader must
    ([(1, 0x30, None, b"\0\0"), (4, 0x2F, 4, (5,)), (4, 0x2F, 8, (7, 32))], {7: {0x2F: 32}}),
    ([(4, 0x2F, 20, (7, 32, 1, 2, 3)), (4, 0x11, 8, (3, 8)), (4, 0x2F, 8, (1, 2)), (4, 0x2F, 8, (3, 4))],
     {7: {0x2F: 32}, 3: {0x11: 8, 0x2F: 4}, 1: {0x2F: 2}}),
    # a longer record whose bytes look like a (symbol, value) record 12 bytes in
    ([(4, 0x2F, 20, (7, 32, 0x00082F04, 99, 123)), (4, 0x11, 8, (3, 8))], {7: {0x2F: 32}, 3: {0x11: 8}}),
])
def test_per_function_records_are_read_whatever_their_shapes(records, want):
    import struct
    import types

    from cudamagic.toolchain.binary.image import _Elf

    blob = b""
    for fmt, attr, size, body in records:
        blob += bytes((fmt, attr)) + (body if size is None else
                                      struct.pack("<H", size) + struct.pack(f"<{len(body)}I", *body))
    fake = types.SimpleNamespace(data=blob, section=lambda name: (0, 0, 0, len(blob), 0, 0, 0))
    assert _Elf.per_symbol.fn(fake) == want


def test_variables_are_those_a_plain_reading_of_the_symbol_table_finds():
    """The module's variables, read through typed views of the symbol table, are the OBJECT
    symbols in constant or global memory that a symbol-by-symbol reading finds, with their
    sizes, places and memory, for every kind of CUBIN (and a library's hundreds of globals),
    less the type probe's own (toolchain/compile/probe.py: their names hold __cudamagic_)."""
    import struct

    import cudamagic

    spaces = {".nv.constant3": "constant", ".nv.global": "global", ".nv.global.init": "global"}
    cubins = _cubins()
    cubins["library"] = cudamagic.build(
        "#include <cuda/std/complex>\n__constant__ int k[2] = {1, 2};\n"
        "__global__ void f(cuda::std::complex<float>* z) { z[0] = cuda::std::exp(z[0]) * float(k[1]); }",
        use_cache=False).cubin
    for label, data in cubins.items():
        sections = _every_section(data)
        want = []
        for name, header in sections:
            if header[1] != 2:  # SHT_SYMTAB
                continue
            strings = data[sections[header[4]][1][2]:][:sections[header[4]][1][3]]
            for st_name, info, _, shndx, value, size in struct.iter_unpack(
                    "<IBBHQQ", data[header[2]:header[2] + header[3] // 24 * 24]):
                if info & 0xF in (1, 13) and 0 < shndx < len(sections) \
                        and sections[shndx][0] in spaces \
                        and b"__cudamagic_" not in strings[st_name:strings.index(b"\0", st_name)]:
                    want.append((strings[st_name:strings.index(b"\0", st_name)].decode(), size,
                                 spaces[sections[shndx][0]], value,
                                 sections[shndx][0] != ".nv.global"))
        got = [(g.name, g.size, g.space, g.offset, g.initialized)
               for g in read_cubin(data).globals]
        assert got == want, label
    assert len(want) > 100  # the library's own globals


def test_a_hit_starts_no_demangler_process(tmp_path, cache, compiler):
    """cu++filt is a process: a miss starts one (its start overlaps the compile); a hit reads
    the texts its entry stored and starts none."""
    import stat
    import sys

    import cudamagic
    from cudamagic.toolchain.binary.demangle import CuFilt

    log = tmp_path / "starts"
    script = tmp_path / "cu++filt"
    root = str(os.path.dirname(os.path.dirname(cudamagic.__file__)))
    script.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {root!r})\n"
        f"open({str(log)!r}, 'a').write('x')\n"
        "from cudamagic.toolchain.binary.demangle import LibStdCxx\n"
        "names = [line.strip() for line in sys.stdin]\n"
        "print('\\n'.join(LibStdCxx().demangle(names)))\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    demangler = CuFilt(str(script))
    opts = options_from_args([], EXPRS)
    started: list[object] = []
    real = subprocess.Popen

    def counted(args, *rest, **kwargs):
        if args and args[0] == str(script):
            started.append(args)
        return real(args, *rest, **kwargs)

    with mock.patch.object(subprocess, "Popen", counted):
        first = build_module(SOURCE, opts, cache=cache, compiler=compiler, demangler=demangler)
        assert not first.hit and len(started) == 1
        for _ in range(3):
            again = build_module(SOURCE, opts, cache=cache, compiler=compiler,
                                 demangler=demangler)
            assert again.hit and again["t<1>"].symbol == first["t<1>"].symbol
    assert len(started) == 1 and log.read_text() == "x"  # none more


@pytest.mark.parametrize("indexed", [False, True])
def test_a_section_name_kept_as_the_tail_of_another_is_found(indexed):
    """ELF lets a name be the tail of a longer one (.text.k inside .rela.text.k); searched or
    indexed, a section is found by its name, and of two with one name the last is."""
    from cudamagic.toolchain.binary import image

    table = b"\0.rela.text.k\0.nv.info\0"
    at = {"": 0, ".rela.text.k": 1, ".text.k": 6, ".nv.info": 14}
    names = ["", ".rela.text.k", ".text.k", ".nv.info", ".text.k"]
    elf = image._Elf(b"", 0, 0, (), {"name": [at[n] for n in names], "type": [0] * 5,
                                      "offset": [0] * 5, "size": [0] * 5, "link": [0] * 5})
    elf.__dict__["_shstr"] = table
    if indexed:
        elf._lookups = image._SEARCHED_LOOKUPS
    want = {"": 0, ".rela.text.k": 1, ".text.k": 4, ".nv.info": 3, "text.k": None, ".text": None,
            ".nv.info.k": None}
    assert {n: elf._index(n) for n in want} == want


# --------------------------------------------------------------------------------------------------
# Ctrl-C in the middle of a lazy first read leaves nothing half made: the next read of the
# same kernel, row or record gives what an uninterrupted read gives.

def _interrupting(real):
    """``real`` whose first call raises KeyboardInterrupt (Ctrl-C inside it)."""
    calls = []

    def once_interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    return once_interrupted


# where Ctrl-C comes: (module, function), and the read that reaches it
WHERE = {
    "a kernel's parameter table": (params_module, "param_specs", lambda m: m[EXPRS[2]].params),
    "a kernel's records": (image_module, "_kparams", lambda m: m[EXPRS[2]].image.params),
    "a report row's signature": (report_module, "display_signature",
                                 lambda m: m.report.rows[2].signature),
    "a kernel's resources": (image_module, "KernelResources",
                             lambda m: m[EXPRS[2]].image.resources),
}


@pytest.mark.parametrize("where", list(WHERE))
def test_ctrl_c_in_a_first_read_leaves_the_next_read_whole(hit, monkeypatch, where):
    module, name, read = WHERE[where]
    monkeypatch.setattr(module, name, _interrupting(getattr(module, name)))
    with pytest.raises(KeyboardInterrupt):
        read(hit)
    again = read(hit)
    assert again == read(hit)
    fresh = read_cubin(hit.cubin)
    k = hit[EXPRS[2]]
    assert k.image.params == fresh.kernel(k.symbol).params
    assert k.image.resources == fresh.kernel(k.symbol).resources
    assert again is not None and again != ()


# --------------------------------------------------------------------------------------------------
# A fork while another thread works out a report's first row leaves the child's report
# working: a hit's report rows are made when shown, so a child forked after the hit (a worker
# pool, a fork-based Dask worker) is the one that shows them; nothing on that way may wait on a
# lock the parent's thread held at the fork (Python 3.11's functools.cached_property holds one
# lock per property for every instance while it computes).

def _held(monkeypatch, name: str):
    """Replace report.``name`` by one whose first call waits until released."""
    entered, release = threading.Event(), threading.Event()
    real = getattr(report_module, name)

    def held(*args, **kwargs):
        if not entered.is_set():  # the parent thread's call; the child's goes through
            entered.set()
            release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(report_module, name, held)
    return entered, release


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("shown", ["signature", "text", "html"])
def test_a_fork_while_a_thread_makes_a_row_leaves_the_childs_report_working(hit, monkeypatch,
                                                                           shown):
    entered, release = _held(monkeypatch, "display_signature")
    rows = hit.report.rows
    reader = threading.Thread(target=lambda: rows[0].signature)
    reader.start()
    assert entered.wait(30)
    show = {"signature": lambda: rows[1].signature, "text": hit.report.text,
            "html": hit.report.html}[shown]
    try:
        outcome = _in_child(show)
    finally:
        release.set()
        reader.join()
    assert outcome == "ok", f"the child's report {shown} {outcome}"
