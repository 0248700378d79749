"""The cell history: why a miss happened, compared with the last build of the same cell; small,
bounded, atomic, owner-only, tolerant of damage, and off the warm path."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

import cudamagic
from cudamagic.pipeline import explain as H
from cudamagic.errors import CacheWarning
from cudamagic.pipeline.explain import CellBuild, History, cell_id, explain, source_diff
from cudamagic.core.miss import ChangeKind, Miss, MissKind
import re
from cudamagic.pipeline.explain import explain

NO_ENTRY = Miss(MissKind.NO_ENTRY)

SRC = """template <typename T>
__global__ void saxpy(T a, const T* x, T* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def cb(key="k1", source=SRC, names=("saxpy<float>",), std="c++17", options=(), arch="sm_90",
       nvrtc="nvidia_cuda_nvrtc-13.5.37.dist-info", toolkit="cupy_cuda13x-14.2.0.dist-info;x"):
    import hashlib

    return CellBuild(key, hashlib.sha256(source.encode()).hexdigest(), source, names, std,
                     options, arch, nvrtc, toolkit, 1)


# --- explanations ------------------------------------------------------------------------------

def test_first_build():
    e = explain(None, cb(), NO_ENTRY, "cuda_module in this folder")
    assert e.kinds == ("first",) and e.summary == "first build of cuda_module in this folder"


def test_source_change_says_which_lines_with_a_short_diff():
    new = SRC.replace("a * x[i] + y[i]", "a * x[i] - y[i]")
    e = explain(cb(), cb("k2", new), NO_ENTRY)
    assert e.kinds == ("source",) and e.summary == "the source changed (line 5)"
    assert e.diff == ("line 5 -     if (i < n) y[i] = a * x[i] + y[i];",
                      "line 5 +     if (i < n) y[i] = a * x[i] - y[i];")


def test_source_diff_ranges_and_cap():
    where, diff = source_diff("a\nb\nc\n", "a\nB\nC\nc\nd\n", line_offset=1)
    assert where == "lines 3-4, line 6"
    long_old = "\n".join(f"x{i}" for i in range(40))
    long_new = "\n".join(f"y{i}" for i in range(40))
    where, diff = source_diff(long_old, long_new)
    assert len(diff) == H.MAX_DIFF_LINES and diff[-1].startswith("... (")


@pytest.mark.parametrize("change, kind, words", [
    (dict(names=("saxpy<float>", "saxpy<double>")), "names", "-n changed: added 'saxpy<double>'"),
    (dict(names=()), "names", "-n changed: removed 'saxpy<float>'"),
    (dict(options=("-DN=4",)), "options", "options changed: added '-DN=4'"),
    (dict(std="c++20"), "options", "--std changed: c++17 -> c++20"),
    (dict(arch="sm_80"), "arch", "the target arch changed: sm_90 -> sm_80"),
    (dict(nvrtc="nvidia_cuda_nvrtc-13.6.1.dist-info"), "nvrtc",
     "NVRTC changed: nvidia_cuda_nvrtc-13.5.37 -> nvidia_cuda_nvrtc-13.6.1"),
    (dict(toolkit="cupy_cuda13x-14.3.0.dist-info;x"), "toolkit",
     "cupy_cuda13x-14.2.0 -> cupy_cuda13x-14.3.0"),
])
def test_what_changed_is_named(change, kind, words):
    e = explain(cb(), cb("k2", **change), NO_ENTRY)
    assert e.kinds == (kind,) and words in e.summary


def test_option_order_is_a_change():
    e = explain(cb(options=("-DA", "-UA")), cb("k2", options=("-UA", "-DA")), None)
    assert e.summary == "options changed: the same ones, in another order"


def test_same_inputs_without_an_entry_is_an_eviction():
    e = explain(cb(), cb(), NO_ENTRY)
    assert e.kinds == ("evicted",) and "no longer holds the entry" in e.summary


# what a detector could say, including words that name other kinds: the kind alone decides
DETAILS = ["the header /x/y.h changed since the last compile",
           "the entry's checksum does not match its contents (deleted)",
           "the entry is of format 3, newer than this reader's 2 (deleted)",
           "a header format now exists in the package folder __has_include", "", "x" * 500]
FOUND = [k for k in MissKind if k not in (MissKind.NO_ENTRY, MissKind.FORCED, MissKind.NO_CACHE)]


@pytest.mark.parametrize("kind", FOUND)
@pytest.mark.parametrize("detail", DETAILS)
def test_what_the_cache_found_is_told_by_its_kind_not_its_words(kind, detail):
    miss = Miss(kind, detail)
    assert explain(cb(), cb(), miss).kinds == (kind,)
    assert explain(None, cb(), miss).kinds == (kind,)
    assert explain(None, cb(), miss).summary == (detail or kind.value)
    both = explain(cb(), cb("k2", arch="sm_80"), miss)
    assert both.kinds == (ChangeKind.ARCH, kind) and detail in both.summary


@pytest.mark.parametrize("detail", DETAILS)
def test_a_plain_absence_or_a_request_is_not_a_finding(detail):
    assert explain(cb(), cb(), Miss(MissKind.NO_ENTRY, detail)).kinds == (ChangeKind.EVICTED,)
    assert explain(None, cb(), Miss(MissKind.NO_ENTRY, detail)).kinds == (ChangeKind.FIRST,)
    assert explain(cb(), cb("k2"), Miss(MissKind.FORCED, detail)).kinds == (MissKind.FORCED,)


def test_force_and_an_unexplained_key():
    assert explain(cb(), cb(), Miss(MissKind.FORCED)).kinds == ("forced",)
    assert explain(cb(), cb("k2"), None).kinds == ("other",)


def test_name_expressions_in_another_order_are_no_change():
    """-n is a set in the key; "explain a miss" must not call an order a change."""
    e = explain(cb(names=("a<int>", "b<int>")), cb("k2", names=("b<int>", "a<int>"),
                                                   arch="sm_80"), NO_ENTRY)
    assert e.kinds == (ChangeKind.ARCH,) and "-n" not in e.summary


def test_too_long_to_diff():
    big = "// " + "x" * H.MAX_SOURCE
    assert cb(source=big).source is not None  # cb does not cap: the record does
    e = explain(cb(), CellBuild("k2", "other", None, ("saxpy<float>",), "c++17", (), "sm_90",
                                cb().nvrtc, cb().toolkit), None)
    assert e.summary == "the source changed (too long to keep for a diff)"


# --- the files ---------------------------------------------------------------------------------

def test_files_are_owner_only_atomic_and_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "MAX_CELLS", 5)
    h = History(tmp_path / "history")
    for i in range(8):
        h.remember(cell_id("/nb", f"m{i}"), cb(f"k{i}"), ())
        time.sleep(0.01)  # distinct mtimes: the oldest go
    names = sorted(os.listdir(tmp_path / "history"))
    assert len(names) == 5 and not any(n.startswith(".tmp-") for n in names)
    assert stat.S_IMODE((tmp_path / "history").stat().st_mode) == 0o700
    for n in names:
        assert stat.S_IMODE((tmp_path / "history" / n).stat().st_mode) == 0o600
    assert History(tmp_path / "history").recall(cell_id("/nb", "m0")) == ()  # pruned
    assert History(tmp_path / "history").recall(cell_id("/nb", "m7"))[0].key == "k7"


def test_a_cell_keeps_its_last_few_builds_newest_first(tmp_path):
    h = History(tmp_path)
    cell = cell_id("/nb", "cuda_module")
    builds: tuple = ()
    for i in range(H.PER_CELL + 2):
        h.remember(cell, cb(f"k{i}"), builds)
        builds = History(tmp_path).recall(cell)
    assert [b.key for b in builds] == [f"k{i}" for i in range(H.PER_CELL + 1, 1, -1)]


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b'{"v": 2, "builds": [{"key": 1}]}',
                                     b'{"v": 1, "key": "x"}', b"\xff\xfe", b"[" * 100000])
def test_a_damaged_file_reads_as_no_history(tmp_path, content):
    h = History(tmp_path)
    cell = cell_id("/nb", "m")
    (tmp_path / f"{cell}.json").write_bytes(content)
    assert h.recall(cell) == ()
    h.remember(cell, cb(), ())  # and the next build replaces it
    assert History(tmp_path).recall(cell)[0] == cb()


def test_a_link_or_a_huge_file_is_not_read(tmp_path):
    h = History(tmp_path)
    real = tmp_path / "elsewhere.json"
    real.write_text(json.dumps({"v": 2, "builds": [cb().__dict__]}))
    os.symlink(real, tmp_path / f"{cell_id('/nb', 'a')}.json")
    assert h.recall(cell_id("/nb", "a")) == ()
    (tmp_path / f"{cell_id('/nb', 'b')}.json").write_bytes(b" " * (H.MAX_FILE + 1))
    assert h.recall(cell_id("/nb", "b")) == ()


def test_an_unwritable_folder_keeps_nothing_silently(tmp_path):
    (tmp_path / "history").write_text("a file where the folder would be")
    h = History(tmp_path / "history")
    h.remember("c", cb(), ())  # no error: the history only explains
    assert h.recall("c") == ()


# --- through build(): the report says why, and a hit stays off the file system ---------------

@pytest.fixture
def where(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path / "cache"


def _build(source, cache, names=("saxpy<float>",), **kw):
    return cudamagic.build(source, list(names), cache=cache, **kw)


def test_a_miss_of_a_changed_source_and_header_names_both(where, tmp_path):
    """Issue 51, snag 2: the source (or an option) and a header both changed: the report
    shown names both, the header by its path (it named only the source)."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "scale.h").write_text("#define SCALE 2\n")
    cell = '#include "scale.h"\n' + SRC.replace("a * x[i]", "SCALE * a * x[i]")
    assert _build(cell, where, options=["-Iinc"]).report.explanation.kinds == ("first",)
    (inc / "scale.h").write_text("#define SCALE 3\n")
    both = _build(cell.replace("+ y[i]", "- y[i]"), where, options=["-Iinc"])
    assert both.report.explanation.kinds == ("source", "header"), both.report.why
    for shown in (both.report.text(), both.report.html()):
        assert "the source changed (line 5)" in shown
        assert "the header inc/scale.h changed since the last build" in shown, shown
    (inc / "scale.h").write_text("#define SCALE 4\n")  # an option and the header
    opt = _build(cell.replace("+ y[i]", "- y[i]"), where, options=["-Iinc", "-DX=1"])
    assert opt.report.explanation.kinds == ("options", "header"), opt.report.why
    assert "added '-DX=1'" in opt.report.why and "inc/scale.h changed" in opt.report.why
    (inc / "scale.h").write_text("#define SCALE 2\n")  # as the first build read it: no word
    again = _build(cell, where, options=["-Iinc", "-DX=2"])
    assert "scale.h" not in again.report.why, again.report.why


def test_a_miss_is_explained_in_the_report(where):
    first = _build(SRC, where)
    assert first.report.explanation.kinds == ("first",)
    assert "first build of cuda_module in this folder" in first.report.text()
    edited = _build(SRC.replace("+ y[i]", "- y[i]"), where)
    assert edited.report.explanation.kinds == ("source",)
    assert "the source changed (line 4)" in edited.report.text()  # build(): no magic line
    assert "line 4 +     if (i < n) y[i] = a * x[i] - y[i];" in edited.report.text()
    assert "the source changed (line 4)" in edited.report.html()
    more = _build(SRC.replace("+ y[i]", "- y[i]"), where, names=("saxpy<float>", "saxpy<int>"))
    assert more.report.explanation.summary == "-n changed: added 'saxpy<int>'"
    assert _build(SRC, where).report.explanation is None  # a hit: nothing to explain


def test_an_evicted_entry_and_a_changed_header(where, tmp_path):
    (tmp_path / "scale.h").write_text("#define SCALE 2\n")
    src = '#include "scale.h"\n__global__ void k(float* x) { x[0] *= SCALE; }\n'
    _build(src, where, names=())
    cudamagic.KernelCache(where).clear()
    assert _build(src, where, names=()).report.explanation.kinds == ("evicted",)
    (tmp_path / "scale.h").write_text("#define SCALE 3\n")
    again = _build(src, where, names=())
    assert again.report.explanation.kinds == ("header",)
    assert "scale.h changed since the last compile" in again.report.why


def test_a_build_that_was_not_cached_is_not_called_evicted(where, monkeypatch):
    """A build whose entry was not kept (here: another process held the database past the
    store's wait; also a compile whose list of headers NVRTC broke): the next run of the same
    inputs misses, and says that build was not cached and why, not that the cache lost it."""
    real_put = cudamagic.KernelCache.put
    monkeypatch.setattr(cudamagic.KernelCache, "put", lambda self, key, record: False)
    first = _build(SRC, where)
    assert first.report.explanation.kinds == ("first",)
    monkeypatch.setattr(cudamagic.KernelCache, "put", real_put)
    again = _build(SRC, where)
    assert again.report.explanation.kinds == (ChangeKind.NOT_STORED,), again.report.why
    assert "built with these same inputs before, and that build was not cached: another " \
           "process kept the cache's database locked" in again.report.why
    cudamagic.KernelCache(where).clear()  # kept this time: an absence now is an eviction
    assert _build(SRC, where).report.explanation.kinds == (ChangeKind.EVICTED,)
    assert "the next run compiles again" not in again.report.why  # said of that build, then


def test_a_hit_after_another_cell_cached_the_entry_forgets_not_cached(where, monkeypatch,
                                                                      tmp_path):
    """A build not cached, then the same inputs cached by another cell (another folder here;
    another notebook alike), then this cell a hit: its history now holds the build as cached,
    so after the cache is cleared its miss is an eviction, not "that build was not cached"."""
    real_put = cudamagic.KernelCache.put
    monkeypatch.setattr(cudamagic.KernelCache, "put", lambda self, key, record: False)
    _build(SRC, where)  # this cell: not cached
    monkeypatch.setattr(cudamagic.KernelCache, "put", real_put)
    here = os.getcwd()
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    assert not _build(SRC, where).hit  # another cell compiles the same inputs and keeps them
    monkeypatch.chdir(here)
    assert _build(SRC, where).hit  # this cell: a hit
    cudamagic.KernelCache(where).clear()
    assert _build(SRC, where).report.explanation.kinds == (ChangeKind.EVICTED,)


def test_why_a_build_was_not_cached_survives_the_record_s_round_trip():
    record = CellBuild.of(key="k", source=SRC, names=("saxpy<float>",), std="c++17",
                          options=(), arch="sm_90", nvrtc="n", toolkit="t",
                          unstored="not cached: why")
    from dataclasses import asdict
    data = json.loads(json.dumps(asdict(record)))  # as the history file holds it
    assert CellBuild.from_json(data) == record
    old = {k: v for k, v in data.items() if k != "unstored"}  # written before it was kept
    assert CellBuild.from_json(old).unstored == ""
    assert CellBuild.from_json({**old, "unstored": 3}) is None
    huge = CellBuild.from_json({**old, "unstored": "x" * 10**6})  # a file's may be anything
    assert len(huge.unstored) <= H.MAX_NOTE + 3


def test_cells_sharing_a_module_name_are_told_apart(where):
    """Notebook cells often all use the default module name: a miss is compared with the
    closest of the cell's remembered builds, not merely the last one."""
    other = 'extern "C" __global__ void fill(float* x, float v, int n) {}\n'
    _build(SRC, where)
    _build(other, where, names=())
    edited = _build(SRC.replace("int i =", "int j = 0; int i ="), where)
    assert edited.report.explanation.summary == "the source changed (line 3)"


def test_a_hit_on_a_remembered_key_touches_no_file(where, monkeypatch):
    _build(SRC, where)
    _build(SRC, where)  # this process has now seen the cell's file
    hist_dir = where / "history"
    before = {p.name: p.stat().st_mtime_ns for p in hist_dir.iterdir()}

    def boom(*a, **k):
        raise AssertionError("the warm path touched the history's files")

    monkeypatch.setattr(History, "_read", boom)
    monkeypatch.setattr(History, "remember", boom)
    start = time.perf_counter()
    mod = _build(SRC, where)
    assert mod.hit and mod.report.timings["history"] < 1e-3
    print(f"\nhistory on a warm hit: {mod.report.timings['history'] * 1e6:.1f} us "
          f"(build {(time.perf_counter() - start) * 1e3:.2f} ms)")
    assert {p.name: p.stat().st_mtime_ns for p in hist_dir.iterdir()} == before


def test_the_first_hit_of_a_process_reads_once_and_writes_nothing(where):
    from .conftest import run_python

    _build(SRC, where)
    code = (f"import cudamagic, os\nfrom cudamagic.pipeline.explain import History\n"
            f"os.chdir({str(where.parent)!r})\n"
            f"def boom(*a, **k): raise AssertionError('a hit wrote the history')\n"
            f"History.remember = boom\n"
            f"m = cudamagic.build({SRC!r}, ['saxpy<float>'], cache={str(where)!r})\n"
            f"print(m.hit, m.report.explanation, round(m.report.timings['history'] * 1e6))\n")
    hit, explanation, micros = run_python(code).split()
    assert (hit, explanation) == ("True", "None")
    print(f"\nhistory on the first hit of a process: {micros} us")


def test_no_cache_and_an_untrusted_folder(where, tmp_path):
    assert _build(SRC, where, use_cache=False).report.explanation.kinds == ("no-cache",)
    bad = tmp_path / "open"
    bad.mkdir(mode=0o777)
    os.chmod(bad, 0o777)
    with pytest.warns(CacheWarning):
        mod = _build(SRC, bad)
    assert mod.report.explanation.kinds == ("first",)
    assert not (bad / "history").exists()  # an untrusted folder gets nothing of ours


# --- damaged numbers and adversarial sizes -----------------------------------------------------

def _record(**change):
    data = {**cb().__dict__, **change}
    return json.dumps({"v": 2, "builds": [data]}).encode()


@pytest.mark.parametrize("content", [
    _record(line_offset=float("inf")), _record(line_offset=float("-inf")),
    _record(line_offset=float("nan")),
    _record().replace(b'"line_offset": 1', b'"line_offset": 1e999'),
    _record(line_offset=True), _record(line_offset=-1), _record(line_offset=2 ** 80),
    _record(line_offset="1"), _record(line_offset=1.5), _record(line_offset=None),
    _record(key=float("inf")), _record(names=[float("nan")]), _record(names="abc"),
    _record(options=[1, 2]), _record(std=None), _record(arch=["sm_90"]),
    _record().replace(b'"line_offset": 1', b'"line_offset": ' + b"9" * 5000),
])
def test_a_damaged_number_reads_as_no_history(tmp_path, content):
    """json reads NaN, Infinity and 1e999 as floats; none belongs in a record."""
    h = History(tmp_path)
    cell = cell_id("/nb", "m")
    (tmp_path / f"{cell}.json").write_bytes(content)
    assert h.recall(cell) == ()
    h.remember(cell, cb(), ())
    assert History(tmp_path).recall(cell)[0] == cb()


@pytest.mark.parametrize("old, new", [
    ("x;\n" * 8000, "x;\n" * 4000 + "y;\n" + "x;\n" * 3999),  # 16 KB of one line, one changed
    ("a\n" + "x;\n" * 8000, "b\n" + "x;\ny;\n" * 4000),  # a differing first line, repeats
    ("x;\ny;\n" * 4000, "y;\nx;\n" * 4000),  # shifted repeats
    ("".join(f"l{i % 7};\n" for i in range(8000)), "".join(f"l{i % 5};\n" for i in range(8000))),
])
def test_explaining_a_large_repetitive_change_is_bounded(old, new):
    """SequenceMatcher on 16 KB of repeated lines took half a minute; the diff and the choice of
    the closest build are linear apart from a capped middle."""
    start = time.perf_counter()
    where, diff = source_diff(old, new)
    best = H.most_alike((cb("a", old), cb("b", new + "z\n")), cb("c", new))
    took = time.perf_counter() - start
    assert where and len(diff) <= H.MAX_DIFF_LINES and best is not None
    assert took < 2.0, f"{took:.1f} s"


def test_a_changed_middle_within_the_cap_is_diffed_line_by_line():
    old = "".join(f"keep {i}\n" for i in range(100))
    new = old.replace("keep 40\n", "changed 40\n").replace("keep 60\n", "")
    where, diff = source_diff(old, new)
    assert where == "line 41, line 60"
    assert diff == ("line 41 - keep 40", "line 41 + changed 40", "line 61 - keep 60")


def test_name_expressions_reordered_through_build_are_no_change(where):
    """-n in another order is the same key; with the source changed, only the source is said."""
    _build(SRC, where, names=("saxpy<float>", "saxpy<int>"))
    edited = _build(SRC.replace("+ y[i]", "- y[i]"), where, names=("saxpy<int>", "saxpy<float>"))
    assert edited.report.explanation.kinds == ("source",)
    assert "-n" not in edited.report.explanation.summary


def test_a_warm_hit_makes_no_build_record(where, monkeypatch):
    """The record hashes the whole source: a hit on a remembered key never makes one."""
    _build(SRC, where)
    _build(SRC, where)

    def boom(*a, **k):
        raise AssertionError("a warm hit made a build record")

    monkeypatch.setattr(CellBuild, "of", boom)
    assert _build(SRC, where).hit


# --------------------------------------------------------------------------------------------------
# A miss after a cell of thousands of name expressions says what changed in a line a person
# reads: the first names added and removed, and how many more (a line of 5000 ``-n`` made a
# headline of 54 KB, every name quoted, in the report, its text and its HTML).

# (names before, names after): counts added and removed around the limit, on either side
SIZES = [(0, 1), (1, 0), (0, 10), (10, 0), (0, 11), (11, 0), (3, 14), (5000, 0), (0, 5000),
         (2500, 5000), (5000, 4990), (5000, 5000)]


def _names(start: int, stop: int) -> tuple[str, ...]:
    return tuple(f"k<{i}>" for i in range(start, stop))


@pytest.mark.parametrize("before, after", SIZES)
def test_a_changed_line_of_names_says_the_first_ones_and_counts_the_rest(before, after):
    # the new line keeps the old one's first names only where 'after' overlaps them
    old = _names(0, before)
    new = _names(before - min(before, after) // 2, before - min(before, after) // 2 + after)
    added = [n for n in new if n not in old]
    removed = [n for n in old if n not in new]
    summary = explain(cb(names=old), cb("k2", names=new), NO_ENTRY).summary
    for word, names in (("added", added), ("removed", removed)):
        if not names:
            assert f"{word} " not in summary
            continue
        said = re.search(rf"{word} ((?:'[^']*'(?:, )?)+)(?: and (\d+) more)?", summary)
        assert said, summary
        listed = re.findall(r"'([^']*)'", said.group(1))
        assert listed == names[:H.MAX_LISTED], summary
        more = int(said.group(2) or 0)
        assert more == len(names) - len(listed), summary
    assert len(summary) < 600, f"{len(summary)} characters"


# cell id, module, the explanation's kinds for the edited cell built after %cd to another folder
AFTER_CD = [
    ("a1b2c3", "cuda_module", ("source",)),   # a notebook cell: the same cell in any folder
    (None, "cuda_module", ("first",)),        # no cell id: the module in this folder
    (None, "mylib", ("first",)),
    ("a1b2c3", "mylib", ("first",)),          # --module names a module of this folder
]


@pytest.mark.parametrize("cell, module, kinds", AFTER_CD)
def test_a_cell_keeps_its_history_after_cd(tmp_path, monkeypatch, cell, module, kinds):
    """``%cd`` in a notebook: the cell built there many times is not 'its first build' in the
    next folder; the shell's cell id identifies it wherever the kernel's working folder is."""
    from cudamagic.core.options import options_from_args
    from cudamagic.pipeline.steps import build_module

    cache = cudamagic.KernelCache(tmp_path / "cache")
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    opts = options_from_args([], ["saxpy<float>"], module=module)
    monkeypatch.chdir(tmp_path / "a")
    first = build_module(SRC, opts, cache=cache, cell=cell)
    assert first.report.explanation.kinds == ("first",)
    monkeypatch.chdir(tmp_path / "b")
    edited = build_module(SRC.replace("+ y[i]", "- y[i]"), opts, cache=cache, cell=cell)
    assert edited.report.explanation.kinds == kinds


# --- explain no cell id ---
# Without a cell id (nbclient, papermill, a script calling :func:`cudamagic.build`), a cell
# never built before is new, not "the source changed; -n changed" against the cell before it
# (issue 31 item 5); the same cell edited is still compared with its last build.
import cudamagic
from cudamagic.core.miss import ChangeKind
from cudamagic.store import KernelCache

FIRST = 'extern "C" __global__ void first(int* p) { p[0] = 1; }\n'
SECOND = ('template <typename T> __global__ void second(T* p) { p[0] = 2; }\n'
          'extern "C" __global__ void also(int* p) { p[1] = 3; }\n')


def _kinds(module) -> tuple:
    return tuple(module.report.explanation.kinds)


def test_each_new_cell_is_first_and_an_edit_is_compared(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cache = KernelCache(tmp_path / "cache")
    assert _kinds(cudamagic.build(FIRST, cache=cache)) == (ChangeKind.FIRST,)
    second = cudamagic.build(SECOND, ["second<float>"], cache=cache)
    assert _kinds(second) == (ChangeKind.FIRST,), second.report.explanation
    edited = cudamagic.build(FIRST.replace("= 1", "= 7"), cache=cache)  # the first cell, edited
    assert _kinds(edited) == (ChangeKind.SOURCE,), edited.report.explanation
    cache.close()


def test_a_cell_after_one_of_no_kernels_is_a_first_build_not_its_change(where):
    """Without a cell id (a terminal, nbclient): a template cell built without -n (no kernels)
    is no other cell's, so the next, unrelated cell is its own first build, not 'the source
    changed' with a diff of the template's code."""
    template = _build(SRC, where, names=())
    assert template.report.explanation.kinds == ("first",)
    other = 'extern "C" __global__ void fill(float* x) { x[0] = 1.0f; }\n'
    after = _build(other, where, names=())
    assert after.report.explanation.kinds == ("first",), after.report.explanation
    assert "first build of cuda_module in this folder" in after.report.text()
    # and after it, a template cell without -n again is its own first build too
    assert _build(SRC + "\n// again\n", where, names=()).report.explanation.kinds == ("first",)


def test_a_record_written_before_kernels_were_kept_may_be_any_cell_s():
    old = {k: v for k, v in json.loads(json.dumps(H.asdict(cb()))).items() if k != "kernels"}
    earlier = CellBuild.from_json(old)
    assert earlier is not None and earlier.kernels is None
    assert H._same_cell(earlier, cb("k2"))
    assert CellBuild.from_json(json.loads(json.dumps(H.asdict(cb())))).kernels == ()
