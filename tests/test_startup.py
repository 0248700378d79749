"""A cache hit in a fresh process imports only what a hit needs (issue 30 item 1).

One child fills a cache folder; a second, fresh, child serves the same build from it
(``import cudamagic; cudamagic.build(...)``, NumPy imported first as a user's script has it) and
lists what the hit imported. A module that joins the hit path by mistake (a compiler, linker,
tool-run, view or remote-tier module pulled in by a module-level import) fails here: add it to
HIT_MODULES only where a hit really uses it, and say why in docs/performance.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SOURCE = "template <int N> __global__ void k(float* x, int n) { if (n > N) x[N] += 1.f; }\n"

CHILD = r"""
import json, sys
import numpy  # noqa: F401  (as a user's script has it: not counted)
before = set(sys.modules)
import cudamagic
mod = cudamagic.build(sys.argv[1], name_expressions=["k<0>", "k<1>"])
new = sorted(set(sys.modules) - before)
print(json.dumps({"hit": mod.hit, "kernels": len(mod), "modules": new}))
"""

#: cudamagic's modules a hit imports: the entry, the CUBIN's tables (and the ELF format they
#: are read by, toolchain.elf), the names (the stored map checked by its text: cxx.quick, no C++
#: reader), the records of the report, the Kernel class (not yet launched: its launcher,
#: parameter table and argument packing come with its first call), cxx.kernel_names (the
#: report's hint of a template kernel left without -n reads the cell's text on every build, a
#: hit's too), and cudamagic.core.process (the registry every memoized function and fork hook
#: registers with). The compile server's client, the tool runs' -lineinfo support and the
#: variables' module come with a miss, a tool run or a cell that has variables.
HIT_MODULES = frozenset("cudamagic." + m if m else "cudamagic" for m in """
    | core.process cxx cxx.display cxx.quick cxx.resolve cxx.signatures errors pipeline.explain
    core.files core.forksafe store.keys core.miss core.options core.toolkit core.units launch
    launch.kernel pipeline.module pipeline.naming pipeline.steps pipeline.typed pipeline.api
    core.libraries store store.base store.cache store.connections store.disk store.entry
    store.limits store.state toolchain toolchain.binary.demangle toolchain.device.driver
    toolchain.binary.elf toolchain.binary.image toolchain.compile.manifest cxx.kernel_names view
    view.render view.report core pipeline toolchain.binary toolchain.device toolchain.compile
    """.replace("|", "").split() + [""])

#: what a hit must never import: the compile's, the link's, the tools', the views a hit does
#: not show, the remote tier (none configured), and the shell's libraries
NEVER = ("cudamagic.toolchain.compile.nvrtc", "cudamagic.toolchain.compile.probe",
         "cudamagic.cxx.declared", "cudamagic.toolchain.compile.link",
         "cudamagic.toolchain.compile.fatbin", "cudamagic.toolchain.device.occupancy",
         "cudamagic.toolchain.tools.sanitizer", "cudamagic.toolchain.tools.profiler",
         "cudamagic.toolchain.tools.tools", "cudamagic.launch.bench", "cudamagic.launch.tool_run",
         "cudamagic.launch.calls", "cudamagic.launch.capture", "cudamagic.view.debug",
         "cudamagic.view.bench", "cudamagic.view.shown", "cudamagic.view.widget",
         "cudamagic.store.remote", "cudamagic.shell.magic", "cudamagic.shell.info", "redis", "xml",
         "cudamagic.toolchain.compile.deps", "cudamagic.toolchain.binary.ptx",
         "cudamagic.launch.launcher", "cudamagic.launch.params", "cudamagic.launch.encode",
         "cudamagic.launch.extended", "subprocess", "difflib", "decimal", "fractions", "IPython",
         "ipywidgets", "cupy", "cuda.bindings.nvrtc", "cuda.bindings.nvjitlink")


def _child(cache: Path, *, env: dict[str, str] | None = None) -> dict:
    full = {**os.environ, "CUDAMAGIC_CACHE_DIR": str(cache), **(env or {}),
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    full.pop("CUDAMAGIC_REMOTE_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, SOURCE], capture_output=True,
                          text=True, env=full, timeout=600, cwd=cache.parent)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def hit(tmp_path_factory) -> dict:
    cache = tmp_path_factory.mktemp("startup") / "cache"
    first = _child(cache)
    assert first["hit"] is False and first["kernels"] == 2
    got = _child(cache)
    assert got["hit"] is True and got["kernels"] == 2
    return got


def test_a_fresh_hit_imports_only_the_hit_path(hit):
    ours = {m for m in hit["modules"] if m.split(".")[0] == "cudamagic"}
    extra = sorted(ours - HIT_MODULES)
    assert not extra, f"a cache hit now imports {extra}: make the import lazy, or add it to " \
                      "HIT_MODULES with the reason"


@pytest.mark.parametrize("name", NEVER)
def test_a_fresh_hit_never_imports(hit, name):
    loaded = [m for m in hit["modules"] if m == name or m.startswith(name + ".")]
    assert not loaded, f"a cache hit imported {loaded}"
