"""NVRTC's precompiled headers, kept by the cache (issue 37): real NVRTC, real files.

Most rows use a header library of the test's own (a few hundred templates: its PCH is a few
MB and made in a tenth of a second); one CUB row shows the heap NVRTC needs for CCCL. Every
row compares the kernel's machine code (its CUBIN ``.text`` section) with a compile that had
no PCH at all.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cudamagic
from cudamagic.errors import OptionError
from cudamagic.core.options import parse_magic_line
from cudamagic.pipeline.steps import entry_key
from cudamagic.store.cache import KernelCache
from cudamagic.toolchain.compile import pch
from cudamagic.toolchain.binary.elf import elf_section
from cudamagic.toolchain.binary.image import read_cubin
from cudamagic.toolchain.compile.pch import PchKind

from .conftest import REPO, settled, trace_broken

pytestmark = pytest.mark.skipif(not pch.supported(), reason="this NVRTC makes no PCH (< 12.8)")

LIBRARY = "\n".join(
    ["#pragma once", "#include \"scale.h\"", "namespace lib {"]
    + [f"template <class T, int N> struct S{i} {{ __device__ static T f(T x) {{ T s = 0; "
       f"for (int j = 0; j < N; ++j) s += x * (T)({i} + j); return s; }} }};" for i in range(300)]
    + ["}"]) + "\n"
HEAD = ('#include "lib.h"\n#include "small.h"\n#if __has_include("extra.h")\n'
        '#include "extra.h"\n#endif\n#ifndef EXTRA\n#define EXTRA 1\n#endif\n')
_RUN = random.Random().randrange(1 << 40)  # no process compiled these sources before
_count = iter(range(1, 1 << 30))


def _source(head: str = HEAD) -> str:
    """A new edit of the cell: one constant of its body changed."""
    return head + (f"__global__ void k(float* o) {{ o[0] = lib::S5<float, 4>::f(o[1]) * "
                   f"{_RUN + next(_count)} + SMALLV * SCALE + EXTRA; }}\n")


@pytest.fixture
def lib(tmp_path, monkeypatch, fresh_process):
    """The working folder with the header library in ``lib/`` (``-Ilib``) and an empty
    ``over/`` searched before it (``-Iover``)."""
    tmp_path = tmp_path / "work"
    for name in ("lib", "over", "other"):
        (tmp_path / name).mkdir(parents=True)
    for path, text in [("lib/lib.h", LIBRARY), ("lib/small.h", "#pragma once\n#define SMALLV 3\n"),
                       ("lib/scale.h", "#pragma once\n#ifndef SCALE\n#define SCALE 1\n#endif\n"),
                       ("lib/extra.h", "#pragma once\n#define EXTRA 5\n"),
                       ("other/small.h", "#pragma once\n#define SMALLV 11\n")]:
        _write(tmp_path / path, text)  # written before the first compile, not during it
    for name in ("lib", "over", "other", "."):
        settled(tmp_path / name)
    monkeypatch.chdir(tmp_path)
    _trace_is_whole()
    monkeypatch.delenv(pch.PCH_ENV, raising=False)
    monkeypatch.delenv(pch.LIMIT_ENV, raising=False)
    return tmp_path


BASE = ("-Iover", "-Ilib")


def _trace_is_whole() -> None:
    """These tests need NVRTC's list of the headers it read: an earlier test of this process
    that failed a compile inside a header broke it (docs/cache.md, 'After a compile fails
    inside a header'), which is said here rather than as a mystery further on."""
    assert not trace_broken(), (
        "NVRTC's trace is broken in this process: an earlier test failed a compile inside a "
        "header; run that compile in a child (tests/test_headers.py does)")


def _write(path: Path, text: str) -> None:
    """An edit made a while ago (not during the next compile, which would not be cached)."""
    path.write_text(text)
    settled(path)
    settled(path.parent)


def _code(m) -> dict[str, bytes]:
    """Each kernel's machine code: its CUBIN's ``.text.SYMBOL`` section."""
    return {s: elf_section(m.cubin, b".text." + s.encode()) for s in read_cubin(m.cubin).symbols}


def _plain(source: str, options=BASE, **kw):
    """The same build with no PCH and no cache at all."""
    return cudamagic.build(source, options=list(options), use_cache=False, **kw)


def _build(cache, source: str, options=BASE, **kw):
    return cudamagic.build(source, options=list(options), cache=cache, **kw)


def _kind(m) -> PchKind | None:
    return None if m.report.pch is None else m.report.pch[0]


def _folder(cache: KernelCache) -> Path:
    return Path(cache.pch_folder)


def _only_pch(cache: KernelCache) -> Path:
    (found,) = _folder(cache).glob("*.pch")
    return found


def test_an_edit_starts_from_the_pch_and_says_so(lib, cache):
    first = _build(cache, _source())
    assert _kind(first) is PchKind.MADE
    edit = _source()
    second = _build(cache, edit)
    assert _kind(second) is PchKind.USED
    assert _code(second) == _code(_plain(edit))
    said = dict(second.report.facts)["headers"]
    assert said.startswith("from the precompiled header: compiled in ") and "front end" in said
    assert "precompiled" not in second.report.log  # NVRTC's own lines about it are not shown
    # the PCH is in the cache folder's own folder, nothing in the working folder
    assert _only_pch(cache).parent == Path(cache.directory) / "pch"
    assert sorted(p.name for p in lib.iterdir()) == ["lib", "other", "over"]


def test_the_entry_made_from_the_pch_lists_every_header(lib, cache):
    """A compile that starts from the PCH opens none of its headers (NVRTC's trace names
    none): the entry's manifest must list them anyway, or an edited header would be a hit."""
    _build(cache, _source())
    edit = _source()
    assert _kind(_build(cache, edit)) is PchKind.USED
    assert _build(cache, edit).report.hit
    for header, text in [("small.h", "#pragma once\n#define SMALLV 4\n"),
                         ("scale.h", "#pragma once\n#define SCALE 2\n")]:
        _write(lib / "lib" / header, text)
        again = _build(cache, edit)
        assert not again.report.hit, f"{header} edited, and the entry still served"
        assert _code(again) == _code(_plain(edit))


def test_off_switches_and_the_key(lib, cache, monkeypatch):
    """--no-pch, build(pch=False) and $CUDAMAGIC_PCH=0 compile the headers; the key is the
    same either way (a PCH changes no code), so an entry made without one serves with one."""
    assert parse_magic_line("--no-pch").pch is False and parse_magic_line("").pch is True
    with pytest.raises(OptionError, match="pch must be True or False"):
        cudamagic.build(_source(), pch="no")
    source = _source()
    off = _build(cache, source, pch=False)
    assert off.report.pch is None and not _folder(cache).exists()
    assert _build(cache, source).report.hit  # with the PCH on: the same key
    for pch_on in (True, False):
        opts = parse_magic_line(f"-I over -I lib {'' if pch_on else '--no-pch'}")
        assert entry_key(source, opts)[0] == off.key
    monkeypatch.setenv(pch.PCH_ENV, "0")
    assert _build(cache, _source()).report.pch is None and not _folder(cache).exists()
    monkeypatch.setenv(pch.PCH_ENV, "1")
    assert _kind(_build(cache, _source())) is PchKind.MADE


def test_a_cell_without_includes_gets_no_pch(lib, cache):
    m = _build(cache, "#define N 3\n__global__ void k(int* x) { x[0] = N; }\n")
    assert m.report.pch is None and not _folder(cache).exists()


# --- never stale, never wrong: each change after the PCH was made, and the compile then --------

def _edit_header(lib: Path, cache) -> tuple[str, ...]:
    _write(lib / "lib" / "small.h", "#pragma once\n#define SMALLV 5\n")
    return BASE


def _add_header(lib: Path, cache) -> tuple[str, ...]:
    _write(lib / "over" / "small.h", "#pragma once\n#define SMALLV 7\n")  # found before lib/
    return BASE


def _remove_header(lib: Path, cache) -> tuple[str, ...]:
    os.unlink(lib / "lib" / "extra.h")  # the cell's __has_include("extra.h") no longer finds it
    settled(lib / "lib")
    return BASE


def _options(*more: str):
    return lambda lib, cache: (*BASE, *more)


def _include_order(lib: Path, cache) -> tuple[str, ...]:
    return ("-Iother", "-Ilib")  # other/small.h first, not lib/small.h


def _pch_file(change):
    def run(lib: Path, cache) -> tuple[str, ...]:
        change(_only_pch(cache))
        return BASE
    return run


def _truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


def _corrupt(path: Path) -> None:
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size // 2)
        f.write(b"\xff" * 4096)


def _other_version(path: Path) -> None:
    """Bytes no NVRTC wrote, of the same size and modification time: NVRTC's check refuses
    them, and the next compile makes a new PCH."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.write(os.urandom(4096))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _replace_by(kind: str):
    def run(path: Path) -> None:
        os.unlink(path)
        if kind == "folder":
            path.mkdir()
        elif kind == "fifo":
            os.mkfifo(path)
        else:  # a link to a PCH of other options: a file NVRTC would take, not this one
            other = path.with_name("elsewhere.pch")
            other.write_bytes(b"")
            path.symlink_to(other)
    return run


def _another_nvrtc(lib: Path, cache, monkeypatch) -> tuple[str, ...]:
    from cudamagic.core.toolkit import Toolkit

    # the identity the key gives NVRTC (its wheel), alone: the headers are the same
    monkeypatch.setattr(Toolkit, "nvrtc_wheel",
                        property(lambda self: "nvidia_cuda_nvrtc-99.9.0.dist-info"))
    return BASE


# (what changed, the change, what the next compile must do with the PCH)
STALE = [
    ("a header edited", _edit_header, PchKind.MADE),
    ("a header added before the one read", _add_header, PchKind.MADE),
    ("a header removed, another found", _remove_header, PchKind.MADE),
    ("a -D", _options("-DSCALE=2"), PchKind.MADE),
    ("-std", _options("-std=c++20"), PchKind.MADE),
    ("-arch", _options("-arch=sm_80"), PchKind.MADE),
    ("the -I order", _include_order, PchKind.MADE),
    ("the standard headers off", None, PchKind.MADE),
    ("another NVRTC", _another_nvrtc, PchKind.MADE),
    ("the PCH truncated", _pch_file(_truncate), PchKind.MADE),
    ("the PCH corrupted", _pch_file(_corrupt), PchKind.MADE),
    ("the PCH written by another version", _pch_file(_other_version), PchKind.REFUSED),
    ("the PCH replaced by a folder", _pch_file(_replace_by("folder")), PchKind.MADE),
    ("the PCH replaced by a FIFO", _pch_file(_replace_by("fifo")), PchKind.MADE),
    ("the PCH replaced by a symlink", _pch_file(_replace_by("link")), PchKind.MADE),
]


@pytest.mark.parametrize("what, change, then", STALE, ids=[r[0] for r in STALE])
def test_a_pch_that_no_longer_fits_is_not_used(lib, cache, monkeypatch, what, change, then):
    """The compile after each change has the machine code of a compile without any PCH, and
    the PCH that no longer fits is made again (or NVRTC refused it, and the next one is made);
    the one after that starts from the new PCH."""
    assert _kind(_build(cache, _source())) is PchKind.MADE
    std = {}
    if change is None:
        options, std = BASE, {"std_headers": False}
    elif change is _another_nvrtc:
        options = change(lib, cache, monkeypatch)
    else:
        options = change(lib, cache)
    edit = _source()
    m = _build(cache, edit, options, **std)
    assert _code(m) == _code(_plain(edit, options, **std)), what
    assert _kind(m) is then, what
    if then is PchKind.REFUSED:
        assert _kind(_build(cache, _source(), options, **std)) is PchKind.MADE
    assert _kind(_build(cache, _source(), options, **std)) is PchKind.USED, what


# --- the heap, the size limit, two processes, no room ------------------------------------------

HEAP_CHILD = r"""
import os, sys
from cuda.bindings import nvrtc
nvrtc.nvrtcSetPCHHeapSize(1 << 20)  # too small for the test's library: NVRTC says what it needs
import cudamagic
from tests.test_pch import _source
for _ in range(int(sys.argv[2])):
    m = cudamagic.build(_source(), options=["-Iover", "-Ilib"], cache=sys.argv[1])
    print(m.report.pch[0].value)
"""


def _child(code: str, *args: str, env: dict | None = None, timeout: float = 300
           ) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": path, **(env or {})})


def test_a_heap_too_small_is_paid_once_per_header_set(lib, tmp_path):
    """NVRTC's heap too small: the compile is good, no PCH; the next compile raises the heap
    to what NVRTC asked for and makes it. A later process makes its own at its first compile:
    the size is kept by the folder."""
    cache = str(tmp_path / "cache")
    run = _child(HEAP_CHILD, cache, "3")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["heap", "made", "used"]
    folder = Path(cache) / "pch"
    (heap,) = folder.glob("*.heap")
    assert int(heap.read_text()) > 1 << 20
    again = _child(HEAP_CHILD, cache, "2")
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == ["made", "used"]


RESIZED_CHILD = r"""
import random, sys
from cuda.bindings import nvrtc
nvrtc.nvrtcSetPCHHeapSize(8 << 20)  # small.h's PCH fits (about 5.5 MiB), the library's does not
import cudamagic
from tests.test_pch import _source
run = random.randrange(1 << 40)
def small(i):
    return f'#include "small.h"\n__global__ void k(float* o) {{ o[0] = SMALLV * {run + i}; }}\n'
said = []
for source in (small(1), _source(), _source(), small(2), small(3)):
    m = cudamagic.build(source, options=["-Iover", "-Ilib"], cache=sys.argv[1])
    said.append(m.report.pch[0].value)
print(" ".join(said))
"""


def test_a_pch_made_before_this_process_resized_the_heap_is_made_again(lib, tmp_path):
    """small.h's PCH is made; the library's needs a larger heap, which the next compile sets;
    small.h's next edit then makes its PCH again, never offering NVRTC the one made before
    the resize (which NVRTC refuses: 'incompatible heap allocation', a compile wasted)."""
    run = _child(RESIZED_CHILD, str(tmp_path / "cache"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["made", "heap", "made", "made", "used"]


def test_a_compile_without_a_trace_publishes_no_pch(lib, cache, monkeypatch):
    """A compile NVRTC gave no header list (no room for its trace: every folder it could go in
    has less free space than a trace needs) knows its headers only by a scan of the quoted
    includes, which misses a <...> one: its PCH is not kept, so an edit of that header is
    compiled, never served from a PCH that holds the old one."""
    from cudamagic.toolchain.compile import tracefolder

    monkeypatch.setattr(tracefolder, "TRACE_ROOM", 1 << 62)  # more than any disk has free
    header, kinds = lib / "lib" / "angled.h", []
    for value in (3, 5):
        _write(header, f"#pragma once\n#define SCALE {value}\n")  # before scale.h's own
        edit = _source("#include <angled.h>\n" + HEAD)
        with pytest.warns(UserWarning, match="NVRTC wrote no list of the headers"):
            m = _build(cache, edit)
        assert _code(m) == _code(_plain(edit)), f"the code of angled.h before SCALE {value}"
        kinds.append((_kind(m), len(list(_folder(cache).glob("*.pch")))))
    assert kinds == [(None, 0), (None, 0)]


def test_the_folder_keeps_its_size_limit_least_recently_used_first(lib, cache, monkeypatch):
    a, b, c = (BASE + (f"-DSCALE={n}",) for n in (2, 3, 4))
    assert _kind(_build(cache, _source(), a)) is PchKind.MADE
    size = _only_pch(cache).stat().st_size
    monkeypatch.setenv(pch.LIMIT_ENV, str(int(size * 2.5)))  # two fit, three do not
    assert _kind(_build(cache, _source(), b)) is PchKind.MADE
    assert _kind(_build(cache, _source(), a)) is PchKind.USED  # a is now the most recent
    assert _kind(_build(cache, _source(), c)) is PchKind.MADE  # b goes
    files = pch.files_of(str(_folder(cache)), size * 2)
    assert files.count == 2 and files.size <= size * 2.5 and files.hits == 1
    assert _kind(_build(cache, _source(), a)) is PchKind.USED
    assert _kind(_build(cache, _source(), b)) is PchKind.MADE  # evicted: made again
    monkeypatch.setenv(pch.LIMIT_ENV, "many")
    m = _build(cache, _source(), BASE + ("-DSCALE=5",))
    assert m.report.pch is None and any("CUDAMAGIC_PCH_SIZE_LIMIT" in w
                                        for w in m.report.warnings)


RACE_CHILD = r"""
import os, sys, time
import cudamagic
from cudamagic.toolchain.compile import pch
from tests.test_pch import _source
meet, me = sys.argv[2], sys.argv[3]

def held():  # both made the PCH, neither has published it: then both publish
    open(os.path.join(meet, me), "w").close()
    deadline = time.monotonic() + 120
    while len(os.listdir(meet)) < 2:
        assert time.monotonic() < deadline, "the other process never made its PCH"
        time.sleep(0.01)

pch.before_publish = held
m = cudamagic.build(sys.argv[4], options=["-Iover", "-Ilib"], cache=sys.argv[1])
pch.before_publish = lambda: None
again = cudamagic.build(_source(), options=["-Iover", "-Ilib"], cache=sys.argv[1])
print(m.report.pch[0].value, again.report.pch[0].value)
"""


def test_two_processes_make_the_same_header_sets_pch_at_once(lib, tmp_path, cache):
    """Both compiles make the header set's PCH and wait for each other before publishing it
    (the race made to happen): each process's next edit starts from its own whole PCH (NVRTC
    takes no other process's); once they ended, their PCHs go at the next publish."""
    meet = tmp_path / "meet"
    meet.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", RACE_CHILD, str(cache.directory),
                               str(meet), name, _source()], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={
                                  **os.environ, "PYTHONPATH": os.pathsep.join(
                                      p for p in (str(REPO), os.environ.get("PYTHONPATH", ""))
                                      if p)})
             for name in ("a", "b")]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    assert [o[0].split() for o in outs] == [["made", "used"], ["made", "used"]]
    assert sorted(meet.iterdir()) == [meet / "a", meet / "b"]
    assert len(list(_folder(cache).glob("*.pch"))) == 2
    assert list((_folder(cache) / "tmp").iterdir()) == []
    assert _kind(_build(cache, _source())) is PchKind.MADE  # this process's own
    assert len(list(_folder(cache).glob("*.pch"))) == 1  # theirs went: they ended
    edit = _source()
    m = _build(cache, edit)
    assert _kind(m) is PchKind.USED and _code(m) == _code(_plain(edit))


def test_a_pch_published_over_another_leaves_a_compile_reading_it_untouched(lib, cache,
                                                                            monkeypatch,
                                                                            tmp_path):
    """Two threads make the same header set's PCH (the first held before publishing until the
    second has made its own too: the race made to happen); the first publishes, a compile
    reads that PCH through a hard link of its own (as pch.plan gives one), then the second
    publishes over it: the reader's file is not rewritten under it (a PCH is published by
    rename, never by writing over the file a link may share). The second starts once the first
    is past NVRTC: two compiles of one process inside NVRTC at once leave the second no forked
    header listing, and so no PCH to publish."""
    import hashlib
    import threading

    first_here, first_may_go, second_may_go = (threading.Event() for _ in range(3))
    arrived: list = []
    order_lock = threading.Lock()

    def held():
        with order_lock:
            arrived.append(threading.current_thread())
            first = len(arrived) == 1
        if first:
            first_here.set()
        assert (first_may_go if first else second_may_go).wait(120)

    monkeypatch.setattr(pch, "before_publish", held)
    kinds: list = []
    threads = [threading.Thread(target=lambda: kinds.append(_kind(_build(cache, _source()))))
               for _ in range(2)]
    threads[0].start()
    assert first_here.wait(240), "the first compile never made its PCH"
    threads[1].start()
    deadline = time.monotonic() + 240
    while len(arrived) < 2:  # the second made its PCH too; neither has published
        assert time.monotonic() < deadline and threads[1].is_alive(), \
            "the second compile made no PCH of its own"
        time.sleep(0.01)
    first_may_go.set()
    arrived[0].join(120)
    reader = tmp_path / "reader.pch"
    os.link(_only_pch(cache), reader)  # a compile's private link to the PCH it reads
    before = (hashlib.sha256(reader.read_bytes()).hexdigest(), reader.stat().st_mtime_ns)
    second_may_go.set()
    arrived[1].join(120)
    assert kinds == [PchKind.MADE, PchKind.MADE]
    assert (hashlib.sha256(reader.read_bytes()).hexdigest(), reader.stat().st_mtime_ns) \
        == before, "the PCH a compile reads was rewritten in place"
    assert not os.path.samefile(reader, _only_pch(cache))
    edit = _source()
    m = _build(cache, edit)
    assert _kind(m) is PchKind.USED and _code(m) == _code(_plain(edit))


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o704, 0o777])
def test_a_pch_folder_an_older_version_left_open_is_closed_to_others(lib, cache, mode):
    """pch/ and pch/tmp left readable (or writable) by the group or others: the next PCH made
    closes both to their owner, read bits too (a PCH holds the headers' code)."""
    folder = _folder(cache)
    (folder / "tmp").mkdir(parents=True)
    for made in (folder, folder / "tmp"):
        os.chmod(made, mode)
    assert _kind(_build(cache, _source())) is PchKind.MADE
    assert {oct(p.stat().st_mode & 0o777) for p in (folder, folder / "tmp")} == {oct(0o700)}


def test_no_room_and_no_folder_are_said_once(lib, cache, monkeypatch):
    monkeypatch.setattr(pch, "FREE_RESERVE", 1 << 60)  # more than any disk has free
    first, second = (_build(cache, _source()) for _ in range(2))
    said = [w for w in first.report.warnings if w.startswith("no precompiled header")]
    assert len(said) == 1 and "MB free" in said[0] and first.report.pch is None
    assert not any(w.startswith("no precompiled header") for w in second.report.warnings)
    assert second.report.pch is None and not list(_folder(cache).glob("*.pch"))


def test_a_pch_folder_that_cannot_be_made_is_said_once(lib, tmp_path, fresh_process):
    cache = KernelCache(tmp_path / "blocked")
    (tmp_path / "blocked" / "pch").write_text("a file where the folder would be")
    first, second = (_build(cache, _source()) for _ in range(2))
    said = [w for w in first.report.warnings if w.startswith("no precompiled header")]
    assert len(said) == 1 and "cannot be written" in said[0] and first.report.pch is None
    assert not any(w.startswith("no precompiled header") for w in second.report.warnings)
    assert second.report.hit is False and second.report.pch is None
    cache.close()


# --- what the magics say -------------------------------------------------------------------------

def test_cuda_cache_shows_the_pchs_and_clears_them_apart(lib, tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    from cudamagic.shell.info import environment_info

    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "magic-cache"))
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    for _ in range(3):
        ip.run_cell_magic("cuda", "-q -I over -I lib", _source())
    stats = ip.run_line_magic("cuda_cache", "stats")
    assert (stats.entries, stats.pch.count, stats.pch.hits) == (3, 1, 2)
    assert stats.pch.size > 0 and stats.pch.last_use > time.time() - 600
    assert "precompiled headers: 1 file, " in stats.text()
    cleared = ip.run_line_magic("cuda_cache", "clear --pch")
    assert (cleared.entries, cleared.pch.count) == (3, 0)
    assert "removed 1 precompiled header; the entries are kept" in cleared.text()
    with pytest.raises(OptionError, match="go with %cuda_cache clear"):
        ip.run_line_magic("cuda_cache", "stats --pch")
    info = dict(environment_info().fields)
    assert info["precompiled headers"].startswith("supported, on")
    monkeypatch.setenv(pch.PCH_ENV, "0")
    assert dict(environment_info().fields)["precompiled headers"].startswith("supported; off")


def test_an_nvrtc_without_pchs_compiles_plainly_and_says_so(lib, cache, monkeypatch):
    """Simulated: an NVRTC older than 12.8 (the probe answers no)."""
    from cudamagic.shell.info import environment_info

    monkeypatch.setattr(pch, "supported", lambda: False)
    assert dict(environment_info().fields)["precompiled headers"].startswith("not supported")
    edit = _source()
    m = _build(cache, edit)
    assert m.report.pch is None and not _folder(cache).exists()
    assert _code(m) == _code(_plain(edit))


# --- CUB: the heap NVRTC needs for CCCL, and the same machine code ------------------------------

CUB = ("#include <cub/block/block_reduce.cuh>\n__global__ void k(float* o) {{ typedef "
       "cub::BlockReduce<float, 256> R; __shared__ typename R::TempStorage t; "
       "float s = R(t).Sum(o[threadIdx.x] * {n}); if (!threadIdx.x) o[0] = s; }}\n")


def test_a_cub_cell(lib, cache):
    """NVRTC 13.5's default heap (256 MiB) is too small for CUB's PCH (335 MB): the first
    compile says so, the next makes it (once), the edit after starts from it. NVRTC 13.0's
    heap holds it at once (the H200's): the first compile makes it and both edits use it.
    Every CUBIN's kernel code is a plain compile's."""
    kinds = []
    for _ in range(3):
        edit = CUB.format(n=_RUN + next(_count))
        m = _build(cache, edit, ())
        kinds.append(_kind(m))
        assert _code(m) == _code(_plain(edit, ())), kinds
    assert kinds in ([PchKind.HEAP, PchKind.MADE, PchKind.USED],
                     [PchKind.MADE, PchKind.USED, PchKind.USED]), kinds


def test_an_option_nvrtc_refuses_is_said_without_the_pchs_own(lib, cache):
    _build(cache, _source())  # the PCH made: the next compile is given -use-pch
    for _ in range(2):  # to use it, then (its options differ) to make one
        with pytest.raises(OptionError) as refused:
            _build(cache, _source(), BASE + ("-bogus-option",))
        assert "-bogus-option" in str(refused.value)
        assert "-use-pch" not in str(refused.value) and "-create-pch" not in str(refused.value)
        assert "-diag-suppress" not in str(refused.value)


@pytest.mark.parametrize("own_line", [False, True], ids=["probe only", "the cell's own #line"])
def test_a_cell_the_type_probe_asks_about_keeps_its_precompiled_header(lib, cache, own_line):
    """An extern "C" kernel makes the type probe ask for its parameters' types, in text added
    after the cell. Its ``#line`` directive (always written before) made NVRTC warn "PCH
    creation disabled because #line directive encountered" in the cell's log, at a line past
    the cell's end, while the report said the PCH was kept (it was: NVRTC makes it up to the
    directive). Now the probe writes one only where the cell has a ``#line`` of its own, and
    NVRTC's warning about its PCH is not the cell's; the edits use the PCH either way."""
    line = '#line 40 "cell.cu"\n' if own_line else ""
    kinds, logs = [], []
    for _ in range(3):
        src = _source() + line + 'extern "C" __global__ void fill(float* x, int n) ' \
            f'{{ if (n) x[0] = {_RUN + next(_count)}; }}\n'
        m = _build(cache, src)
        kinds.append(_kind(m))
        logs.append(m.report.log)
        assert "float*" in m["fill"].signature  # the probe answered
    assert kinds[-1] is PchKind.USED, kinds
    assert not any("20283" in log for log in logs), logs


# --- issue 47: the bound is a bound, left files are found, liveness is a lock --------------------

def test_a_pch_over_the_size_limit_is_not_kept_and_that_is_said_once(lib, cache, monkeypatch):
    """The PCH made is bigger than the limit: it is not kept, said once, and the next compile
    of the header set makes none (planted: publish whatever size was made)."""
    monkeypatch.setenv(pch.LIMIT_ENV, "1KB")  # the library's PCH is a few MB
    first, second = (_build(cache, _source()) for _ in range(2))
    said = [w for m in (first, second) for w in m.report.warnings
            if "size limit" in w]
    assert len(said) == 1 and "not kept" in said[0], said
    assert first.report.pch is None and second.report.pch is None
    assert not list(_folder(cache).glob("*.pch"))
    assert list((_folder(cache) / "tmp").iterdir()) == []


def test_a_refused_pch_leaves_the_folder_within_its_limit(lib, cache, monkeypatch):
    """An adversary's finding: PCHs kept under a higher limit (or by processes that ended)
    stayed when a later process with a lower limit made one over it and did not keep it
    ("3 files, 22.6 MiB of 5.0 MiB"): eviction ran only when a PCH was published. A PCH not
    kept for the limit leaves the folder within it."""
    kept = _build(cache, _source())
    assert _kind(kept) is PchKind.MADE and list(_folder(cache).glob("*.pch"))
    monkeypatch.setenv(pch.LIMIT_ENV, "1KB")
    refused = _build(cache, _source(), options=(*BASE, "-DANOTHER_SET=1"))
    assert any("size limit" in w for w in refused.report.warnings), refused.report.warnings
    assert not list(_folder(cache).glob("*.pch")), "the folder stays over its 1 KB limit"


def test_a_bad_size_limit_is_said_once(lib, cache, monkeypatch):
    monkeypatch.setenv(pch.LIMIT_ENV, "lots")
    ms = [_build(cache, _source()) for _ in range(2)]
    said = [w for m in ms for w in m.report.warnings if pch.LIMIT_ENV in w]
    assert len(said) == 1, said


KILLED_CHILD = r"""
import os, signal, sys
import cudamagic
import cudamagic.toolchain.compile.nvrtc as nv
from tests.test_pch import _source
real = nv.read_outcome
def killed(nvrtc, prog, p, log):  # during the compile that reads the PCH through its link
    if not p.create and os.stat(p.path).st_nlink > 1:  # a published one's, not one just made
        os.kill(os.getpid(), signal.SIGKILL)
    return real(nvrtc, prog, p, log)
nv.read_outcome = killed
for _ in range(2):
    cudamagic.build(_source(), options=["-Iover", "-Ilib"], cache=sys.argv[1])
"""


def test_a_link_left_by_a_killed_process_is_counted_and_cleared(lib, tmp_path):
    """kill -9 during a compile that reads a PCH leaves its hard link in tmp/: stats count it,
    clear removes it with the PCH (planted: clear and files_of look at published PCHs only)."""
    cache = tmp_path / "cache"
    run = _child(KILLED_CHILD, str(cache))
    assert run.returncode == -9, run.stderr
    folder = cache / "pch"
    assert len(list((folder / "tmp").iterdir())) == 1
    files = pch.files_of(str(folder), pch.DEFAULT_LIMIT)
    assert files.left == 1 and files.count == 2
    assert pch.clear(str(folder)) == (1, 1)
    assert list((folder / "tmp").iterdir()) == [] and not list(folder.glob("*.pch"))


HOLDING_CHILD = r"""
import sys
import cudamagic
from tests.test_pch import _source
m = cudamagic.build(_source(), options=["-Iover", "-Ilib", "-DSCALE=7"], cache=sys.argv[1])
print(m.report.pch[0].value, flush=True)
sys.stdin.read()
"""


def test_a_live_process_in_another_pid_namespace_keeps_its_pch(lib, tmp_path):
    """Another process's record names a pid this one cannot see (as from another pid
    namespace): while it lives (holds its lock) its PCH stays; once it ended, it goes
    (planted: liveness read from /proc by the record's pid)."""
    import json

    cache = KernelCache(tmp_path / "cache")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    other = subprocess.Popen([sys.executable, "-c", HOLDING_CHILD, str(cache.directory)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert other.stdout.readline().split() == ["made"]
        (theirs,) = _folder(cache).glob("*.json")
        record = json.loads(theirs.read_text())
        record["process"] = "999999999:1"  # a pid of another namespace: none here
        theirs.write_text(json.dumps(record))
        assert _kind(_build(cache, _source())) is PchKind.MADE  # publishing trims the folder
        assert theirs.with_suffix(".pch").exists()
    finally:
        other.stdin.close()
        other.wait(timeout=120)
    assert _kind(_build(cache, _source(), BASE + ("-DSCALE=8",))) is PchKind.MADE
    assert not theirs.with_suffix(".pch").exists()
    cache.close()


def test_a_forked_child_outliving_the_maker_does_not_keep_its_pchs_alive(tmp_path):
    """A PCH's liveness is its maker's held lock on owners/NAME; a child forked from the maker
    (a multiprocessing worker) inherited that descriptor and so kept a dead notebook's PCHs
    'alive' (usable by no one, first in no eviction) for as long as it ran. The child closes
    its parent's owner descriptors: once the maker ends, its name is dead while the child
    still runs (held on a pipe the test keeps, not a sleep)."""
    import re
    import textwrap

    folder = tmp_path / "pch"
    hold_r, hold_w = os.pipe()
    maker = textwrap.dedent(f"""
        import os, sys
        from cudamagic.toolchain.compile import pch
        name = pch._owner({str(folder)!r})
        if os.fork() == 0:  # the worker: runs until the test lets it go
            os.read({hold_r}, 1)
            os._exit(0)
        print(name, flush=True)
        os._exit(0)  # the maker ends; the worker lives on
    """)
    proc = subprocess.Popen([sys.executable, "-c", maker], stdout=subprocess.PIPE, text=True,
                            pass_fds=(hold_r,), env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                (str(REPO), os.environ.get("PYTHONPATH", "")))})
    os.close(hold_r)
    try:
        name = proc.stdout.readline().strip()  # the worker was forked before: it runs
        proc.wait(timeout=60)
        assert re.fullmatch(r"[0-9a-f]{16}", name), name
        assert not pch._alive(str(folder), name), "the worker kept the dead maker's name alive"
    finally:
        os.close(hold_w)  # the worker's read returns: it ends
