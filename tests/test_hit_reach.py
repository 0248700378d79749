"""What a cached ``%%cuda`` cell reaches in a fresh IPython: the hit path, and no more (issue 55
item 1, issue 48 item 4).

A first child fills a cache folder; a second, fresh, child is a notebook after a restart: a real
``InteractiveShell`` runs ``%load_ext cudamagic`` as a cell of its own (so its ``post_run_cell``
starts the warm-up, as in Jupyter), waits for the warm-up and the driver thread, then runs the
same ``%%cuda`` cell, a hit. It lists every module of the package in ``sys.modules`` then
(``%load_ext``'s, the warm-up's and the cell's together) and, for each, the line that imported
it first (an import hook records it). A module outside :data:`HIT_REACH` fails with that chain:
make its import lazy where only a miss, a tool run, a launch or a view the hit does not show uses
it, or add it to :data:`HIT_REACH` with the reason. tests/test_import_cost.py holds the
split between ``%load_ext`` and the cell and the modules outside the package; tests/test_startup.py
the API's hit (``build()`` in a fresh process).
"""

from __future__ import annotations

import textwrap

import pytest


#: the modules a hit cell may reach, by what the hit does with each
HIT_REACH = frozenset("cudamagic" + (f".{m}" if m != "-" else "") for m in """
    - shell.magic errors core.forksafe core.process core.options core.units toolchain
    toolchain.device.driver pipeline.steps core.miss store.keys core.toolkit core.libraries
    pipeline.naming pipeline.typed store store.base store.cache store.disk store.connections
    store.limits store.state store.entry toolchain.compile.manifest core.files
    toolchain.binary.elf toolchain.binary.image toolchain.binary.demangle cxx cxx.resolve
    cxx.quick cxx.signatures cxx.display cxx.kernel_names pipeline.module launch launch.kernel
    view view.report view.render view.widget pipeline.explain view.bench
    toolchain.device.occupancy shell core toolchain.device pipeline toolchain.compile
    toolchain.binary
    """.split())
# %load_ext: the package, the magics (magic, options and the errors it raises, units, the
#   fork-safe lock, the process registry) and the driver thread (toolchain, toolchain.driver)
# the key: pipeline, miss (its records), keys, toolkit (the toolkit's fingerprint), libraries
#   (the cell's library options: none without a CUTLASS or CuTe folder), naming (the Python
#   names, taken as stored), typed (the stored variables, checked)
# the lookup: the store, its disk folder (SQLite connections per thread, the size limit, the
#   process's SQLite lock), the entry's decoding, the headers' manifest checked, files read
# the entry: the CUBIN's ELF and tables, the demangler's variable texts (in process, none
#   started); the names: the stored map checked by text (cxx.quick: no C++ reader), the
#   signatures as stored, their display, the hints' template kernels read off the cell
# the module: its kernel table (launch.kernel: the Kernel class alone)
# the report: its record, text and HTML, the display (view.widget: the resources read off the
#   CUBIN, the report shown), the cell's history (explain: the next miss's explanation) and
#   the notebook's folds (view.bench with toolchain.occupancy: occupancy from the CUBIN)

#: what only a notebook's report reaches: its timing fold (a terminal's report has no folds)
NOTEBOOK_ONLY = ("cudamagic.view.bench", "cudamagic.toolchain.device.occupancy")

#: at most this many of the package's modules after a hit cell, by front end (HIT_REACH's size;
#: issue 55 asks for 25: the hit's own steps above, one module each or part of one, are 45 by
#: meaning today, docs/performance.md)
#: (the folders move, issue 48, added 6 packages whose __init__ is a docstring: counted
#: here, no code)
MAX_HIT_MODULES = {"notebook": 51, "terminal": 49}

#: what a hit never reaches, by room: the compile, the tool runs, the debugging views, the bench
NEVER = {
    "compile": ("cudamagic.toolchain.compile.nvrtc", "cudamagic.toolchain.compile.pch", "cudamagic.toolchain.compile.probe",
                "cudamagic.toolchain.compile.link", "cudamagic.toolchain.compile.fatbin", "cudamagic.toolchain.compile.deps",
                "cudamagic.toolchain.compile.listing", "cudamagic.toolchain.binary.ptx",
                "cudamagic.toolchain.compile.signals", "cudamagic.toolchain.compile.threads",
                "cudamagic.toolchain.compile.tracefolder", "cudamagic.toolchain.binary.variables",
                "cudamagic.compiler", "cudamagic.pipeline.precompiled", "cudamagic.pipeline.interrupts",
                "cudamagic.pipeline.child", "cudamagic.cxx.declared", "cudamagic.cxx.parse",
                "cudamagic.cxx.args", "cudamagic.cxx.compare", "cudamagic.cxx.pyname",
                "cudamagic.cxx.mangled", "cudamagic.view.stored", "cudamagic.core.lines",
                "cudamagic.store.memory", "cudamagic.store.remote", "cudamagic.store.server"),
    "tool run": ("cudamagic.toolchain.tools.tools", "cudamagic.toolchain.tools.sanitizer",
                 "cudamagic.toolchain.tools.profiler", "cudamagic.toolchain.tools.sass",
                 "cudamagic.toolchain.tools.annotation", "cudamagic.launch.tool_run",
                 "cudamagic.launch.support", "cudamagic.pipeline.lineinfo", "cudamagic.pipeline.annotated",
                 "cudamagic.view.annotate"),
    "debug": ("cudamagic.view.debug", "cudamagic.view.records", "cudamagic.view.shown",
              "cudamagic.shell.info"),
    "bench and launch": ("cudamagic.launch.bench", "cudamagic.launch.calls",
                         "cudamagic.launch.capture", "cudamagic.launch.launcher",
                         "cudamagic.launch.params", "cudamagic.launch.encode",
                         "cudamagic.launch.extended", "cudamagic.launch.attributes",
                         "cudamagic.launch.warm"),
}

SOURCE = "template <int N> __global__ void k(float* x, int n) { if (n > N) x[N] += 1.f; }\n"

CHILD = textwrap.dedent("""
    import json, sys, threading

    first = {}  # module -> the line that imported it first, and the thread

    class Recorder:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "cudamagic" and name not in first:
                f = sys._getframe(1)
                while f is not None and (f.f_globals.get("__name__", "").startswith(
                        ("importlib", "_frozen")) or f.f_globals.get("__name__") == __name__):
                    f = f.f_back
                where = "?" if f is None else f"{f.f_globals.get('__name__')}:{f.f_lineno}"
                first[name] = f"{where} ({threading.current_thread().name})"
            return None

    sys.meta_path.insert(0, Recorder())
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    if sys.argv[1] == "notebook":
        ip.kernel = object()  # shown as in a notebook: the HTML, the folds, comm's stand-in
    assert ip.run_cell("%load_ext cudamagic").success  # its post_run_cell starts the warm-up
    import cudamagic
    from cudamagic.shell import magic

    magic._WARMUP.wait(120)
    for t in threading.enumerate():
        if t.name == cudamagic.DRIVER_THREAD:
            t.join(120)
    result = ip.run_cell("%%cuda -n k<1> -n k<2>\\n" + sys.argv[2])
    assert result.success, result.error_in_exec
    ours = sorted(m for m in sys.modules if m.split(".")[0] == "cudamagic")
    print(json.dumps({"front": sys.argv[1], "hit": ip.user_ns["cuda_module"].hit, "warmed": magic._WARMUP.thread
                      is not None, "modules": ours, "first": {m: first.get(m) for m in ours}}))
""")


def _child(cache, front: str) -> dict:
    from .conftest import hit_child

    return hit_child(CHILD, cache, front, SOURCE)


@pytest.fixture(scope="module", params=["terminal", "notebook"])
def reached(request, tmp_path_factory) -> dict:
    """A fresh shell's %load_ext, its warm-up and a hit cell (a first process filled the cache)."""
    cache = tmp_path_factory.mktemp("reach") / "cache"
    assert _child(cache, request.param)["hit"] is False
    got = _child(cache, request.param)
    assert got["hit"] is True and got["warmed"] is True
    return got


def _chains(got: dict, names: list[str]) -> str:
    return "; ".join(f"{m} (imported by {got['first'][m]})" for m in names)


def test_a_hit_cell_reaches_only_the_hit_path(reached):
    extra = [m for m in reached["modules"] if m not in HIT_REACH]
    assert not extra, (f"a hit cell now reaches {len(extra)} modules off the hit path: "
                       f"{_chains(reached, extra)}; make the import lazy, or add it to "
                       "HIT_REACH with the reason")


def test_a_hit_cell_imports_at_most_the_hit_paths_count(reached):
    ours, most = reached["modules"], MAX_HIT_MODULES[reached["front"]]
    assert len(ours) <= most, (
        f"a hit cell imports {len(ours)} of the package's modules (at most {most}); "
        f"beyond the hit path: {_chains(reached, [m for m in ours if m not in HIT_REACH])}")


def test_a_terminals_hit_imports_no_fold(reached):
    """A terminal shows the report as text: neither the cell nor the warm-up imports the
    notebook's folds."""
    if reached["front"] != "terminal":
        pytest.skip("a notebook's report has its folds")
    loaded = [m for m in reached["modules"] if m in NOTEBOOK_ONLY]
    assert not loaded, f"a terminal's hit imported {_chains(reached, loaded)}"


@pytest.mark.parametrize("room, name", [(room, name) for room, names in NEVER.items()
                                        for name in names])
def test_a_hit_cell_never_imports(reached, room, name):
    loaded = [m for m in reached["modules"] if m == name or m.startswith(name + ".")]
    assert not loaded, f"a hit cell imported the {room}'s {_chains(reached, loaded)}"


def test_the_lists_name_modules_that_exist():
    """A module renamed or moved leaves no stale name behind in the lists above."""
    import importlib.util

    for name in sorted(HIT_REACH | {n for names in NEVER.values() for n in names}):
        assert importlib.util.find_spec(name) is not None, name
