"""The debugging loop without a GPU: finding compute-sanitizer and ncu, their command lines,
compute-sanitizer's reports read into records and mapped to cell lines, addresses named against
the launch's arguments, the launch captured by value and rebuilt, the child process, and the
order of refusals (arguments first, then NoDeviceError).

The compute-sanitizer and ncu reports are the tools' own, recorded on the GPU machine by
scripts/record_tool_fixtures.py into tests/fixtures/tools/recorded (its VERSIONS.txt says which
tools, driver and GPU made them).
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cudamagic
from cudamagic.errors import ArgumentTypeError, ArgumentValueError, NoDeviceError
from cudamagic.launch import capture as cap
from cudamagic.launch.tool_run import LineinfoBuild, SanitizeReport, fold, write_run
from cudamagic.toolchain.tools import profiler, tools
from cudamagic.toolchain.tools.sanitizer import (Access, FindingKind, SanitizerTool, Space,
                                                 parse_xml, sanitizer_argv)
from cudamagic.errors import SanitizerOutputError
from cudamagic.view.debug import sanitize_html, sanitize_text

from .planted import LINE_OFFSET, PLANTED

TOOLS = Path(__file__).parent / "fixtures" / "tools"
NO_GPU = not cudamagic.gpu_available()


def _report(name: str) -> bytes:
    return (TOOLS / "recorded" / f"{name}.xml").read_bytes()


# --- finding the tools --------------------------------------------------------------------------

def test_the_wheels_compute_sanitizer_is_found_with_its_version(monkeypatch):
    import importlib.metadata
    try:
        importlib.metadata.version("nvidia-cuda-sanitizer-api")
    except importlib.metadata.PackageNotFoundError:
        # the test extra has it; the GPU machine's carry leaves it out (its toolkit has one)
        pytest.skip("the nvidia-cuda-sanitizer-api wheel is not installed here")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no toolkit's on it (a GPU machine has one)
    tool = tools.look(tools.ToolKind.SANITIZER)
    assert isinstance(tool, tools.Tool), tool
    assert tool.found is tools.Found.WHEEL
    assert "compute-sanitizer" in tool.path and tool.version.startswith("Version ")


def _fake_tool(folder: Path, name: str, version: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho 'NVIDIA (R) fake'\necho '{version}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_cuda_home_comes_before_the_wheel_and_ncu_is_found_there(monkeypatch, tmp_path):
    sanitizer = _fake_tool(tmp_path / "compute-sanitizer", "compute-sanitizer", "Version 9.9")
    ncu = _fake_tool(tmp_path / "bin", "ncu", "Version 2099.1.0")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    found = tools.look(tools.ToolKind.SANITIZER)
    assert (found.path, found.found, found.version) == (str(sanitizer), tools.Found.CUDA_HOME,
                                                        "Version 9.9")
    found = tools.look(tools.ToolKind.NCU)
    assert (found.path, found.version) == (str(ncu), "Version 2099.1.0")


def test_a_tool_that_does_not_run_is_passed_over(monkeypatch, tmp_path):
    broken = tmp_path / "bin" / "ncu"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    found = tools.look(tools.ToolKind.NCU)
    if isinstance(found, tools.Tool):  # a machine with Nsight Compute installed
        assert found.path != str(broken)
    else:
        assert str(broken) in found.looked
        assert "not pip-installable" in found.describe() and "CUDA_HOME" in found.describe()


def test_a_tool_installed_after_a_failed_look_is_found(monkeypatch, tmp_path):
    # before: find() was lru_cached, a Missing included: after "ncu not found", installing it
    # or setting CUDA_HOME changed nothing until the Jupyter kernel was restarted
    monkeypatch.setattr(tools, "_FOUND", {}, raising=False)
    if hasattr(tools.find, "cache_clear"):
        tools.find.cache_clear()
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(tools.glob, "glob", lambda pattern: [])  # no /opt/nvidia/nsight-compute
    monkeypatch.setattr(tools.os.path, "isfile",
                        lambda p, real=os.path.isfile: real(p) and str(tmp_path) in str(p))
    assert isinstance(tools.find(tools.ToolKind.NCU), tools.Missing)
    ncu = _fake_tool(tmp_path / "bin", "ncu", "Version 2099.1.0")
    found = tools.find(tools.ToolKind.NCU)
    assert isinstance(found, tools.Tool) and found.path == str(ncu)
    ncu.unlink()
    assert tools.find(tools.ToolKind.NCU) == found  # a found tool is not looked for again
    if hasattr(tools.find, "cache_clear"):
        tools.find.cache_clear()


def test_missing_ncu_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(tools, "find", lambda kind: tools.Missing(kind, ("/x/ncu",),
                                                                   tools._INSTALL[kind]))
    with pytest.raises(tools.ToolMissingError, match="Nsight Compute.*CUDA toolkit"):
        tools.require(tools.ToolKind.NCU)


# --- command lines ------------------------------------------------------------------------------

@pytest.mark.parametrize("tool", list(SanitizerTool))
def test_the_sanitizer_command_saves_xml_and_runs_the_child_last(tool):
    argv = sanitizer_argv("/cs", tool, "/r.xml", ["python", "-m", "cudamagic.pipeline.child", "d", "0"])
    assert argv[0] == "/cs" and argv[-5:] == ["python", "-m", "cudamagic.pipeline.child", "d", "0"]
    assert argv[argv.index("--tool") + 1] == tool.value
    assert "--xml" in argv and argv[argv.index("--save") + 1] == "/r.xml"


def test_the_ncu_command_picks_the_kernel_by_its_symbol_and_exports_a_report():
    argv = profiler.ncu_argv("/ncu", "_Z4copyPKfPfi", "/r.ncu-rep", ["python", "c"])
    assert argv[argv.index("--kernel-name") + 1] == "_Z4copyPKfPfi"
    assert argv[argv.index("--kernel-name-base") + 1] == "mangled"
    assert argv[argv.index("--export") + 1] == "/r.ncu-rep" and argv[-2:] == ["python", "c"]
    metrics = argv[argv.index("--metrics") + 1].split(",")
    assert set(profiler.METRICS.values()) <= set(metrics)


# --- reports into records -----------------------------------------------------------------------

@pytest.mark.parametrize("planted", PLANTED, ids=lambda p: p.name)
def test_each_planted_bug_is_read_with_its_kind_and_line(planted):
    tool = SanitizerTool(planted.tool)
    findings = parse_xml(_report(planted.name), tool)
    ours = [f for f in findings if f.kind is not FindingKind.API]
    assert ours, "the report holds the planted bug"
    first = ours[0]
    assert first.kind is FindingKind[planted.kind]
    assert first.file == "cell.cu" and first.line in (planted.line, *planted.also)
    assert first.thread is not None and first.block is not None
    if first.kind is FindingKind.RACE:  # a hazard: both accesses, each with its line and thread
        assert first.peer is not None and first.peer.thread is not None
        assert {first.line, first.peer.line} == {planted.line, *planted.also}
        assert {first.access, first.peer.access} <= {Access.READ, Access.WRITE}
    else:
        assert first.peer is None
    if planted.space:
        assert first.space is Space[planted.space]
    if planted.access:
        assert first.access is Access[planted.access]


def test_a_clean_report_has_no_findings():
    assert parse_xml(_report("clean"), SanitizerTool.MEMCHECK) == ()


@pytest.mark.parametrize("data, says", [
    (b"", "not well-formed"),
    (b"<ComputeSanitizerOutput><record>", "not well-formed"),
    (b"<other/>", "root element is <other>"),
    (b'<!DOCTYPE x [<!ENTITY a "aaaa">]><ComputeSanitizerOutput/>', "DTD"),
])
def test_a_report_that_is_not_the_tools_is_refused(data, says):
    with pytest.raises(SanitizerOutputError, match=says):
        parse_xml(data, SanitizerTool.MEMCHECK)


def _oob_capture() -> cap.Capture:
    x = cap.CapturedArg(0, cap.ArgKind.ARRAY, bytes(8), "float*", "x", "<f4", (256,), (4,), 0,
                        bytes(1024), 0x5000)
    n = cap.CapturedArg(1, cap.ArgKind.BYTES, (4096).to_bytes(4, "little"), "int", "n")
    return cap.Capture("oob_write", (1, 1, 1), (256, 1, 1), 0, (x, n))


def test_findings_fold_by_kind_and_line_and_map_to_the_cell():
    planted = PLANTED[0]
    findings = parse_xml(_report("oob_write"), SanitizerTool.MEMCHECK)
    base = min(f.address for f in findings if f.address is not None) - 4 * 4096
    build = LineinfoBuild(b"", planted.source, LINE_OFFSET, "cell.cu", True)
    folded = fold(findings, build, _oob_capture(), [cap.Placement(0, base, 1024)])
    ours = [cf for cf in folded if cf.finding.kind is FindingKind.OUT_OF_BOUNDS]
    assert len(ours) == 1
    cf = ours[0]
    writes = [f for f in findings if f.kind is FindingKind.OUT_OF_BOUNDS]
    assert cf.count == len(writes)
    assert cf.cell_line == planted.line + LINE_OFFSET
    assert cf.source_line.strip() == "x[i + n] = 1.0f;"
    # the first write is x[4096]: 4096 * 4 - 1024 bytes past the end of the 1 KiB array
    assert cf.place.describe() == "15 360 bytes past the end of argument 0, x: float32[256]"
    report = SanitizeReport(SanitizerTool.MEMCHECK, "Version 1", "oob_write", (1, 1, 1),
                            (256, 1, 1), folded, len(findings), True)
    text = sanitize_text(report)
    assert f"at cell line {planted.line + LINE_OFFSET} ({len(writes)} times)" in text
    assert "__global__ write of 4 bytes" in text and "thread (0,0,0) in block (0,0,0)" in text
    assert "15 360 bytes past the end of argument 0, x: float32[256]" in sanitize_html(report)


def test_race_findings_fold_by_both_their_accesses():
    """The recorded racecheck report (write at line 3 against a read at line 4, and the
    reverse) with one hazard more: the same write against another write of line 3. Each of
    the three is its own item, each naming its own other access and line."""
    race = next(p for p in PLANTED if p.name == "race")
    findings = list(parse_xml(_report("race"), SanitizerTool.RACECHECK))
    war = next(f for f in findings if f.line == 3)
    findings.append(dataclasses.replace(war, peer=dataclasses.replace(war.peer, line=3,
                                                                      access=Access.WRITE)))
    build = LineinfoBuild(b"", race.source, LINE_OFFSET, "cell.cu", True)
    folded = fold(findings, build, _oob_capture(), [])
    got = {(cf.cell_line, cf.finding.access, cf.peer_line, cf.finding.peer.access): cf.count
           for cf in folded}
    line3, line4 = 3 + LINE_OFFSET, 4 + LINE_OFFSET
    assert got == {(line3, Access.WRITE, line4, Access.READ): 744,
                   (line4, Access.READ, line3, Access.WRITE): 256,
                   (line3, Access.WRITE, line3, Access.WRITE): 1}
    text = sanitize_text(SanitizeReport(SanitizerTool.RACECHECK, "Version 1", "race",
                                        (1, 1, 1), (256, 1, 1), folded, len(findings), True))
    assert f"against a read at cell line {line4}" in text
    assert text.count(f"against a write at cell line {line3}") == 2


@pytest.mark.parametrize("space, named", [
    (Space.GLOBAL, True), (Space.UNKNOWN, True), (Space.SHARED, False), (Space.LOCAL, False)])
def test_only_a_global_address_is_named_against_the_arguments(space, named):
    """A __shared__ or local address is in its own window: on the H200 a shared read at 0x80
    was said to be "139 988 423 408 640 bytes before the start of argument 0"."""
    from cudamagic.toolchain.tools.sanitizer import Finding

    f = Finding(SanitizerTool.MEMCHECK, FindingKind.OUT_OF_BOUNDS, "Invalid read", space,
                Access.READ, 4, 0x5000 + 2048, "oob_write", "cell.cu", 4)
    build = LineinfoBuild(b"", PLANTED[0].source, LINE_OFFSET, "cell.cu", True)
    (cf,) = fold([f], build, _oob_capture(), [cap.Placement(0, 0x5000, 1024)])
    assert (cf.place is not None) is named
    if named:
        assert cf.place.describe() == "1 024 bytes past the end of argument 0, x: float32[256]"


def test_a_clean_run_says_so_with_the_tools_name():
    report = SanitizeReport(SanitizerTool.RACECHECK, "Version 2026.4.0.0", "race", (1, 1, 1),
                            (256, 1, 1))
    assert report.clean
    assert sanitize_text(report) == ("racecheck: no errors in race(1,1,1)(256,1,1) "
                                     "(Version 2026.4.0.0)")
    assert "clean" in sanitize_html(report)


@pytest.mark.parametrize("address, says", [
    (0x1000, "byte 0 of argument 0, x: float32[256]"),
    (0x13FF, "byte 1 023 of argument 0, x: float32[256]"),
    (0x1400, "0 bytes past the end of argument 0, x: float32[256]"),
    (0x0FFC, "4 bytes before the start of argument 0, x: float32[256]"),
    (0x9000 + 512 * 8 + 8, "8 bytes past the end of argument 2: float64[16, 32]"),
])
def test_an_address_is_named_against_the_nearest_argument(address, says):
    x = cap.CapturedArg(0, cap.ArgKind.ARRAY, bytes(8), "float*", "x", "<f4", (256,), (4,))
    m = cap.CapturedArg(2, cap.ArgKind.ARRAY, bytes(8), "double*", "", "<f8", (16, 32),
                        (256, 8))
    c = cap.Capture("k", (1, 1, 1), (1, 1, 1), 0, (x, m))
    placed = [cap.Placement(0, 0x1000, 1024), cap.Placement(2, 0x9000, 4096)]
    assert cap.name_address(address, c, placed).describe() == says


# --- the capture record ---------------------------------------------------------------------------

def _capture_of_every_kind() -> cap.Capture:
    rng = np.random.default_rng(1)
    a = rng.random(12).astype(np.float32)
    rev = np.arange(6, dtype=np.int16)
    args = (cap.CapturedArg(0, cap.ArgKind.ARRAY, bytes(8), "float*", "a", "<f4", (3, 4),
                            (16, 4), 0, a.tobytes(), 0x7000),
            cap.CapturedArg(1, cap.ArgKind.NULL, bytes(8), "int*"),
            cap.CapturedArg(2, cap.ArgKind.BYTES, np.float64(2.5).tobytes(), "double", "s"),
            cap.CapturedArg(3, cap.ArgKind.ARRAY, bytes(8), "short*", "r", "<i2", (6,), (-2,),
                            10, rev.tobytes(), 0x8000),
            cap.CapturedArg(4, cap.ArgKind.ARRAY, bytes(8), "float*", "fresh", "<f4", (5,),
                            (4,), 0, b"", 0x9000, copied=False),
            cap.CapturedArg(5, cap.ArgKind.BYTES, bytes(range(24)), "S", "st"))
    return cap.Capture("k<int>", (2, 3, 1), (32, 4, 1), 96, args)


def test_a_capture_comes_back_whole_from_its_bytes():
    c = _capture_of_every_kind()
    assert cap.decode_capture(cap.encode_capture(c)) == c


def test_a_damaged_capture_is_refused():
    data = cap.encode_capture(_capture_of_every_kind())
    for bad in (data[:-1], data + b"x", b"PICKLE" + data[6:], data[:20]):
        with pytest.raises(ValueError):
            cap.decode_capture(bad)


# (what changes argument 0, a float32 (3, 4) array of 48 bytes, in an otherwise whole record;
# whether its 48 bytes still are what its shape, strides and dtype cover)
_COVER_ROWS = {
    "as captured": ({}, True),
    "a larger shape": ({"shape": (4, 4)}, False),
    "a smaller shape": ({"shape": (2, 4)}, False),
    "wider strides": ({"strides": (32, 4)}, False),
    "a wider dtype": ({"dtype": "<f8", "strides": (32, 8)}, False),
    "a narrower dtype": ({"dtype": "<f2", "strides": (8, 2)}, False),
    "a transposed view of the same bytes": ({"shape": (4, 3), "strides": (4, 16)}, True),
}


@pytest.mark.parametrize("row", list(_COVER_ROWS))
def test_a_capture_whose_bytes_are_not_what_its_array_covers_is_refused(row):
    """Each array's bytes are checked against what its shape, strides and dtype cover: a
    record saying a (4, 4) array with 48 bytes would have the child read past them."""
    change, whole = _COVER_ROWS[row]
    c = _capture_of_every_kind()
    a = dataclasses.replace(c.args[0], **change)
    data = cap.encode_capture(dataclasses.replace(c, args=(a,) + c.args[1:]))
    if whole:
        assert cap.decode_capture(data).args[0] == a
    else:
        with pytest.raises(ValueError, match="argument 0's bytes"):
            cap.decode_capture(data)


def test_the_child_rebuilds_each_array_in_its_own_buffer_and_points_the_slots_there():
    c = _capture_of_every_kind()
    memory: dict[int, bytearray] = {}
    next_base = [0x100000]

    def alloc(n):
        base = next_base[0]
        next_base[0] += 0x10000
        memory[base] = bytearray(n)
        return base

    def write(ptr, data):
        memory[ptr][:len(data)] = data

    slots, placed = cap.rebuild(c, alloc, write)
    assert [p.nbytes for p in placed] == [48, 12, 20]
    assert slots[1] == bytes(8) and slots[2] == c.args[2].packed and slots[5] == bytes(range(24))
    # the reversed array's pointer is its first element, 10 bytes into its buffer
    assert int.from_bytes(slots[3], "little") == placed[1].base + 10
    assert bytes(memory[placed[0].base]) == c.args[0].contents
    assert bytes(memory[placed[2].base]) == bytes(20)  # left fresh (initcheck)


@pytest.mark.parametrize("shape, strides, itemsize, want", [
    ((256,), (4,), 4, (0, 1024)), ((3, 4), (16, 4), 4, (0, 48)), ((6,), (-2,), 2, (-10, 12)),
    ((4, 0), (4, 4), 4, (0, 0)), ((2, 3), (4, 8), 4, (0, 24)), ((5,), (0,), 8, (0, 8)),
])
def test_the_extent_of_an_array(shape, strides, itemsize, want):
    assert cap.extent(shape, strides, itemsize) == want


# --- the kernel's methods: arguments first, then the GPU ------------------------------------------

@pytest.fixture(scope="module")
def oob(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return cudamagic.build(PLANTED[0].source, cache=str(cache))


@pytest.mark.parametrize("call, error, says", [
    (lambda k: k.sanitize((1,), (256,), (None, 1.5)), ArgumentTypeError, "parameter 1"),
    (lambda k: k.sanitize((1,), (256,), (None,)), ArgumentTypeError, "takes 2 arguments"),
    (lambda k: k.sanitize((0,), (256,), (None, 1)), ArgumentValueError, "at least 1"),
    (lambda k: k.sanitize((1,), (256,), (None, 1), tool="valgrind"), ArgumentValueError,
     "memcheck, racecheck"),
    (lambda k: k.sanitize((1,), (256,), (None, 1), uninitialized=(1,)), ArgumentValueError,
     "not the index of a pointer"),
    (lambda k: k.sanitize((1,), (256,), (None, 1), cluster=(2, 1, 1)), ArgumentTypeError,
     "cluster"),
    (lambda k: k.profile((1,), (256,), (np.zeros(4, np.float32), 1)), ArgumentTypeError,
     "host array"),
])
def test_bad_arguments_are_refused_before_anything_starts(oob, call, error, says):
    with pytest.raises(error, match=says):
        call(oob["oob_write"])


@pytest.mark.skipif(not NO_GPU, reason="needs a machine without a GPU")
@pytest.mark.parametrize("method", ["sanitize", "profile"])
def test_without_a_gpu_good_arguments_get_no_device_error(oob, method):
    with pytest.raises(NoDeviceError, match="no CUDA device"):
        getattr(oob["oob_write"], method)((1,), (256,), (None, 4096))


def test_the_lineinfo_build_is_the_same_cell_cached_under_its_own_key(tmp_path):
    planted = PLANTED[2]
    m = cudamagic.build(planted.source, cache=str(tmp_path))
    build = m.debug.lineinfo()
    assert build.lineinfo and build.source == planted.source
    assert m.debug.lineinfo() is build  # once per module
    again = cudamagic.build(planted.source, options=["-lineinfo"], cache=str(tmp_path))
    assert again.hit and again.key != m.key
    # a cell built with -lineinfo already is its own lineinfo build: nothing more is compiled
    assert again.debug.lineinfo().payload == again.payload()


def test_the_child_takes_the_module_and_the_capture_and_says_why_it_could_not_run(oob,
                                                                                   tmp_path):
    build = oob.debug.lineinfo()
    c = _oob_capture()
    argv = write_run(tmp_path, c, build, 0)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run(argv, capture_output=True, env=env, timeout=120)
    said = json.loads((tmp_path / "placed.json").read_text())
    if NO_GPU:
        assert done.returncode == 3 and "no CUDA device" in said["error"], done.stderr
    else:
        assert done.returncode == 0 and len(said["placed"]) == 1, said


# --- printf ---------------------------------------------------------------------------------------

def test_the_cubin_says_which_kernels_call_printf(tmp_path):
    from .planted import PRINTF_SOURCE

    src = PRINTF_SOURCE + """
__device__ __noinline__ void say(int v) { printf("%d\\n", v); }
extern "C" __global__ void through_a_call(int v) { say(v); }
"""
    m = cudamagic.build(src, cache=str(tmp_path))
    assert {k: m[k].prints for k in m} == {"hello": True, "silent": False,
                                           "through_a_call": True}


def test_an_assert_only_kernel_prints_so_its_message_is_flushed_with_its_cell(tmp_path):
    """A failing assert() writes its message to the device's output buffer as printf does:
    a kernel whose only output is an assert, directly or through a call, prints."""
    src = """#include <cassert>
__device__ __noinline__ void check(int v) { assert(v > 0); }
extern "C" __global__ void asserts(int v) { assert(v > 0); }
extern "C" __global__ void asserts_through_a_call(int v) { check(v); }
extern "C" __global__ void asserts_nothing(int* x, int v) { x[0] = v; }
"""
    m = cudamagic.build(src, cache=str(tmp_path))
    assert {k: m[k].prints for k in m} == {"asserts": True, "asserts_through_a_call": True,
                                           "asserts_nothing": False}


class _DeviceArray:
    """A stand-in for a device array (the GPU is the part that cannot run here): host memory
    behind a __cuda_array_interface__, its address the host buffer's."""

    def __init__(self, host: np.ndarray) -> None:
        self.host = host
        self.__cuda_array_interface__ = {
            "shape": host.shape, "typestr": host.dtype.str, "version": 3,
            "data": (host.__array_interface__["data"][0], False),
            "strides": None if host.flags.c_contiguous else host.strides}


def _host_copy(ptr: int, nbytes: int) -> bytes:
    import ctypes

    return ctypes.string_at(ptr, nbytes)


def test_capture_takes_arrays_by_value_with_their_layout_and_scalars_as_their_bytes(oob):
    import ctypes

    k = cudamagic.build("""extern "C" __global__ void k(const float* a, double s, short* r,
                           int* none) {}""", use_cache=False)["k"]
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    a = base[1:, ::2]  # strided: 3 x 3, strides (24, 8)
    r = np.arange(6, dtype=np.int16)[::-1]  # negative stride
    ready = []
    c = cap.capture("k", k.params, (2,), (32,), (_DeviceArray(a), 2.5, _DeviceArray(r), None),
                    copy=_host_copy, labels=("a", "s", "r", "none"),
                    ready=lambda: ready.append(1))
    assert ready == [1]
    ca, cs, cr, cn = c.args
    assert (ca.kind, ca.dtype, ca.shape, ca.strides, ca.offset) == (
        cap.ArgKind.ARRAY, "<f4", (3, 3), (24, 8), 0)
    # the bytes from the first element to the last one's end, as in memory
    first = a.__array_interface__["data"][0]
    assert ca.contents == ctypes.string_at(first, 2 * 24 + 2 * 8 + 4)
    assert ca.address == first and ca.describe() == "argument 0, a: float32[3, 3]"
    assert (cr.shape, cr.strides, cr.offset, len(cr.contents)) == ((6,), (-2,), 10, 12)
    assert np.frombuffer(cr.contents, np.int16)[::-1].tolist() == r.tolist()
    assert cs.kind is cap.ArgKind.BYTES and cs.packed == np.float64(2.5).tobytes()
    assert cn.kind is cap.ArgKind.NULL
    assert cap.decode_capture(cap.encode_capture(c)) == c


def test_capture_checks_every_argument_before_it_asks_for_the_gpu(oob):
    asked = []
    with pytest.raises(ArgumentTypeError, match="parameter 1"):
        cap.capture("oob_write", oob["oob_write"].params, (1,), (256,),
                    (_DeviceArray(np.zeros(256, np.float32)), 2.5), copy=_host_copy,
                    ready=lambda: asked.append(1))
    assert asked == []


# --- ncu's report -------------------------------------------------------------------------------

class _Metric:
    """What the report interface (ncu_report's IMetric) answers, for a stand-in action."""

    def __init__(self, value=0.0, instances=None):
        self.value, self.instances = value, instances

    def as_double(self):
        return float(self.value)

    def has_correlation_ids(self):
        return self.instances is not None

    def num_instances(self):
        return len(self.instances)

    def as_uint64(self, i):
        return self.instances[i][1]

    def correlation_ids(self):
        return _Metric(instances=[(None, pc) for pc, _ in self.instances])


class _Line:
    def __init__(self, file, line):
        self._file, self._line = file, line

    def file_name(self):
        return self._file

    def line(self):
        return self._line


class _Action:
    """A stand-in for one launch of an ncu report (no report can be made without a GPU): the
    metric names are ncu's, and a recorded report replaces it where tests/fixtures/tools/recorded
    has one."""

    def __init__(self, metrics, lines):
        self.metrics, self.lines = metrics, lines

    def name(self):
        return "burn"

    def metric_names(self):
        return list(self.metrics)

    def metric_by_name(self, name):
        return self.metrics.get(name)

    def source_info(self, pc):
        return self.lines.get(pc)


def test_a_profile_reads_its_figures_stalls_and_hot_lines_by_ncus_metric_names():
    from .planted import PROFILE_SOURCE

    metrics = {profiler.METRICS["duration_ns"]: _Metric(175_800.0),
               profiler.METRICS["compute_pct"]: _Metric(12.0),
               profiler.METRICS["dram_bytes"]: _Metric(134_217_728),
               "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": _Metric(1e9),
               "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio":
                   _Metric(3.5),
               "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": _Metric(0.5),
               "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": _Metric(0),
               "smsp__pcsamp_sample_count": _Metric(instances=[(0x10, 5), (0x20, 80),
                                                               (0x30, 15)])}
    lines = {0x10: _Line("/tmp/x/cell.cu", 8), 0x20: _Line("cell.cu", 9),
             0x30: _Line("/usr/include/other.h", 1)}
    p = profiler.profile_of(_Action(metrics, lines), source=PROFILE_SOURCE, line_offset=1)
    assert p.duration_ns == 175_800.0 and p.compute_pct == 12.0 and p.memory_pct is None
    assert [s.reason for s in p.stalls] == ["long_scoreboard", "wait"]
    assert p.flops == 2e9 and p.intensity == pytest.approx(2e9 / 134_217_728)
    assert [(h.line, h.share) for h in p.hot_lines] == [(10, 0.8), (9, 0.05)]
    assert "v * 1.0000001f" in p.hot_lines[0].text


@pytest.mark.parametrize("name", ["copy", "burn"])
def test_a_recorded_ncu_report_reads_into_a_profile(name):
    path = TOOLS / "recorded" / f"{name}.ncu-rep"
    if not path.exists():
        pytest.skip("no ncu report recorded yet (scripts/record_tool_fixtures.py on a GPU)")
    from .planted import PROFILE_SOURCE  # the cell the reports were made of

    p = profiler.read_report(path, label=name, source=PROFILE_SOURCE, line_offset=LINE_OFFSET)
    assert p.duration_ns and p.dram_bytes and p.achieved_occupancy_pct and p.stalls
    assert p.hot_lines
    if name == "copy":
        assert p.memory_pct > p.compute_pct
    else:
        assert p.compute_pct > p.memory_pct


def test_a_tool_run_compiles_nothing_but_the_one_lineinfo_build(tmp_path, compiler):
    from cudamagic.core.options import options_from_args
    from cudamagic.pipeline.steps import build_module

    source = PLANTED[0].source

    def cell():
        return build_module(source, options_from_args((), ()), cache=str(tmp_path),
                            line_offset=LINE_OFFSET, compiler=compiler)

    first = cell()
    assert len(compiler.calls) == 1
    build = first.debug.lineinfo()
    assert len(compiler.calls) == 2 and build.lineinfo and build.line_offset == LINE_OFFSET
    first.debug.lineinfo()
    again = cell()  # a notebook restart: the cell and its -lineinfo build are both hits
    from cudamagic.store import decode_entry

    assert again.hit
    assert decode_entry(again.debug.lineinfo().payload).cubin == decode_entry(build.payload).cubin
    assert len(compiler.calls) == 2


def test_a_profiles_views_show_ncus_occupancy_beside_cudamagics_and_a_roofline_per_variant():
    from cudamagic.view.debug import profile_html, profile_text

    copy = profiler.Profile("copy", "copy", duration_ns=175_800.0, compute_pct=12.0,
                            memory_pct=61.0, dram_bytes=1.3e8, dram_bytes_per_s=7.6e11,
                            achieved_occupancy_pct=95.0, theoretical_occupancy_pct=100.0,
                            flops=0.0, occupancy_pct=100.0, limited_by=("warps",),
                            stalls=(profiler.Stall("long_scoreboard", 12.5),),
                            hot_lines=(profiler.HotLine(4, "b[i] = a[i];", 0.9, 90),))
    burn = dataclasses.replace(copy, label="burn", flops=6.7e10, dram_bytes=1.3e8,
                               duration_ns=2.0e6)
    text = profile_text(copy)
    assert "95.0 % achieved of 100.0 % theoretical (cudamagic: 100.0 %, limited by warps)" \
        in text
    assert "long_scoreboard 12.50" in text and "cell line 4: 90%  b[i] = a[i];" in text
    page = profile_html(profiler.Comparison((copy, burn)))
    assert "<th>copy</th><th>burn</th>" in page
    assert page.count("<circle") == 1  # copy does no floating-point work: no point of its own


# --- Attacks on the tools' inputs: lying arrays, hostile reports, runs that hang or are interrupted (from the file that held them alone) ---
# Attacks on the debugging loop's parts that run without a GPU: damaged captures and reports
# (seeded mutants: every one is read or refused with the project's error, never another
# exception), a child that hangs or is interrupted (its whole process group goes), sizes a
# capture must refuse before it copies anything.
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
from cudamagic.toolchain.tools import tools
from cudamagic.errors import SanitizerOutputError
from cudamagic.toolchain.tools.sanitizer import SanitizerTool, parse_xml

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
    data = _report(name)
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
    from cudamagic.toolchain.tools.sanitizer import FindingKind

    findings = parse_xml(_report("oob_write"), SanitizerTool.MEMCHECK)
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
    from cudamagic.toolchain.tools.sanitizer import read_xml

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
