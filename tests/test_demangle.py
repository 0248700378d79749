"""Demanglers: libstdc++ through ctypes (always here), cu++filt (batched, one process)."""

from __future__ import annotations

import os
import stat

import pytest

from cudamagic.toolchain.binary.demangle import CuFilt, LibStdCxx, find_cufilt
from cudamagic.errors import DemangleError

from .conftest import FIXTURES, fixture_rows


def test_libstdcxx_gives_the_recorded_outputs(rows):
    d = LibStdCxx()
    assert d.demangle([r.symbol for r in rows]) == [r.libstdcxx for r in rows]


def test_libstdcxx_leaves_plain_and_bad_names():
    assert LibStdCxx().demangle(["c_kernel", "_Znot_a_name!", ""]) == ["c_kernel", "_Znot_a_name!", ""]


def _stand_in_cufilt(tmp_path) -> str:
    """An executable that answers as cu++filt did on the GPU machine (recorded outputs), and
    logs each start, so the test sees how many processes a batch costs."""
    table = {r.symbol: r.cufilt for r in fixture_rows()}
    script = tmp_path / "bin" / "cu++filt"
    script.parent.mkdir()
    script.write_text(
        "#!/usr/bin/env python3\nimport sys\n"
        f"T = {table!r}\n"
        f"open({str(tmp_path / 'starts')!r}, 'a').write('x')\n"
        "for line in sys.stdin:\n    s = line.strip()\n    print(T.get(s, s))\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_cufilt_demangles_a_module_in_one_process(tmp_path, rows):
    path = _stand_in_cufilt(tmp_path)
    out = CuFilt(path).demangle([r.symbol for r in rows])
    assert out == [r.cufilt for r in rows]
    assert (tmp_path / "starts").read_text() == "x"


def test_cufilt_is_found_through_cuda_home(tmp_path, monkeypatch):
    path = _stand_in_cufilt(tmp_path)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert find_cufilt() == path
    monkeypatch.delenv("CUDA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + os.environ["PATH"])
    assert find_cufilt() == path


def test_a_cufilt_gone_since_it_was_found_is_said_as_such(tmp_path):
    """cu++filt is looked up once per process: where it has gone since (its folder removed,
    PATH changed to another toolkit), a build says so and how to look again, not a raw
    FileNotFoundError from subprocess."""
    path = _stand_in_cufilt(tmp_path)
    os.remove(path)
    with pytest.raises(DemangleError, match=r"could not be started .*\$PATH change.*restart the kernel"):
        CuFilt(path).demangle(["_Z1kv"])


# --- bounded demangling (issue 17, group 4): adversarial sizes in time and memory -------------

import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

from cudamagic.cxx.mangled import Unreadable, demangled_bound  # noqa: E402
from cudamagic.toolchain.binary.demangle import TEXT_LIMIT, Plan, plan  # noqa: E402

from .conftest import run_python  # noqa: E402
from cudamagic.pipeline.steps import build_module, options_from_args
from cudamagic.toolchain.binary.demangle import LibStdCxx


def _seq(i: int) -> str:
    """The base-36 digits of a substitution's <seq-id>."""
    digits, out = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", ""
    while True:
        out, i = digits[i % 36] + out, i // 36
        if i == 0:
            return out


def nested(depth: int) -> str:
    """NVRTC's mangling of ``k<T<depth>>(T*)`` for ``T<n+1> = P<T<n>, T<n>>``: 2**depth copies
    of ``int`` once demangled, in 8 * depth characters (checked against NVRTC below)."""
    if depth == 1:
        return "_Z1kI1PIiiEEvPT_"
    return ("_Z1kI1P" + "IS0_" * (depth - 1) + "Iii" + "E"
            + "".join(f"S{_seq(i)}_E" for i in range(1, depth)) + "EvPT_")


def test_the_nested_symbols_are_nvrtcs():
    from cudamagic.toolchain.compile.nvrtc import _compile

    source = ("template <class A, class B> struct P {};\nusing T0 = int;\n"
              + "".join(f"using T{i + 1} = P<T{i}, T{i}>;\n" for i in range(18))
              + "template <class T> __global__ void k(T*) {}\n")
    depths = [1, 2, 5, 12, 18]  # NVRTC itself slows down beyond 20
    _, lowered, *_ = _compile(source, [f"k<T{d}>" for d in depths],
                              ["-arch=sm_90", "-fdevice-syntax-only"], "t.cu", 0)
    assert [lowered[f"k<T{d}>"] for d in depths] == [nested(d) for d in depths]


def _demanglers():
    out = [pytest.param("libstdc++", id="libstdc++")]
    # binutils' c++filt reads one name a line and answers as it goes, as cu++filt does
    c = shutil.which("cu++filt") or shutil.which("c++filt")
    out.append(pytest.param(c, id="cu++filt-path", marks=pytest.mark.skipif(
        c is None, reason="no cu++filt or c++filt here")))
    return out


# depth: the demangled name has about 2**depth * 5 characters; 64 is beyond any memory
DEPTHS = [1, 4, 8, 12, 13, 14, 16, 20, 24, 26, 28, 32, 48, 64, 200]

CHILD = r"""
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # the old code would take all
from cudamagic.toolchain.binary.demangle import CuFilt, LibStdCxx
which, symbols = json.loads(sys.argv[1]) if len(sys.argv) > 1 else ARGS
d = LibStdCxx() if which == "libstdc++" else CuFilt(which)
rows = []
for s in symbols:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    out = d.demangle([s, "_Z4fillIfEvPT_S0_i"])
    rows.append([time.perf_counter() - t,
                 resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before,
                 len(out[0] or ""), out[0] and out[0][:200], out[1]])
print(json.dumps(rows))
"""


def _unbounded(which: str, symbol: str) -> str:
    if which == "libstdc++":
        return LibStdCxx()._one(symbol)
    return subprocess.run([which], input=symbol + "\n", capture_output=True, text=True,
                          timeout=30).stdout.strip()


@pytest.mark.parametrize("which", _demanglers())
def test_nested_substitutions_are_bounded_in_time_and_memory(which):
    symbols = [nested(d) for d in DEPTHS]
    rows = json.loads(run_python(f"ARGS = {json.dumps([which, symbols])!r}\nARGS = "
                                 f"__import__('json').loads(ARGS)\n" + CHILD,
                                 timeout=120).splitlines()[-1])
    for depth, symbol, (seconds, grown_kib, length, head, other) in zip(DEPTHS, symbols, rows):
        assert seconds < 1.0, (depth, seconds)
        assert grown_kib < 64 << 10, (depth, grown_kib)  # 64 MiB
        assert length <= TEXT_LIMIT + 200, depth
        assert other.startswith("void fill<float>(")  # the batch's other name is intact
        if 5 * 2 ** depth < TEXT_LIMIT // 4:
            # small enough: demangled in full, as the same demangler writes it unbounded
            # (cu++filt keeps a template parameter as T1 where libstdc++ writes its type)
            assert head == _unbounded(which, symbol)[:200], depth
        elif 5 * 2 ** depth > TEXT_LIMIT:
            assert head is None, depth  # too long to keep: no text


def test_bound_is_never_below_the_text_of_a_mutated_symbol():
    """Table of 3000 mutations (insertions, deletions, repeats) of real symbols: the reader
    raises nothing but Unreadable, and where it gives a bound, libstdc++'s text fits in it."""
    lib = LibStdCxx()
    seeds = [r.symbol for r in fixture_rows() if r.symbol.startswith("_Z")] + \
        [nested(d) for d in range(1, 9)]
    rng = random.Random(17)
    alphabet = "_ZNSEITLXJPKRVFDAM0123456789abcdefghijlmnstvxy"
    checked = 0
    for _ in range(3000):
        s = list(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(s) + 1)
            op = rng.random()
            if op < 0.4:
                s.insert(at, rng.choice(alphabet))
            elif op < 0.7 and len(s) > 3:
                del s[min(at, len(s) - 1)]
            else:
                a, b = sorted((rng.randrange(len(s)), rng.randrange(len(s))))
                s[a:a] = s[a:b][:16]
        symbol = "".join(s)
        try:
            bound = demangled_bound(symbol)
        except Unreadable:
            continue
        if bound < 1 << 20:
            text = lib._one(symbol)
            checked += 1
            assert text == symbol or len(text) <= bound, (symbol, bound, len(text))
    assert checked > 500


ENTRIES = FIXTURES / "entries"
#: A cell whose kernel ``k<T18>`` demangles to about 2 MB (over TEXT_LIMIT); plain() is short.
TOO_LONG_CELL = (ENTRIES / "too_long.cu").read_text()


def test_a_legal_cell_whose_name_is_too_long_is_served_without_demangling(tmp_path):
    """The 2 MB name of issue 17: the miss keeps it as too long to show, the hit demangles
    nothing (the entry's texts), and both take well under a second beyond the compile."""
    import cudamagic
    from cudamagic.pipeline.steps import build_module
    from cudamagic.core.options import options_from_args
    from cudamagic.store.cache import KernelCache

    from cudamagic.view.report import too_long_text

    depth = 18
    source = TOO_LONG_CELL

    class Counting(LibStdCxx):
        calls: list[list[str]] = []

        def demangle(self, symbols):
            Counting.calls.append(list(symbols))
            return super().demangle(symbols)

    opts = options_from_args((), [f"k<T{depth}>"])
    cache = KernelCache(tmp_path / "cache")
    try:
        first = build_module(source, opts, cache=cache, demangler=Counting())
        assert not first.hit and len(Counting.calls) == 1
        t = time.perf_counter()
        second = build_module(source, opts, cache=cache, demangler=Counting())
        took = time.perf_counter() - t
    finally:
        cache.close()
    assert second.hit and len(Counting.calls) == 1, "the hit demangled again"
    assert took < 1.0
    (row,) = [r for r in second.report.rows if r.name_expression == f"k<T{depth}>"]
    kern = second[f"k<T{depth}>"]
    assert row.too_long and row.signature == too_long_text(kern.symbol)
    assert row.signature.startswith("too long to show (the demangled name of a ")
    assert row.resolved_by == "stored-unverified"  # its name cannot be read to verify it
    assert kern.symbol == first[f"k<T{depth}>"].symbol
    assert kern.name_too_long and kern.signature == kern.symbol
    assert [r.signature for r in second.report.rows if r.name_expression == "plain"] == \
        ["void plain(int*)"]
    assert cudamagic  # imported for the package's side effects only


@pytest.mark.parametrize("symbol, expected", [
    ("_Z4fillIfEvPT_S0_i", "DEMANGLE"), ("cfill", "KEEP"), ("_Z1k\nv", "KEEP"),
    ("_Z1kv\f", "KEEP"), ("_Z1kv\r", "KEEP"), ("_Z1k\x85v", "KEEP"), ("_Z1k\u2028v", "KEEP"),
    ("_Z" + "1a" * 40000, "TOO_LONG"), (nested(64), "TOO_LONG"), (nested(10), "DEMANGLE"),
    ("_Z5plainPfi.constprop.0", "DEMANGLE")])
def test_plan_sends_only_bounded_mangled_names(symbol, expected):
    assert plan(symbol) is Plan[expected]


# --- symbols that are not one line (issue 17, group 5) ----------------------------------------

ODD = ["_Z4fill\nIfEvPT_S0_i", "_Z4fillIfEvPT_S0_i\n", "\n", "_Z1kv\f_Z1kv", "_Z1k\rv", "_Z1k\vv",
       "_Z1k\x1cv", "_Z1k\x1dv", "_Z1k\x1ev", "_Z1k\x85v", "_Z1k\u2028v", "_Z1k\u2029v",
       "k\r\nv", "_Z1k v", "_Z1k\tv", "", "_Z1k\x00v", "_Zé1kv"]


@pytest.mark.parametrize("which", ["stand-in", "libstdc++"])
def test_a_symbol_with_a_line_break_never_misaligns_the_others(tmp_path, rows, which):
    d = CuFilt(_stand_in_cufilt(tmp_path)) if which == "stand-in" else LibStdCxx()
    good = [r.symbol for r in rows]
    expected = [r.cufilt if which == "stand-in" else r.libstdcxx for r in rows]
    batch, want = [], []
    for n, (g, e) in enumerate(zip(good, expected)):
        batch.append(g)
        want.append(e)
        batch.append(ODD[n % len(ODD)])
        want.append(ODD[n % len(ODD)])  # not a mangled name: it comes back as it is
    assert d.demangle(batch) == want


# --------------------------------------------------------------------------------------------------
# A kernel whose name the demangler cannot read is served from the cache.
#
# libstdc++'s demangler gives back a name with an identifier of over about 1000 characters as it
# is; the hit then compared the name expression with the mangled symbol, found them to differ,
# called the entry's map a lie, deleted the entry and compiled again: the cell never hit. A name
# that cannot be read is one that cannot be compared (as one too long to keep): the stored symbol,
# one of the CUBIN's kernels, serves unverified.

@pytest.mark.parametrize("length", [1500, 2000, 5000, 50_000])
def test_a_template_kernel_whose_name_the_demangler_cannot_read_is_a_hit(cache, compiler,
                                                                         length):
    name = "q" * length
    source = (f"template <int N> __global__ void {name}(int* x) {{ x[0] = N; }}\n"
              "template <int N> __global__ void short_one(int* x) { x[0] = N; }\n")
    exprs = [f"{name}<3>", "short_one<2>"]
    opts = options_from_args([], exprs)
    first = build_module(source, opts, cache=cache, compiler=compiler, demangler=LibStdCxx())
    symbol = first[f"{name}<3>"].symbol
    assert LibStdCxx().demangle([symbol]) == [symbol]  # the case: it cannot be read
    for _ in range(2):
        again = build_module(source, opts, cache=cache, compiler=compiler,
                             demangler=LibStdCxx())
        assert again.hit, again.report.miss_reason
        assert again[f"{name}<3>"].symbol == symbol
        assert again[f"{name}<3>"].resolved_by == "stored-unverified"
        assert again["short_one<2>"].resolved_by == "stored"  # read: verified as before
    assert len(compiler.calls) == 1


@pytest.mark.parametrize("length", [1500, 5000])
def test_a_stored_map_that_names_another_kernel_for_an_unreadable_one_is_still_refused(
        cache, compiler, length):
    """Unverified is not unchecked: a stored symbol the CUBIN lacks makes the entry bad."""
    import dataclasses

    name = "q" * length
    source = f"template <int N> __global__ void {name}(int* x) {{ x[0] = N; }}\n"
    opts = options_from_args([], [f"{name}<3>"])
    first = build_module(source, opts, cache=cache, compiler=compiler, demangler=LibStdCxx())
    record, _ = cache.get(first.key)
    bad = {f"{name}<3>": first[f"{name}<3>"].symbol.replace("Li3E", "Li4E")}
    cache.put(first.key, dataclasses.replace(record, lowered=bad))
    again = build_module(source, opts, cache=cache, compiler=compiler, demangler=LibStdCxx())
    assert not again.hit and "does not match its CUBIN" in again.report.miss_reason
    assert again[f"{name}<3>"].symbol == first[f"{name}<3>"].symbol


# --- a name too long to keep is a state, never words (issue 26) --------------------------------
#
# The demangler gives None for a name too long to keep; the signatures carry the symbol in
# too_long, and only the view says "too long to show". A text that reads like those words (a
# symbol that is not a mangled name comes back as it is) is a name in every consumer.

@pytest.mark.parametrize("symbol", [
    "too long to show", "too long to show (a kernel)",
    "too long to show (the demangled name of a 10-character symbol is over 64 KiB)"])
def test_a_text_that_reads_like_the_too_long_words_is_a_name(symbol):
    from cudamagic.cxx import Signatures, recorded_texts, stored_signatures, symbol_record
    from cudamagic.cxx.resolve import ResolvedBy
    from cudamagic.view.report import KernelRow

    (text,) = LibStdCxx().demangle([symbol])
    assert text == symbol  # not a mangled name: the demangler's answer is the symbol
    sigs = Signatures({symbol: text, "_Z5plainPi": "plain(int*)"}, placeholders=False)
    assert sigs.too_long == frozenset() and sigs.maybe_plain(symbol)
    row = KernelRow("k", symbol, symbol, sigs.text(symbol), ResolvedBy.EXTERN_C)
    assert not row.too_long and row.signature.startswith(f"void {symbol}")
    stored = stored_signatures(symbol_record(sigs, "libstdc++"), [symbol, "_Z5plainPi"],
                               "libstdc++")
    assert stored is not None and stored.too_long == frozenset()
    assert stored.texts() == sigs.texts()
    # a record of the older form (no too_long list) reads the old words only as they stood
    # for a mangled symbol's name
    assert recorded_texts({symbol: text}, None) == {symbol: text}


def test_kernels_named_like_the_too_long_words_are_kernels(cache, compiler):
    """Real kernels named ``too_long_to_show...`` (extern "C", a namespace): a miss and a hit
    show their signatures, none is taken for a name too long to keep."""
    source = ('extern "C" __global__ void too_long_to_show(int* p) { p[0] = 1; }\n'
              "namespace too_long_to_show_ns {\n"
              "template <class T> __global__ void k(T* p) { p[0] = T(1); }\n}\n")
    opts = options_from_args([], ["too_long_to_show_ns::k<float>"])
    for hit in (False, True):
        mod = build_module(source, opts, cache=cache, compiler=compiler, demangler=LibStdCxx())
        assert mod.hit is hit
        assert not any(r.too_long for r in mod.report.rows)
        assert {r.signature for r in mod.report.rows} == {
            "void too_long_to_show(int*)", "void too_long_to_show_ns::k<float>(float*)"}
        assert not any(k.name_too_long for k in mod.kernels.values())
    assert len(compiler.calls) == 1


def test_an_entry_and_a_module_written_with_the_old_words_read_as_too_long(cache, compiler):
    """An entry and a travelling module written by cudamagic at bbe0534 (the words "too long
    to show (...)" stored as k<T18>'s text: tests/fixtures/entries/write_too_long_entry.py):
    read by this code, the kernel's name is too long to keep, and the hit demangles nothing."""
    import pickle
    from dataclasses import replace

    from cudamagic.pipeline.module import arrive
    from cudamagic.store import decode_entry, encode_entry
    from cudamagic.view.report import too_long_text

    calls = []

    class Counting(LibStdCxx):
        def demangle(self, symbols):
            calls.append(list(symbols))
            return super().demangle(symbols)

    opts = options_from_args([], ["k<T18>"], arch="sm_90")
    first = build_module(TOO_LONG_CELL, opts, cache=cache, compiler=compiler,
                         demangler=LibStdCxx())
    symbol = first["k<T18>"].symbol
    written = cache.get(first.key)[0]  # what this code writes: the symbol listed, no words
    assert written.symbols["too_long"] == [symbol] and symbol not in written.symbols["texts"]
    # the old entry under this machine's key, with this machine's header manifest
    old = decode_entry((ENTRIES / "v3_too_long_words.entry").read_bytes())
    assert "too_long" not in old.symbols  # the older form: the words are k<T18>'s text
    assert old.symbols["texts"][symbol].startswith("too long to show")
    cache.raw.set(first.key, encode_entry(replace(old, key=first.key,
                                                  manifest=written.manifest)))
    again = build_module(TOO_LONG_CELL, opts, cache=cache, compiler=compiler,
                         demangler=Counting())
    assert again.hit and again.cubin == old.cubin and calls == [], "the hit demangled again"
    assert again.kernels.signatures.too_long == {symbol} and again["k<T18>"].name_too_long
    (row,) = [r for r in again.report.rows if r.name_expression == "k<T18>"]
    assert row.too_long and row.signature == too_long_text(symbol)
    assert again["plain"].signature == "void plain(int*)" and not again["plain"].name_too_long
    # the module payload of then (what a pickled module carried)
    arrived = arrive((ENTRIES / "v3_too_long_words.module").read_bytes(), again.report)
    assert arrived["k<T18>"].name_too_long and not arrived["plain"].name_too_long
    assert arrived["plain"].signature == "void plain(int*)"
    # a module of this code carries the state along
    travelled = pickle.loads(pickle.dumps(first))
    assert travelled["k<T18>"].name_too_long and travelled["k<T18>"].signature == symbol
