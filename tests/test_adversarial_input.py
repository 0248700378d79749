"""Bad build() arguments found by attacking issue 17 as a new user: each is a CudaMagicError
that says what to do (never a raw Python exception), options that read or write files the
key cannot see are refused, and a long -n list is checked in linear time."""

from __future__ import annotations

import os
import time

import pytest

import cudamagic
from cudamagic import CudaMagicError
from cudamagic.errors import OptionError
from cudamagic.options import BuildOptions

SRC = '__global__ void k(float* x) { x[0] = 1; }\n'

# options NVRTC takes that write a file on each compile (a hit writes none), or hand ptxas
# an options file the key cannot see
WRITES_OR_READS = ["-time=t.csv", "--time=t.csv", "-time=-", "--time=/tmp/x.csv",
                   "-Xptxas=--options-file=o.txt", "-Xptxas=-optf=o.txt",
                   "--ptxas-options=--options-file=o.txt", "--ptxas-options=-optf",
                   "-Xptxas=-v --options-file o.txt", "-Xptxas=-O3,-optf=o.txt"]
KEPT = ["-Xptxas=-v", "--ptxas-options=-O3", "-Xptxas=--optfoo", "-timeX", "-lineinfo"]


@pytest.mark.parametrize("opt", WRITES_OR_READS)
def test_options_with_files_the_key_cannot_see_are_refused(opt):
    with pytest.raises(OptionError, match="leave it out"):
        BuildOptions(options=(opt,))


@pytest.mark.parametrize("opt", KEPT)
def test_neighbouring_options_are_kept(opt):
    assert BuildOptions(options=(opt,)).options == (opt,)


def test_a_time_option_leaves_no_file_in_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OptionError):
        cudamagic.build(SRC, options=["-time=t.csv"], use_cache=False)
    assert os.listdir(tmp_path) == []


BAD = {
    "arch: an integer of 5000 digits": dict(arch=10 ** 5000),
    "arch: a negative integer": dict(arch=-90),
    "arch: a float": dict(arch=9.0),
    "arch: a list": dict(arch=["sm_90"]),
    "arch: True": dict(arch=True),
    "arch: a string of 5000 digits": dict(arch="sm_" + "9" * 5000),
    "base_dir: a NUL byte": dict(base_dir="/tmp\0x"),
    "base_dir: a name that is not UTF-8": dict(base_dir=os.fsdecode(b"/tmp/\xff")),
    "base_dir: a path object, not UTF-8": dict(base_dir=__import__("pathlib").Path(
        os.fsdecode(b"/tmp/\xfe"))),
}


@pytest.mark.parametrize("label", list(BAD))
def test_bad_arguments_are_cudamagic_errors(label):
    with pytest.raises(CudaMagicError) as info:
        cudamagic.build(SRC, use_cache=False, **BAD[label])
    assert len(str(info.value)) < 400, "the message quotes the whole bad value"


def test_an_include_folder_name_too_long_for_the_system_is_a_note(tmp_path):
    """A -I name the file system refuses (ENAMETOOLONG) is a folder that is not there."""
    with pytest.warns(cudamagic.InputWarning, match="no such folder") as seen:
        m = cudamagic.build(SRC, options=["-I" + "/a" * 3000], cache=tmp_path / "c")
    assert m.kernels
    assert all(len(str(w.message)) < 1000 for w in seen), "the note quotes the whole name"


def test_many_name_expressions_are_checked_in_linear_time():
    names = tuple(f"k<{i}>" for i in range(40_000)) + ("k<7>",)
    start = time.perf_counter()
    opts = BuildOptions(name_expressions=names)
    assert time.perf_counter() - start < 2.0
    assert opts.duplicates == ("k<7>",) and len(opts.name_expressions) == 40_000
