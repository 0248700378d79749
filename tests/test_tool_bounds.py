"""The debugging tools' own bounds, without a GPU: what a tool run keeps of a child's output, how
long its timeout lets it take, what it reads of the files the child and the tool leave, how the
child rebuilds arguments that share memory, what the child is given of the notebook's
environment, what a clean initcheck run could not see, and the cluster launches the CUBIN alone
refuses.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import cudamagic
from cudamagic.launch import capture as cap
from cudamagic.toolchain import tools
from cudamagic.toolchain.sanitizer import (MAX_REPORT_BYTES, SanitizerOutputError,
                                           SanitizerTool, read_xml)

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
], ids=["stdout", "stderr", "both", "short"])
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
            "from cudamagic.toolchain import tools\n"
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
    import threading

    path = _report_in(tmp_path, kind)
    got: list = []

    def read():
        try:
            got.append(read_xml(path, SanitizerTool.MEMCHECK))
        except SanitizerOutputError as exc:
            got.append(exc)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(30)
    if t.is_alive():  # let it go: the FIFO gets a writer and ends
        with open(path, "wb"):
            pass
        t.join(30)
        pytest.fail(f"read_xml waited on {kind}")
    assert isinstance(got[0], SanitizerOutputError) and says in str(got[0])


def _parse_in_child(data: bytes, tmp_path) -> str:
    """How many findings parse_xml reads of ``data``, or its refusal, from a child given 60 s
    (the quadratic parse of a nested report took hours for what these rows hold)."""
    report = tmp_path / "nested.xml"
    report.write_bytes(data)
    code = ("import sys\n"
            "from cudamagic.toolchain.sanitizer import parse_xml, SanitizerTool, "
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
