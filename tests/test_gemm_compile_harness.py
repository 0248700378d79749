"""benchmarks/gemm_compile.py's harness (issue 54) run on CPU: the CUB cell's first compile
and one edit through the three tools, real NVRTC and CuPy's own NVRTC program; NVRTC alone must
be given the options cudamagic's main compile was (its PCH's left out), and the SGEMM cell's
kernel must be cut from the installed nvidia-cutlass wheel and compile with NVRTC once (the
whole SGEMM loop is 10-20 s a compile here, too long for CI)."""

from __future__ import annotations

import pytest

pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def bench():
    """benchmarks/gemm_compile.py as the script imports it (its folder on sys.path)."""
    from .conftest import benchmark_module

    yield from benchmark_module("gemm_compile")


@pytest.fixture(scope="module")
def ran(bench):
    """The CUB cell, first compile and one edit, with every cuda.bindings NVRTC compile of the
    run recorded (cudamagic's own and NVRTC alone's; CuPy compiles through its own binding)."""
    with bench.recorded_compiles() as calls:
        result = bench.run(["cub"], edits=1, gpu=False)
    return result, calls


def test_every_tool_timed_the_first_compile_and_the_edit(ran, bench):
    result, _ = ran
    for tool in bench.TOOLS:
        runs = result["raw"]["cub"][tool]
        assert len(runs) == 2 and all(r["seconds"] > 0 for r in runs), tool
    split = result["raw"]["cub"]["cudamagic"][1]["timings"]
    assert split["compile"] > 0 and "listing" in split


def test_nvrtc_alone_was_given_the_options_of_cudamagics_main_compile(ran, bench):
    result, calls = ran
    from cudamagic.toolchain.compile.pch import SUPPRESSED

    names = ["reduce_scan<1>"]
    named = [c["options"] for c in calls if c["names"] == names]
    builds = result["raw"]["cub"]["cudamagic"]
    # cudamagic's own compiles, as each build recorded them; the named ones left are NVRTC alone's
    alone = list(named)
    for build in builds:
        for c in build["calls"]:
            if c["names"] == names:
                alone.remove(c["options"])
    assert len(named) == 4 and len(alone) == 2, named
    for build, options in zip(builds, alone):
        (main,) = [c["options"] for c in build["calls"] if c["names"] == names]
        assert not any(o.startswith("--fdevice-time-trace") for o in main), main
        kept = [o for o in main if not o.startswith(bench.PCH_OPTIONS) and o != SUPPRESSED]
        assert options == kept, (kept, options)
    assert any(o.startswith("-arch=") for o in alone[0]) and "-std=c++17" in alone[0]


def test_the_table_has_each_tool_and_the_ratios(ran, bench):
    result, _ = ran
    rows = bench.table(result)
    assert "NVRTC alone" in rows[0] and "goal ≤ 1.1x" in rows[0]
    (cub,) = [r for r in rows if r.startswith("| cub |")]
    c = result["raw"]["cub"]
    ratio = c["cudamagic"][0]["seconds"] / c["nvrtc"][0]["seconds"]
    assert f"{ratio:.2f}x" in cub


def test_the_sgemm_cell_is_cut_from_the_wheel_and_compiles_with_nvrtc(bench):
    pytest.importorskip("cutlass_library")
    cell = bench.sgemm_cell()
    assert str(bench.cutlass_library_folder()) in str(bench.sgemm_file())
    # the device part ends before the host function gemm_nt (the appended instance names it)
    assert "gemm_device" in cell.source and "gemm_nt(" not in cell.source
    assert "<<<" not in cell.source and "thrust" not in cell.source
    from cudamagic.core.options import BuildOptions
    from cudamagic.pipeline.steps import entry_key

    # the options cudamagic would give the cell (CUTLASS's folders and flags among them)
    source = bench.edited(cell, "1.5")
    options = list(entry_key(source, BuildOptions(name_expressions=cell.names))[2])
    assert bench.nvrtc_alone(source, cell.names, options) > 0


def test_a_tutorial_of_another_shape_is_refused_with_what_changed(bench):
    pytest.importorskip("cutlass_library")
    text = bench.sgemm_file().read_text()
    with pytest.raises(bench.ShapeChanged, match="gemm_nt"):
        bench.sgemm_device_part(text.replace("gemm_nt(", "gemm_nt_host("), "t.cu")
    with pytest.raises(bench.ShapeChanged, match="host code"):
        bench.sgemm_device_part(text.replace("gemm_device(ProblemShape",
                                             "gemm_device(cudaStream_t s, ProblemShape"), "t.cu")
