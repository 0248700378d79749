"""tinyla, the tests' own header library (tests/fixtures/tinyla): its committed headers are what
its script writes; a cell that includes it is cached with every one of its headers in the
entry's manifest, and an edit to any of them makes the cell compile again, to what an uncached
compile of the edited library makes. Real NVRTC; benchmarks/edit_loop.py times the same cell."""

from __future__ import annotations

import importlib.util
import shutil
import time
from pathlib import Path

import pytest

import cudamagic
from cudamagic.toolchain.compile.deps import RACY_NS
from cudamagic.toolchain.compile.manifest import Manifest

HERE = Path(__file__).resolve().parent / "fixtures" / "tinyla"
_spec = importlib.util.spec_from_file_location("make_tinyla", HERE / "make_tinyla.py")
assert _spec is not None and _spec.loader is not None
make_tinyla = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_tinyla)

#: uses most of the library; an edit that defines TINYLA_EDITED changes its code
CELL = r"""
#include <tinyla/tinyla.cuh>
using namespace tinyla;
template <int N> __global__ void t(const float* x, float* out, int n) {
  __shared__ BlockReduce<float, 256>::TempStorage tmp;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  Vec<float, 4> v = make_vec(x[i % n], 1.0f, 2.0f, 3.0f) * float(N);
  Mat<float, 4, 4> m = outer(v, wzyx(v)) + Mat<float, 4, 4>::identity();
  Quat<float> q = Quat<float>::from_axis_angle(xyz(v), 0.5f);
  Vec<float, 3> r = rotate(q, normalize(xyz(m * v)));
  Complex<float> z = sqrt(Complex<float>(r.v[0], r.v[1]));
  float s = BlockReduce<float, 256>(tmp).sum(determinant(m) + abs(z) + median(sorted(v)));
#ifdef TINYLA_EDITED
  s *= 3.0f;
#endif
  if (threadIdx.x == 0) out[blockIdx.x] = s; }
"""


def test_the_committed_headers_are_what_the_script_writes():
    on_disk = {p.name: p.read_text() for p in make_tinyla.INCLUDE.glob("*.cuh")}
    assert on_disk == make_tinyla.files()
    assert sum(t.count("\n") for t in on_disk.values()) > 2500  # a few thousand lines


def _library(tmp_path: Path) -> Path:
    """A copy of the library the test may edit; the -I folder that finds it."""
    inc = tmp_path / "include"
    shutil.copytree(make_tinyla.INCLUDE.parent, inc)
    time.sleep(2 * RACY_NS / 1e9)  # a header written within the clock's resolution is not stored
    return inc


def _build(inc: Path, cache, **kw):
    return cudamagic.build(CELL, ["t<2>"], [f"-I{inc}"], cache=cache, **kw)


def test_the_entry_lists_every_header_of_the_library(tmp_path, cache):
    inc = _library(tmp_path)
    module = _build(inc, cache)
    record, _ = cache.get(module.key)
    listed = {Path(f.path).resolve() for f in Manifest.from_json(record.manifest).files}
    library = {p.resolve() for p in (inc / "tinyla").glob("*.cuh")}
    assert len(library) == len(make_tinyla.files())
    assert library <= listed, sorted(p.name for p in library - listed)
    assert _build(inc, cache).hit


@pytest.mark.parametrize("header", ["tinyla.cuh", "config.cuh", "vec.cuh", "sort.cuh"])
def test_an_edit_to_any_header_of_the_library_compiles_the_cell_again(header, tmp_path, cache):
    """The umbrella, the deepest header (every other includes it), one in the middle, a leaf."""
    inc = _library(tmp_path)
    before = _build(inc, cache)
    assert _build(inc, cache).hit
    with open(inc / "tinyla" / header, "a") as f:
        f.write("\n#define TINYLA_EDITED 1\n")
    time.sleep(2 * RACY_NS / 1e9)
    edited = _build(inc, cache)
    assert not edited.hit, header
    fresh = _build(inc, cache, use_cache=False)
    assert edited.cubin == fresh.cubin != before.cubin
    assert _build(inc, cache).hit
