"""PTX and fatbins from nvcc loaded like CUBINs: unpacked, picked or compiled for the target by
nvJitLink, cached by content and target, names resolved as for a CUBIN. No GPU."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

import pytest

import cudamagic
from cudamagic.core import process
from cudamagic.errors import ImageError, NameResolutionError
from cudamagic.store import KernelCache
from cudamagic.toolchain.compile import fatbin as fatbin_mod
from cudamagic.toolchain.compile.fatbin import read_fatbin
from cudamagic.toolchain.binary.image import read_cubin
from cudamagic.toolchain.compile.link import CodeKind

from .conftest import FIXTURES

FATBIN = FIXTURES / "nvcc_kernels.fatbin"
COMPRESSED = FIXTURES / "nvcc_kernels_compressed.fatbin"
PTX = FIXTURES / "nvcc_kernels.ptx"
# what nvcc_kernels.cu defines, by the name a user gives and the symbol it is
NAMES = {"axpy<float>": "_Z4axpyIfEvT_PKS0_PS0_i", "fill": "fill", "forward": "forward"}


def _names(module) -> dict[str, str]:
    return {label: k.symbol for label, k in module.kernels.items()}


def test_a_fatbin_is_unpacked():
    entries = read_fatbin(FATBIN.read_bytes())
    assert [(e.kind, e.sm, e.compressed) for e in entries] == [
        (CodeKind.CUBIN, 80, False), (CodeKind.CUBIN, 90, False), (CodeKind.PTX, 90, True)]
    for e in entries[:2]:
        image = read_cubin(e.data)
        assert image.sm == e.sm and set(image.symbols) == set(NAMES.values())
    ptx = entries[2].data.decode()
    assert len(entries[2].data) == entries[2].size
    assert ".target sm_90" in ptx and ".entry forward(" in ptx


def test_compressed_entries_read_as_the_stored_ones():
    """Every entry ZSTD-compressed (-Xfatbin=-compress-all) gives the same bytes as nvcc's
    uncompressed ones."""
    plain, packed = read_fatbin(FATBIN.read_bytes()), read_fatbin(COMPRESSED.read_bytes())
    assert all(e.compressed for e in packed)
    assert [e.data for e in packed] == [e.data for e in plain]


@pytest.mark.parametrize("path", [FATBIN, COMPRESSED, PTX], ids=lambda p: p.name)
def test_fatbins_and_ptx_load_with_every_name_resolved(tmp_path, path):
    module = cudamagic.load_cubin(path, arch="sm_90", cache=tmp_path)
    assert _names(module) == NAMES
    assert module.image.sm == 90
    named = cudamagic.load_cubin(path, ["axpy<float>"], arch="sm_90", cache=tmp_path)
    assert named["axpy<float>"].symbol == NAMES["axpy<float>"]
    with pytest.raises(NameResolutionError):
        cudamagic.load_cubin(path, ["axpy<double>"], arch="sm_90", cache=tmp_path)


def test_the_cubin_for_the_target_is_taken_as_nvcc_made_it(tmp_path):
    entries = read_fatbin(FATBIN.read_bytes())
    for e in (x for x in entries if x.kind is CodeKind.CUBIN):
        module = cudamagic.load_cubin(FATBIN, arch=f"sm_{e.sm}", cache=tmp_path)
        assert module.cubin == e.data
    assert len(KernelCache.wrap(tmp_path)) == 0  # nothing was linked, nothing cached


def test_ptx_is_compiled_for_a_newer_target_and_refused_for_an_older_one(tmp_path):
    newer = cudamagic.load_cubin(FATBIN, arch="sm_100", cache=tmp_path)
    assert newer.image.sm == 100 and _names(newer) == NAMES
    with pytest.raises(ImageError, match=r"sm_80, sm_90, compute_90.*compute_86"):
        cudamagic.load_cubin(FATBIN, arch="sm_86", cache=tmp_path)


def test_what_nvjitlink_made_is_cached_by_content_and_target(tmp_path, monkeypatch):
    first = cudamagic.load_cubin(PTX, arch="sm_90", cache=tmp_path)
    other_target = cudamagic.load_cubin(PTX, arch="sm_100", cache=tmp_path)
    assert other_target.image.sm == 100 and len(KernelCache.wrap(tmp_path)) == 2

    def no_link(*args, **kwargs):
        raise AssertionError("linked again although the cache holds the CUBIN")

    monkeypatch.setattr(fatbin_mod, "link_needing_runtime", no_link)
    again = cudamagic.load_cubin(PTX, arch="sm_90", cache=tmp_path)
    assert again.cubin == first.cubin
    edited = PTX.read_bytes().replace(b"// .globl", b"//  .globl", 1)
    with pytest.raises(AssertionError, match="linked again"):
        cudamagic.load_cubin(edited, arch="sm_90", cache=tmp_path)


# what an upgrade of nvJitLink changes -> (the attribute patched, its new value)
UPGRADES = {
    "a patch release of the wheel (same major.minor)": (
        "toolkit", lambda real: lambda: dataclasses.replace(real(), distributions=tuple(
            d.replace("nvidia_nvjitlink-", "nvidia_nvjitlink-0.") for d in
            real().distributions))),
    "another library loaded (a toolkit's, not the wheel's)": (
        "loaded_libraries", lambda real: lambda stem: ("libnvJitLink.so.13.9.1:123",)),
}


@pytest.mark.parametrize("upgrade", list(UPGRADES))
def test_what_nvjitlink_made_is_not_served_after_nvjitlink_changes(tmp_path, monkeypatch,
                                                                    upgrade):
    """PTX compiled by nvJitLink was cached under its major.minor version only: after a patch
    upgrade of the wheel, cached output of the old one was still served."""
    import cudamagic.core.toolkit as toolkit_mod

    first = cudamagic.load_cubin(PTX, arch="sm_90", cache=tmp_path)
    assert cudamagic.load_cubin(PTX, arch="sm_90", cache=tmp_path).cubin == first.cubin
    name, patched = UPGRADES[upgrade]
    monkeypatch.setattr(toolkit_mod, name, patched(getattr(toolkit_mod, name)))
    forget = process.reset_for_tests  # the finders' answers (nvJitLink's identity) forgotten
    forget()
    try:
        linked = []
        real = fatbin_mod.link_needing_runtime
        monkeypatch.setattr(fatbin_mod, "link_needing_runtime",
                            lambda *a, **k: linked.append(1) or real(*a, **k))
        cudamagic.load_cubin(PTX, arch="sm_90", cache=tmp_path)
        assert linked == [1]  # linked by the new nvJitLink, not served from the old one's
    finally:
        monkeypatch.undo()
        forget()


def test_ptx_names_that_cxx_cannot_spell_keep_their_three_names_apart(tmp_path):
    """``forward$async_dispatch_0``: found by its exact name, called by a sanitized Python
    name, and the sanitized name is never a lookup (another kernel is named like it)."""
    ptx = PTX.read_bytes().replace(b"forward", b"forward$async_dispatch_0").replace(
        b"fill", b"forward_async_dispatch_0x")
    module = cudamagic.load_cubin(ptx, arch="sm_90", cache=tmp_path)
    kern = module["forward$async_dispatch_0"]
    assert kern.symbol == "forward$async_dispatch_0"
    assert kern.python_name == "forward_async_dispatch_0"
    assert module["forward_async_dispatch_0x"].symbol == "forward_async_dispatch_0x"
    with pytest.raises(NameResolutionError, match="no kernel named 'forward_async_dispatch_0'"):
        module["forward_async_dispatch_0"]


def test_a_bad_ptx_says_where(tmp_path):
    bad = PTX.read_bytes().replace(b"ret;", b"frobnicate;", 1)
    with pytest.raises(cudamagic.errors.LinkError, match="line 50.*'frobnicate'"):
        cudamagic.load_cubin(bad, arch="sm_90", cache=tmp_path)
    with pytest.raises(cudamagic.errors.LinkError, match="higher than"):
        cudamagic.load_cubin(PTX, arch="sm_80", cache=tmp_path)  # PTX for sm_90 on sm_80
    assert len(KernelCache.wrap(tmp_path)) == 0


@pytest.mark.parametrize("data, what", [
    (b"hello", "not a CUBIN"), (b"\x50\xed\x55\xba\x02\x00\x10\x00" + b"\0" * 8, "version"),
    (FATBIN.read_bytes()[:100], "truncated"),
])
def test_not_a_loadable_input(tmp_path, data, what):
    with pytest.raises(ImageError, match=what):
        cudamagic.load_cubin(data, arch="sm_90", cache=tmp_path)


def test_every_truncation_of_a_fatbin_is_an_image_error_or_a_prefix():
    data = COMPRESSED.read_bytes()
    full = read_fatbin(data)
    for cut in range(0, len(data), 37):
        try:
            got = read_fatbin(data[:cut])
        except ImageError:
            continue
        assert got == full[:len(got)]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("flags", [["-fatbin", "-gencode", "arch=compute_90,code=sm_90"],
                                   ["-fatbin", "-gencode", "arch=compute_75,code=compute_75"],
                                   ["-fatbin", "-rdc=true", "-gencode",
                                    "arch=compute_90,code=sm_90"],
                                   ["-ptx", "-arch=sm_80"], ["-cubin", "-rdc=true", "-arch=sm_90"]])
def test_what_nvcc_makes_loads(tmp_path, flags):
    out = tmp_path / "out.bin"
    subprocess.run(["nvcc", *flags, "-o", str(out), str(FIXTURES / "nvcc_kernels.cu")],
                   check=True, capture_output=True)
    module = cudamagic.load_cubin(out, arch="sm_90", cache=tmp_path / "cache")
    assert _names(module) == NAMES and module.image.sm == 90
    assert read_cubin(module.cubin).symbols  # an executable CUBIN the driver can load
    assert module.cubin[16] == 2


# --- sizes a fatbin declares: bounded by what the file and the target can hold ----------------

def _rle_frame(regenerated: int, declared: int | None) -> bytes:
    """A ZSTD frame of RLE blocks (4 bytes for each 128 KiB of output) that regenerates
    ``regenerated`` bytes and declares ``declared`` (None: no content size)."""
    import struct

    head = struct.pack("<I", 0xFD2FB528)
    if declared is None:
        head += bytes([0x00, 0x58])  # no content size; a window descriptor (1 MiB)
    else:
        head += bytes([0xE0]) + struct.pack("<Q", declared)  # single segment, 8-byte size
    blocks, left = [], regenerated
    while left > 0:
        n = min(left, 128 << 10)
        left -= n
        header = (1 if left == 0 else 0) | (1 << 1) | (n << 3)  # last?, RLE, size
        blocks.append(header.to_bytes(3, "little") + b"\x20")
    return head + b"".join(blocks)


def _fatbin(payload: bytes, declared: int, compressed_size: int | None = None,
            kind: int = 1) -> bytes:
    """One container of one ZSTD-compressed entry (PTX for compute_90 by default)."""
    padded = payload + b"\0" * (-len(payload) % 8)
    csize = len(payload) if compressed_size is None else compressed_size
    entry = fatbin_mod._ENTRY.pack(kind, 0x101, fatbin_mod._ENTRY.size, len(padded),
                                   csize & 0xFFFFFFFF, 0, 0, 8, 90, 0, 0,
                                   fatbin_mod._FLAG_ZSTD, 0, declared) + padded
    return fatbin_mod._HEADER.pack(fatbin_mod._MAGICS[0], 1, 16, len(entry)) + entry


_MIB = 1 << 20
# what a fatbin declares and holds -> the words of the ImageError
BOUNDS = {
    "768 MiB declared, a 24 KB frame regenerating more": (
        lambda: _fatbin(_rle_frame(800 * _MIB, 768 * _MIB), 768 * _MIB), "more than the"),
    "2**50 bytes declared": (lambda: _fatbin(_rle_frame(_MIB, 2**50), 2**50), "damaged"),
    "2**63 bytes declared": (lambda: _fatbin(_rle_frame(_MIB, 2**63), 2**63), "damaged"),
    "2**64 - 1 bytes declared": (lambda: _fatbin(_rle_frame(_MIB, None), 2**64 - 1),
                                 "damaged"),
    "1 MiB declared, the frame regenerates 2 MiB": (
        lambda: _fatbin(_rle_frame(2 * _MIB, None), _MIB), "ZSTD could not uncompress it"),
    "1 MiB declared, the frame says 2 MiB": (
        lambda: _fatbin(_rle_frame(2 * _MIB, 2 * _MIB), _MIB), "its ZSTD frame 2097152"),
    "not a ZSTD frame": (lambda: _fatbin(b"\x01\x02\x03\x04" * 64, 1000), "not a ZSTD frame"),
    "a compressed size past the entry": (
        lambda: _fatbin(_rle_frame(_MIB, _MIB), _MIB, compressed_size=2**32 - 1),
        "ZSTD could not uncompress it"),
}


@pytest.mark.parametrize("case", list(BOUNDS))
def test_a_declared_size_the_file_or_the_target_cannot_hold_is_an_image_error(case, tmp_path):
    """A 24 KB fatbin whose entry claims 768 MiB raised a raw MemoryError under a 1.2 GiB
    limit, 2**50 bytes a MemoryError, 2**63 an OverflowError, a ZSTD error was printed as a
    byte count (18446744073709551546)."""
    make, words = BOUNDS[case]
    data = make()
    with pytest.raises(ImageError, match=words) as caught:
        cudamagic.load_cubin(data, arch="sm_90", cache=tmp_path)
    assert "18446744073" not in str(caught.value)
    with pytest.raises(ImageError):
        [e.data for e in read_fatbin(data)]


# a memory-limited child's numerical libraries on one thread: on 16 cores numpy's OpenBLAS
# reserved more per thread than the limit leaves ('Memory allocation still failed')
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def test_the_768_mib_fatbin_is_refused_under_a_memory_limit_as_it_was_found(tmp_path):
    from .conftest import run_python

    out = run_python(
        "import os, resource\n"
        "from tests.test_fatbin import _fatbin, _rle_frame\n"
        f"os.environ['CUDAMAGIC_CACHE_DIR'] = {str(tmp_path)!r}\n"
        "resource.setrlimit(resource.RLIMIT_AS, (int(1.2 * 2**30),) * 2)\n"
        "import cudamagic\n"
        "from cudamagic.errors import ImageError\n"
        "data = _fatbin(_rle_frame(800 << 20, 768 << 20), 768 << 20)\n"
        "try:\n"
        "    cudamagic.load_cubin(data, arch='sm_90')\n"
        "except ImageError as exc:\n"
        "    print(len(data) < 30000, 'refused', exc)\n", env=ONE_THREAD, timeout=120)
    assert out.startswith("True refused") and "more than the 512 MiB" in out, out


# --- what people pass load_cubin by mistake, said as what it is --------------------------------

def _machine(data: bytes, machine: int) -> bytes:
    import struct

    return data[:18] + struct.pack("<H", machine) + data[20:]


CUBIN = (FIXTURES / "fixture.cubin").read_bytes()
# an input -> the words of its ImageError (None: it loads)
INPUTS = {
    "an x86-64 object file": (lambda: _machine(CUBIN, 62), "ELF file for another machine "
                                                           r"\(e_machine 62, x86-64\)"),
    "an AArch64 object file": (lambda: _machine(CUBIN, 183), r"e_machine 183, AArch64"),
    "an ELF header cut short": (lambda: CUBIN[:19], "another machine"),
    "PTX text as a str": (lambda: PTX.read_text(), None),
    "CUDA C++ as a str": (lambda: '__global__ void k() {}\nint x;\n',
                          "<text> is not a CUBIN .*nor PTX text"),
    "a 300 000-character str": (lambda: "x" * 300_000, r"\.\.\. \(300000 characters\)"),
}


@pytest.mark.parametrize("case", list(INPUTS))
def test_what_load_cubin_is_given_is_said_as_what_it_is(tmp_path, case):
    """An x86 .o gave a LinkError from nvJitLink instead of 'not a CUBIN'; PTX text passed as a
    str was taken for a path (and its 1.3 MB quoted in the error)."""
    make, words = INPUTS[case]
    if words is None:
        assert _names(cudamagic.load_cubin(make(), arch="sm_90", cache=tmp_path)) == NAMES
        return
    with pytest.raises(ImageError, match=words) as caught:
        cudamagic.load_cubin(make(), arch="sm_90", cache=tmp_path)
    assert len(str(caught.value)) < 600


def test_a_fatbin_of_another_kind_only_says_what_it_holds(tmp_path):
    """An LTO-IR-only fatbin said 'nothing runs on sm_90: it holds sm_90'."""
    data = _fatbin(_rle_frame(64, 64), 64, kind=4)
    with pytest.raises(ImageError) as caught:
        cudamagic.load_cubin(data, arch="sm_90", cache=tmp_path)
    said = str(caught.value)
    assert "it holds kind 4 for sm_90" in said and "neither PTX nor a CUBIN" in said, said
    assert "it holds sm_90" not in said


def _container(*entries: tuple[int, int, bytes], header_size: int = 16) -> bytes:
    """One container of uncompressed entries, each (kind, sm, payload); a ``header_size`` past
    16 covers the first entry's start, and the container then ends with its header (what
    follows it is no container's header)."""
    body = b"".join(fatbin_mod._ENTRY.pack(kind, 0x101, fatbin_mod._ENTRY.size, len(data), 0, 0,
                                           0, 8, sm, 0, 0, 0, 0, len(data)) + data
                    for kind, sm, data in entries)
    size = len(body) if header_size == 16 else 0
    return fatbin_mod._HEADER.pack(fatbin_mod._MAGICS[0], 1, header_size, size) + body


_SM90 = next(e.data for e in read_fatbin(FATBIN.read_bytes()) if e.sm == 90 and e.kind is
             CodeKind.CUBIN)
# a hand-made fatbin -> the words of its ImageError: each said what it is, in a message of
# bounded length (100 000 entries were listed one by one: 3.6 MB; a nested fatbin was "not a
# CUBIN: the data does not start with an ELF header"; a first container that holds nothing
# was "not a fatbin: it does not start with the fatbin magic")
STRANGE = {
    "100 000 entries of an unknown kind": (
        lambda: _container(*[(3, 90, b"")] * 100_000),
        r"it holds kind 3 for sm_90 \(100000 entries\) \(a CUBIN.*; kind 3 for sm_90 "
        r"\(100000 entries\) is neither"),
    "20 000 CUBINs for other targets": (
        lambda: _container(*[(2, 20 + i % 40, _SM90[:64]) for i in range(20_000)]),
        r"it holds sm_20 \(500 entries\), sm_21 .* and 28 other targets \("),
    "a CUBIN entry holding a fatbin": (
        lambda: _container((2, 90, FATBIN.read_bytes())),
        "sm_90 CUBIN entry is a fatbin itself"),
    "a CUBIN entry holding PTX text": (
        lambda: _container((2, 90, PTX.read_bytes())), "sm_90 CUBIN entry is not an ELF file"),
    "a first container whose header covers the next": (
        lambda: _container((2, 90, _SM90), header_size=120),
        "nothing in the fatbin runs on sm_90: it holds nothing"),
}


@pytest.mark.parametrize("case", list(STRANGE))
def test_a_strange_fatbin_is_said_as_what_it_holds_in_a_bounded_message(tmp_path, case):
    make, words = STRANGE[case]
    with pytest.raises(ImageError, match=words) as caught:
        cudamagic.load_cubin(make(), arch="sm_90", cache=tmp_path)
    assert len(str(caught.value)) < 800, len(str(caught.value))


def test_a_fatbin_of_many_entries_that_loads_says_its_targets_briefly(tmp_path):
    data = _container(*[(2, 80, _SM90[:64])] * 5000, (2, 90, _SM90))
    loaded = fatbin_mod.loadable_cubin(data, "sm_90")
    assert loaded.cubin == _SM90
    assert loaded.how == "its sm_90 CUBIN (it holds sm_80 (5000 entries), sm_90)", loaded.how


def test_a_file_past_what_a_cubin_is_is_refused_before_it_is_read(tmp_path):
    """A 3 GiB file was read whole (the bound was 4 GiB): a raw MemoryError under a 3 GiB
    address-space limit, or 3 GiB of memory taken for what is no CUBIN. Sparse: no disk used."""
    from cudamagic.core.files import MAX_CUBIN_FILE

    big = tmp_path / "huge.cubin"
    with open(big, "wb") as f:
        f.truncate(MAX_CUBIN_FILE + 1)
    with pytest.raises(ImageError, match="more than a CUBIN is"):
        cudamagic.load_cubin(big, arch="sm_90", cache=tmp_path)


def test_a_file_this_process_cannot_hold_is_an_image_error(tmp_path):
    from .conftest import run_python

    big = tmp_path / "big.cubin"
    with open(big, "wb") as f:
        f.truncate(900 << 20)
    out = run_python(
        "import resource\n"
        "import cudamagic\n"
        "from cudamagic.errors import ImageError\n"
        "vm = next(int(x.split()[1]) << 10 for x in open('/proc/self/status')\n"
        "          if x.startswith('VmSize'))\n"
        "resource.setrlimit(resource.RLIMIT_AS, (vm + (400 << 20),) * 2)  # 400 MiB more\n"
        "try:\n"
        f"    cudamagic.load_cubin({str(big)!r}, arch='sm_90', cache=False)\n"
        "except ImageError as exc:\n"
        "    print('refused', exc)\n", env=ONE_THREAD, timeout=120)
    assert out.startswith("refused") and "too large to read" in out, out


@pytest.mark.parametrize("path", ["a\x00b", "\x00"])
def test_a_path_with_a_nul_is_an_image_error(path):
    """A raw ValueError ('embedded null byte')."""
    with pytest.raises(ImageError, match="is no path"):
        cudamagic.load_cubin(path, arch="sm_90", cache=False)


def test_a_cubin_without_kernels_says_so_in_a_cubins_words(tmp_path):
    """load_cubin of a CUBIN with variables only said 'the cell defines no __global__ kernel':
    there is no cell."""
    built = cudamagic.build("__device__ float g[3];\n__device__ int f(int x) { return x; }\n",
                            arch="sm_90", use_cache=False)
    assert any("the cell defines no __global__ kernel" in w for w in built.report.warnings)
    loaded = cudamagic.load_cubin(built.cubin, arch="sm_90", cache=tmp_path)
    said = " ".join(loaded.report.warnings)
    assert "the CUBIN holds no __global__ kernel" in said and "cell" not in said, said
