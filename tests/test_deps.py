"""The dependency manifest: what NVRTC read is what a hit re-checks, for every include spelling.

The stale-header corpus builds each case in a fresh interpreter, builds it again in another
(a hit: nothing changed), edits a header, and builds in a third: a miss whose CUBIN equals an
uncached build's. Every case served the old kernel on the code before the manifest.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from cudamagic.toolchain.compile import deps

from .conftest import run_python

KERN = 'extern "C" __global__ void k(int* x) { x[0] = V; }\n'
CHAIN = 1100  # headers in a chain: past the old scanner's silent limit of 1000


def _chain(n: int) -> dict[str, str]:
    files = {f"chain/h{i}.h": f'#include "h{i + 1}.h"\n' for i in range(n)}
    files[f"chain/h{n}.h"] = "#define V 1\n"
    return files


# label: (files to write, source, build() options, base_dir, edit: (path, new text))
CASES = {
    "angle include through -I": (
        {"inc/mylib.h": "#define V 1\n"}, "#include <mylib.h>\n", ["-Iinc"], None,
        ("inc/mylib.h", "#define V 2\n")),
    "quoted header beside the cell shadows an -I copy": (
        {"inc/s.h": "#define V 1\n", "s.h": "#define V 2\n"}, '#include "s.h"\n', ["-Iinc"],
        None, ("s.h", "#define V 3\n")),
    "quoted include inside an angle-included header": (
        {"inc/outer.h": '#include "inner.h"\n', "inc/inner.h": "#define V 1\n"},
        "#include <outer.h>\n", ["-Iinc"], None, ("inc/inner.h", "#define V 2\n")),
    "#include MACRO": (
        {"m.h": "#define V 1\n"}, '#define HDR "m.h"\n#include HDR\n', [], None,
        ("m.h", "#define V 2\n")),
    "#include /*c*/ \"x.h\"": (
        {"x.h": "#define V 1\n"}, '#include /*c*/ "x.h"\n', [], None, ("x.h", "#define V 2\n")),
    "line splice": (
        {"x.h": "#define V 1\n"}, '#inc\\\nlude "x.h"\n', [], None, ("x.h", "#define V 2\n")),
    "%:include digraph": (
        {"x.h": "#define V 1\n"}, '%:include "x.h"\n', [], None, ("x.h", "#define V 2\n")),
    "__has_include of a file created later": (
        {}, '#if __has_include("later.h")\n#include "later.h"\n#else\n#define V 1\n#endif\n',
        [], None, ("later.h", "#define V 2\n")),
    "a shadowing file created later in an earlier -I": (
        {"inc2/sh.h": "#define V 1\n", "inc1/.keep": ""}, "#include <sh.h>\n",
        ["-Iinc1", "-Iinc2"], None, ("inc1/sh.h", "#define V 2\n")),
    "--pre-include": (
        {"pre.h": "#define V 1\n"}, "", ["--pre-include=pre.h"], None,
        ("pre.h", "#define V 2\n")),
    "symlinked header whose includes sit beside the link": (
        {"real/t.h": '#include "beside.h"\n', "real/beside.h": "#define V 9\n",
         "inc/beside.h": "#define V 1\n", "inc/t.h": "@../real/t.h"},
        "#include <t.h>\n", ["-Iinc"], None, ("inc/beside.h", "#define V 2\n")),
    "header found through the process's current folder": (
        {"cwdh.h": "#define V 1\n", "nb/.keep": ""}, '#include "cwdh.h"\n', [], "nb",
        ("cwdh.h", "#define V 2\n")),
    "header number 1001 of a chain": (
        _chain(CHAIN), '#include "chain/h0.h"\n', [], None,
        (f"chain/h{CHAIN}.h", "#define V 2\n")),
    "__has_include of a name a macro gives": (
        {}, '#define OPT "opt.h"\n#if __has_include(OPT)\n#include OPT\n#else\n#define V 1\n'
            '#endif\n', [], None, ("opt.h", "#define V 2\n")),
    "__has_include spelled across a line splice": (
        {}, '#if __has_include\\\n("later2.h")\n#include "later2.h"\n#else\n#define V 1\n'
            '#endif\n', [], None, ("later2.h", "#define V 2\n")),
    "in-place edit inside an installed package (same size)": (
        {}, "#include <tkedit.h>\n", [], None, ("cudahome/include/tkedit.h", "#define V 2\n")),
}

CHILD = r"""
import json, os, sys
import cudamagic
root, phase, cache = sys.argv[1], sys.argv[2], sys.argv[3]
out = {}
for label, (folder, src, options, base) in json.loads(open(os.path.join(root, "cases.json")).read()).items():
    folder = os.path.join(root, folder)
    os.chdir(folder)
    kw = dict(options=options, base_dir=os.path.join(folder, base) if base else None)
    mod = cudamagic.build(src, [], cache=cache, **kw)
    res = {"hit": mod.hit, "reason": mod.report.miss_reason}
    if phase == "edited":
        res["same_as_uncached"] = mod.cubin == cudamagic.build(src, [], use_cache=False, **kw).cubin
    out[label] = res
print(json.dumps(out))
"""


def _written_before(tmp_path: Path, files: dict[str, str]) -> Path:
    """``tmp_path/lib`` with ``files``, each dated 5 s back (written well before any build)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    _write(lib, files)
    for f in lib.iterdir():
        past = f.stat().st_mtime - 5
        os.utime(f, (past, past))
    return lib


def _write(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if text.startswith("@"):
            path.symlink_to(text[1:])
        else:
            path.write_text(text)


def _toolkit_home(root: Path) -> Path:
    """A CUDA_HOME whose include folder is the toolkit's (entries linked) plus tkedit.h: the
    toolkit folder every build searches, checked by size and time as an installed package."""
    from cudamagic.core.toolkit import toolkit

    real = next(Path(d) for d in toolkit().include_dirs if (Path(d) / "cuda_fp16.h").is_file())
    inc = root / "cudahome" / "include"
    inc.mkdir(parents=True)
    for entry in real.iterdir():
        (inc / entry.name).symlink_to(entry)
    (inc / "tkedit.h").write_text("#define V 1\n")
    return root / "cudahome"


def test_stale_header_corpus(tmp_path):
    cases = {}
    for i, (label, (files, src, options, base, _)) in enumerate(CASES.items()):
        (tmp_path / f"case{i}").mkdir()
        _write(tmp_path / f"case{i}", files)
        cases[label] = (f"case{i}", src + KERN, options, base)
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    env = {"CUDA_HOME": str(_toolkit_home(tmp_path))}

    def run(phase: str) -> dict:
        out = run_python(CHILD.replace("sys.argv[1], sys.argv[2], sys.argv[3]",
                                       f"{str(tmp_path)!r}, {phase!r}, {str(tmp_path / 'cache')!r}"),
                         env=env, timeout=900)
        return json.loads(out.strip().splitlines()[-1])

    first = run("first")
    assert not any(r["hit"] for r in first.values()), first
    again = run("again")  # a kernel restart, nothing changed: every case is a hit
    assert {label: r["hit"] for label, r in again.items()} == {label: True for label in CASES}
    for i, (label, (*_, (rel, text))) in enumerate(CASES.items()):
        path = tmp_path / ("" if rel.startswith("cudahome") else f"case{i}") / rel
        path.write_text(text)
    edited = run("edited")
    wrong = {label: r for label, r in edited.items() if r["hit"] or not r["same_as_uncached"]}
    print(f"\nstale-header corpus: {len(CASES)} spellings, {len(CASES) - len(wrong)} rebuilt "
          f"after the edit, {len(wrong)} served stale")
    assert not wrong, wrong
    print("\n".join(f"  {label}: {r['reason']}" for label, r in edited.items()))


def _trace(*events) -> str:
    return json.dumps({"traceEvents": [
        {"name": "Processing Header File", "ts": ts, "dur": dur, "args": {"detail": path}}
        for ts, dur, path in events] + [{"name": "Other", "ts": 0, "dur": 9}]})


def test_trace_nesting_gives_each_headers_includer():
    trace = _trace((10, 100, "/a/outer.h"), (20, 10, "/a/inner.h"), (40, 5, "/b/x.h"),
                   (200, 5, "cwd.h"), (1, 2, "__nv_nvrtc_builtin_header.h"))
    assert deps.trace_headers(trace) == [("/a/outer.h", None, 10), ("/a/inner.h", "/a/outer.h", 20),
                                         ("/b/x.h", "/a/outer.h", 40), ("cwd.h", None, 200)]


def _manifest(tmp_path: Path, opened, include_dirs=(), versioned=()) -> deps.Manifest:
    search = deps.SearchPath(str(tmp_path), tuple(include_dirs), tuple(versioned))
    return deps.from_trace(opened, search, "")


def test_a_touch_is_not_a_change_an_edit_is(tmp_path):
    (tmp_path / "h.h").write_text("#define V 1\n")
    m = _manifest(tmp_path, [("h.h", None)])
    assert m.check() is None
    os.utime(tmp_path / "h.h", ns=(1, 1))
    assert m.check() is None  # same content
    (tmp_path / "h.h").write_text("#define V 2\n")
    assert "changed" in m.check().detail
    (tmp_path / "h.h").unlink()
    assert "gone" in m.check().detail


def test_a_versioned_file_is_checked_by_size_and_time(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "p.h").write_text("#define V 1\n")
    m = _manifest(tmp_path, [(str(pkg / "p.h"), None)], [str(pkg)], [str(pkg)])
    assert m.files[0].sha256 is not None  # for a check where the entry was not made
    st = (pkg / "p.h").stat()
    (pkg / "p.h").write_text("#define V 2\n")  # same size
    os.utime(pkg / "p.h", ns=(st.st_atime_ns, st.st_mtime_ns + 1000))
    assert "changed" in m.check().detail


def test_a_file_appearing_earlier_in_the_search_misses(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    (tmp_path / "b" / "x.h").write_text("//b\n")
    m = _manifest(tmp_path, [(str(tmp_path / "b" / "x.h"), None)],
                  [str(tmp_path / "a"), str(tmp_path / "b")])
    (tmp_path / "unrelated.txt").write_text("")  # the folder changes; no shadow appears
    assert m.check() is None
    (tmp_path / "a" / "x.h").write_text("//a\n")
    assert "now exists" in m.check().detail


@pytest.mark.parametrize("compact", [True, False])
def test_the_manifest_survives_json(tmp_path, compact):
    (tmp_path / "h.h").write_text("x")
    m = _manifest(tmp_path, [("h.h", None)], [str(tmp_path / "inc")])
    back = deps.Manifest.from_json(json.loads(json.dumps(m.to_json())))
    assert back == m
    with pytest.raises(ValueError):
        deps.Manifest.from_json({"version": 1, "files": [["x"]]})


@pytest.mark.parametrize("source, options, no_files", [
    ('extern "C" __global__ void k(int* x) { x[0] = 1; }', [], True),
    ('#include "x.h"\n', [], False),
    ('%:include "x.h"\n', [], False),
    ('#inc\\\nlude "x.h"\n', [], False),              # a line splice inside the word
    ('#define H <x.h>\n#include H\n', [], False),
    ('#if __has_include(<x.h>)\n#endif\n', [], False),
    ("__global__ void k() {}", ["--pre-include=pre.h"], False),
    ("__global__ void k() {}", ["-include", "pre.h"], False),
    ("__global__ void k() {}", ["-I/usr/include"], True),  # a folder is no file read
])
def test_a_compile_that_can_open_no_file_needs_no_trace(source, options, no_files):
    assert deps.reads_no_file(source, options) is no_files


def test_an_include_free_cell_is_compiled_without_the_trace(cache, compiler):
    from cudamagic.core.options import options_from_args
    from cudamagic.pipeline.steps import build_module

    calls = []

    def watched(*args, **kw):
        calls.append(kw.get("trace"))
        return compiler(*args, **kw)

    build_module('extern "C" __global__ void k(int* x) { x[0] = 1; }',
                 options_from_args([], []), cache=cache, compiler=watched)
    build_module('#include <cuda/std/cstdint>\nextern "C" __global__ void k(int* x) {}',
                 options_from_args([], []), cache=cache, compiler=watched)
    assert calls == [False, True]


def test_a_header_swapped_for_one_of_the_same_size_and_time_misses(tmp_path):
    """``cp -p``, a switched link, two writes within one clock tick: same size and mtime, other
    text. A user header is checked by its content."""
    (tmp_path / "h.h").write_text("#define V 1\n")
    m = _manifest(tmp_path, [("h.h", None)])
    st = (tmp_path / "h.h").stat()
    (tmp_path / "h.h").write_text("#define V 2\n")
    os.utime(tmp_path / "h.h", ns=(st.st_atime_ns, st.st_mtime_ns))  # as cp -p leaves it
    assert "changed" in m.check().detail
    # a link switched between two files of one size and time
    for name, text in (("v1.h", "#define V 1\n"), ("v2.h", "#define V 2\n")):
        (tmp_path / name).write_text(text)
        os.utime(tmp_path / name, ns=(1, 1))
    (tmp_path / "cfg.h").symlink_to("v1.h")
    m = _manifest(tmp_path, [("cfg.h", None)])
    (tmp_path / "cfg.h").unlink()
    (tmp_path / "cfg.h").symlink_to("v2.h")
    assert "changed" in m.check().detail


def test_a_header_changed_while_compiling_is_not_stored(cache, compiler, tmp_path, monkeypatch):
    """The manifest is taken after NVRTC ran: a header saved meanwhile would be recorded with
    its new text beside a CUBIN of the old one. Such a build is not stored."""
    from cudamagic.core.options import options_from_args
    from cudamagic.pipeline.steps import build_module

    monkeypatch.chdir(tmp_path)
    (tmp_path / "v.h").write_text("#define V 1\n")
    src = '#include "v.h"\n' + KERN

    def edits_during_the_compile(*args, **kw):
        result = compiler(*args, **kw)  # NVRTC read V 1
        (tmp_path / "v.h").write_text("#define V 2\n")
        return result

    first = build_module(src, options_from_args([], []), cache=cache,
                         compiler=edits_during_the_compile)
    assert any("not cached" in w and "v.h" in w for w in first.warnings)
    assert len(cache) == 0
    again = build_module(src, options_from_args([], []), cache=cache, compiler=compiler)
    assert not again.hit and again.cubin != first.cubin  # V 2 now


@pytest.mark.parametrize("gap_ms, opened_ms, racy", [
    (0.5, 0.0, True), (2, 1, True), (5, 2, True), (8, 1, True),   # saved just before
    (-3, 1, True), (-20, 30, True),                                # saved during the compile
    (12, 0, False), (50, 5, False), (1000, 25, False),             # saved before, as users do
])
def test_a_header_saved_within_the_clock_resolution_of_the_compile_is_not_certain(
        tmp_path, gap_ms, opened_ms, racy):
    """The rule the pipeline does not store by: a header whose modification or change time is
    within :data:`deps.RACY_NS` before NVRTC opened it (file times lag the clock) or after."""
    (tmp_path / "h.h").write_text("#define V 1\n")
    st = (tmp_path / "h.h").stat()
    saved = max(st.st_mtime_ns, st.st_ctime_ns)
    started = saved + int(gap_ms * 1e6)  # the compile started gap_ms after the save
    search = deps.SearchPath(str(tmp_path), ())
    m = deps.from_trace([("h.h", None, opened_ms * 1000)], search, "", started)
    assert (m.racy is not None) is racy, (gap_ms, opened_ms, m.racy)


def _every_leaf(data, path=()):
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _every_leaf(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _every_leaf(v, (*path, i))
    yield path


def _replaced(data, path, value):
    if not path:
        return value
    out = copy.deepcopy(data)
    holder = out
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = value
    return out


CRAFTED = [0, 3, -1, 2**70, 1.5, float("inf"), None, True, "", "\0", "x" * 5000, [], [0], {}, {"a": 1}]


def test_a_crafted_manifest_is_a_clean_miss_never_an_exception(tmp_path):
    """Every field of a stored manifest replaced by each kind of JSON value (an integer where a
    folder belongs: the check would stat or open a file descriptor): the reader refuses it as
    of another version, or its check says why it does not serve, or it serves; nothing else."""
    for d in ("inc", "pkg"):
        (tmp_path / d).mkdir()
    (tmp_path / "inc" / "h.h").write_text('#if __has_include(OPT)\n#endif\n')
    (tmp_path / "pkg" / "p.h").write_text("\n")
    search = deps.SearchPath(str(tmp_path), (str(tmp_path / "pkg"), str(tmp_path / "inc")),
                             (str(tmp_path / "pkg"),))
    source = '#if __has_include("opt.h")\n#endif\n'
    real = deps.from_trace([(str(tmp_path / "inc" / "h.h"), None),
                            (str(tmp_path / "pkg" / "p.h"), None)], search, source).to_json()
    assert real["files"] and real["absent"] and real["watched"]
    assert deps.Manifest.from_json(copy.deepcopy(real)).check() is None
    tried = 0
    for path in _every_leaf(real):
        for value in CRAFTED:
            crafted = _replaced(real, path, value)
            tried += 1
            try:
                manifest = deps.Manifest.from_json(crafted)
            except ValueError:
                continue
            said = manifest.check()  # a Miss or None; anything raised fails the test
            # a folder is [root, path], both text; absent and watched name one by its index
            folder_slot = path[:1] == ("folders",) and len(path) == 3
            index_slot = path[:1] in (("absent",), ("watched",)) and path[2:] == (0,)
            if folder_slot and not isinstance(value, str) or index_slot and type(value) is not int:
                assert said is not None and said.kind.value == "damaged", (path, value, said)
    assert tried > 300


DAY_NS = 86_400 * 10**9


@pytest.mark.parametrize("ahead_ns", [DAY_NS, 365 * DAY_NS, 30 * 365 * DAY_NS])
def test_a_header_with_a_future_mtime_is_cached(cache, compiler, tmp_path, monkeypatch, ahead_ns):
    """A header whose modification time is ahead of the clock (a tarball from a machine whose
    clock ran ahead, ``touch -d``, a network folder's server time) did not change while the cell
    compiled: the build is stored and the next one is a hit."""
    import time

    from cudamagic.core.options import options_from_args
    from cudamagic.pipeline.steps import build_module

    monkeypatch.chdir(tmp_path)
    (tmp_path / "v.h").write_text("#define V 1\n")
    future = time.time_ns() + ahead_ns
    os.utime(tmp_path / "v.h", ns=(future, future))
    time.sleep(2 * deps.RACY_NS / 1e9)  # the utime (its ctime) is well before the compile
    src = '#include "v.h"\n' + KERN
    first = build_module(src, options_from_args([], []), cache=cache, compiler=compiler)
    assert not any("not cached" in w for w in first.warnings), first.warnings
    again = build_module(src, options_from_args([], []), cache=cache, compiler=compiler)
    assert again.hit and again.cubin == first.cubin


def test_a_header_with_a_future_mtime_edited_while_compiling_is_not_stored(
        cache, compiler, tmp_path, monkeypatch):
    """Its change time still says when it really changed: an edit during the compile that keeps
    the future modification time (an editor that restores it, ``touch -d`` again) is doubted."""
    import time

    from cudamagic.core.options import options_from_args
    from cudamagic.pipeline.steps import build_module

    monkeypatch.chdir(tmp_path)
    (tmp_path / "v.h").write_text("#define V 1\n")
    future = time.time_ns() + DAY_NS
    os.utime(tmp_path / "v.h", ns=(future, future))
    time.sleep(2 * deps.RACY_NS / 1e9)

    def edits_during_the_compile(*args, **kw):
        result = compiler(*args, **kw)
        (tmp_path / "v.h").write_text("#define V 2\n")
        os.utime(tmp_path / "v.h", ns=(future, future))
        return result

    first = build_module('#include "v.h"\n' + KERN, options_from_args([], []), cache=cache,
                         compiler=edits_during_the_compile)
    assert any("not cached" in w and "v.h" in w for w in first.warnings)
    assert len(cache) == 0


# --- angle shadow ---
# A new file beside the cell (or beside a header) shadows only an include NVRTC would have
# looked for there: a quoted one. ``#include <ops.h>`` through ``-Iinc`` never searches the
# current folder, so a new ``./ops.h`` keeps the entry serving (issue 31 item 5: it was a miss
# said to "shadow" the header).
import pytest

import cudamagic
from cudamagic.store import KernelCache

KERN_angle_shadow = 'extern "C" __global__ void k(int* x) { x[0] = V; }\n'

# label: (files, cell source, the new file, whether the next build must still hit)
CASES_angle_shadow = {
    "angle include from the cell, new ./ops.h": (
        {"inc/ops.h": "#define V 1\n"}, "#include <ops.h>\n", "ops.h", True),
    "quoted include from the cell, new ./ops.h": (
        {"inc/ops.h": "#define V 1\n"}, '#include "ops.h"\n', "ops.h", False),
    "angle include from a header, new file beside that header": (
        {"inc/sub/a.h": "#include <b.h>\n", "inc/b.h": "#define V 1\n"},
        "#include <sub/a.h>\n", "inc/sub/b.h", True),
}


@pytest.mark.parametrize("label", list(CASES_angle_shadow))
def test_only_a_place_searched_for_that_include_form_shadows(tmp_path, monkeypatch, label):
    files, src, new, hits = CASES_angle_shadow[label]
    monkeypatch.chdir(tmp_path)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    cache = KernelCache(tmp_path / "cache")
    assert not cudamagic.build(src + KERN_angle_shadow, options=["-Iinc"], cache=cache).hit
    (tmp_path / new).write_text("#define V 2\n")
    again = cudamagic.build(src + KERN_angle_shadow, options=["-Iinc"], cache=cache)
    assert again.hit is hits, again.report.miss_reason
    uncached = cudamagic.build(src + KERN_angle_shadow, options=["-Iinc"], use_cache=False)
    assert again.cubin == uncached.cubin  # what was served is what NVRTC builds now
    cache.close()


# --- What the search's own folders held as the compile started (issue 27 C) ---
# from_trace told a name a __has_include tested and found, then removed before the compile
# ended, from any other file written there only by the folder's time: with -I. in a folder
# that anything writes into, no build was ever stored. The listing taken before the compile
# tells them apart; where there is none (not given, a folder past the limit) the folder's time
# still decides.
TESTS_NAMES = '#if __has_include(<later.h>)\n#endif\n#if __has_include(<sub/t.h>)\n#endif\n'


def _atomic(path: Path, text: str) -> None:
    path.with_name(path.name + ".tmp").write_text(text)
    os.replace(path.with_name(path.name + ".tmp"), path)


def _retarget(root: Path) -> None:
    (root / "lnk").unlink()
    (root / "lnk").symlink_to(root / "b")


# label: (files before, change during the compile, -I folder, listed, racy)
LISTED = {
    "an unrelated file written": ((), lambda r: (r / "nb" / "out.txt").write_text("1"),
                                  "nb", True, False),
    "an unrelated file saved atomically": ((), lambda r: _atomic(r / "nb" / "m.pt", "w"),
                                           "nb", True, False),
    "an unrelated file removed": ((), lambda r: (r / "nb" / "data.csv").unlink(), "nb", True,
                                  False),
    "an unrelated folder made": ((), lambda r: (r / "nb" / "out").mkdir(), "nb", True, False),
    "the tested name removed": (("nb/later.h",), lambda r: (r / "nb" / "later.h").unlink(),
                                "nb", True, True),
    "the tested name saved atomically": (("nb/later.h",),
                                         lambda r: _atomic(r / "nb" / "later.h", "\n"), "nb",
                                         True, True),
    "the tested name created": ((), lambda r: (r / "nb" / "later.h").write_text("\n"), "nb",
                                True, True),
    "a tested name's folder made": ((), lambda r: (r / "nb" / "sub").mkdir(), "nb", True,
                                    True),
    "an unrelated file written, no listing": (
        (), lambda r: (r / "nb" / "out.txt").write_text("1"), "nb", False, True),
    "an unrelated file written, a folder past the listing limit": (
        ("nb/a", "nb/b"), lambda r: (r / "nb" / "out.txt").write_text("1"), "nb", "limit", True),
    "the -I link retargeted away from the tested name": (
        ("a/later.h", "b/x"), _retarget, "lnk", True, True),
}


@pytest.mark.parametrize("label", list(LISTED))
def test_only_a_tested_name_changing_during_the_compile_is_a_doubt(tmp_path, monkeypatch,
                                                                   label):
    import time

    files, change, include, listed, racy = LISTED[label]
    for name in ("nb/data.csv", *files):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("\n")
    (tmp_path / "lnk").symlink_to(tmp_path / "a", target_is_directory=True)
    search = deps.SearchPath(str(tmp_path / "nb"), (str(tmp_path / include),))
    if listed == "limit":
        monkeypatch.setattr(deps, "LISTING_LIMIT", 2)
    time.sleep(2 * deps.RACY_NS / 1e9)
    before = deps.list_search_folders(search) if listed else None
    started = time.time_ns()
    change(tmp_path)
    m = deps.from_trace([], search, TESTS_NAMES, started, before)
    assert (m.racy is not None) is racy, (label, m.racy)


def test_the_listing_holds_the_searchs_own_folders_once(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "x.h").write_text("\n")
    search = deps.SearchPath(str(tmp_path), (str(tmp_path), str(tmp_path / "pkg"),
                                             str(tmp_path / "none")), (str(tmp_path / "pkg"),))
    listed = deps.list_search_folders(search)
    assert list(listed) == [str(tmp_path)]  # the package's folder and a missing one are not
    assert listed[str(tmp_path)].entries["x.h"][1] is False
    assert listed[str(tmp_path)].entries["pkg"] == ((tmp_path / "pkg").stat().st_ino, True)


def test_the_listing_stops_at_its_limit_over_all_folders(tmp_path, monkeypatch):
    """Many -I folders cannot make the listing before a compile long: the limit counts the
    entries of all folders together; a folder past it is not listed (the old rule there)."""
    for name in ("a/1", "a/2", "b/1", "b/2", "c/1"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    monkeypatch.setattr(deps, "LISTING_LIMIT", 3)
    search = deps.SearchPath(str(tmp_path / "a"), (str(tmp_path / "b"), str(tmp_path / "c")))
    assert list(deps.list_search_folders(search)) == [str(tmp_path / "a"), str(tmp_path / "c")]


def _rewrite_keeping_times(path: Path, text: str) -> None:
    """New content of the same size, the modification time put back (``cp -p``, an editor
    that keeps times): only the change time says it changed."""
    st = path.stat()
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _replace_keeping_times(path: Path, text: str) -> None:
    """A new file renamed over it, of the same size and modification time (an atomic save)."""
    st = path.stat()
    new = path.with_name(path.name + ".new")
    new.write_text(text)
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    new.replace(path)


@pytest.mark.parametrize("change", [_rewrite_keeping_times, _replace_keeping_times])
def test_a_header_changed_between_misses_is_hashed_again_whatever_its_size_and_mtime(
        tmp_path, monkeypatch, cache, change):
    """A miss reuses the sha256 this process took of a header whose stat is unchanged
    (deps._DIGESTS); a header rewritten between two edits of the cell with its size and
    modification time kept must be hashed again: the entry must hold the new content's
    digest, and a hit must serve the new CUBIN."""
    import hashlib
    import time

    import cudamagic
    from cudamagic.toolchain.compile.manifest import Manifest

    monkeypatch.chdir(tmp_path)
    header = tmp_path / "v.h"
    header.write_text("#define V 1\n")
    time.sleep(2 * deps.RACY_NS / 1e9)  # settled: this process may keep its digest

    def build(edit: int):
        return cudamagic.build(f'#include "v.h"\n// edit {edit}\n' + KERN, cache=cache,
                               base_dir=tmp_path)

    first = build(1)
    record, _ = cache.get(first.key)
    kept = {Path(f.path).name: f.sha256 for f in Manifest.from_json(record.manifest).files}
    assert kept["v.h"] == hashlib.sha256(b"#define V 1\n").hexdigest()
    change(header, "#define V 7\n")
    time.sleep(2 * deps.RACY_NS / 1e9)
    second = build(2)  # an edit of the cell: a miss that reads v.h again
    record, _ = cache.get(second.key)
    kept = {Path(f.path).name: f.sha256 for f in Manifest.from_json(record.manifest).files}
    assert kept["v.h"] == hashlib.sha256(b"#define V 7\n").hexdigest()
    fresh = cudamagic.build(f'#include "v.h"\n// edit 2\n' + KERN, use_cache=False,
                            base_dir=tmp_path)
    assert second.cubin == fresh.cubin != first.cubin
    again = build(2)
    assert again.hit and again.cubin == fresh.cubin


_BROKEN_TRACE_CHILD = r"""
import os, sys, warnings
import cudamagic
from cudamagic.errors import CompileError
from cudamagic.toolchain.compile.nvrtc import compile_cubin
warnings.simplefilter("ignore")
folder, cache = sys.argv[1], sys.argv[2]
os.chdir(folder)
body = '__global__ void k(int* p) { p[0] = A + B + C + %d; }\n'
cells = {"cell": '#include "a.h"\n#include "c.h"\n' + body,  # the PCH holds both headers
         # the PCH holds <a.h>; <c.h> comes after it (NVRTC opens it in each compile)
         "angle": '#include <a.h>\n__device__ int after;\n#include <c.h>\n' + body,
         "other": '#include "c.h"\n#include "a.h"\n' + body}  # no PCH before the break


def build(name, n):
    return cudamagic.build(cells[name] % n, cache=cache, options=["-Ilib"])


def pch(m):
    return m.report.pch is not None and m.report.pch[0].value


def said(m):
    return any("broken in this process" in w for w in m.report.warnings)


print("before:", pch(build("cell", 1)), pch(build("angle", 1)))
try:
    cudamagic.build('#include "bad.h"\n__global__ void k() {}\n', cache=cache,
                    options=["-Ilib"])
except CompileError as exc:
    print("failed:", "missing.h" in str(exc))
print("broken:", compile_cubin("__global__ void z() {}\n", [], ["-arch=sm_90"]).trace_broken)
for name in cells:
    m = build(name, 2)
    print(f"{name}:", pch(m), said(m))
print("hits:", *(build(name, 2).hit for name in cells))
with open("lib/c.h", "w") as f:  # a header a broken trace leaves out
    f.write("#pragma once\n#define C 4\n")  # the same size
past = os.stat("lib/b.h").st_mtime
os.utime("lib/c.h", (past, past))
print("edited:", *(build(name, 2).hit for name in cells))
"""


def test_a_trace_nvrtc_broke_is_not_taken_as_the_list_of_headers(tmp_path):
    """After a compile fails inside a header, NVRTC's traces leave headers out (docs/cache.md,
    'After a compile fails inside a header'): real NVRTC, in a child. A precompiled header made before still
    serves its header set, and its record lists its headers: such a build is cached. A build
    whose trace is broken (a header opened after the PCH's part, or another header set) is not
    cached, says why, and makes no precompiled header; an edit of a header a broken trace
    leaves out is a miss for every cell."""
    _written_before(tmp_path, {
        "a.h": '#pragma once\n#include "b.h"\n#define A 1\n',
        "b.h": "#pragma once\n#define B 2\n", "c.h": "#pragma once\n#define C 3\n",
        "bad.h": '#pragma once\n#include "missing.h"\n'})
    code = _BROKEN_TRACE_CHILD.replace("sys.argv[1]", repr(str(tmp_path))).replace(
        "sys.argv[2]", repr(str(tmp_path / "cache")))
    out = run_python(code, timeout=240).strip().splitlines()
    assert out[:2] == ["before: made made", "failed: True"], out
    # NVRTC 13.5 breaks it; where an NVRTC does not, every build is cached as usual
    if out[2] == "broken: True":
        assert out[3:] == ["cell: used False", "angle: used True", "other: False True",
                           "hits: True False False", "edited: False False False"], out
    else:
        assert out[3:] == ["cell: used False", "angle: used False", "other: made False",
                           "hits: True True True", "edited: False False False"], out


_RESTART_CHILD = r"""
import os, sys, warnings
import cudamagic
from cudamagic.errors import CompileError
warnings.simplefilter("ignore")
folder, cache, step = sys.argv[1], sys.argv[2], sys.argv[3]
os.chdir(folder)
cell = '#include "c.h"\n__global__ void k(int* p) { p[0] = C; }\n'
if step == "break":
    try:
        # nothing past the include: compiled traced here, not listed in a child
        cudamagic.build('#include "bad.h"\n', cache=cache, options=["-Ilib"])
    except CompileError:
        pass
m = cudamagic.build(cell, cache=cache, options=["-Ilib"])
print(repr((m.report.hit, str(m.report), m.report.warnings)))
"""


def test_a_restarted_kernel_is_not_told_its_list_is_broken(tmp_path):
    """A build not cached because NVRTC's list of headers was broken in its process: the same
    cell in a restarted kernel (a new process, whose list is whole and whose build is
    cached) is told why the last build was not cached, never that the list "is broken in
    this process" and to restart the kernel (planted: the history keeping the report's
    words -> the new process is told to restart)."""
    _written_before(tmp_path, {"c.h": "#pragma once\n#define C 3\n",
                               "bad.h": '#include "missing.h"\n'})

    def child(step: str):
        code = _RESTART_CHILD.replace("sys.argv[1]", repr(str(tmp_path))).replace(
            "sys.argv[2]", repr(str(tmp_path / "cache"))).replace("sys.argv[3]", repr(step))
        return eval(run_python(code, timeout=240).strip().splitlines()[-1])

    hit, _, warned = child("break")
    if not any("broken in this process" in w for w in warned):
        pytest.skip(f"this NVRTC keeps its trace whole after a failed compile: {warned}")
    assert not hit
    hit, shown, warned = child("restarted")  # the report as shown: the miss's reason
    assert not hit and "that build was not cached" in shown, shown
    assert "in this process" not in shown and "restart the kernel" not in shown, shown
    assert not any("broken" in w for w in warned), warned
    assert child("again")[0]  # cached this time


_HEADER_ERROR_CHILD = r"""
import os, sys, warnings
import cudamagic
from cudamagic.errors import CompileError
warnings.simplefilter("ignore")
os.chdir(sys.argv[1])
cache = sys.argv[2]
try:  # code past the include: the header listing runs (and fails) in a forked child
    cudamagic.build('#include "bad.h"\n__global__ void k() {}\n', cache=cache, options=["-Ilib"])
except CompileError as exc:
    print("failed:", "boom" in str(exc))
cell = '#include "c.h"\n__global__ void k(int* p) { p[0] = C; }\n'
for _ in range(2):
    m = cudamagic.build(cell, cache=cache, options=["-Ilib"])
    print("hit:", m.report.hit, any("broken" in w for w in m.report.warnings))
"""


def test_a_cell_failing_inside_a_header_leaves_later_cells_cached(tmp_path):
    """docs/cache.md 'After a compile fails inside a header': a cell with code past its
    include whose header says #error leaves the process's caching whole (its header listing
    failed in a forked child): a later cell with a quoted header, built twice, is a hit the
    second time and is told nothing of a broken list (planted: the listing child not started,
    the cell compiled traced in the process -> the second build is a miss)."""
    _written_before(tmp_path, {"c.h": "#pragma once\n#define C 3\n",
                               "bad.h": "#pragma once\n#error boom\n"})
    code = _HEADER_ERROR_CHILD.replace("sys.argv[1]", repr(str(tmp_path))).replace(
        "sys.argv[2]", repr(str(tmp_path / "cache")))
    out = run_python(code, timeout=240).strip().splitlines()
    assert out[-3:] == ["failed: True", "hit: False False", "hit: True False"], out
