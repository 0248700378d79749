"""The report's ``variables:`` line names the cell's own variables first and folds the
included libraries' with a count (issue 31 item 4: it started with eight cuRAND tables, which
no namespace marks as a library's). Which are the cell's own is what the compiler typed from
the cell's text, not a guess from the names."""

from __future__ import annotations

import cudamagic

SRC = ('#include <curand_kernel.h>\n__constant__ float coeffs[16];\n__device__ int counter;\n'
       'extern "C" __global__ void k(float* p) { curandState s; curand_init(1, 0, 0, &s);\n'
       '  p[0] = curand_uniform(&s) + coeffs[0] + counter; }\n')


def test_the_cells_variables_first_and_the_librarys_counted():
    mod = cudamagic.build(SRC, use_cache=False)
    line = mod.report.variables
    library = len(mod.globals) - 2
    assert library > 0  # cuRAND's tables are in the CUBIN
    assert line == ("coeffs (64 B, constant)", "counter (4 B, global)",
                    f"{library} library globals not shown"), line
    assert "variables: coeffs (64 B, constant) · counter" in str(mod.report)
