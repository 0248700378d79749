"""The report lists a cell's kernels in the order they are defined (issue 31 item 4: row 1 of
a 1 000-kernel cell was ck499, the last defined). The name expressions come first, in -n
order; then the kernels reached by their own names, in the order of the CUBIN's symbol table
read backwards (NVRTC writes it last-defined first; file-scope kernels before those in
namespaces: docs/report.md)."""

from __future__ import annotations

import cudamagic
from cudamagic.store import KernelCache

PLAIN = [f"ck{i:03d}" for i in range(40)]
SRC = ("template <typename T> __global__ void tz(T* p) {}\n"
       + "".join(f'extern "C" __global__ void {n}(int* p) {{ p[0] = {i}; }}\n'
                 for i, n in enumerate(PLAIN))
       + "__global__ void cpp_last(float* p) {}\n"
       + "namespace ns { __global__ void inner_a(int*) {} __global__ void inner_b(int*) {} }\n")
NAMES = ["tz<int>", "tz<float>"]
WANT = [*NAMES, *PLAIN, "cpp_last", "ns::inner_a", "ns::inner_b"]


def test_kernels_are_listed_in_definition_order_on_a_miss_and_a_hit(tmp_path):
    cache = KernelCache(tmp_path / "cache")
    built = cudamagic.build(SRC, NAMES, cache=cache)
    hit = cudamagic.build(SRC, NAMES, cache=cache)
    assert hit.hit
    for mod in (built, hit):
        assert list(mod.kernels) == WANT
        assert [row.name_expression for row in mod.report.rows] == WANT  # the report's rows too
    cache.close()
