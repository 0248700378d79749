"""What ``%load_ext cudamagic`` and a notebook's first cell, a cache hit, import (issue 38).

Each runs in a fresh interpreter on a real IPython ``InteractiveShell`` and lists the modules it
added to ``sys.modules``; a module outside the lists below fails, with its name. The GPU is
simulated present and absent (the driver's answers replaced before ``%load_ext``), so the same
lists hold on a machine with one: with a GPU the cell asks the driver for the device's
architecture, and ``%load_ext``'s thread makes device 0's context.

A module that shows up here was pulled in by a module-level import on the way: make that import
lazy (inside the function that needs it), or, where the step really uses it, add it to the list
with the reason. tests/test_startup.py holds the API's hit (``build()`` in a fresh process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from .conftest import REPO

#: ``%load_ext``: the extension, the magics' module and what it needs to define them (the line
#: parser's options, the errors it raises, the fork-safe lock of the compile notice), and the
#: driver thread's module, which starts ``cuInit`` and device 0's primary context (issue 30)
LOAD_EXT = frozenset("cudamagic" + (f".{m}" if m != "-" else "") for m in """
    - shell.magic errors core.forksafe core.options core.process core.units toolchain
    toolchain.device.driver shell core toolchain.device""".split())

#: outside cudamagic: IPython's own (its magics' argument parser, its %load_ext), contextvars
#: (the magic's warning capture), locale (argparse's gettext, asked by the magics' help), and
#: ctypes, which the driver thread calls libcuda through
LOAD_EXT_OTHER = frozenset("""contextvars _contextvars locale _locale ctypes _ctypes
    ctypes._endian""".split())

#: what a hit cell adds to that, shown in a notebook: the pipeline's hit (options and key, the
#: cache and its entry, the manifest's check, the CUBIN's symbol table, the names, the module and
#: its kernels, pushed), the report (its record, text and HTML, the history that explains the
#: next miss) and the report's folds (occupancy computed from the CUBIN: view.bench with
#: toolchain.occupancy). No compile, link, PTX reading, tool-run, bench, launch or %cuda_info
#: code: launch.kernel is the Kernel class alone (its launcher and argument packing come with the
#: first call), view.widget gives the report's resources (read off the CUBIN); the stored names
#: are checked by their text (cxx.quick: no C++ reader), libraries says whether the cell includes
#: CUTLASS (a text check). The compile server's client, the tool runs' -lineinfo support
#: (lineinfo, launch.support) and the variables' module come with a miss, a tool run or a cell
#: that has variables (tests/test_hit_reach.py holds the whole list and the count)
HIT_CELL = frozenset("cudamagic." + m for m in """
    cxx cxx.display cxx.kernel_names cxx.quick cxx.resolve cxx.signatures pipeline.explain
    core.files store.keys core.miss pipeline.module pipeline.naming pipeline.steps core.toolkit
    pipeline.typed core.libraries launch launch.kernel store store.base store.cache
    store.connections store.disk store.entry store.limits store.state toolchain.binary.demangle
    toolchain.binary.elf toolchain.binary.image toolchain.compile.manifest
    toolchain.device.occupancy view view.bench view.render view.report view.widget pipeline core
    toolchain toolchain.binary toolchain.compile toolchain.device""".split())

#: outside cudamagic: the cache's diskcache (and the SQLite, pickletools, tempfile it imports),
#: the key's hashlib, the report's html, and comm (its widget's channel, which a Jupyter kernel
#: has imported before any cell; it imports uuid and platform)
HIT_CELL_OTHER = frozenset("""diskcache diskcache.core diskcache.fanout diskcache.persistent
    diskcache.recipes sqlite3 sqlite3.dbapi2 _sqlite3 pickletools tempfile random _random
    bisect _bisect _sha512 shutil bz2 _bz2 lzma _lzma _compression zlib fcntl hashlib _hashlib
    _blake2 html html.entities comm comm.base_comm uuid _uuid platform""".split())

#: never, named for what each would mean: numpy and the launch's packing (a launch), XML (the
#: sanitizer's report), email and importlib.metadata (a package's version: %cuda_info),
#: subprocess (a tool or cu++filt started), decimal and fractions, csv, difflib (a miss's
#: explanation), NVRTC and nvJitLink, CuPy, the debugging views
NEVER = ("numpy", "xml", "email", "importlib.metadata", "subprocess", "decimal", "fractions",
         "csv", "difflib", "cupy", "cuda.bindings", "cudamagic.toolchain.compile.nvrtc",
         "cudamagic.toolchain.compile.link", "cudamagic.toolchain.compile.deps",
         "cudamagic.toolchain.binary.ptx", "cudamagic.toolchain.compile.probe",
         "cudamagic.toolchain.tools.sanitizer", "cudamagic.toolchain.tools.profiler",
         "cudamagic.toolchain.tools.tools", "cudamagic.launch.launcher", "cudamagic.launch.encode",
         "cudamagic.launch.params", "cudamagic.launch.tool_run", "cudamagic.launch.bench",
         "cudamagic.view.debug", "cudamagic.view.records", "cudamagic.view.shown")

SOURCE = "template <int N> __global__ void k(float* x, int n) { if (n > N) x[N] += 1.f; }\n"

CHILD = textwrap.dedent("""
    import json, sys, threading
    from IPython.core.interactiveshell import InteractiveShell

    gpu = sys.argv[1] == "device-simulated"
    ip = InteractiveShell.instance()
    ip.kernel = object()  # shown as in a notebook: the HTML, the folds, comm's stand-in
    before = set(sys.modules)
    from cudamagic.toolchain.device import driver  # counted: %load_ext's thread imports it

    driver.available = lambda: gpu
    driver.retain_primary = lambda device: 1   # the context the thread makes
    driver.current_device = lambda: 0
    driver.device_sm = lambda device: 90       # the cell's arch: the entry's without a GPU too
    ip.run_line_magic("load_ext", "cudamagic")
    for t in threading.enumerate():
        if t.name == "cudamagic-driver":
            t.join(60)
    loaded = set(sys.modules)
    ip.run_cell_magic("cuda", "-n k<1> -n k<2>", sys.argv[2])
    print(json.dumps({"hit": ip.user_ns["cuda_module"].hit, "load_ext": sorted(loaded - before),
                      "cell": sorted(set(sys.modules) - loaded)}))
""")


def _child(cache, gpu: str) -> dict:
    from .conftest import hit_child

    return hit_child(CHILD, cache, gpu, SOURCE)


@pytest.fixture(scope="module", params=["no-device", "device-simulated"])
def fresh(request, tmp_path_factory) -> dict:
    """A fresh notebook's %load_ext and first cell, a hit (a first process filled the cache)."""
    cache = tmp_path_factory.mktemp("imports") / "cache"
    assert _child(cache, request.param)["hit"] is False
    got = _child(cache, request.param)
    assert got["hit"] is True
    return got


def _outside(found: list[str], ours: frozenset[str], other: frozenset[str]) -> list[str]:
    return [m for m in found if m not in ours and m not in other and not (
        m.split(".")[0] == "IPython")]  # IPython's own, by its version


def test_load_ext_imports_the_magics_and_the_driver_thread_only(fresh):
    extra = _outside(fresh["load_ext"], LOAD_EXT, LOAD_EXT_OTHER)
    assert not extra, f"%load_ext now imports {extra}: make the import lazy, or add it to " \
                      "LOAD_EXT with the reason"


def test_a_hit_cell_imports_the_hit_the_report_and_its_folds_only(fresh):
    extra = _outside(fresh["cell"], HIT_CELL, HIT_CELL_OTHER)
    assert not extra, f"a hit cell now imports {extra}: make the import lazy, or add it to " \
                      "HIT_CELL with the reason"


@pytest.mark.parametrize("name", NEVER)
def test_neither_imports(fresh, name):
    loaded = [m for m in fresh["load_ext"] + fresh["cell"]
              if m == name or m.startswith(name + ".")]
    assert not loaded, f"%load_ext or a hit cell imported {loaded}"


WARM = textwrap.dedent("""
    import json, sys, threading
    if sys.argv[1] == "numpy":
        import numpy  # noqa: F401  (CuPy's: a notebook that launches has it)
    from IPython.core.interactiveshell import InteractiveShell
    ip = InteractiveShell.instance()
    from cudamagic.toolchain.device import driver
    driver.available = lambda: sys.argv[2] == "gpu"
    driver.retain_primary = lambda device: 1
    ip.run_line_magic("load_ext", "cudamagic")
    for t in threading.enumerate():
        if t.name == "cudamagic-driver":
            t.join(60)
    print(json.dumps({m: m in sys.modules for m in ("numpy", "cudamagic.launch.launcher")}))
""")


@pytest.mark.parametrize("numpy, gpu, warmed", [("numpy", "gpu", True), ("numpy", "none", False),
                                                ("bare", "gpu", False), ("bare", "none", False)])
def test_the_driver_thread_imports_the_launch_code_where_a_launch_comes_next(numpy, gpu, warmed):
    """With a GPU and NumPy imported (CuPy's), the driver thread imports the launch code once
    the context is made, so the first launch does not (it was ~10 ms of it); it never imports
    NumPy for that, and without a GPU it imports none."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get(
        "PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", WARM, numpy, gpu], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"numpy": numpy == "numpy", "cudamagic.launch.launcher": warmed}
