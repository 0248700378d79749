"""A generated corpus of file-system changes between builds, and during one, each build checked
against an uncached compile of the files as they are then.

Every case: build, build again (nothing changed: a hit, where the manifest can be certain),
change the files (or change them while NVRTC runs, through the compiler hook), build: the CUBIN
served must be a fresh uncached compile's; build again: the same, and a hit where it can be.
Cases are made from how a cell reaches its header (quoted, through ``-I``, from another header,
through a macro) crossed with what changes (an edit, an atomic save, a rename over it, a link
replaced by a real header, a folder that becomes a file, a ``__has_include`` target that
becomes a folder, a name that is not UTF-8, a shadowing header or an atomic save in the middle
of the compile).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cudamagic.core.options import options_from_args
from cudamagic.pipeline.steps import build_module
from cudamagic.toolchain.compile.nvrtc import compile_cubin
from tests import test_manifest_corpus as corpus

KERN = '\nextern "C" __global__ void k(int* x) { x[0] = V; }\n'
Op = tuple  # ("write", path, text) | ("symlink", path, target) | ("hardlink", path, target)
#             | ("mkdir", path) | ("rm", path) | ("rename", src, dst) | ("atomic", path, text)


@dataclass(frozen=True)
class Case:
    """Files, a cell and its options; what changes between builds or during one."""

    files: tuple[Op, ...]
    source: str
    options: tuple[str, ...] = ()
    between: tuple[Op, ...] = ()
    during: tuple[Op, ...] = ()   # after NVRTC returns, before the manifest is taken
    after: tuple[Op, ...] = ()    # once that build returned (an atomic save completing)
    certain: bool = True          # False: the manifest cannot be sure, so nothing is stored
    tags: tuple[str, ...] = field(default_factory=tuple)


def _apply(root: Path, ops: tuple[Op, ...]) -> None:
    for op, path, *rest in ops:
        p = root / os.fsdecode(path)
        if op in ("write", "symlink", "hardlink", "mkdir"):
            p.parent.mkdir(parents=True, exist_ok=True)
        if op == "write":
            p.write_text(rest[0])
        elif op == "symlink":
            p.symlink_to(rest[0])
        elif op == "hardlink":
            os.link(root / rest[0], p)
        elif op == "mkdir":
            p.mkdir()
        elif op == "rm":
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        elif op == "rename":
            os.replace(p, root / rest[0])
        elif op == "atomic":  # an editor's save: a new file renamed over the old
            tmp = p.with_name(p.name + ".swp")
            tmp.write_text(rest[0])
            os.replace(tmp, p)
        else:  # pragma: no cover
            raise ValueError(op)


# how a cell reaches the header NAME: (files besides it, source, options, folder NAME is in)
def _reaches(name: str) -> dict[str, tuple[tuple[Op, ...], str, tuple[str, ...], str]]:
    return {
        "quoted": ((), f'#include "{name}"\n', (), ""),
        "angle -I": ((("mkdir", "inc"),), f"#include <{name}>\n", ("-Iinc",), "inc/"),
        "from a header": ((("write", "outer.h", f'#include "{name}"\n'),),
                          '#include "outer.h"\n', (), ""),
        "macro": ((), f'#define HDR "{name}"\n#include HDR\n', (), ""),
    }


def _twice(reach: str, a: str, b: str) -> str:
    """A source that includes ``a`` then ``b`` the way ``reach`` does."""
    return {"quoted": f'#include "{a}"\n#include "{b}"\n',
            "angle -I": f"#include <{a}>\n#include <{b}>\n",
            "from a header": '#include "outer.h"\n',
            "macro": f'#define HA "{a}"\n#define HB "{b}"\n#include HA\n#include HB\n'}[reach]


def _corpus() -> dict[str, Case]:
    cases: dict[str, Case] = {}
    for reach, (extra, src, opts, at) in _reaches("v.h").items():
        h = at + "v.h"
        base = (*extra, ("write", h, "#define V 1\n"))
        cases[f"{reach}: edit"] = Case(base, src, opts, (("write", h, "#define V 2\n"),))
        cases[f"{reach}: atomic save"] = Case(base, src, opts, (("atomic", h, "#define V 2\n"),))
        cases[f"{reach}: renamed over"] = Case(
            (*base, ("write", at + "new.h", "#define V 3\n")), src, opts,
            (("rename", at + "new.h", h),))
        cases[f"{reach}: removed, then back"] = Case(
            base, src, opts, (("rm", h), ("write", h, "#define V 4\n")))
        cases[f"{reach}: symbolic link retargeted"] = Case(
            (*extra, ("write", at + "v1.h", "#define V 1\n"),
             ("write", at + "v2.h", "#define V 2\n"), ("symlink", h, "v1.h")), src, opts,
            (("rm", h), ("symlink", h, "v2.h")))
        cases[f"{reach}: atomic save during the compile"] = Case(
            base, src, opts, during=(("rename", h, at + "away.h"),),
            after=(("write", h, "#define V 5\n"),), certain=True)
        # the same header reached a second time through a link, skipped by its guard
        for link, guard in (("symlink", "#pragma once\n"),
                            ("hardlink", "#ifndef VH\n#define VH\n")):
            end = "#endif\n" if guard.startswith("#ifndef") else ""
            target = "v.h" if link == "symlink" else at + "v.h"
            outer = (("write", "outer.h", f'#include "v.h"\n#include "w.h"\n'),) \
                if reach == "from a header" else ()
            files = (*[e for e in extra if e[1] != "outer.h"], *outer,
                     ("write", h, guard + "#define V 1\n" + end), (link, at + "w.h", target))
            cases[f"{reach}: {link} reached twice, then a real header"] = Case(
                files, _twice(reach, "v.h", "w.h"), opts,
                (("rm", at + "w.h"), ("write", at + "w.h", "#undef V\n#define V 6\n")))
    # a folder where the search looks first (NVRTC passes over it), then a file there
    for first, opts in (("", ("-Iinc",)), ("inc1/", ("-Iinc1", "-Iinc2"))):
        src = '#include "s.h"\n' if not first else "#include <s.h>\n"
        last = "inc/" if not first else "inc2/"
        files = (("mkdir", last), ("write", last + "s.h", "#define V 1\n"),
                 ("mkdir", first + "s.h"))
        cases[f"folder at {first or 'the cell'}'s place becomes a shadowing file"] = Case(
            files, src, opts, (("rm", first + "s.h"), ("write", first + "s.h", "#define V 7\n")))
        cases[f"shadowing header renamed into {first or 'the cell'}'s place"] = Case(
            (*files[:2], ("mkdir", first or "x"), ("write", "x/t.h", "#define V 8\n")), src, opts,
            (("rename", "x/t.h", first + "s.h"),))
        cases[f"shadowing header created during the compile in {first or 'the cell'}'s place"] \
            = Case(files[:2], src, opts, during=(("write", first + "s.h", "#define V 9\n"),))
    probe = '#if __has_include("p.h")\n#define V 1\n#else\n#define V 2\n#endif\n'
    cases["__has_include of a file that becomes a folder"] = Case(
        (("write", "p.h", "\n"),), probe, (), (("rm", "p.h"), ("mkdir", "p.h")))
    cases["__has_include of a folder that becomes a file"] = Case(
        (("mkdir", "p.h"),), probe, (), (("rm", "p.h"), ("write", "p.h", "\n")))
    cases["__has_include target created during the compile"] = Case(
        (), probe, (), during=(("write", "p.h", "\n"),))
    cases["__has_include target removed during the compile"] = Case(
        (("write", "p.h", "\n"),), probe, (), during=(("rm", "p.h"),))
    odd = os.fsdecode(b"\xff\xfe.h")
    cases["a header name that is not UTF-8, edited"] = Case(
        (("write", "a.h", ""), ("write", odd, "#define V 1\n")), '#include "a.h"\n', (),
        (("write", odd, "#define V 2\n"),), certain=False)
    return cases


CORPUS = _corpus()


def _odd_header(root: Path) -> None:
    """a.h includes the non-UTF-8 name by its bytes (a cell's text is UTF-8: it cannot)."""
    (root / "a.h").write_bytes(b'#include "\xff\xfe.h"\n')


@pytest.mark.parametrize("label", list(CORPUS))
def test_each_change_serves_what_an_uncached_compile_makes(label, tmp_path, cache,
                                                          monkeypatch):
    case = CORPUS[label]
    root = tmp_path / "cell"
    root.mkdir()
    _apply(root, case.files)
    if "not UTF-8" in label:
        _odd_header(root)
    _past(root)
    monkeypatch.chdir(root)
    source = case.source + KERN
    opts = options_from_args(list(case.options), [])
    during: list[tuple[Op, ...]] = []

    def compiler(*args, **kw):
        result = compile_cubin(*args, **kw)
        if during:
            _apply(root, during.pop())
        return result

    def build():
        return build_module(source, opts, cache=cache, base_dir=root, compiler=compiler)

    def fresh() -> bytes:
        return build_module(source, dataclasses.replace(opts, no_cache=True),
                            base_dir=root).cubin

    first = build()
    assert first.cubin == fresh()
    again = build()
    assert again.hit is case.certain, (label, first.warnings, again.report.miss_reason)
    _apply(root, case.between)
    if case.during:  # the files change while a miss compiles
        cache.delete(first.key)
        during.append(case.during)
        assert not build().hit
        _apply(root, case.after)
    _past(root)
    served = build()
    assert served.cubin == fresh(), (label, served.hit, served.report.miss_reason)
    last = build()
    assert last.cubin == fresh(), label
    assert last.hit is case.certain, (label, served.warnings, last.report.miss_reason)


def _past(root: Path) -> None:
    """Wait out the file system clock's resolution after writing: a header saved within it of
    a compile is (rightly) not stored, and these cases test other rules."""
    import time

    from cudamagic.toolchain.compile.deps import RACY_NS

    time.sleep(2 * RACY_NS / 1e9)


def test_a_deleted_working_folder_is_not_stored(tmp_path):
    """The cell's folder deleted during the compile: the headers read through it cannot be
    checked, so the build is not stored (the manifest says why), never stored without them."""
    from cudamagic.toolchain.compile import deps

    root = tmp_path / "gone"
    root.mkdir()
    (root / "v.h").write_text("#define V 1\n")
    search = deps.SearchPath(str(root), ())
    shutil.rmtree(root)
    m = deps.from_trace([("v.h", None, 1000.0)], search, '#include "v.h"\n')
    assert m.racy and "could not be read" in m.racy


# --------------------------------------------------------------------------------------------------
# More file-system changes between builds, run through test_manifest_corpus's check (each
# build's CUBIN against an uncached compile): folders reached through links, folders renamed
# over folders, chains of links, a header edited in place while NVRTC runs.

V1, V2 = "#define V 1\n", "#define V 2\n"


def _more() -> dict[str, Case]:
    angle = "#include <v.h>\n"
    sub = '#include "sub/v.h"\n'
    return {
        "-I of a symbolic link to a folder, retargeted": Case(
            (("write", "a/v.h", V1), ("write", "b/v.h", V2), ("symlink", "inc", "a")),
            angle, ("-Iinc",), (("rm", "inc"), ("symlink", "inc", "b"))),
        "-I folder renamed away and another renamed over it": Case(
            (("write", "inc/v.h", V1), ("write", "other/v.h", V2)), angle, ("-Iinc",),
            (("rename", "inc", "old"), ("rename", "other", "inc"))),
        "a header's folder, reached through a link, retargeted": Case(
            (("write", "a/v.h", V1), ("write", "b/v.h", V2), ("symlink", "sub", "a")), sub, (),
            (("rm", "sub"), ("symlink", "sub", "b"))),
        "a header's folder renamed over by another": Case(
            (("write", "sub/v.h", V1), ("write", "b/v.h", V2)), sub, (),
            (("rename", "sub", "old"), ("rename", "b", "sub"))),
        "the middle link of a chain retargeted": Case(
            (("write", "r1.h", V1), ("write", "r2.h", V2), ("symlink", "l2.h", "r1.h"),
             ("symlink", "v.h", "l2.h")), '#include "v.h"\n', (),
            (("rm", "l2.h"), ("symlink", "l2.h", "r2.h"))),
        "a link chain's end replaced by a real header": Case(
            (("write", "r1.h", V1), ("symlink", "l2.h", "r1.h"), ("symlink", "v.h", "l2.h")),
            '#include "v.h"\n', (), (("rm", "l2.h"), ("write", "l2.h", V2))),
        "-I folder that was missing is created with the header": Case(
            (("write", "inc2/v.h", V1),), angle, ("-Iinc1", "-Iinc2"),
            (("write", "inc1/v.h", V2),)),
        "a header edited in place during the compile": Case(
            (("write", "v.h", V1),), '#include "v.h"\n', (),
            during=(("write", "v.h", V2),)),
        "a header name differing only in case appears": Case(
            (("write", "inc2/v.h", V1), ("mkdir", "inc1")), angle, ("-Iinc1", "-Iinc2"),
            (("write", "inc1/V.h", V2),)),
    }


MORE = _more()


# --- A folder on the include path that other files are written into (issue 27 C) ---
# `-I.` in a notebook's folder, where cells write their output, Jupyter autosaves the notebook
# and keeps .ipynb_checkpoints, a training run saves checkpoints, a logger appends. Only a name
# the compile looked up there (a header read, a place searched before one, a name a
# __has_include tested) can change what NVRTC read: any other file written, saved or removed
# there while the cell compiles leaves the build stored and the next run a hit; one of those
# names changing, during the compile or after it, is still a miss that compiles afresh.

# v.h is found in inc/ after . was searched for it; later.h and sub/t.h are tested in . (as
# CCCL tests <version>, <cuda_fp16.h>... in every -I folder)
DOT_SOURCE = ('#include <v.h>\n#if __has_include(<later.h>)\n#undef V\n#define V 2\n'
              '#elif __has_include(<sub/t.h>)\n#undef V\n#define V 3\n#endif\n')
DOT_OPTIONS = ("-I.", "-Iinc")
NOTEBOOK: tuple[Op, ...] = (
    ("write", "inc/v.h", V1), ("write", "Untitled.ipynb", "{}"), ("write", "data.csv", "1,2\n"),
    ("write", "run.log", "start\n"), ("write", "outputs/old.npy", "x"))


def _dot() -> dict[str, Case]:
    with_later = (*NOTEBOOK, ("write", "later.h", "\n"))
    with_sub = (*NOTEBOOK, ("write", "sub/t.h", "\n"))
    out = ("write", "out.txt", "1\n")
    return {
        "-I.: __has_include target created during the compile": Case(
            NOTEBOOK, DOT_SOURCE, DOT_OPTIONS, during=(("write", "later.h", "\n"),)),
        "-I.: __has_include target removed during the compile": Case(
            with_later, DOT_SOURCE, DOT_OPTIONS, during=(("rm", "later.h"),)),
        "-I.: __has_include target removed while another file is written": Case(
            with_later, DOT_SOURCE, DOT_OPTIONS, during=(("rm", "later.h"), out)),
        "-I.: __has_include target renamed away during the compile": Case(
            with_later, DOT_SOURCE, DOT_OPTIONS, during=(("rename", "later.h", "later.bak"),)),
        "-I.: __has_include target's folder removed during the compile": Case(
            with_sub, DOT_SOURCE, DOT_OPTIONS, during=(("rm", "sub"), out)),
        "-I.: __has_include target in a folder removed during the compile": Case(
            with_sub, DOT_SOURCE, DOT_OPTIONS, during=(("rm", "sub/t.h"),)),
        "-I.: __has_include target in a folder created during the compile": Case(
            NOTEBOOK, DOT_SOURCE, DOT_OPTIONS, during=(("write", "sub/t.h", "\n"),)),
        "-I.: shadowing header created during the compile": Case(
            NOTEBOOK, DOT_SOURCE, DOT_OPTIONS, during=(("write", "v.h", V2), out)),
        "-I.: shadowing header created later": Case(
            NOTEBOOK, DOT_SOURCE, DOT_OPTIONS, (("write", "v.h", V2),)),
        "-I.: __has_include target created later": Case(
            NOTEBOOK, DOT_SOURCE, DOT_OPTIONS, (("write", "later.h", "\n"),)),
        "-I.: __has_include target removed later": Case(
            with_later, DOT_SOURCE, DOT_OPTIONS, (("rm", "later.h"), out)),
        "-I.: the header read edited later": Case(
            NOTEBOOK, DOT_SOURCE, DOT_OPTIONS, (("write", "inc/v.h", V2), out)),
        "-I.: __has_include(MACRO) target removed during the compile": Case(
            (*NOTEBOOK, ("write", "opt.h", "\n")),
            '#include <v.h>\n#define OPT <opt.h>\n#if __has_include(OPT)\n#undef V\n'
            '#define V 4\n#endif\n', DOT_OPTIONS, during=(("rm", "opt.h"),)),
    }


DOT = _dot()


@pytest.mark.parametrize("label", [*MORE, *DOT])
def test_more_changes_serve_what_an_uncached_compile_makes(label, tmp_path, cache,
                                                            monkeypatch):
    monkeypatch.setitem(corpus.CORPUS, label, {**MORE, **DOT}[label])
    corpus.test_each_change_serves_what_an_uncached_compile_makes(label, tmp_path, cache,
                                                                  monkeypatch)


# --- A manifest naming a special or huge file (from the file that held them alone) ---
# A stored manifest (a team member's remote record, a folder's entry) may name any path: the
# hit's check must never block on a FIFO, read /dev/zero or a file far larger than the header
# it recorded, and answers a miss for each. Each case runs in a child process with a 1 GiB
# address-space limit and a timeout, so the old code fails instead of taking the machine.
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_CHILD = textwrap.dedent("""
    import hashlib, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    from cudamagic.toolchain.compile.manifest import HeaderState, Manifest, SearchPath
    path, size = sys.argv[1], int(sys.argv[2])
    state = HeaderState(path, size, 0, hashlib.sha256(b"#pragma once\\n").hexdigest())
    t = time.perf_counter()
    miss = Manifest([state], search=SearchPath("/", ())).check()
    print(type(miss).__name__, round(time.perf_counter() - t, 3), miss and miss.detail)
""")


def _fifo(tmp: Path) -> str:
    os.mkfifo(tmp / "fifo.h")
    return str(tmp / "fifo.h")


def _sparse(tmp: Path) -> str:  # 4 GiB of holes, recorded as a 13-byte header
    with open(tmp / "big.h", "wb") as f:
        f.truncate(4 << 30)
    return str(tmp / "big.h")


def _sparse_same_size(tmp: Path) -> str:  # recorded at its own (large) size: hashed in pieces
    with open(tmp / "big.h", "wb") as f:
        f.truncate(1152 << 20)
    return str(tmp / "big.h")


CASES = [
    ("a FIFO", _fifo, 13),
    ("/dev/zero", lambda tmp: "/dev/zero", 13),
    ("/dev/zero at size 0", lambda tmp: "/dev/zero", 0),
    ("a directory", lambda tmp: str(tmp), 13),
    ("a 4 GiB file recorded as 13 bytes", _sparse, 13),
    ("a 1.1 GiB file at its size", _sparse_same_size, 1152 << 20),
]


@pytest.mark.parametrize("name, make, size", CASES, ids=[c[0] for c in CASES])
def test_a_manifest_naming_a_special_or_huge_file_is_a_quick_miss(tmp_path, name, make, size):
    path = make(tmp_path)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, path, str(size)], env=env,
                              capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: the check still runs after 30 s")
    assert done.returncode == 0, done.stderr[-2000:]
    kind, seconds, reason = done.stdout.split(" ", 2)
    assert kind == "Miss", done.stdout
    assert "changed" in reason


# what a notebook's folder sees while a cell compiles: none of it a name the compile looked up
UNRELATED: dict[str, tuple[Op, ...]] = {
    "a cell's output file": (("write", "out.txt", "1\n"),),
    "an output folder and a file in it": (("write", "results/data.bin", "x"),),
    "a file written into a folder that was there": (("write", "outputs/new.npy", "x"),),
    "a log rewritten": (("write", "run.log", "start\nstep 1\n"),),
    "a checkpoint saved atomically": (("atomic", "model.pt", "w"),),
    "Jupyter's autosave of the notebook": (("atomic", "Untitled.ipynb", '{"cells": []}'),),
    "Jupyter's first checkpoint": (
        ("write", ".ipynb_checkpoints/Untitled-checkpoint.ipynb", "{}"),),
    "an unrelated file removed": (("rm", "data.csv"),),
    "an unrelated file renamed": (("rename", "data.csv", "data-old.csv"),),
    "a header nothing includes": (("write", "notes.h", "\n"),),
    "all of them": (("write", "out.txt", "1\n"), ("atomic", "model.pt", "w"),
                    ("atomic", "Untitled.ipynb", "{}"), ("rm", "data.csv"),
                    ("write", ".ipynb_checkpoints/Untitled-checkpoint.ipynb", "{}")),
}


@pytest.mark.parametrize("label", list(UNRELATED))
def test_a_file_written_beside_an_include_dot_cell_while_it_compiles_keeps_it_cached(
        label, tmp_path, cache, monkeypatch):
    root = tmp_path / "notebook"
    root.mkdir()
    _apply(root, NOTEBOOK)
    _past(root)
    monkeypatch.chdir(root)
    source, opts = DOT_SOURCE + KERN, options_from_args(list(DOT_OPTIONS), [])

    def writes_while_compiling(*args, **kw):
        result = compile_cubin(*args, **kw)
        _apply(root, UNRELATED[label])
        return result

    first = build_module(source, opts, cache=cache, base_dir=root,
                         compiler=writes_while_compiling)
    assert not first.hit
    assert not any("not cached" in w for w in first.warnings), first.warnings
    again = build_module(source, opts, cache=cache, base_dir=root)
    assert again.hit, again.report.miss_reason
    assert again.cubin == build_module(source, dataclasses.replace(opts, no_cache=True),
                                       base_dir=root).cubin


# another process writing into the notebook's folder the whole time: checkpoints saved
# atomically, numbered outputs, Jupyter's checkpoint; it counts its writes in count.txt
_WRITER = textwrap.dedent("""
    import os, sys, time
    os.chdir(sys.argv[1])
    os.makedirs(".ipynb_checkpoints", exist_ok=True)
    n = 0
    while True:
        with open("model.pt.tmp", "w") as f:
            f.write(str(n))
        os.replace("model.pt.tmp", "model.pt")
        with open(f"out{n}.txt", "w") as f:
            f.write(str(n))
        with open(".ipynb_checkpoints/c.tmp", "w") as f:
            f.write("{}")
        os.replace(".ipynb_checkpoints/c.tmp", ".ipynb_checkpoints/Untitled-checkpoint.ipynb")
        n += 1
        with open("count.tmp", "w") as f:
            f.write(str(n))
        os.replace("count.tmp", "count.txt")
        time.sleep(0.01)
""")


def test_a_cccl_cell_with_include_dot_is_cached_while_another_process_writes_there(
        tmp_path, cache, monkeypatch):
    """The user's case: a CCCL cell with ``-I.`` run twice in a folder another process writes
    into all the while. Before: 'not cached: the folder ..., where a __has_include found
    nothing, changed while the cell compiled' on every run, never a hit."""
    import time

    root = tmp_path / "notebook"
    root.mkdir()
    monkeypatch.chdir(root)
    source = ('#include <cuda/std/array>\nextern "C" __global__ void k(int* x) '
              '{ x[0] = cuda::std::array<int, 2>{1, 2}[1]; }\n')
    opts = options_from_args(["-I."], [])
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(root)])
    try:
        while not (root / "count.txt").exists():
            assert writer.poll() is None, "the writer stopped"
            time.sleep(0.01)
        before = int((root / "count.txt").read_text())
        first = build_module(source, opts, cache=cache, base_dir=root)
        during = int((root / "count.txt").read_text()) - before
        again = build_module(source, opts, cache=cache, base_dir=root)
    finally:
        writer.kill()
        writer.wait()
    assert during > 1, "the other process wrote nothing while the cell compiled"
    assert not any("not cached" in w for w in first.warnings), first.warnings
    assert again.hit, again.report.miss_reason
