"""The header listing (toolchain/compile/listing.py): the main compile carries no trace, the listing's
list of headers is never shorter than what NVRTC read, and no compile path writes a trace into
the working folder, as another user in a folder they cannot write in.

Each exactness case edits a header the compile read and must see a miss with the new code,
and the listing must have served (beside the compile, not the traced fallback): a planted bug
that makes the listing fail shows as a fallback, one that makes it read fewer files as a hit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import cudamagic
from cudamagic.store.cache import KernelCache
from cudamagic.toolchain.compile.listing import Traced, listing_source

from .conftest import REPO, settled


# --- the listing's text ----------------------------------------------------------------------

def test_the_listing_keeps_everything_to_the_last_include_and_directives_after_it():
    src = ("#define N 4\nstruct S { int a; };\n#include \"a.h\"\n__global__ void k() {\n"
           "#if N > 2\n  int x = N;\n#endif\n}\n")
    out = listing_source(src)
    assert isinstance(out, str) and not isinstance(out, Traced)
    lines = out.split("\n")
    assert len(lines) == len(src.split("\n"))  # NVRTC's line numbers kept
    assert lines[:3] == src.split("\n")[:3]  # code before the last include kept as it is
    assert lines[3:8] == ["", "#if N > 2", "", "#endif", ""]


def test_a_spliced_include_word_counts_and_a_trigraph_splice_is_not_followed():
    src = "__device__ int a;\n#inc\\\nlude \"a.h\"\n__global__ void k() {}\n"
    out = listing_source(src)
    assert out.split("\n")[:3] == src.split("\n")[:3]
    assert listing_source("#include <x.h>\n__global__ void k() {} ??/\n") is Traced.TRIGRAPH
    assert listing_source("__global__ void k() {}\n#include <x.h>\n") \
        is Traced.NOTHING_LEFT_OUT


# --- NVRTC's calls, recorded -------------------------------------------------------------------

def test_the_main_compile_has_no_trace_option_and_the_manifest_names_the_header(
        tmp_path, monkeypatch):
    """Every nvrtcCompileProgram of this process recorded: the cell's compile (the one with its
    name expression) has no --fdevice-time-trace, and an edit of its header is still a miss
    (the listing, in its child, named it)."""
    from cuda.bindings import nvrtc

    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "v.h").write_text("#define V 1\n")
    settled(inc / "v.h")
    calls: list[list[bytes]] = []
    real = nvrtc.nvrtcCompileProgram

    def recorded(prog, n, opts):
        calls.append(list(opts))
        return real(prog, n, opts)

    monkeypatch.setattr(nvrtc, "nvrtcCompileProgram", recorded)
    cache = KernelCache(str(tmp_path / "cache"))
    src = '#include "v.h"\ntemplate <int N> __global__ void k(int* x) { x[0] = V + N; }\n'
    m = cudamagic.build(src, name_expressions=["k<1>"], options=[f"-I{inc}"], cache=cache)
    assert m.report.listing is not None and m.report.listing.beside
    assert calls, "no compile was recorded"
    assert not [c for c in calls if any(o.startswith(b"--fdevice-time-trace") for o in c)], \
        calls
    (inc / "v.h").write_text("#define V 2\n")
    again = cudamagic.build(src, name_expressions=["k<1>"], options=[f"-I{inc}"], cache=cache)
    assert not again.report.hit and again.cubin != m.cubin


# --- exactness ------------------------------------------------------------------------------

# name -> (cell, options, {header: (first text, edited text)}, header edited)
_VAL = ("#define VAL 1\n", "#define VAL 2\n")
CASES = {
    "include named by a macro": (
        '#define HDR "a.h"\n#include HDR\n__global__ void k(int* x) { x[0] = VAL; }\n',
        [], {"a.h": _VAL}, "a.h"),
    "__has_include": (
        '#if __has_include("opt.h")\n#include "opt.h"\n#else\n#define VAL 0\n#endif\n'
        "__global__ void k(int* x) { x[0] = VAL; }\n", [], {"opt.h": _VAL}, "opt.h"),
    "include after code": (
        "struct Cfg { int n; };\n#include \"a.h\"\n"
        "__global__ void k(int* x) { x[0] = VAL + cfg_n(Cfg{3}); }\n", [],
        {"a.h": ("#define VAL 1\n__device__ int cfg_n(Cfg c) { return c.n; }\n",
                 "#define VAL 2\n__device__ int cfg_n(Cfg c) { return c.n; }\n")}, "a.h"),
    "chosen by -D": (
        '#ifdef USE_B\n#include "b.h"\n#else\n#include "a.h"\n#endif\n'
        "__global__ void k(int* x) { x[0] = VAL; }\n", ["-DUSE_B"],
        {"a.h": ("#define VAL 7\n", "#define VAL 7\n"), "b.h": _VAL}, "b.h"),
    "chosen by another header's macro": (
        '#include "cfg.h"\n#ifdef PICK_B\n#include "b.h"\n#else\n#include "a.h"\n#endif\n'
        "__global__ void k(int* x) { x[0] = VAL; }\n", [],
        {"cfg.h": ("#define PICK_B\n", "#define PICK_B\n"),
         "a.h": ("#define VAL 7\n", "#define VAL 7\n"), "b.h": _VAL}, "b.h"),
    "chosen by __CUDA_ARCH__": (
        '#if __CUDA_ARCH__ >= 900\n#include "b.h"\n#else\n#include "a.h"\n#endif\n'
        "__global__ void k(int* x) { x[0] = VAL; }\n", ["-arch=sm_90"],
        {"a.h": ("#define VAL 7\n", "#define VAL 7\n"), "b.h": _VAL}, "b.h"),
    "guarded header included twice": (
        '#include "g.h"\n__device__ int y = VAL;\n#include "g.h"\n'
        "__global__ void k(int* x) { x[0] = VAL + y; }\n", [],
        {"g.h": ("#ifndef G_H\n#define G_H\n#define VAL 1\n#endif\n",
                 "#ifndef G_H\n#define G_H\n#define VAL 2\n#endif\n")}, "g.h"),
    "#pragma once header included twice": (
        '#include "o.h"\n#include "o.h"\n__global__ void k(int* x) { x[0] = VAL; }\n', [],
        {"o.h": ("#pragma once\n#define VAL 1\n", "#pragma once\n#define VAL 2\n")}, "o.h"),
    "-include pre-include": (
        "__global__ void k(int* x) { x[0] = VAL; }\n", ["--pre-include=pre.h"],
        {"pre.h": _VAL}, "pre.h"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_edit_of_a_header_the_compile_read_is_a_miss_with_the_new_code(tmp_path, case):
    src, extra, headers, edited = CASES[case]
    inc = tmp_path / "inc"
    inc.mkdir()
    for name, (text, _) in headers.items():
        (inc / name).write_text(text)
        settled(inc / name)
    cache = KernelCache(str(tmp_path / "cache"))
    options = [f"-I{inc}", *extra]
    first = cudamagic.build(src, options=options, cache=cache, pch=False)
    listing = first.report.listing
    assert listing is not None and listing.beside, f"the listing did not serve: {listing}"
    assert cudamagic.build(src, options=options, cache=cache, pch=False).report.hit
    (inc / edited).write_text(headers[edited][1])
    settled(inc / edited)
    again = cudamagic.build(src, options=options, cache=cache, pch=False)
    assert not again.report.hit, f"{case}: an edit of {edited} was served from the cache"
    assert again.cubin != first.cubin


def test_a_listing_that_fails_where_the_cell_compiles_falls_back_to_the_traced_compile(
        tmp_path):
    """An include inside a namespace closed after it: the listing (the closing brace blanked)
    fails, the cell is compiled again traced, the report says so, and an edit is a miss."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "a.h").write_text("#define VAL 1\n__device__ inline int f() { return VAL; }\n")
    settled(inc / "a.h")
    src = 'namespace a {\n#include "a.h"\n}\n__global__ void k(int* x) { x[0] = a::f(); }\n'
    cache = KernelCache(str(tmp_path / "cache"))
    first = cudamagic.build(src, options=[f"-I{inc}"], cache=cache, pch=False)
    assert first.report.listing.traced is Traced.LISTING_FAILED
    assert "the listing failed" in first.report.text()
    (inc / "a.h").write_text("#define VAL 2\n__device__ inline int f() { return VAL; }\n")
    again = cudamagic.build(src, options=[f"-I{inc}"], cache=cache, pch=False)
    assert not again.report.hit and again.cubin != first.cubin


# --- no trace in the working folder, as another user -------------------------------------------

NOBODY = 65534

PATHS_CHILD = r"""
import json, os, sys
import cudamagic
from cudamagic.errors import CudaMagicError
inc = sys.argv[1]
out = {}
def run(label, src, **kw):
    try:
        m = cudamagic.build(src, **kw)
        out[label] = "ok" if m.cubin[:4] == b"\x7fELF" else "no cubin"
    except CudaMagicError as exc:
        out[label] = type(exc).__name__
HALF = "#include <cuda_fp16.h>\n"
run("main compile", HALF + "__global__ void k(__half* x) { x[0] = __float2half(1.f); }\n")
run("type probe", '#include "v.h"\n__device__ float table[V];\n'
    'extern "C" __global__ void k(float* x) { x[0] = table[0]; }\n', options=["-I" + inc])
run("-n retry, listed", HALF + "__global__ void scale(float* x) { x[0] *= 2; }\n",
    name_expressions=["scale<float>"])
run("-n retry, traced", "__global__ void scale(float* x) { x[0] *= 2; }\n" + HALF,
    name_expressions=["scale<float>"])
run("-rdc and link", HALF + "__device__ int f();\n__device__ int f() { return 1; }\n"
    "__global__ void k(int* x) { x[0] = f(); }\n", options=["-rdc=true"])
run("-dc and link", HALF + "__global__ void k(int* x) { x[0] = 3; }\n", options=["-dc"])
run("-lineinfo build", HALF + "__global__ void k(int* x) { x[0] = 4; }\n",
    options=["-lineinfo"])
run("failed listing", 'namespace a {\n#include "v.h"\n}\n__global__ void k(int* x) '
    '{ x[0] = V; }\n', options=["-I" + inc])
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run a child as another user")
def test_every_compile_path_as_another_user_in_a_read_only_folder(tmp_path):
    """Each compile path (the main compile, the type probe, the -n hint's compile after a
    failed one, listed and traced, -rdc and -dc with their link, the -lineinfo build, a
    listing that fails) as uid 65534 from a folder it cannot write in: no abort ("Could not
    open .json": SIGABRT), nothing written there, each with its own outcome."""
    home = Path(tempfile.mkdtemp(prefix="cudamagic-nobody-"))
    try:
        os.chown(home, NOBODY, NOBODY)
        (home / "inc").mkdir()
        (home / "inc" / "v.h").write_text("#define V 4\n")
        read_only = Path(tempfile.mkdtemp(prefix="cudamagic-ro-"))
        read_only.chmod(0o555)  # root's: uid 65534 can read and enter it, not write there
        for p in (home / "inc", home / "inc" / "v.h"):
            os.chown(p, NOBODY, NOBODY)
        # the interpreter's own PYTHONPATH kept (the GPU machine's wheels are carried there)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                   p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
               "PYTHONDONTWRITEBYTECODE": "1",
               "HOME": str(home), "TMPDIR": str(home),
               "CUDAMAGIC_CACHE_DIR": str(home / "cache")}

        # uid 65534 that may still read and search every folder (the interpreter may live
        # under /root), and write only where that uid may: not in the read-only folder
        as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                     "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
        proc = subprocess.run([*as_nobody, sys.executable, "-c", PATHS_CHILD,
                               str(home / "inc")], capture_output=True, text=True, env=env,
                              cwd=read_only, timeout=600)
        assert proc.returncode == 0, f"child died ({proc.returncode}):\n{proc.stderr[-3000:]}"
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out == {"main compile": "ok", "type probe": "ok",
                       "-n retry, listed": "CompileError", "-n retry, traced": "CompileError",
                       "-rdc and link": "ok", "-dc and link": "ok", "-lineinfo build": "ok",
                       "failed listing": "ok"}, out
        assert not list(read_only.iterdir())
        assert "time profiler" not in proc.stderr, proc.stderr
    finally:
        shutil.rmtree(home, ignore_errors=True)
        if "read_only" in locals():
            read_only.rmdir()
