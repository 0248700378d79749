"""The report shows what the CUBIN says about a module beyond its name map: its
``__constant__``/``__device__`` variables (the cell's own, bounded), the kernels launched
cooperatively or with a compiled cluster, and a module linked by nvJitLink. Each fact in the
text and the HTML (the notebook's output) for a cell that has it, and absent for one that does
not; from a real NVRTC compile, a cache hit and an nvJitLink link. No GPU."""

from __future__ import annotations

import dataclasses

import pytest

import cudamagic
from cudamagic.toolchain.binary.image import GlobalImage
from cudamagic.view.report import SHOWN_VARIABLES, BuildReport

from .conftest import FIXTURES

FEATURES = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__constant__ float coeffs[16];
__device__ int counter;
namespace ns { __device__ double scale; }
extern "C" __global__ void gsync(int* x) { cg::this_grid().sync(); x[0] = counter + coeffs[0] + ns::scale; }
extern "C" __global__ void __cluster_dims__(2, 1, 1) clus(int* x) { x[0] = 1; }
"""
PLAIN = 'extern "C" __global__ void plain(int* x) { x[0] = 1; }\n'
# dynamic parallelism: the link needs the device runtime
PARENT = ("__global__ void child(int* x) { x[0] = 1; }\n"
          "__global__ void parent(int* x) { child<<<1, 1>>>(x); }\n")

COOP = "gsync launched cooperatively (grid sync)"
CLUSTER = "clus cluster 2x1x1"
VARIABLES = ("coeffs (64 B, constant)", "counter (4 B, global)", "ns::scale (8 B, global)")


def _views(report: BuildReport) -> tuple[str, str]:
    """The text and the HTML."""
    return report.text(), report.html()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    made = {name: cudamagic.build(src, options=opts, cache=cache) for name, src, opts in (
        ("features", FEATURES, ()), ("plain", PLAIN, ()), ("parent", PARENT, ("-rdc=true",)),
        ("rdc", PLAIN, ("-rdc=true",)))}
    hits = {name: cudamagic.build(src, options=opts, cache=cache) for name, src, opts in (
        ("features", FEATURES, ()), ("parent", PARENT, ("-rdc=true",)))}
    return made, hits


@pytest.mark.parametrize("hit", [False, True], ids=["miss", "hit"])
def test_cooperative_and_cluster_kernels_are_said_so(built, hit):
    module = built[1 if hit else 0]["features"]
    assert module.report.hit is hit
    for view in _views(module.report):
        plain = view.replace("<code>", "").replace("</code>", "")
        assert COOP in plain and CLUSTER in plain
        assert "clus launched cooperatively" not in plain
    for view in _views(built[0]["plain"].report):
        assert "launched cooperatively" not in view and "cluster 2x1x1" not in view
        assert "launch:" not in view


@pytest.mark.parametrize("hit", [False, True], ids=["miss", "hit"])
def test_the_cells_own_variables_are_listed_and_the_librarys_counted(built, hit):
    module = built[1 if hit else 0]["features"]
    library = len(module.image.globals) - len(VARIABLES)
    assert library > 1000  # cooperative_groups and libcu++ bring their own
    for view in _views(module.report):
        flat = " ".join(view.split())
        for v in VARIABLES:
            assert v in flat
        assert f"{library} library globals not shown" in flat
        assert "integral_constant" not in flat and "cooperative_groups::" not in flat
    for view in _views(built[0]["plain"].report):
        assert "variables:" not in view


@pytest.mark.parametrize("n", [1, SHOWN_VARIABLES, SHOWN_VARIABLES + 1, 40])
def test_at_most_ten_variables_are_named_then_how_many_more(built, n):
    own = tuple(GlobalImage(f"v{i}", 4, "global", 4 * i, False) for i in range(n))
    library = (GlobalImage("_ZN4cuda3std3__45valueE", 1, "global", 0, False),
               GlobalImage("_ZN18cooperative_groups4__v12idE", 4, "global", 0, False),
               GlobalImage("_ZN34_INTERNAL_x_12345678_4_cell_cu_a1b2c3d45valueE", 4, "global",
                           0, False), GlobalImage("$str$1", 9, "global", 0, False))
    report = built[0]["plain"].report
    # the cell's own are those the compiler was asked about (own_globals), the rest a library's
    items = dataclasses.replace(report, globals=own + library,
                                own_globals=frozenset(g.name for g in own)).variables
    shown = min(n, SHOWN_VARIABLES)
    assert items[:shown] == tuple(f"v{i} (4 B, global)" for i in range(shown))
    assert items[shown:] == ((f"and {n - shown} more",) if n > shown else ()) + (
        "4 library globals not shown",)


def test_a_linked_module_says_so_and_whether_the_device_runtime_came(built):
    made, hits = built
    for module in (made["parent"], hits["parent"]):
        for view in _views(module.report):
            assert "linked with" in view and "nvJitLink + device runtime" in view
    for view in _views(made["rdc"].report):
        assert "nvJitLink" in view and "device runtime" not in view
    for view in _views(made["plain"].report) + _views(made["features"].report):
        assert "linked with" not in view and "nvJitLink" not in view


def test_a_ptx_load_says_nvjitlink_compiled_it_and_a_cubin_load_does_not(tmp_path):
    ptx = cudamagic.load_cubin(FIXTURES / "nvcc_kernels.ptx", arch="sm_90", cache=tmp_path)
    assert all("linked with" in v for v in _views(ptx.report))
    cubin = cudamagic.load_cubin(built_cubin := ptx.cubin)
    assert built_cubin and not any("linked with" in v for v in _views(cubin.report))


def test_the_report_names_variables_as_module_globals_does(built, monkeypatch):
    """One demangler for variable names (toolchain.demangle.variable_texts): the report's
    variables line and ``module.globals`` give each the same C++ name, so a change to how
    variables are demangled changes both (a second demangling in the view would keep its own)."""
    from cudamagic.toolchain.binary import demangle

    module = built[0]["features"]
    ns = next(g for g in module.globals if g.cxx_name == "ns::scale")
    assert any(v.startswith("ns::scale ") for v in module.report.variables)
    real = demangle.variable_texts
    monkeypatch.setattr(demangle, "variable_texts", lambda symbols, *, may_start: {
        s: t and t.replace("ns::", "renamed::") for s, t in real(symbols, may_start=may_start)
        .items()})
    fresh = dataclasses.replace(module.report)  # its variables line is made on first use
    assert any(v.startswith("renamed::scale ") for v in fresh.variables), fresh.variables
    module._variables = None  # module.globals is made on first use too
    try:
        assert ns.name in {g.name for g in module.globals if g.cxx_name == "renamed::scale"}
    finally:
        module._variables = None  # the fixture's module, named again after the patch
