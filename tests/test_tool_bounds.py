"""The debugging tools' own bounds, without a GPU: what a tool run keeps of a child's output, how
long its timeout lets it take, what it reads of the files the child and the tool leave, how the
child rebuilds arguments that share memory, what the child is given of the notebook's
environment, what a clean initcheck run could not see, and the cluster launches the CUBIN alone
refuses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import cudamagic
from cudamagic.launch import capture as cap
from cudamagic.toolchain.tools import tools
from cudamagic.toolchain.tools.sanitizer import MAX_REPORT_BYTES, SanitizerTool, read_xml
from cudamagic.errors import SanitizerOutputError

from .test_debug_tools import _DeviceArray, _host_copy


class _Memory:
    """Device memory as the child sees it: allocations of exactly the size asked, which a write
    past their end does not grow (it fails, as the tool would report it)."""

    STEP = 1 << 40

    def __init__(self) -> None:
        self.blocks: dict[int, bytearray] = {}

    def alloc(self, n: int) -> int:
        base = self.STEP * (len(self.blocks) + 1)
        self.blocks[base] = bytearray(n)
        return base

    def _block(self, address: int, n: int) -> tuple[bytearray, int]:
        base = address - address % self.STEP
        block, at = self.blocks[base], address - base
        assert at + n <= len(block), f"{n} bytes at {at} of a {len(block)}-byte buffer"
        return block, at

    def write(self, address: int, data: bytes) -> None:
        block, at = self._block(address, len(data))
        block[at:at + len(data)] = data

    def read(self, address: int, n: int) -> bytes:
        block, at = self._block(address, n)
        return bytes(block[at:at + n])


class _View(_DeviceArray):
    """``x[start:stop]`` as CuPy makes it: an empty view's address is where it starts in x
    (NumPy gives an empty slice its array's own address)."""

    def __init__(self, x: np.ndarray, start: int, stop: int) -> None:
        super().__init__(x[start:stop])
        self.address = x.__array_interface__["data"][0] + start * x.itemsize
        self.__cuda_array_interface__["data"] = (self.address, False)


def _shared_rows():
    x = np.arange(64, dtype=np.float32)
    # (the three arguments as (start, stop) of x, the child's buffer sizes, the arguments that
    # keep the notebook's distances)
    return {"an empty view between two that overlap": (((0, 64), (10, 10), (20, 30)), [256],
                                                       (0, 1, 2)),
            "an empty view at the array's start": (((0, 0), (0, 64), (4, 8)), [256], (0, 1, 2)),
            "a group ends at its furthest byte, not its last member's":
                (((0, 64), (1, 3), (2, 4)), [256], (0, 1, 2)),
            "a later member reaches past the first": (((0, 40), (8, 16), (30, 64)), [256],
                                                      (0, 1, 2)),
            "an empty view outside every array": (((0, 8), (20, 20), (30, 40)), [0, 32, 40], ())}


@pytest.mark.parametrize("row", list(_shared_rows()))
def test_overlapping_arrays_share_one_buffer_at_the_notebooks_distances(row):
    # before: an empty view (x[10:10]) ended the group it lay in, so x[20:30] was rebuilt in a
    # buffer of its own, another allocation's distance from x (8 GiB on the H200) instead of
    # 80 bytes; this memory does not grow when written past an allocation's end, so a group
    # that ended where its last member ends would be seen too small
    x = np.arange(64, dtype=np.float32)
    spans, buffers, together = _shared_rows()[row]
    views = [_View(x, start, stop) for start, stop in spans]
    k = cudamagic.build('extern "C" __global__ void k(float* a, float* b, float* c) {}',
                        use_cache=False)["k"]
    c = cap.capture("k", k.params, (1,), (1,), tuple(views),
                    copy=_host_copy)
    memory = _Memory()
    slots, placed = cap.rebuild(c, memory.alloc, memory.write)
    assert sorted(len(b) for b in memory.blocks.values()) == buffers
    child = [int.from_bytes(s, "little") for s in slots]
    parent = [v.address for v in views]
    assert len({child[i] - parent[i] for i in together}) <= 1
    for ptr, view in zip(child, views):  # each pointer reads its own array's values
        got = np.frombuffer(memory.read(ptr, view.host.nbytes), np.float32)
        assert got.tolist() == view.host.tolist()
    assert [p.nbytes for p in placed] == [v.host.nbytes for v in views]


# --- a child's output and its timeout ------------------------------------------------------------

def _writer(stdout: int, stderr: int) -> list[str]:
    """A child that writes ``stdout`` and ``stderr`` bytes of filler in turns, then a last line
    on each."""
    code = ("import os\n"
            f"left = [{stdout}, {stderr}]\n"
            "chunk = b'x' * 65536\n"
            "while any(left):\n"
            "    for i, fd in enumerate((1, 2)):\n"
            "        n = min(left[i], len(chunk))\n"
            "        if n: os.write(fd, chunk[:n]); left[i] -= n\n"
            "os.write(1, b'\\nthe end of stdout\\n'); os.write(2, b'\\nthe end of stderr\\n')\n")
    return [sys.executable, "-c", code]


@pytest.mark.parametrize("stdout, stderr", [
    (32 << 20, 0),  # a printf in every thread of a large grid
    (0, 32 << 20),  # a tool's account of every fault
    (16 << 20, 16 << 20),
    (1000, 10),  # kept whole
    # between one and two tails' worth: never trimmed while read, cut only when the tail is
    # given (whatever sizes the reads had)
    (3 * tools.TAIL_BYTES // 2, 0),
    (0, 3 * tools.TAIL_BYTES // 2),
], ids=["stdout", "stderr", "both", "short", "stdout, 1.5 tails", "stderr, 1.5 tails"])
def test_a_childs_output_keeps_a_bounded_tail_and_says_how_much_was_cut(stdout, stderr):
    # before: every byte was kept (300 MB of output grew the notebook by 860 MB for 8 lines)
    done = tools.run_child(_writer(stdout, stderr), timeout=120)
    for text, cut, written, name in ((done.stdout, done.stdout_cut, stdout, "stdout"),
                                     (done.stderr, done.stderr_cut, stderr, "stderr")):
        total = written + len(f"\nthe end of {name}\n")
        assert text.endswith(f"the end of {name}\n")
        assert len(text) == min(total, tools.TAIL_BYTES)
        assert cut == total - len(text)


def test_the_notebook_holds_the_tail_of_a_childs_output_not_all_of_it():
    # ru_maxrss of a fresh interpreter before and after a child that writes 256 MiB
    code = ("import resource, sys\n"
            "from cudamagic.toolchain.tools import tools\n"
            "from tests.test_tool_bounds import _writer\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "done = tools.run_child(_writer(256 << 20, 0), timeout=300)\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n")
    grew_kib = int(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True,
                                  text=True, timeout=300).stdout)
    assert grew_kib < 32 << 10, f"the process grew by {grew_kib} KiB"


def _helper_child(tmp_path, then: str) -> tuple[list[str], object]:
    """A child that starts a helper in a session of its own (outside the child's process
    group, which a timeout kills) holding the child's pipes for 40 s, then ``then``."""
    marker = tmp_path / "helper.pid"
    code = ("import subprocess, sys, time\n"
            "h = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(40)'],\n"
            "                     start_new_session=True)\n"
            f"open({str(marker)!r}, 'w').write(str(h.pid))\n"
            "print('the child is done', flush=True)\n"
            f"{then}\n")
    return [sys.executable, "-c", code], marker


@pytest.mark.parametrize("then, raises", [
    ("time.sleep(40)", True),  # the child hangs: the timeout stops it
    ("sys.exit(0)", False),  # the child ends: its result comes back
], ids=["hangs", "ends"])
def test_a_timeout_is_a_timeout_while_a_helper_holds_the_pipes(tmp_path, then, raises):
    # before: after the child's group was killed, the wait for its pipes had no bound, and a
    # helper in its own session held them: run_child(timeout=2) took 40 s (the helper's life)
    argv, marker = _helper_child(tmp_path, then)
    started = time.monotonic()
    try:
        if raises:
            with pytest.raises(subprocess.TimeoutExpired):
                tools.run_child(argv, timeout=2)
        else:
            done = tools.run_child(argv, timeout=30)
            assert done.returncode == 0 and "the child is done" in done.stdout
        assert time.monotonic() - started < 20
    finally:
        if marker.exists() and marker.read_text():
            try:
                os.kill(int(marker.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("cut, first", [
    (300 << 20, "(300 MiB of output before its last 64.0 KiB, not kept)"),
    (0, "line 92"),
])
def test_the_childs_last_lines_say_how_much_came_before_what_was_kept(cut, first):
    from cudamagic.launch.tool_run import _tail

    done = tools.ChildResult(1, "", "".join(f"line {i}\n" for i in range(100)), 1.0,
                             stderr_cut=cut)
    lines = _tail(done, stderr=True).splitlines()
    assert lines[0] == first and lines[-1] == "line 99"


# --- the sanitizer's report ----------------------------------------------------------------------

def _without_waiting(read, path, error: type) -> object:
    """What ``read()`` returns or raises as ``error``, from a thread given 30 s; a read still
    waiting then (on a FIFO at ``path``) is let go by a writer, and the test fails."""
    import threading

    got: list = []

    def run():
        try:
            got.append(read())
        except error as exc:
            got.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(30)
    if t.is_alive():
        with open(path, "wb"):
            pass
        t.join(30)
        pytest.fail(f"the read waited on {path}")
    return got[0]


def _report_in(tmp_path, kind: str):
    """A report path that is not the regular file the tool writes."""
    from .test_debug_tools import _report

    path = tmp_path / "report.xml"
    if kind == "a FIFO":
        os.mkfifo(path)
    elif kind == "a folder":
        path.mkdir()
    elif kind == "a symbolic link":
        (tmp_path / "elsewhere.xml").write_bytes(_report("oob_write"))
        path.symlink_to(tmp_path / "elsewhere.xml")
    else:  # past the size read, sparse
        with open(path, "wb") as f:
            f.truncate(MAX_REPORT_BYTES + 1)
    return path


@pytest.mark.parametrize("kind, says", [
    ("a FIFO", "is a FIFO"),
    ("a folder", "is a folder"),
    ("a symbolic link", "is a symbolic link"),
    ("too large", "more than the 64 MiB read"),
])
def test_a_report_that_is_no_file_the_tool_wrote_is_refused_at_once(tmp_path, kind, says):
    # before: a plain open(), so a FIFO in the report's place blocked read_xml for ever (other
    # untrusted files go through files.read_regular), and a link was followed
    got = _without_waiting(lambda: read_xml(_report_in(tmp_path, kind), SanitizerTool.MEMCHECK),
                           tmp_path / "report.xml", SanitizerOutputError)
    assert isinstance(got, SanitizerOutputError) and says in str(got)


def _parse_in_child(data: bytes, tmp_path) -> str:
    """How many findings parse_xml reads of ``data``, or its refusal, from a child given 60 s
    (the quadratic parse of a nested report took hours for what these rows hold)."""
    report = tmp_path / "nested.xml"
    report.write_bytes(data)
    code = ("import sys\n"
            "from cudamagic.toolchain.tools.sanitizer import parse_xml, SanitizerTool, "
            "SanitizerOutputError\n"
            "try:\n"
            f"    print(len(parse_xml(open({str(report)!r}, 'rb').read(), "
            "SanitizerTool.MEMCHECK)))\n"
            "except SanitizerOutputError as exc:\n"
            "    print('refused:', exc)\n")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"parse_xml of {len(data)} bytes did not end in 60 s")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


_RECORD = ("<record><kind>Error</kind><what><text>Invalid __global__ write of size 4 bytes"
           "</text></what>")


@pytest.mark.parametrize("body, says", [
    (_RECORD * 8 + "</record>" * 8, "1"),  # a record inside a record is no finding of its own
    ("".join(_RECORD * 2 + "</record>" * 2 for _ in range(2000)), "2000"),
    (_RECORD * 8000 + "</record>" * 8000, "refused: compute-sanitizer's report nests its "
                                          "elements more than 32 deep"),  # 0.7 MB
    (_RECORD + "<a>" * 300_000 + "</a>" * 300_000 + "</record>", "refused: compute-"
                                                                 "sanitizer's report nests"),
], ids=["nested", "each-holds-one", "deep-records", "deep-elements"])
def test_records_nested_in_records_are_read_in_linear_time(tmp_path, body, says):
    # before: every <record> at any depth was a finding, each searched its whole subtree: a
    # 0.6 MB report of nested records did not finish in 30 s, while 64 MiB are accepted
    data = f"<ComputeSanitizerOutput>{body}</ComputeSanitizerOutput>".encode()
    assert _parse_in_child(data, tmp_path).startswith(says)


# --- what the child is given and what it leaves --------------------------------------------------

@pytest.mark.parametrize("name, value, reaches", [
    ("CUDAMAGIC_REMOTE_CACHE", "redis://:s3cret@cache.example:6379/0", False),  # a password
    ("CUDAMAGIC_REMOTE_PASSWORD_FILE", "/home/u/.cache-password", False),
    ("CUDAMAGIC_EAGER_CONTEXT", "1", False),
    ("CUDA_VISIBLE_DEVICES", "1", True),  # the device the notebook chose
    ("LD_LIBRARY_PATH", "/opt/cuda/lib64", True),
])
def test_the_child_gets_the_notebooks_environment_without_cudamagics_settings(
        monkeypatch, name, value, reaches):
    # before: the whole environment, the team cache's address and password included
    from cudamagic.launch.tool_run import _child_env

    monkeypatch.setenv(name, value)
    done = tools.run_child([sys.executable, "-c", "import os; print(repr(dict(os.environ)))"],
                           env=_child_env(), timeout=60)
    seen = eval(done.stdout)  # noqa: S307 - the repr of a dict of str the child printed
    assert (seen.get(name) == value) is reaches


_STAND_IN = """import json, os, sys
def main(argv):
    with open(os.path.join(argv[0], "seen.json"), "w") as f:
        json.dump({"file": __file__, "path": sys.path, "argv": argv}, f)
    return 0
if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("entry", ["pkgs:1", "rel"], ids=["a colon", "relative"])
def test_the_child_imports_from_the_notebooks_sys_path_as_it_is(tmp_path, monkeypatch, entry):
    # before: PYTHONPATH joined from sys.path, so an entry holding ':' was cut in two, and a
    # relative one was looked for in the child's own folder: what the notebook imports from
    # there was not found (here a stand-in cudamagic.pipeline.child that says where it ran from)
    from cudamagic.launch.tool_run import LineinfoBuild, _child_env, write_run
    from .test_debug_tools import _oob_capture

    monkeypatch.chdir(tmp_path)
    package = tmp_path / entry / "cudamagic"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "pipeline").mkdir()
    (package / "pipeline" / "__init__.py").write_text("")
    (package / "pipeline" / "child.py").write_text(_STAND_IN)
    monkeypatch.setattr(sys, "path", [entry, *sys.path])
    folder = tmp_path / "run"
    folder.mkdir()
    argv = write_run(folder, _oob_capture(), LineinfoBuild(b""), 0)
    done = tools.run_child(argv, env=_child_env(), cwd=folder, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads((folder / "seen.json").read_text())
    assert seen["file"] == str(package / "pipeline" / "child.py")
    assert seen["path"][0] == str(tmp_path / entry) and seen["argv"] == [str(folder), "0"]


@pytest.mark.parametrize("text, says", [
    ("[]", "not {"),
    ('{"placed": 5}', "not {"),
    ('{"placed": [], "error": 5}', "not {"),
    ('{"placed": [[1, 2]]}', "[1, 2] is not three"),
    ('{"placed": [["a", 4096, 16]]}', "is not three"),
    ('{"placed": [[1.5, 4096, 16]]}', "is not three"),
    ('{"placed": [[true, 4096, 16]]}', "is not three"),
    ('{"placed": [[0, -1, 16]]}', "is not three"),
    ('{"placed": [[0, 4096', "cannot be read as JSON"),
    (b"\xff\xfe", "cannot be read as JSON"),
    (None, "it is a FIFO"),
])
def test_a_malformed_placed_json_is_the_projects_error_saying_what(tmp_path, text, says):
    # before: a raw AttributeError ([]) or ValueError ([[1, 2]]), a float or a bool taken as an
    # address, a cut file read as no placements, and a FIFO waited on for ever
    from cudamagic.errors import LaunchError
    from cudamagic.launch.tool_run import read_placed

    where = tmp_path / "placed.json"
    if text is None:
        os.mkfifo(where)
    else:
        where.write_bytes(text if isinstance(text, bytes) else text.encode())
    got = _without_waiting(lambda: read_placed(tmp_path), where, LaunchError)
    assert isinstance(got, LaunchError) and says in str(got) and str(where) in str(got)


@pytest.mark.parametrize("text, want", [
    ('{"placed": [[0, 4096, 16], [2, 8192, 0]], "error": ""}',
     ([cap.Placement(0, 4096, 16), cap.Placement(2, 8192, 0)], "")),
    ('{"placed": [], "error": "cuLaunchKernel failed"}', ([], "cuLaunchKernel failed")),
    (None, ([], "")),  # the child ended before it wrote the file
])
def test_the_childs_placed_json_is_read(tmp_path, text, want):
    from cudamagic.launch.tool_run import read_placed

    if text is not None:
        (tmp_path / "placed.json").write_text(text)
    assert read_placed(tmp_path) == want


# --- what a clean initcheck run could not see ----------------------------------------------------

@pytest.mark.parametrize("tool, uninitialized, sizes, names", [
    ("initcheck", (), (8, 4), "argument 0, x: float32[8]; argument 2, y: float32[4]"),
    ("initcheck", (0,), (8, 4), "argument 2, y: float32[4]"),
    ("initcheck", (0, 2), (8, 4), None),  # both left fresh: initcheck sees every such read
    ("initcheck", (), (8, 0), "argument 0, x: float32[8]"),  # an empty array holds no bytes
    ("memcheck", (), (8, 4), None),
])
def test_a_clean_initcheck_run_says_what_it_could_not_see_and_how_to(tool, uninitialized,
                                                                     sizes, names):
    # before: the arrays were copied into the child, so a read of memory the notebook never
    # wrote was invisible there, and the clean result said only "no errors"
    from cudamagic.launch.tool_run import SanitizeReport, copied_in
    from cudamagic.view.debug import sanitize_html, sanitize_text

    k = cudamagic.build('extern "C" __global__ void k(float* x, int n, float* y) {}',
                        use_cache=False)["k"]
    x, y = (_DeviceArray(np.zeros(n, np.float32)) for n in sizes)
    c = cap.capture("k", k.params, (1,), (1,), (x, 3, y), copy=_host_copy,
                    labels=("x", "n", "y"), uninitialized=uninitialized)
    r = SanitizeReport(SanitizerTool.of(tool), "Version 2025.3.1", "k", c.grid, c.block,
                       copied_in=copied_in(c))
    text, page = sanitize_text(r), sanitize_html(r)
    assert text.startswith(f"{tool}: no errors in k")
    if names is None:
        assert "not seen" not in text and "uninitialized=" not in page
        return
    copied = [i for i, n in ((0, sizes[0]), (2, sizes[1])) if n and i not in uninitialized]
    given = f"({', '.join(map(str, copied))})" if len(copied) > 1 else str(copied[0])
    assert f"not seen: a read of memory the notebook never wrote, in {names}:" in text
    assert f"uninitialized={given}, or %cuda_sanitize --uninitialized " \
           f"{','.join(map(str, copied))}" in text
    assert f"uninitialized={given}" in page
    assert all(a.contents == b"" for a in r.copied_in)  # the record keeps no array's bytes


# --- cluster launches the CUBIN alone refuses ----------------------------------------------------

CLUSTERS = r"""
extern "C" __global__ void __cluster_dims__(2, 1, 1) paired(int* x, int n) { x[0] = n; }
extern "C" __global__ void __cluster_dims__() any_cluster(int* x, int n) { x[0] = n; }
"""


@pytest.fixture(scope="module")
def cluster_cache(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clusters")
    cudamagic.build(CLUSTERS, [], arch="sm_90", cache=str(folder))
    return str(folder)


@pytest.mark.parametrize("name, grid, kw, says", [
    ("paired", (3,), {}, r"the grid \(3, 1, 1\) is not a whole number of clusters of "
                         r"\(2, 1, 1\) blocks \(its __cluster_dims__\)"),
    ("paired", (4,), {"cluster": (4, 1, 1)}, r"cluster=\(4, 1, 1\), but the kernel was "
                                             r"compiled with __cluster_dims__\(2, 1, 1\)"),
    ("any_cluster", (4,), {}, r"compiled with __cluster_dims__\(\) and no shape: launch it "
                              r"with cluster=\(x, y, z\)"),
    ("any_cluster", (3,), {"cluster": 2}, r"clusters of \(2, 1, 1\) blocks \(the call's "
                                          r"cluster\)"),
    ("paired", (4,), {}, None),  # a launch the CUBIN takes: the device is asked
    ("any_cluster", (4,), {"cluster": (2, 1, 1)}, None),
], ids=["grid-3-of-pairs", "another-shape", "no-shape", "call-shape", "good", "good-shape"])
def test_a_cluster_launch_the_cubin_refuses_is_an_argument_error_without_a_gpu(
        monkeypatch, cluster_cache, name, grid, kw, says):
    # before: the kernel's __cluster_dims__ (EIATTR_CTA_PER_CLUSTER, EIATTR_EXPLICIT_CLUSTER in
    # its CUBIN) was checked after the device was asked, so without a GPU each of these said
    # only NoDeviceError; here the GPU's absence is simulated, so a GPU machine runs it alike
    from cudamagic.errors import ArgumentValueError, NoDeviceError
    from cudamagic.toolchain.device import driver

    monkeypatch.setattr(driver, "_init", lambda: "no GPU (simulated)")
    kernel = cudamagic.build(CLUSTERS, [], arch="sm_90", cache=cluster_cache)[name]
    with pytest.raises(NoDeviceError if says is None else ArgumentValueError,
                       match=f"^{name}: .*{says}" if says else "simulated"):
        kernel(grid, (32,), (None, 3), **kw)


@pytest.mark.parametrize("how", ["fstat", "stat"])
def test_a_report_that_grows_after_its_size_check_is_read_to_that_size_only(tmp_path,
                                                                           monkeypatch, how):
    """The size checked is the size read: a report that grows once its size was taken (the
    tool still writing, or anyone else) is read to that size, never whole."""
    from .test_debug_tools import _report

    path = tmp_path / "report.xml"
    path.write_bytes(_report("oob_write"))
    expected = read_xml(path, SanitizerTool.MEMCHECK)
    assert expected  # the recorded report has findings
    inode = path.stat().st_ino
    real = getattr(os, how)
    grown = []

    def then_grow(where, *args, **kw):
        st = real(where, *args, **kw)
        if st.st_ino == inode and not grown:
            grown.append(True)
            with open(path, "ab") as f:  # past the root element: no XML a reader would take
                f.write(b"<not-xml" * (1 << 17))
        return st

    monkeypatch.setattr(os, how, then_grow)
    assert read_xml(path, SanitizerTool.MEMCHECK) == expected
    if how == "fstat":
        assert grown  # the size was taken from the open file
