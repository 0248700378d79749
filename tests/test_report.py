"""The report record and its text and HTML views: every word comes from the record, each worked
out once; signatures as a person reads them; the line magics' records read as text."""

from __future__ import annotations

import dataclasses

import pytest

import cudamagic
from IPython.lib.pretty import pretty

from cudamagic.view import render
from cudamagic.view import report as R
from cudamagic.view.records import CacheListing, CacheStats, EnvironmentInfo
from cudamagic.view.report import (SHOWN_ROWS, BuildReport, Explanation, KernelRow,
                                   display_signature)

from .conftest import FIXTURES


def make(n: int = 3, origin: str = "compiled", **kw) -> BuildReport:
    rows = tuple(KernelRow(f"k_{i}", f"k<{i}>", f"_Z1kIfLi{i}EEvPT_", f"void k<float, (int){i}>(T1 *)",
                           "nvrtc", placeholders=True) for i in range(n))
    fields = dict(key="ab" * 32, hit=origin == "cache", origin=origin,
                  miss_reason="no cache entry" if origin == "compiled" else None,
                  timings={"lookup": 0.001, "compile": 0.2, "total": 0.25},
                  demangler="cu++filt", arch="sm_90",
                  nvrtc_version="13.5", cache_dir="/home/u/.cache/cudamagic", rows=rows,
                  module_name="cuda_module")
    return BuildReport(**{**fields, **kw})


# --- signatures (issue 11, item 5) -----------------------------------------------------------

@pytest.mark.parametrize("demangled, placeholders, sizes, shown", [
    # cu++filt's raw form: placeholders become the template arguments, void shown
    ("void saxpy<float>(T1, const T1 *, T1 *, int)", True, None,
     "void saxpy<float>(float, float const*, float*, int)"),
    # libstdc++ says the same thing its own way: the same text
    ("void saxpy<float>(float, float const*, float*, int)", False, None,
     "void saxpy<float>(float, float const*, float*, int)"),
    ("void ns::scale<float, (int)3>(T1 *, int)", True, None, "void ns::scale<float, 3>(float*, int)"),
    # a plain kernel: no return type in its mangling, void shown anyway
    ("plain(int*)", False, None, "void plain(int*)"),
    # extern "C": nothing but the name in the symbol, the CUBIN's sizes instead
    ("fill", False, (8, 4, 4), "void fill(8 bytes, 4 bytes, 4 bytes)"),
    ("flag", False, (1,), "void flag(1 byte)"),
    ("nothing", False, (), "void nothing()"),
    ("unknown", False, None, "void unknown(?)"),
    # library-internal inline and versioned namespaces go
    ("void k<cuda::std::__4::complex<float> >(T1 *, int)", True, None,
     "void k<cuda::std::complex<float>>(cuda::std::complex<float>*, int)"),
    ("void r<thrust::THRUST_300102_SM_900_NS::complex<double> >(T1 const*)", True, None,
     "void r<thrust::complex<double>>(thrust::complex<double> const*)"),
    ("void c<cub::CUB_300102_SM_900_NS::Sum>(T1, int)", True, None, "void c<cub::Sum>(cub::Sum, int)"),
    ("void s<std::__cxx11::basic_string<char> >(int)", False, None,
     "void s<std::basic_string<char>>(int)"),
])
def test_display_signature(demangled, placeholders, sizes, shown):
    assert display_signature(demangled, placeholders, sizes) == shown


def test_a_name_the_model_cannot_read_is_shown_as_given_with_void():
    assert display_signature("weird<?>(x y z)", False) == "void weird<?>(x y z)"


def test_the_signature_column_is_the_display_form_and_the_raw_text_is_kept():
    row = KernelRow("saxpy_float", "saxpy<float>", "_Z5saxpyIfEvT_PKS0_PS0_i",
                    "void saxpy<float>(T1, const T1 *, T1 *, int)", "nvrtc", placeholders=True)
    report = make(0, rows=(row,))
    assert report.table()[0][3] == "void saxpy<float>(float, float const*, float*, int)"
    assert row.demangled == "void saxpy<float>(T1, const T1 *, T1 *, int)"
    assert "T1" not in report.text() and "T1" not in report.html()


# --- words come from the record, once ---------------------------------------------------------

def test_badge_and_headline_are_the_records():
    miss = make(origin="compiled", explanation=Explanation(("source",), ("the source changed (line 5)",),
                                                           ("line 5 - a", "line 5 + b")))
    assert (miss.badge.label, miss.badge.css_class) == ("cache miss", "cudamagic-miss")
    assert miss.headline == ("cudamagic: cache miss · 250.0 ms · 3 kernels · sm_90 — the source "
                             "changed (line 5)")
    hit = make(origin="cache", cell_seconds=0.0042)
    assert (hit.badge.label, hit.badge.css_class) == ("cache hit", "cudamagic-hit")
    assert hit.headline == "cudamagic: cache hit · 4.2 ms · 3 kernels · sm_90"
    assert make(origin="cubin").badge.label == "loaded CUBIN"


def test_views_lay_out_the_records_words():
    r = make(explanation=Explanation(("source",), ("the source changed (line 5)",),
                                     ("line 5 - a <b>", "line 5 + c")),
             warnings=("'len' replaces <x>",), log="line 3: warning: w")
    text, page = r.text(), r.html()
    for words in (r.headline, "line 5 - a <b>", "the cell" if r.cell_seconds else "the build",
                  "warning: 'len' replaces <x>", "compile log", "cache /home/u/.cache/cudamagic"):
        assert words in text, words
    assert r.badge.label in page and r.badge.css_class in page
    assert "the source changed (line 5)" in page and "line 5 - a &lt;b&gt;" in page
    assert "&#x27;len&#x27; replaces &lt;x&gt;" in page  # escaped
    assert "/home/u/.cache/cudamagic" in page  # the widget shows the cache folder (item 8)
    assert page.count("<tr>") == 1 + 3 + len(r.phases)  # head, rows, phases


def test_phases_account_for_the_time_shown():
    r = make(cell_seconds=0.3).with_timings(display=0.002, parse=0.001)
    labels = [p.label for p in r.phases]
    assert labels[0] == "magic line" and labels[-1] == "the cell"
    assert labels.index("cache lookup") < labels.index("compile (NVRTC)") < labels.index("display (render)")
    assert "other" in labels  # the time no phase holds is shown, not hidden
    assert abs(sum(p.seconds for p in r.phases[:-1]) - r.phases[-1].seconds) < 1e-9
    assert r.phases[-1].text == "300.0 ms"
    assert make().phases[-1].label == "the build"  # build(): its own time


def test_str_is_the_text_and_repr_is_short():
    r = make(200)
    assert str(r) == r.text() and str(r).count("\n") > 200
    assert repr(r) == "<cudamagic BuildReport: cache miss, 200 kernels, key abababababab>"
    assert pretty(r) == r.text(SHOWN_ROWS)  # IPython in a terminal: 50 rows and a note


def test_a_long_table_shows_fifty_rows_and_says_how_to_see_all():
    r = make(120)
    assert len(r.text(SHOWN_ROWS).splitlines()) < 60
    assert "70 more kernels; print(cuda_module.report) lists them all" in r.text(SHOWN_ROWS)
    assert r.html().count("<tr>") == SHOWN_ROWS + 1 + len(r.phases)
    assert "70 more kernels" in r.html()
    assert "more kernels" not in r.text()  # print(report): every row


def test_columns_and_cells_are_worked_out_once(monkeypatch):
    """cells() used to scan every row for every row (1000 rows: 54 ms of text()); now the
    columns are decided once and a table cut at 50 rows reads 50 signatures."""
    calls = []
    real = R.display_signature
    monkeypatch.setattr(R, "display_signature", lambda *a: calls.append(a) or real(*a))
    r = make(1000)
    r.html()
    assert len(calls) == SHOWN_ROWS
    r.html()
    r.text(SHOWN_ROWS)
    assert len(calls) == SHOWN_ROWS  # cached per row
    r.text()
    assert len(calls) == 1000
    seen = []
    monkeypatch.setattr(BuildReport, "columns", property(lambda self: seen.append(1) or R._COLUMNS))
    make(1000).table()
    assert len(seen) == 1


def test_gpu_columns_where_a_gpu_reported_them():
    r = make(2)
    rows = (dataclasses.replace(r.rows[0], attributes={"registers": 32, "static_shared_bytes": 0,
                                                       "local_bytes": 16}), r.rows[1])
    g = dataclasses.replace(r, rows=rows)
    assert g.columns[-3:] == ("registers", "shared (static)", "local")
    assert g.table()[0][-3:] == ("32", "0 B", "16 B")
    assert r.columns == R._COLUMNS


def test_with_warnings_says_each_once():
    r = make(warnings=("a",)).with_warnings(("a", "b"))
    assert r.warnings == ("a", "b")


# --- the line magics' records read as text (issue 11, item 3) --------------------------------

def _records():
    from cudamagic.store.cache import EntryInfo

    return [CacheStats("/c", 2, 1 << 20, 1 << 30, 1, 2, "removed 1 entry"),
            CacheListing((EntryInfo("ab" * 32, 2048, 1.7e9, 1.7e9, ("k<float>",), True),
                          EntryInfo("cd" * 32, 10, None, None, (), False))),
            CacheListing(()),
            EnvironmentInfo((("NVRTC", "13.5"), ("device", "none")))]


@pytest.mark.parametrize("record", _records(), ids=lambda r: type(r).__name__)
def test_line_magic_records_read_as_text_in_a_terminal(record):
    text = record.text()
    assert pretty(record) == text  # IPython's terminal display; no dataclass repr
    assert str(record) == text
    assert "(" not in repr(record).split(":")[0] and type(record).__name__ in repr(record)
    assert f"{type(record).__name__}(" not in pretty(record)


def test_cache_listing_text():
    listing, empty = _records()[1], _records()[2]
    lines = listing.text().splitlines()
    assert lines[1].split() == ["key", "size", "created", "host:folder", "last", "used", "cell's",
                                "first", "line", "kernels"]
    assert "k<float>" in lines[2] and "(unreadable: rebuilt on use)" in lines[3]
    assert empty.text().endswith("(none)")


def test_cache_listing_names_in_natural_order_and_bounded():
    """An entry of 1000 instances lists its first few, k<2> before k<10>, and how many more
    (a new user's: one line of 1000 names sorted as strings, k<0>, k<10>, k<100>...)."""
    from cudamagic.store.cache import EntryInfo

    names = tuple(f"k<{i}>" for i in (10, 2, 1000, 0, 1, 3, 20, 100, 4, 5, 6, 7))
    row = CacheListing((EntryInfo("ab" * 32, 2048, 1.7e9, 1.7e9, names, True),)).table()[0]
    assert row[-1] == "k<0>, k<1>, k<2>, k<3>, k<4>, k<5>, k<6>, k<7> and 4 more"


@pytest.mark.parametrize("count, said", [
    (7, "k<0>, k<1>, k<2>, k<3>, k<4>, k<5>, k<6>"),
    (8, "k<0>, k<1>, k<2>, k<3>, k<4>, k<5>, k<6>, k<7>"),  # exactly the bound: no "and 0 more"
    (9, "k<0>, k<1>, k<2>, k<3>, k<4>, k<5>, k<6>, k<7> and 1 more"),
])
def test_cache_listing_says_more_only_past_its_bound(count, said):
    from cudamagic.store.cache import EntryInfo

    names = tuple(f"k<{i}>" for i in range(count))
    row = CacheListing((EntryInfo("ab" * 32, 2048, 1.7e9, 1.7e9, names, True),)).table()[0]
    assert row[-1] == said


@pytest.mark.parametrize("names, first", [
    (("k<" + "0" * 4400 + "1>", "k<2>"), "k<" + "0" * 4400 + "1>"),  # past int()'s digit limit
    (("k<1/*1\u00b22*/>", "k<1>"), "k<1/*1"),  # '²': a digit to str.isdigit, not to int()
    (("k<007>", "k<10>", "k<8>"), "k<007>"),  # leading zeros: the value orders
])
def test_cache_listing_orders_any_name_nvrtc_takes(names, first):
    """Names NVRTC compiles (a template argument of 4 400 digits, a comment holding a
    superscript digit) are listed, never a ValueError in place of the whole listing."""
    from cudamagic.store.cache import EntryInfo

    row = CacheListing((EntryInfo("ab" * 32, 2048, 1.7e9, 1.7e9, names, True),)).table()[0]
    assert row[-1].startswith(first[:40]), row[-1][:80]


# --- numbers as people read them (issue 20, item 10) -----------------------------------------

@pytest.mark.parametrize("n, shown", [
    (0, "0 bytes"), (1, "1 byte"), (1023, "1023 bytes"), (1024, "1.0 KiB"), (40 << 10, "40.0 KiB"),
    (1 << 20, "1.0 MiB"), (int(3.25 * 2**20), "3.2 MiB"), (120 << 20, "120 MiB"),
    (1 << 30, "1.0 GiB"), (5 << 40, "5.0 TiB"), (2**63 - 1, "8.0 EiB"),
])
def test_sizes_read_in_the_unit_they_reach(n, shown):
    from cudamagic.core.units import size_text

    assert size_text(n) == shown


def test_no_size_that_is_not_zero_prints_as_zero():
    from cudamagic.core.units import size_text

    sizes = [*range(1, 5000, 7), *(1 << k for k in range(64)), *((1 << k) - 1 for k in range(1, 64))]
    for n in sizes:
        number = size_text(n).split()[0]
        assert float(number) > 0 and number not in ("0.0", "0"), (n, size_text(n))


@pytest.mark.parametrize("n, kernels, more", [
    (1, "1 kernel ·", "unused"), (2, "2 kernels ·", "unused"),
    (SHOWN_ROWS + 1, f"{SHOWN_ROWS + 1} kernels ·", "1 more kernel;"),
    (SHOWN_ROWS + 2, f"{SHOWN_ROWS + 2} kernels ·", "2 more kernels;"),
])
def test_counts_agree_with_their_nouns(n, kernels, more):
    r = make(n)
    assert kernels in r.headline
    if more != "unused":
        assert more in r.text(SHOWN_ROWS)


def test_every_phase_has_its_label_and_a_misspelled_one_is_refused():
    """Timings are keyed by BuildPhase, whose every member but the total has a label in the
    phases list (in the enum's order); a word that names no phase is an error where it is
    added, not a time the view would drop into "other"."""
    from cudamagic.core.miss import BuildPhase
    from cudamagic.view.report import _PHASES

    assert list(_PHASES) == [p for p in BuildPhase if p is not BuildPhase.TOTAL]
    r = make().with_timings({BuildPhase.DISPLAY: 0.002}, parse=0.001)
    assert r.timings["display"] == 0.002 and r.timings[BuildPhase.PARSE] == 0.001  # both read
    assert {"display (render)", "magic line"} <= {p.label for p in r.phases}
    with pytest.raises(ValueError):
        make().with_timings(dispaly=0.002)


def test_docs_report_names_every_phase_as_the_report_does():
    """docs/report.md lists the time line's phases by the words the report shows (a new user
    met "NVRTC start" and "list of headers read" in a report and nowhere in the docs)."""
    from pathlib import Path

    from cudamagic.view.report import _PHASES

    doc = " ".join((Path(__file__).resolve().parents[1] / "docs" / "report.md").read_text()
                   .split())  # the words, whatever the line breaks
    missing = [label for label in _PHASES.values() if f"*{label}*" not in doc]
    assert not missing, f"docs/report.md's time line does not name: {missing}"


def test_cache_stats_show_small_sizes_in_their_unit():
    stats = CacheStats("/c", 1, 40 << 10, 1 << 30, 0, 0)
    assert "size: 40.0 KiB of 1.0 GiB" in stats.text()


_ALL_PHASES = ("imports", "parse", "driver", "key", "lookup", "headers", "nvrtc", "compile",
               "manifest", "demangle", "resolve", "store", "history", "push", "resources",
               "display")


@pytest.mark.parametrize("phases", [1, 4, 9, len(_ALL_PHASES)])
@pytest.mark.parametrize("cache_dir", ["/c", "/home/someone/" + "deep/" * 12 + "cache"])
def test_the_time_and_facts_lines_fold_and_keep_every_phase(phases, cache_dir):
    timings = {k: 0.00123 * (i + 1) for i, k in enumerate(_ALL_PHASES[:phases])}
    r = make(2, timings={**timings, "total": 9.0}, cache_dir=cache_dir)
    text = r.text()
    tail = text[text.index("  NVRTC "):]
    for line in tail.splitlines():
        longest_item = max(len(i) for i in line.split(" · "))
        assert len(line) <= render.TEXT_WIDTH or longest_item + 10 > render.TEXT_WIDTH, line
    # folded between items, each phase whole and in order
    flat = " ".join(s.strip() for s in text[text.index("  time: "):].splitlines())
    assert flat == "time: " + " · ".join(f"{p.label} {p.text}" for p in r.phases)


@pytest.mark.parametrize("cache_dir, in_memory, shown", [
    ("/home/u/.cache/cudamagic", False, "/home/u/.cache/cudamagic"),
    ("memory (the folder /c is not trusted)", True, "in memory, this session only"),
    # the store's words are not what the view decides by: reworded, or a folder so named
    ("RAM: the folder /c is not trusted", True, "in memory, this session only"),
    ("memory (old)", False, "memory (old)"),
])
def test_the_facts_say_a_cache_in_memory_from_the_record_not_its_words(cache_dir, in_memory,
                                                                        shown):
    facts = dict(make(1, cache_dir=cache_dir, cache_in_memory=in_memory).facts)
    assert facts["cache"] == shown


def test_the_errors_and_warnings_a_user_catches_are_importable_from_the_package():
    import cudamagic
    from cudamagic import errors

    for name in ("ArgumentTypeError", "ArgumentValueError", "InputWarning", "CudaMagicWarning",
                 "CudaMagicError", "CompileError", "NoDeviceError"):
        assert getattr(cudamagic, name) is getattr(errors, name) and name in cudamagic.__all__
    for name in cudamagic.__all__:
        assert hasattr(cudamagic, name), name


def test_a_modules_repr_counts_its_kernels(tmp_path):
    import cudamagic

    one = cudamagic.build("__global__ void only(int* x) { *x = 1; }", cache=str(tmp_path))
    assert repr(one).startswith("<cudamagic.Module 1 kernel, cache miss")


def test_a_small_cache_database_is_not_said_to_take_zero(tmp_path):
    from cudamagic.errors import CacheArgumentError
    from cudamagic.store import KernelCache

    cache = KernelCache(tmp_path, size_limit="64MB")
    with pytest.raises(CacheArgumentError) as caught:
        cache.set_size_limit(1000)
    said = str(caught.value)
    assert "database alone takes" in said and " KiB" in said, said
    assert "0.0 MiB" not in said


# What a new user porting CuPy RawModule code met (from test_user_tries.py): every lap of a build is a named phase
DYNAMIC = r"""
__global__ void child(int* x) { x[threadIdx.x] += 1; }
extern "C" __global__ void parent(int* x) { child<<<1, 32>>>(x); }
"""


def _unnamed(report) -> list[str]:
    """Timed laps the report's phases do not show by name (they would fall into 'other')."""
    named = {p.seconds for p in report.phases[:-1] if p.label != "other"}
    return [k for k, s in report.timings.items() if k != "total" and s not in named]


@pytest.mark.parametrize("options", [[], ["-rdc=true"], ["-dc"], ["-dlto"]])
def test_every_lap_of_a_build_is_a_named_phase(tmp_path, options):
    module = cudamagic.build(DYNAMIC if options else DYNAMIC.replace("child<<<1, 32>>>(x);", ""),
                             options=options, arch="sm_90", cache=tmp_path)
    assert _unnamed(module.report) == []
    assert ("link (nvJitLink)" in module.report.text()) == bool(options)


@pytest.mark.parametrize("name", ["nvcc_kernels.ptx", "nvcc_kernels.fatbin"])
def test_what_nvjitlink_does_for_a_load_is_a_named_phase_and_a_hit_is_a_lookup(tmp_path, name):
    # the fatbin holds no sm_100 CUBIN: its PTX is compiled, as a .ptx file is
    first = cudamagic.load_cubin(FIXTURES / name, arch="sm_100", cache=tmp_path)
    assert _unnamed(first.report) == []
    assert [p.label for p in first.report.phases].count("link (nvJitLink)") == 1
    again = cudamagic.load_cubin(FIXTURES / name, arch="sm_100", cache=tmp_path)
    labels = [p.label for p in again.report.phases]
    assert "link (nvJitLink)" not in labels and "cache lookup" in labels


def test_a_cubin_taken_as_it_is_has_no_link_phase(tmp_path):
    module = cudamagic.load_cubin(FIXTURES / "nvcc_kernels.fatbin", arch="sm_90", cache=tmp_path)
    assert "link (nvJitLink)" not in [p.label for p in module.report.phases]


# --- kernel order ---
# The report lists a cell's kernels in the order they are defined (issue 31 item 4: row 1 of
# a 1 000-kernel cell was ck499, the last defined). The name expressions come first, in -n
# order; then the kernels reached by their own names, in the order of the CUBIN's symbol table
# read backwards (NVRTC writes it last-defined first; file-scope kernels before those in
# namespaces: docs/report.md).
import cudamagic
from cudamagic.store import KernelCache

PLAIN = [f"ck{i:03d}" for i in range(40)]
SRC = ("template <typename T> __global__ void tz(T* p) {}\n"
       + "".join(f'extern "C" __global__ void {n}(int* p) {{ p[0] = {i}; }}\n'
                 for i, n in enumerate(PLAIN))
       + "__global__ void cpp_last(float* p) {}\n"
       + "namespace ns { __global__ void inner_a(int*) {} __global__ void inner_b(int*) {} }\n")
NAMES = ["tz<int>", "tz<float>"]
WANT = [*NAMES, *PLAIN, "cpp_last", "ns::inner_a", "ns::inner_b"]


def test_kernels_are_listed_in_definition_order_on_a_miss_and_a_hit(tmp_path):
    cache = KernelCache(tmp_path / "cache")
    built = cudamagic.build(SRC, NAMES, cache=cache)
    hit = cudamagic.build(SRC, NAMES, cache=cache)
    assert hit.hit
    for mod in (built, hit):
        assert list(mod.kernels) == WANT
        assert [row.name_expression for row in mod.report.rows] == WANT  # the report's rows too
    cache.close()


# --- variables line ---
# The report's ``variables:`` line names the cell's own variables first and folds the
# included libraries' with a count (issue 31 item 4: it started with eight cuRAND tables, which
# no namespace marks as a library's). Which are the cell's own is what the compiler typed from
# the cell's text, not a guess from the names.
import cudamagic

SRC_variables_line = ('#include <curand_kernel.h>\n__constant__ float coeffs[16];\n__device__ int counter;\n'
       'extern "C" __global__ void k(float* p) { curandState s; curand_init(1, 0, 0, &s);\n'
       '  p[0] = curand_uniform(&s) + coeffs[0] + counter; }\n')


def test_the_cells_variables_first_and_the_librarys_counted():
    mod = cudamagic.build(SRC_variables_line, use_cache=False)
    line = mod.report.variables
    library = len(mod.globals) - 2
    assert library > 0  # cuRAND's tables are in the CUBIN
    assert line == ("coeffs (64 B, constant)", "counter (4 B, global)",
                    f"{library} library globals not shown"), line
    assert "variables: coeffs (64 B, constant) · counter" in str(mod.report)


# --- report says ---
# What the report says (issue 31 item 5): -q is quiet for a slow compile too.
import pytest

from cudamagic.shell import magic

CELL = 'extern "C" __global__ void k{n}(float* x) {{ x[0] = {n}.0f; }}\n'


@pytest.fixture
def shell(tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(magic, "NOTICE_AFTER_S", 0.0)  # every compile is a slow one
    ip = InteractiveShell.instance()
    if "cudamagic" not in ip.extension_manager.loaded:
        ip.run_line_magic("load_ext", "cudamagic")
    return ip


@pytest.mark.parametrize("quiet", [True, False])
def test_q_shows_nothing_even_for_a_slow_compile(shell, capfd, quiet, tmp_path):
    result = shell.run_cell(f"%%cuda {'-q ' if quiet else ''}--module m{int(quiet)}\n"
                            + CELL.format(n=int(quiet) + 7))
    assert result.success, result.error_in_exec
    shown = capfd.readouterr()
    text = shown.out + shown.err
    if quiet:
        assert text.strip() == "", text
    else:  # the notice a slow compile gets, and the report
        assert "compil" in shown.err and "cudamagic: cache miss" in shown.out, text


def test_the_occupancy_plot_reads_in_a_dark_theme_and_draws_alike_curves_apart():
    """Its words take the page's text colour (black on JupyterLab's dark theme otherwise); a
    kernel on the same curve as an earlier one is dashed, and its legend says whose curve it
    is; the fold's last line says what %cuda_bench does with several launches."""
    import re

    from cudamagic.view import bench

    curve = [(32, 0.5), (64, 1.0)]
    page = bench.svg_lines([("a", curve), ("b", list(curve)), ("c", [(32, 0.25), (64, 0.5)]),
                            ("d", curve)], x_label="threads per block", y_label="occupancy",
                           y_max=1.0)
    root = re.match(r"<svg [^>]*>", page).group(0)
    assert 'fill="currentColor"' in root
    lines = re.findall(r"<polyline ([^>]*)>", page)
    dashes = [re.search(r'stroke-dasharray="([^"]*)"', x) for x in lines]
    assert [d is None for d in dashes] == [True, False, True, False]
    assert dashes[1].group(1) != dashes[3].group(1)  # the third on a curve differs again
    legends = re.findall(r'<text [^>]*fill="#[0-9a-f]+">([^<]*)</text>', page)
    assert legends == ["a", "b (same curve as a)", "c", "d (same curve as a)"]
    texts = re.findall(r"<text ([^>]*)>", page)
    assert all('fill="#000' not in t for t in texts)


def test_a_ptx_loads_badge_and_footer_say_ptx_and_the_cache(tmp_path):
    """A PTX file is compiled by nvJitLink and its CUBIN cached: the report says PTX (not
    "loaded CUBIN"), names the cache it went into (not "(not cached)"), and the second load
    says it came from there."""
    import cudamagic

    from .conftest import FIXTURES

    ptx = FIXTURES / "nvcc_kernels.ptx"
    cache = cudamagic.KernelCache(tmp_path / "cache")
    first = cudamagic.load_cubin(ptx, cache=cache).report
    second = cudamagic.load_cubin(ptx, cache=cache).report
    assert first.badge.label == "loaded PTX", first.badge
    assert second.badge.label == "loaded PTX (compiled before: cached)", second.badge
    for report in (first, second):
        assert report.cache_dir == str(cache.location) and "(not cached)" not in report.text()
    cubin = cudamagic.load_cubin(FIXTURES / "fixture.cubin", ["fill<float>"]).report
    assert cubin.badge.label == "loaded CUBIN" and cubin.cache_dir == "(not cached)"


# --- resources past 64 kernels ---
# A module of more than 64 kernels used to lose its registers, shared and local columns without
# a word (issue 31 item 4); now the rows the table shows carry them, the others are not made.
MANY = [f"sk{i:02d}" for i in range(70)]
SRC_many = "".join(f'extern "C" __global__ void {n}(int* p) {{ __shared__ int s[{i + 1}]; '
                   f's[threadIdx.x] = 1; __syncthreads(); p[0] = s[{i}]; }}\n'
                   for i, n in enumerate(MANY))


def test_a_report_of_many_kernels_shows_resources_for_the_rows_it_shows(tmp_path):
    from cudamagic.view.widget import report_with_attributes

    cache = KernelCache(tmp_path / "cache")
    for mod in (cudamagic.build(SRC_many, cache=cache), cudamagic.build(SRC_many, cache=cache)):
        report = report_with_attributes(mod)
        assert report.columns[-3:] == ("registers", "shared (static)", "local")
        at = report.columns.index("shared (static)")
        shared = {row[0]: row[at] for row in report.table(0, SHOWN_ROWS)}
        assert len(shared) == SHOWN_ROWS
        for name, cell in shared.items():  # the compiler's own numbers: 4 B per int declared
            assert cell == f"{4 * (MANY.index(name) + 1)} B", (name, cell)
        assert "registers" in report.html() and "registers" in report.text(SHOWN_ROWS)
    cache.close()


class _CuFiltTexts:
    """cu++filt's texts for the cell below, as the CUDA 13.0 toolkit's gave them on the GPU
    machine (``T1`` for a template's parameters, a space before ``*``): a machine with the
    toolkit demangles with it (toolchain/binary/demangle.py's default)."""

    name = "cu++filt"
    placeholders = True
    TEXTS = {"_Z5plainPi": "plain(int *)", "_Z5saxpyIfEvT_PS0_": "void saxpy<float>(T1, T1 *)"}

    def demangle(self, symbols):
        return [self.TEXTS.get(s, s) for s in symbols]

    def start(self):
        from cudamagic.toolchain.binary.demangle import Pending

        return Pending(self.demangle)


@pytest.mark.parametrize("cufilt", [False, True], ids=["libstdc++", "cu++filt"])
def test_a_kernel_s_signature_is_the_one_its_report_row_shows(cufilt):
    """With its void return: the extern "C" kernel's parameter types as the compiler declared
    them, a plain C++ kernel's and a template's; with cu++filt's texts too (the GPU machine's
    demangler: the kernel said ``T1`` where its row said ``float``)."""
    from cudamagic.core.options import BuildOptions
    from cudamagic.pipeline.steps import build_module

    source = ('extern "C" __global__ void fill(float* x, float v, int n) { if (n) x[0] = v; }\n'
              "__global__ void plain(int* p) { *p = 1; }\n"
              "template <class T> __global__ void saxpy(T a, T* x) { x[0] *= a; }\n")
    module = build_module(source, BuildOptions(name_expressions=("saxpy<float>", "plain"),
                                               no_cache=True),
                          demangler=_CuFiltTexts() if cufilt else None)
    assert module.report.demangler == ("cu++filt" if cufilt else module.report.demangler)
    rows = {r.python_name: r.signature for r in module.report.rows}
    assert rows == {k.python_name: k.signature for k in module.kernels.values()}
    assert module["fill"].signature == "void fill(float*, float, int)"
    assert module["plain"].signature == "void plain(int*)"
    assert module["saxpy<float>"].signature == "void saxpy<float>(float, float*)"


def test_the_options_added_for_a_library_read_with_a_colon_as_the_guide_shows_them():
    """docs/magics.md shows "options added for CUTLASS: ..."; the report said it without the
    colon ("options added for CUTLASS -I ..., -default-device")."""
    r = make(added=("CUTLASS", ("-I /site/cutlass/include", "-default-device")))
    said = "options added for CUTLASS: -I /site/cutlass/include, -default-device"
    assert said in R.render_text(r).replace("\n    ", " ")
    assert "options added for CUTLASS: <code>-I /site/cutlass/include, -default-device" \
        in R.render_html(r)
