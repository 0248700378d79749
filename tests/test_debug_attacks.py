"""Attacks on the debugging loop's parts that run without a GPU: damaged captures and reports
(seeded mutants: every one is read or refused with the project's error, never another
exception), a child that hangs or is interrupted (its whole process group goes), sizes a
capture must refuse before it copies anything.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time

import numpy as np
import pytest

import cudamagic
from cudamagic.errors import ArgumentValueError
from cudamagic.launch import capture as cap
from cudamagic.toolchain import tools
from cudamagic.toolchain.sanitizer import SanitizerOutputError, SanitizerTool, parse_xml

from .test_debug_tools import TOOLS, _capture_of_every_kind, _DeviceArray, _host_copy


def _mutants(data: bytes, seed: int, count: int):
    rng = random.Random(seed)
    for _ in range(count):
        b = bytearray(data)
        how = rng.randrange(4)
        if how == 0:  # flip bytes
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif how == 1:  # cut
            del b[rng.randrange(len(b)):]
        elif how == 2:  # drop a span
            i = rng.randrange(len(b))
            del b[i:i + rng.randint(1, 32)]
        else:  # repeat a span
            i = rng.randrange(len(b))
            b[i:i] = b[i:i + rng.randint(1, 32)]
        yield bytes(b)


def test_every_damaged_capture_is_read_whole_or_refused():
    data = cap.encode_capture(_capture_of_every_kind())
    refused = 0
    for mutant in _mutants(data, seed=28, count=600):
        try:
            c = cap.decode_capture(mutant)
        except ValueError:
            refused += 1
            continue
        assert isinstance(c, cap.Capture)  # a flip inside an array's bytes reads as other data
    assert refused > 300


@pytest.mark.parametrize("name", ["oob_write", "race", "divergent", "clean"])
def test_every_damaged_report_is_read_or_refused_with_the_projects_error(name):
    path = TOOLS / "recorded" / f"{name}.xml"
    data = (path if path.exists() else TOOLS / "documented" / f"{name}.xml").read_bytes()
    for mutant in _mutants(data, seed=len(name), count=300):
        try:
            findings = parse_xml(mutant, SanitizerTool.MEMCHECK)
        except SanitizerOutputError:
            continue
        assert all(f.line is None or isinstance(f.line, int) for f in findings)


@pytest.mark.parametrize("record, field, want", [
    ("<line>abc</line>", "line", None),
    ("<line>-3</line>", "line", -3),
    ("<threadId><x>1</x><y>2</y></threadId>", "thread", None),  # no z: not a thread
    ("<threadId><x>1</x><y>2</y><z>q</z></threadId>", "thread", None),
    ("<size>1,024</size>", "size", 1024),
    ("<address>0xZZ</address>", "address", None),
    ("", "file", None),
])
def test_a_record_with_a_field_missing_or_garbled_leaves_it_none(record, field, want):
    where = record if field in ("line", "file") else ""
    what = record if field not in ("line", "file") else ""
    xml = (f"<ComputeSanitizerOutput><record><kind>Memory</kind><what><text>Invalid __global__ "
           f"read of size 4 bytes</text>{what if field in ('size', 'address') else ''}</what>"
           f"{what if field == 'thread' else ''}<deviceStack><frame>{where}</frame>"
           "</deviceStack></record></ComputeSanitizerOutput>").encode()
    (finding,) = parse_xml(xml, SanitizerTool.MEMCHECK)
    assert getattr(finding, field) == want


def _grandchild_script(tmp_path) -> list[str]:
    marker = tmp_path / "grandchild.pid"
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
            f"open({str(marker)!r}, 'w').write(str(p.pid))\n"
            "time.sleep(120)\n")
    return [sys.executable, "-c", code], marker


def _wait_for(path, seconds=60.0):
    end = time.monotonic() + seconds
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < end, "the child did not start"
        time.sleep(0.05)
    return int(path.read_text())


def _gone(pid: int, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie of ours is gone too
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def test_a_hung_child_is_stopped_with_everything_it_started(tmp_path):
    argv, marker = _grandchild_script(tmp_path)
    seen = {}

    def watch():
        seen["pid"] = _wait_for(marker)

    t = threading.Thread(target=watch)
    t.start()
    with pytest.raises(Exception) as info:
        tools.run_child(argv, timeout=20)
    t.join()
    assert type(info.value).__name__ == "TimeoutExpired"
    assert _gone(seen["pid"])


def test_ctrl_c_during_a_tool_run_stops_the_child_and_is_raised(tmp_path):
    argv, marker = _grandchild_script(tmp_path)

    def interrupt():
        _wait_for(marker)
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=interrupt)
    t.start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        tools.run_child(argv, timeout=120)
    t.join()
    assert time.monotonic() - started < 60
    assert _gone(int(marker.read_text()))


@pytest.mark.parametrize("shape, strides", [
    ((1 << 40,), (4,)),  # a terabyte of float32
    ((1 << 20, 1 << 20), (1 << 22, 4)),
])
def test_a_capture_refuses_more_than_it_copies_before_copying(shape, strides):
    k = cudamagic.build('extern "C" __global__ void k(const float* a) {}', use_cache=False)["k"]

    class Huge(_DeviceArray):
        def __init__(self):
            self.__cuda_array_interface__ = {"shape": shape, "strides": strides,
                                             "typestr": "<f4", "data": (1 << 20, True),
                                             "version": 3}

    copied = []
    with pytest.raises(ArgumentValueError, match="more than a tool run copies"):
        cap.capture("k", k.params, (1,), (1,), (Huge(),),
                    copy=lambda p, n: copied.append(n) or b"")
    assert copied == []


def test_an_empty_array_travels_as_an_empty_buffer():
    k = cudamagic.build('extern "C" __global__ void k(float* a, int n) {}',
                        use_cache=False)["k"]
    c = cap.capture("k", k.params, (1,), (1,), (_DeviceArray(np.zeros(0, np.float32)), 0),
                    copy=_host_copy)
    assert c.args[0].contents == b"" and cap.decode_capture(cap.encode_capture(c)) == c
    slots, placed = cap.rebuild(c, lambda n: 0x1000, lambda p, d: None)
    assert placed == [cap.Placement(0, 0x1000, 0)]


def test_an_api_error_takes_no_place_from_the_host_stack():
    from cudamagic.toolchain.sanitizer import FindingKind

    findings = parse_xml((TOOLS / "documented" / "oob_write.xml").read_bytes(),
                         SanitizerTool.MEMCHECK)
    (api,) = [f for f in findings if f.kind is FindingKind.API]
    assert (api.function, api.file, api.line) == ("", None, None)


@pytest.mark.parametrize("make", [
    lambda tmp: tmp / "a-file",  # the temporary folder is a file
    lambda tmp: tmp / "missing" / "deeper",  # it does not exist
])
def test_no_scratch_folder_is_the_projects_error_saying_what_to_do(tmp_path, monkeypatch, make):
    import tempfile

    (tmp_path / "a-file").write_text("x")
    monkeypatch.setattr(tempfile, "tempdir", str(make(tmp_path)))
    with pytest.raises(tools.ScratchError, match="set TMPDIR to a writable folder"):
        tools.scratch_folder()


# (a __cuda_array_interface__ that lies, what the refusal says): the launch itself reads only
# the pointer, but a capture copies what shape and strides describe, so each must hold
LYING = {
    "a negative extent": ({"shape": (-5,), "strides": (4,)}, "negative extent"),
    "a negative extent, C order": ({"shape": (-3, 4)}, "negative extent"),
    "fewer strides than dimensions": ({"shape": (4, 1000), "strides": (4,)},
                                      "one stride per dimension"),
    "more strides than dimensions": ({"shape": (4,), "strides": (4, 4000)},
                                     "one stride per dimension"),
    "a fractional extent": ({"shape": (2.7,)}, "not a tuple of integers"),
    "a text shape": ({"shape": "abc"}, "not a tuple of integers"),
    "an int for a shape": ({"shape": 5}, "not a tuple of integers"),
    "a shape of None": ({"shape": None}, "not a tuple of integers"),
    "an extent written as text": ({"shape": ("3",)}, "not a tuple of integers"),
    "a bool extent": ({"shape": (True,)}, "not a tuple of integers"),
    "a fractional stride": ({"shape": (4,), "strides": (4.5,)}, "not a tuple of integers"),
    "memory below address 0": ({"shape": (4,), "strides": (-4,), "data": (4, False)},
                               "outside the address space"),
    "memory past 2**64": ({"shape": (4,), "data": (2**64 - 8, False)},
                          "outside the address space"),
    "a huge negative stride": ({"shape": (2,), "strides": (-(1 << 62),)},
                               "outside the address space"),
}


@pytest.mark.parametrize("lie, says", LYING.values(), ids=list(LYING))
def test_a_lying_array_interface_is_refused_before_anything_is_copied(lie, says):
    # before: shape (-5,) copied 28 bytes from 24 bytes below the pointer, strides (4,) for a
    # (4, 1000) array copied 16 bytes (the child's buffer then far too small: false
    # out-of-bounds findings), 2.7 was taken as 2, a text shape or None a raw ValueError or
    # TypeError, an address below 0 reached the driver's copy
    k = cudamagic.build('extern "C" __global__ void k(const float* a) {}', use_cache=False)["k"]

    class Lying:
        def __init__(self):
            self.__cuda_array_interface__ = {"typestr": "<f4", "data": (1 << 20, True),
                                             "version": 3, "strides": None, **lie}

    copied, asked = [], []
    with pytest.raises(ArgumentValueError, match=says) as refused:
        cap.capture("k", k.params, (1,), (1,), (Lying(),),
                    copy=lambda p, n: copied.append(n) or bytes(n),
                    ready=lambda: asked.append(1))
    assert "parameter 0" in str(refused.value)
    assert copied == [] and asked == []


@pytest.mark.parametrize("given, taken", [(1, (1,)), (np.int64(1), (1,)), ([1], (1,)),
                                          ((), ()), (None, "refused"), ("1", "refused"),
                                          (True, "refused"), ([0], "refused"),
                                          ([1.0], "refused")])
def test_uninitialized_takes_one_index_or_several_and_refuses_the_rest(given, taken):
    # before: uninitialized=1 (one index, as people write it) raised a raw TypeError
    k = cudamagic.build('extern "C" __global__ void k(int n, float* a) {}',
                        use_cache=False)["k"]
    a = _DeviceArray(np.zeros(4, np.float32))
    if taken == "refused":
        with pytest.raises(ArgumentValueError, match="uninitialized"):
            cap.capture("k", k.params, (1,), (1,), (3, a), copy=_host_copy,
                        uninitialized=given)
        return
    c = cap.capture("k", k.params, (1,), (1,), (3, a), copy=_host_copy, uninitialized=given)
    assert tuple(x.index for x in c.args if x.kind is cap.ArgKind.ARRAY and not x.copied) \
        == taken


@pytest.mark.parametrize("line, says", [
    # k's argument 0 is an array, bad's an int
    ("--uninitialized 0 k(1, 32, (x, 4)); bad(1, 32, (4, x))", "0 is not the index of a pointer"),
    ("--tool nosuch k(1, 32, (x, 4)); bad(1, 32, (4, x))", "nosuch"),
])
def test_cuda_sanitize_checks_its_options_against_every_launch_before_the_first(line, says):
    # before: the first launch started (here: NoDeviceError, no GPU) before the second's
    # --uninitialized index was checked
    from cudamagic.launch.tool_run import sanitize_line

    k = cudamagic.build('extern "C" __global__ void k(float* a, int n) {}',
                        use_cache=False)["k"]
    bad = cudamagic.build('extern "C" __global__ void bad(int n, float* a) {}',
                          use_cache=False)["bad"]
    with pytest.raises(ArgumentValueError, match=says):
        sanitize_line(line, {"k": k, "bad": bad, "x": _DeviceArray(np.zeros(4, np.float32))})


_ENTITIES = ('<?xml version="1.0" encoding="{}"?>\n<!DOCTYPE r [<!ENTITY a "AAAAAAAAAA">'
             '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>\n<ComputeSanitizerOutput><record>'
             '<kind>Error</kind><text>&b;</text></record></ComputeSanitizerOutput>')


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8"])
def test_a_report_in_another_encoding_cannot_hide_its_entities(encoding):
    # before: the DTD check looked for the bytes b"<!DOCTYPE", so a UTF-16 report with a BOM
    # declared its entities and expat expanded them (the text read 100 A's)
    data = _ENTITIES.format(encoding.upper()).encode(encoding)
    with pytest.raises(SanitizerOutputError, match="refused"):
        parse_xml(data, SanitizerTool.MEMCHECK)


def test_a_huge_report_is_refused_by_its_size_before_it_is_read(tmp_path):
    # before: the tool run read the whole file into memory (report.read_bytes()), then
    # compared its length: a sparse terabyte was a MemoryError or a machine out of memory
    from cudamagic.toolchain.sanitizer import read_xml

    report = tmp_path / "report.xml"
    with open(report, "wb") as f:
        f.truncate(1 << 40)
    started = time.monotonic()
    with pytest.raises(SanitizerOutputError, match="more than the 64 MiB"):
        read_xml(report, SanitizerTool.MEMCHECK)
    assert time.monotonic() - started < 5
    assert read_xml(tmp_path / "absent.xml", SanitizerTool.MEMCHECK) == ()


@pytest.mark.parametrize("where", ["missing/report.xml", "."])
def test_a_save_report_that_cannot_be_written_is_refused_before_the_run(tmp_path, where,
                                                                        monkeypatch):
    # before: the run went ahead (child, tool, findings) and the final copy raised
    # FileNotFoundError or IsADirectoryError, losing the findings
    monkeypatch.chdir(tmp_path)
    k = cudamagic.build('extern "C" __global__ void k(float* a) {}', use_cache=False)["k"]
    with pytest.raises(ArgumentValueError, match="save_report"):
        k.sanitize(1, 1, (_DeviceArray(np.zeros(4, np.float32)),), save_report=where)


def _aliased_rows():
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(3, np.float32)
    # (the arguments, the child's buffers, whether a and b share one)
    return {"the same array twice": ((x, x, y), [32, 12], True),
            "overlapping views": ((x[:-1], x[1:], y), [32, 12], True),
            "a view inside the array": ((x, x[2:5], y), [32, 12], True),
            "touching, not sharing": ((x[:4], x[4:], y), [16, 16, 12], False),
            "apart": ((x[:2], x[4:], y), [8, 16, 12], False)}


@pytest.mark.parametrize("row", list(_aliased_rows()))
def test_arguments_that_share_memory_in_the_notebook_share_it_in_the_child(row):
    # before: each array argument got a buffer of its own, so k(x, x) (an in-place kernel) or
    # k(x[:-1], x[1:]) ran on unrelated copies: a write through one was not seen through the
    # other, and the tool watched allocations the notebook's launch never had
    args, buffers, shared = _aliased_rows()[row]
    k = cudamagic.build('extern "C" __global__ void k(float* a, float* b, float* c) {}',
                        use_cache=False)["k"]
    c = cap.capture("k", k.params, (1,), (1,), tuple(_DeviceArray(a) for a in args),
                    copy=_host_copy)
    memory: dict[int, bytearray] = {}

    def alloc(n):
        base = 0x100000 * (len(memory) + 1)
        memory[base] = bytearray(n)
        return base

    def write(address, data):
        base = address & ~0xFFFFF
        memory[base][address - base:address - base + len(data)] = data

    slots, placed = cap.rebuild(c, alloc, write)
    assert [len(m) for m in memory.values()] == buffers
    a, b, _ = (int.from_bytes(s, "little") for s in slots)
    parent = [v.__array_interface__["data"][0] for v in args]
    assert (b - a == parent[1] - parent[0]) is shared
    for ptr, value in zip((a, b), args[:2]):  # each pointer reads its own array's values
        base = ptr & ~0xFFFFF
        got = np.frombuffer(bytes(memory[base][ptr - base:ptr - base + value.nbytes]),
                            np.float32)
        assert got.tolist() == value.tolist()
    assert [p.nbytes for p in placed] == [v.nbytes for v in args]
