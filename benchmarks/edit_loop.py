"""An edited cell's miss as the user waits for it (issue 37): ten edits of each cell, for
cudamagic through its compile server, cudamagic with the precompiled header in the kernel's own
process, cudamagic without it, and CuPy compiling the same edited sources, alternated in one
run; then each kernel restarted and the next edit sent to the fresh one (issue 49).

The cells (``--cells``): ``cub`` (``cub::BlockReduce<float, 256>``), ``fp16`` (``cuda_fp16.h``
and ``cuda_bf16.h`` arithmetic in an ``extern "C"`` kernel, whose parameter types the type probe
asks), ``tinyla`` (the tests' own header library, tests/fixtures/tinyla: 14 headers, about
2 800 lines of templates), ``cute`` (issue 50's CuTe cell: ``cute/tensor.hpp`` and
``cutlass::half_t`` from the nvidia-cutlass wheel; cudamagic adds CUTLASS's options itself, CuPy
is given the same folders by hand) and ``small`` (no header: the control, which must not get
slower).
Each is compiled once ("first": the header set's first compile, where the PCH is made) and then
edited ``--edits`` times; every edit changes one constant in the kernel's body, and that
constant holds a salt drawn for this run, the tool and the edit, so no compile of any tool
repeats a source that any process compiled before (NVRTC 12.9 and later keep their own cache
of compiled programs, which would answer a repeated source in a fraction of its time).

How it is timed. One Jupyter kernel per tool (``python3``, through jupyter_client), started
once and kept for the whole run as a user's session is, each with a fresh cache folder
(``CUDAMAGIC_CACHE_DIR``, ``CUPY_CACHE_DIR``): its first cell imports CuPy (makes the context
where there is a GPU) and, for cudamagic, runs ``%load_ext cudamagic`` and compiles one small
cell, so that NVRTC is loaded before anything is timed. Then for each cell and edit the four
tools take turns (the order rotates with each edit), each sent as a notebook sends a cell (the
same ``cellId`` for every edit of one cell, so cudamagic's report compares each edit with the
one before). A figure is the kernel's own dates, the cell's ``execute_input`` to its
``execute_reply``: everything the kernel did, the report shown. Medians over the edits.

- *cudamagic server*: the same cell with ``CUDAMAGIC_COMPILE_SERVER=1`` in the kernel's
  environment: NVRTC runs in the compile server (docs/cache.md), which the warm-up cell starts
  and which outlives the kernel. Each edit's check asks the server's pid and that the kernel's
  process never loaded libnvrtc (else the column was compiled in-process and the run stops).
  A cudamagic without ``cudamagic.compiler`` runs without this column and says so.
- *cudamagic + PCH*: the ``%%cuda`` cell, report shown (no ``-q``); the cudamagic of this
  checkout as it builds by default (in the kernel's process).
- *cudamagic, no PCH*: the same cell with ``CUDAMAGIC_PCH=0`` in the kernel's environment (and
  ``--no-pch`` on the line where the magic takes it). A cudamagic without the PCH switch
  (``build()`` has no ``pch=``) runs this column alone and says so.
- *CuPy*: ``cp.RawModule(code=..., options=..., name_expressions=...)`` and ``get_function`` for
  each kernel, with cudamagic's dialect and header folders; CuPy's defaults otherwise
  (``CUPY_NVRTC_USE_PCH`` off, as CuPy ships). Without a GPU, RawModule cannot compile (it
  asks the device for its arch and loads the CUBIN), so the cell runs what RawModule's compile
  runs without a device: CuPy's ``_NVRTCProgram`` with the options RawModule gives it for sm_90
  (``-ftz=true``, ``-arch=sm_90``, ``--device-as-default-execution-space``) and its source file
  written as CuPy writes it; the output says so.

After each timed cell an untimed cell checks it: for cudamagic the cell was a miss and showed
its report, and what its precompiled header did (the report's ``pch``: ``used`` where it
served, ``made``, ``heap``...) and its phases (``report.timings``) are kept; for CuPy on a GPU,
its cache folder got a new file (it compiled). Every check records the kernel's pid, its cache
folder, whether it loaded libnvrtc and the compile server serving it.

**The restart** (left out with ``--no-restart``). After a cell's edits every tool's kernel is
shut down and a fresh one started with the same environment: the same cache folders and, for
the server's column, the same compile server (its pid is checked to be the one before). The
fresh kernel runs the warm-up cell (untimed, as before: imports, ``%load_ext``, one small
compile of another salt), then receives the cell's next edit, whose time is the restart figure:
for cudamagic in-process a header set's first compile of a new process (its PCH was the dead
process's), for the server one more edit, its PCH the server's. Each restart edit is checked a
miss in a kernel of a new pid; the goal (issue 49) is the server's restart edit at most 0.3x
CuPy's.

``--breakdown`` prints, per cell, the median seconds of each phase of cudamagic's miss (the
report's timings: NVRTC's compile, the header manifest, the names, the store, the history, the
display...) and what the kernel spent outside them, for both cudamagic columns; and, in the
no-PCH kernel, NVRTC's compile alone of the same edit (no trace, no type probe: another salt),
so the table shows what cudamagic adds to NVRTC's own call.

GPU machine (scripts/device.sh edit_loop; about 5 minutes):
    python3 benchmarks/edit_loop.py --breakdown --out $OUT
Here (no GPU):
    .venv/bin/python benchmarks/edit_loop.py --breakdown --out /tmp/edit_loop
    .venv/bin/python benchmarks/edit_loop.py --edits 2 --cells cub,cute   # the restart, quickly
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import queue
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from common import (REPO, bench_env, cupy_options, gpu_available, machine, median, versions,
                    write_outputs)

TINYLA = str(REPO / "tests" / "fixtures" / "tinyla" / "include")


@dataclass(frozen=True)
class Cell:
    """One cell the user edits: its source (``@C@`` is the constant an edit changes), the name
    expressions, the kernels CuPy's get_function asks for, and extra NVRTC options."""

    name: str
    source: str
    names: tuple[str, ...]
    kernels: tuple[str, ...]
    options: tuple[str, ...] = ()
    #: what CuPy is given by hand where cudamagic adds the options itself (CUTLASS's folders)
    cupy_options: tuple[str, ...] = ()


def cutlass_folders() -> tuple[str, ...]:
    """The ``-I`` folders cudamagic adds for a CuTe cell (the wheel's headers and the ``cccl/``
    layout CUTLASS expects under CUDA 13), for CuPy by hand; ``()`` without the wheel. CuPy's
    RawModule already passes ``--device-as-default-execution-space``, CUTLASS's third need.
    They go before the toolkit's folders, as cudamagic orders them: a toolkit whose include/
    has a cccl/ of its own (``CUDA_HOME=/usr/local/cuda`` on the GPU machine), found first,
    mixed two CCCLs in one compile."""
    from cudamagic.core.libraries import cccl_layout_dir, cutlass

    found = cutlass()
    return () if found is None else (f"-I{found.include_dir}", f"-I{cccl_layout_dir()}")


CELLS = {c.name: c for c in [
    Cell("cub", r"""
#include <cub/block/block_reduce.cuh>
template <int N> __global__ void reduce_sum(const float* x, float* out, int n) {
  using Reduce = cub::BlockReduce<float, 256>;
  __shared__ typename Reduce::TempStorage tmp;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? x[i] * @C@f : 0.0f;
  float s = Reduce(tmp).Sum(v);
  if (threadIdx.x == 0) out[blockIdx.x] = s * N; }
""", ("reduce_sum<1>",), ("reduce_sum<1>",)),
    Cell("fp16", r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void mix(const __half* a, const __nv_bfloat16* b, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half h = __hmul(a[i], __float2half(@C@f));
  __nv_bfloat16 g = __hfma(b[i], __float2bfloat16(0.25f), __float2bfloat16(0.5f));
  __half2 p = __halves2half2(h, __hneg(h));
  out[i] = __half2float(__hadd(__low2half(p), hsqrt(__habs(h)))) + __bfloat162float(hexp(g)); }
""", (), ("mix",)),
    Cell("tinyla", r"""
#include <tinyla/tinyla.cuh>
using namespace tinyla;
template <int N> __global__ void t(const float* x, float* out, int n) {
  __shared__ BlockReduce<float, 256>::TempStorage tmp;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  Vec<float, 4> v = make_vec(x[i % n], 1.0f, 2.0f, 3.0f) * @C@f;
  Mat<float, 4, 4> m = outer(v, wzyx(v)) + Mat<float, 4, 4>::identity();
  Quat<float> q = Quat<float>::from_axis_angle(xyz(v), 0.5f);
  Vec<float, 3> r = rotate(q, normalize(xyz(m * v)));
  Complex<float> z = sqrt(Complex<float>(r.v[0], r.v[1]));
  float s = BlockReduce<float, 256>(tmp).sum(determinant(m) + abs(z) + median(sorted(v)));
  if (threadIdx.x == 0) out[blockIdx.x] = s * N; }
""", ("t<1>",), ("t<1>",), (f"-I{TINYLA}",)),
    Cell("cute", r"""
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>
using namespace cute;
template <class T, class N> __global__ void scale(T* x, float a) {
  auto t = make_tensor(make_gmem_ptr(x), make_layout(make_shape(N{})));
  if (threadIdx.x < size(t)) t(threadIdx.x) = T(float(t(threadIdx.x)) * a * @C@f); }
""", ("scale<cutlass::half_t, cute::Int<128>>",), ("scale<cutlass::half_t, cute::Int<128>>",),
         cupy_options=cutlass_folders()),
    Cell("small", r"""
template <int N> __global__ void k(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = x[i] * @C@f + N; }
""", ("k<1>",), ("k<1>",)),
]}

TOOLS = ("server", "pch", "plain", "cupy")
LABELS = {"server": "cudamagic server", "pch": "cudamagic + PCH", "plain": "cudamagic, no PCH",
          "cupy": "CuPy"}


class Salt:
    """The constants edits write: each one new to every process (a fresh salt per run)."""

    def __init__(self) -> None:
        self.run = secrets.randbelow(10 ** 9)

    def constant(self, tool: int, cell: int, edit: int) -> str:
        return f"1.{self.run:09d}{tool}{cell}{edit:02d}"


def edited(cell: Cell, constant: str) -> str:
    return cell.source.replace("@C@", constant).strip() + "\n"


# ---- one kernel per tool ------------------------------------------------------------------------

@dataclass
class Ran:
    """One executed cell: the kernel's dates, the client's wait, what it showed and printed."""

    kernel_s: float
    client_s: float
    outputs: list = field(default_factory=list)

    def stdout(self) -> str:
        return "".join(o["text"] for o in self.outputs
                       if o["type"] == "stream" and o.get("name") == "stdout")

    def checked(self, tag: str) -> dict:
        line = next((ln for ln in self.stdout().splitlines() if ln.startswith(tag + " ")), None)
        if line is None:
            raise RuntimeError(f"the check cell printed no {tag} line: {self.outputs}")
        return json.loads(line.split(" ", 1)[1])


class Session:
    """A Jupyter kernel started once and sent cells one at a time, as a notebook sends them."""

    def __init__(self, env: dict[str, str], cwd: str, timeout: float) -> None:
        from jupyter_client.manager import KernelManager

        self.timeout = timeout
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=bench_env(env), cwd=cwd)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=timeout)

    def run(self, code: str, cell_id: str | None = None) -> Ran:
        """Execute ``code`` (with a notebook's ``cellId``); raises where the cell raised."""
        kc = self.kc
        msg = kc.session.msg("execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True},
            metadata={"cellId": cell_id} if cell_id else {})
        sent = time.perf_counter()
        kc.shell_channel.send(msg)
        mid = msg["header"]["msg_id"]
        outputs: list[dict] = []
        started = None
        while True:
            try:
                m = kc.get_iopub_msg(timeout=self.timeout)
            except queue.Empty:
                raise TimeoutError(f"no answer from the kernel in {self.timeout} s") from None
            if m["parent_header"].get("msg_id") != mid:
                continue
            kind, content = m["msg_type"], m["content"]
            if kind == "execute_input":
                started = m["header"]["date"]
            elif kind == "status" and content.get("execution_state") == "idle":
                break
            elif kind in ("stream", "display_data", "execute_result", "error"):
                outputs.append({"type": kind, **content})
        while True:
            reply = kc.get_shell_msg(timeout=self.timeout)
            if reply["parent_header"].get("msg_id") == mid:
                break
        done = time.perf_counter()
        if reply["content"].get("status") != "ok":
            err = reply["content"]
            raise RuntimeError(f"the cell raised {err.get('ename')}: {err.get('evalue')}\n"
                               + "\n".join(err.get("traceback", []))[-3000:])
        assert started is not None
        return Ran((reply["header"]["date"] - started).total_seconds(), done - sent, outputs)

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


# ---- the cells each tool runs -------------------------------------------------------------------

#: the kernel's process as a check cell sees it: its pid, its cache folder, whether it loaded
#: libnvrtc, and the compile server serving it (its pid; None where none serves or can)
PROCESS = """import json as _j, os as _os, sys as _sys
def _process():
    _p = _sys.modules.get("cudamagic.pipeline.steps")  # CuPy's kernel never imports cudamagic
    _f = _p.SERVED.status() if _p is not None and hasattr(_p, "SERVED") else None
    with open("/proc/self/maps") as _m:
        _maps = _m.read()
    return {"pid": _os.getpid(), "cache": _os.environ.get("CUDAMAGIC_CACHE_DIR"),
            "nvrtc_loaded": "libnvrtc" in _maps, "server_pid": getattr(_f, "pid", None)}
"""

CHECK_CUDAMAGIC = """_r = cuda_module.report
print("EDIT-CHECK " + _j.dumps({"hit": bool(cuda_module.hit),
    "timings": {str(getattr(k, "value", k)): v for k, v in _r.timings.items()},
    "pch_said": "precompiled header" in str(_r),
    "pch_kind": _r.pch[0].value if getattr(_r, "pch", None) else None, **_process()}))"""
CHECK_CUPY = 'print("EDIT-CHECK " + _j.dumps(_process()))'

#: what RawModule's compile runs without a device (no arch query, no module load): CuPy's
#: NVRTC program with the options RawModule adds for sm_90, its source file written as CuPy does
CUPY_NO_GPU = '''
import os as _os, tempfile as _tf
from cupy.cuda import compiler as _cc
def _cupy_compile(code, options, names):
    options = tuple(options) + ("-ftz=true", "-arch=sm_90", "--device-as-default-execution-space")
    with _tf.TemporaryDirectory() as _d:
        _p = _os.path.join(_d, "kern.cu")
        with open(_p, "w") as _f:
            _f.write(code)
        prog = _cc._NVRTCProgram(code, _p, (), (), name_expressions=list(names) or None,
                                 method="cubin")
        return prog.compile(options)
'''

BARE = '''
from cudamagic.core.options import BuildOptions as _BO
from cudamagic.pipeline.steps import entry_key as _ek
from cudamagic.toolchain.compile.nvrtc import compile_cubin as _cc_bare
import time as _t, json as _j
def _bare(code, names, options):
    """NVRTC's compile alone: cudamagic's options, no trace, no type probe."""
    opts = _ek(code, _BO(name_expressions=tuple(names), options=tuple(options)))[2]
    t = _t.perf_counter()
    _cc_bare(code, list(names), opts, trace=False)
    print("EDIT-BARE " + _j.dumps({"seconds": _t.perf_counter() - t}))
'''


def warm_up(tool: str, gpu: bool, constant: str) -> str:
    """The first cell of a tool's kernel (untimed): imports, the context, one small compile."""
    lines = ["import cupy as cp", PROCESS] + (["cp.cuda.Device(0).synchronize()"] if gpu else [])
    small = edited(CELLS["small"], constant)
    if tool == "cupy":
        if gpu:
            lines.append(f"cp.RawModule(code={small!r}, name_expressions=['k<1>'])"
                         ".get_function('k<1>')")
        else:
            lines += [CUPY_NO_GPU, f"_cupy_compile({small!r}, {cupy_options()!r}, ['k<1>'])"]
        return "\n".join(lines)
    # the server's kernel never imports the in-process compile (it would load NVRTC)
    lines += ["%load_ext cudamagic", *([BARE] if tool != "server" else []),
              f"get_ipython().run_cell_magic('cuda', \"-q -n 'k<1>'\", {small!r})"]
    return "\n".join(lines)


def timed_cell(tool: str, cell: Cell, constant: str, gpu: bool, no_pch_flag: bool) -> str:
    source = edited(cell, constant)
    if tool == "cupy":
        options = cell.cupy_options + cupy_options() + cell.options
        if not gpu:
            return f"_cupy_compile({source!r}, {options!r}, {cell.names!r})"
        names = f", name_expressions={list(cell.names)!r}" if cell.names else ""
        return (f"mod = cp.RawModule(code={source!r}, options={options!r}{names})\n"
                f"kernels = [mod.get_function(k) for k in {list(cell.kernels)!r}]")
    line = " ".join([*(f"-n '{n}'" for n in cell.names), *cell.options,
                     *(["--no-pch"] if tool == "plain" and no_pch_flag else [])])
    return f"%%cuda {line}\n{source}"


def _files(folder: str) -> int:
    return sum(len(fs) for _, _, fs in os.walk(folder))


# ---- the run ------------------------------------------------------------------------------------

def pch_switch() -> tuple[bool, bool]:
    """(build() takes pch=, the magic's line takes --no-pch) in this checkout's cudamagic."""
    import cudamagic
    from cudamagic.core.options import parse_magic_line

    takes = "pch" in inspect.signature(cudamagic.build).parameters
    try:
        parse_magic_line("--no-pch")
        flag = True
    except Exception:
        flag = False
    return takes, flag


def has_server() -> bool:
    """Whether this checkout's cudamagic has the compile server (issue 49)."""
    import importlib.util

    return importlib.util.find_spec("cudamagic.compiler.client") is not None


def tool_env(tool: str, work: str) -> dict[str, str]:
    """A tool's kernel's environment: its own cache folders (kept over its restart)."""
    env = {"CUDAMAGIC_CACHE_DIR": os.path.join(work, f"{tool}-cudamagic"),
           "CUPY_CACHE_DIR": os.path.join(work, f"{tool}-cupy"), "CUPY_NVRTC_USE_PCH": "0"}
    if tool == "plain":
        env["CUDAMAGIC_PCH"] = "0"
    if tool == "server":
        env["CUDAMAGIC_COMPILE_SERVER"] = "1"
    return env


def _started(tool: str, work: str, gpu: bool, constant: str, timeout: float,
             what: str) -> Session:
    """A tool's kernel, started and warmed up (untimed)."""
    t = time.perf_counter()
    session = Session(tool_env(tool, work), work, timeout)
    session.run(warm_up(tool, gpu, constant))
    print(f"  {LABELS[tool]}: kernel {what} and warmed up in {time.perf_counter() - t:.1f} s",
          flush=True)
    return session


def run(cells: list[str], edits: int, breakdown: bool, gpu: bool, timeout: float,
        restart: bool = True) -> dict:
    has_pch, no_pch_flag = pch_switch()
    served = has_server()
    tools = [t for t in TOOLS if (has_pch or t != "pch") and (served or t != "server")]
    missing = [c for c in cells if CELLS[c].name == "cute" and not CELLS[c].cupy_options]
    if missing:
        raise RuntimeError("the cute cell needs the nvidia-cutlass wheel (pip install "
                           "nvidia-cutlass), which this Python lacks")
    salt = Salt()
    work = tempfile.mkdtemp(prefix="cudamagic-edit-loop-")
    sessions: dict[str, Session] = {}
    raw: dict[str, dict[str, list[dict]]] = {c: {t: [] for t in tools} for c in cells}
    restarts: dict[str, dict[str, dict]] = {c: {} for c in cells}
    note = [] if has_pch else ["this cudamagic has no PCH switch (build() takes no pch=): "
                               "the cudamagic column is its only build, without a PCH"]
    if not served:
        note.append("this cudamagic has no compile server (no cudamagic.compiler): no server "
                    "column")
    if not gpu:
        note.append("no GPU: CuPy's column is what RawModule's compile runs without a device "
                    "(CuPy's _NVRTCProgram with RawModule's options for sm_90), not RawModule")
    try:
        for i, tool in enumerate(tools):
            sessions[tool] = _started(tool, work, gpu, salt.constant(i, 9, 99), timeout,
                                      "started")
        for ci, name in enumerate(cells):
            cell = CELLS[name]
            for edit in range(edits + 1):
                order = tools[edit % len(tools):] + tools[:edit % len(tools)]
                for tool in order:
                    got = _one(sessions[tool], tool, cell, salt.constant(TOOLS.index(tool), ci,
                               edit), gpu, no_pch_flag,
                               os.path.join(work, f"{tool}-cupy"), breakdown and tool == "plain",
                               salt.constant(8, ci, edit))
                    raw[name][tool].append(got)
                print(f"  {name:6} {'first' if edit == 0 else f'edit {edit:2}'}: " + ", ".join(
                    f"{LABELS[t]} {raw[name][t][-1]['cell'] * 1e3:7.0f} ms" for t in tools)
                    + (f" (NVRTC alone {raw[name]['plain'][-1]['bare'] * 1e3:.0f} ms)"
                       if breakdown and "bare" in raw[name]["plain"][-1] else ""), flush=True)
            if restart:
                _restart(sessions, tools, work, gpu, timeout, salt, ci)
                order = tools[(edits + 1) % len(tools):] + tools[:(edits + 1) % len(tools)]
                for tool in order:
                    got = _one(sessions[tool], tool, cell, salt.constant(
                        TOOLS.index(tool), ci, edits + 1), gpu, no_pch_flag,
                        os.path.join(work, f"{tool}-cupy"), False, "")
                    restarts[name][tool] = _restarted(tool, name, got, raw[name][tool])
                print(f"  {name:6} restart: " + ", ".join(
                    f"{LABELS[t]} {restarts[name][t]['cell'] * 1e3:7.0f} ms" for t in tools),
                    flush=True)
    finally:
        if "server" in tools:
            _stop_server(sessions.get("server"), tool_env("server", work)["CUDAMAGIC_CACHE_DIR"])
        for s in sessions.values():
            s.close()
        shutil.rmtree(work, ignore_errors=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(),
            "versions": versions(), "gpu": gpu, "edits": edits, "pch_switch": has_pch,
            "notes": note, "tools": tools, "raw": raw, "restarts": restarts if restart else {}}


def _stop_server(session: Session | None, cache: str) -> None:
    """The server's column's compile server ended (it outlives its kernels: ended here, not
    its idle time later): by its kernel as a user ends it, else (a kernel that did not
    start) asked here through its socket, never started."""
    try:
        if session is not None:
            session.run("%cuda_cache server stop")
            return
        if os.path.isdir(os.path.join(cache, "server")):
            from cudamagic.compiler.client import Endpoint
            from cudamagic.compiler.wire import server_folder, toolchain_id
            from cudamagic.core.toolkit import toolkit

            Endpoint(server_folder(cache), toolchain_id(toolkit().nvrtc_wheel)).ask(
                {"kind": "stop"}, start=False)
    except Exception as exc:  # noqa: BLE001 - said; the run's folder goes all the same
        print(f"  the compile server could not be stopped: {exc}", flush=True)


def _restart(sessions: dict[str, Session], tools: list[str], work: str, gpu: bool,
             timeout: float, salt: Salt, ci: int) -> None:
    """Every tool's kernel shut down and a fresh one started in its place (same environment,
    same cache folders; the compile server, a process of its own, stays)."""
    for i, tool in enumerate(tools):
        sessions.pop(tool).close()
        sessions[tool] = _started(tool, work, gpu, salt.constant(i, 7, ci), timeout,
                                  "restarted")


def _restarted(tool: str, name: str, got: dict, before: list[dict]) -> dict:
    """``got``, the first edit after the restart, checked: a kernel of a new pid, the same cache
    folder, and for the server's column the same server as before."""
    if got["pid"] in {r["pid"] for r in before}:
        raise RuntimeError(f"{LABELS[tool]}: the restart edit of {name} ran in the kernel of "
                           f"the edits before it (pid {got['pid']}): no restart")
    if {r["cache"] for r in before} != {got["cache"]}:
        raise RuntimeError(f"{LABELS[tool]}: the restarted kernel's cache folder is "
                           f"{got['cache']}, not the one of the edits before it")
    if tool == "server" and {r["server_pid"] for r in before} != {got["server_pid"]}:
        raise RuntimeError(f"the server's column: the restart edit of {name} was served by "
                           f"server {got['server_pid']}, not the one of the edits before it")
    return got


def _one(session: Session, tool: str, cell: Cell, constant: str, gpu: bool, no_pch_flag: bool,
         cupy_cache: str, bare: bool, bare_constant: str) -> dict:
    """One timed edit of one tool, and its untimed check."""
    before = _files(cupy_cache) if tool == "cupy" and gpu else None
    ran = session.run(timed_cell(tool, cell, constant, gpu, no_pch_flag), f"edit-{cell.name}")
    got: dict[str, Any] = {"cell": ran.kernel_s, "client": ran.client_s}
    if tool == "cupy":
        if before is not None and _files(cupy_cache) <= before:
            raise RuntimeError(f"CuPy's cache folder got no new file: {cell.name} did not "
                               "compile (a repeated source?)")
        got.update(session.run(CHECK_CUPY).checked("EDIT-CHECK"))
        return got
    if not any(o["type"] == "display_data" for o in ran.outputs):
        raise RuntimeError(f"the %%cuda cell showed no report: {ran.outputs}")
    check = session.run(CHECK_CUDAMAGIC).checked("EDIT-CHECK")
    if check["hit"]:
        raise RuntimeError(f"{LABELS[tool]}: an edit of {cell.name} was a cache hit: its time "
                           "would not be a miss's")
    if tool == "server" and (check["server_pid"] is None or check["nvrtc_loaded"]):
        raise RuntimeError(f"the server's column: an edit of {cell.name} was compiled in the "
                           f"kernel's process (server {check['server_pid']}, libnvrtc loaded "
                           f"there: {check['nvrtc_loaded']}), not by a compile server")
    got.update(check)
    del got["hit"]
    if bare:
        code = edited(cell, bare_constant)
        got["bare"] = session.run(f"_bare({code!r}, {cell.names!r}, {cell.options!r})"
                                  ).checked("EDIT-BARE")["seconds"]
    return got


# ---- tables -------------------------------------------------------------------------------------

def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x * 1e3:.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if a is None or b is None else f"{a / b:.2f}x"


def summary(result: dict) -> dict:
    """Per cell and tool: the first compile and the median edit (seconds)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, by_tool in result["raw"].items():
        out[name] = {}
        for tool, runs in by_tool.items():
            if runs:
                out[name][tool] = {"first": runs[0]["cell"],
                                   "edit": median([r["cell"] for r in runs[1:]] or [runs[0]["cell"]]),
                                   "slowest": max(r["cell"] for r in runs)}
    return out


def table(result: dict) -> list[str]:
    s = summary(result)
    tools = [t for t in TOOLS if t in result["tools"]]
    rows = ["| cell | " + " | ".join(f"{LABELS[t]} ms: first / edit" for t in tools) + " | "
            "server / in-process (edit; goal ≤ 1.0x, small ≤ 1.1x) | PCH / CuPy (edit) | "
            "PCH / no PCH (edit) | first with PCH / no PCH edit | "
            "slowest with PCH (the PCH made) / no PCH edit | PCH used (edits) |",
            "| --- |" + " ---: |" * (len(tools) + 6)]
    for name, m in s.items():
        server, pch, plain, cupy = (m.get(t, {}) for t in TOOLS)
        said = [r["pch_kind"] == "used" if "pch_kind" in r else r.get("pch_said")
                for r in result["raw"][name].get("pch", [])[1:]]
        rows.append(
            f"| {name} | " + " | ".join(f"{_ms(m.get(t, {}).get('first'))} / "
                                        f"{_ms(m.get(t, {}).get('edit'))}" for t in tools)
            + f" | {_ratio(server.get('edit'), pch.get('edit'))} | "
            f"{_ratio(pch.get('edit'), cupy.get('edit'))} | "
            f"{_ratio(pch.get('edit'), plain.get('edit'))} | "
            f"{_ratio(pch.get('first'), plain.get('edit'))} | "
            f"{_ratio(pch.get('slowest'), plain.get('edit'))} | "
            + (f"{sum(map(bool, said))}/{len(said)} |" if said else "– |"))
    return rows


def restart_table(result: dict) -> list[str]:
    """Per cell: each tool's first edit after its kernel's restart, against CuPy's (the goal:
    the server's at most 0.3x) and against the tool's own edits before the restart."""
    tools = [t for t in TOOLS if t in result["tools"]]
    s = summary(result)
    rows = ["| cell | " + " | ".join(f"{LABELS[t]} ms" for t in tools) + " | "
            "server / CuPy (goal ≤ 0.3x) | in-process PCH / CuPy | server restart / its edit | "
            "in-process restart / its edit | the PCH: server, in-process |",
            "| --- |" + " ---: |" * (len(tools) + 5)]
    for name, by_tool in result.get("restarts", {}).items():
        if not by_tool:
            continue
        cell = {t: by_tool.get(t, {}).get("cell") for t in TOOLS}
        edit = {t: s[name].get(t, {}).get("edit") for t in TOOLS}
        said = ", ".join(by_tool.get(t, {}).get("pch_kind") or "–" for t in ("server", "pch"))
        rows.append(f"| {name} | " + " | ".join(_ms(cell[t]) for t in tools)
                    + f" | {_ratio(cell['server'], cell['cupy'])} | "
                    f"{_ratio(cell['pch'], cell['cupy'])} | "
                    f"{_ratio(cell['server'], edit['server'])} | "
                    f"{_ratio(cell['pch'], edit['pch'])} | {said} |")
    return rows


#: the phases a breakdown shows, in the order a miss goes through them
PHASES = ("parse", "key", "lookup", "nvrtc", "compile", "link", "manifest", "demangle",
          "resolve", "store", "history", "push", "resources", "display")


def breakdown(result: dict) -> list[str]:
    """Median milliseconds per phase of cudamagic's edits, per cell and column."""
    tools = [t for t in ("server", "pch", "plain") if t in result["tools"]]
    head = [f"{name} {LABELS[t]}" for name in result["raw"] for t in tools]
    rows = ["| phase (median ms over the edits) | " + " | ".join(head) + " |",
            "| --- |" + " ---: |" * len(head)]

    def col(name: str, tool: str, f) -> str:
        runs = result["raw"][name][tool][1:]
        vals = [v for v in (f(r) for r in runs) if v is not None]
        return f"{median(vals) * 1e3:.1f}" if vals else "–"

    cols = [(n, t) for n in result["raw"] for t in tools]
    for phase in PHASES:
        if any(phase in r.get("timings", {}) for n, t in cols for r in result["raw"][n][t]):
            rows.append(f"| {phase} | " + " | ".join(
                col(n, t, lambda r, p=phase: r["timings"].get(p, 0.0)) for n, t in cols) + " |")
    rows.append("| the cell outside the phases (IPython, the kernel) | " + " | ".join(
        col(n, t, lambda r: r["cell"] - sum(r["timings"].get(p, 0.0) for p in PHASES))
        for n, t in cols) + " |")
    rows.append("| the cell | " + " | ".join(col(n, t, lambda r: r["cell"]) for n, t in cols)
                + " |")
    rows.append("| NVRTC alone (no trace, no probe) | " + " | ".join(
        col(n, t, lambda r: r.get("bare")) for n, t in cols) + " |")
    rows.append("| the cell minus NVRTC alone | " + " | ".join(
        col(n, t, lambda r: r["cell"] - r["bare"] if "bare" in r else None) for n, t in cols)
        + " |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for edit_loop.md and edit_loop.json")
    ap.add_argument("--edits", type=int, default=10, help="edits of each cell (default 10)")
    default = ",".join(c for c in CELLS if c != "cute" or CELLS[c].cupy_options)
    ap.add_argument("--cells", default=default,
                    help=f"which cells, comma-separated (default {default}; cute where the "
                         "nvidia-cutlass wheel is installed)")
    ap.add_argument("--breakdown", action="store_true",
                    help="where cudamagic's miss goes, phase by phase, and NVRTC alone")
    ap.add_argument("--no-restart", action="store_true",
                    help="leave out the restart: no kernel restarted after a cell's edits")
    ap.add_argument("--dry-run", action="store_true", help="as without a GPU, even with one")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per cell")
    a = ap.parse_args()
    cells = [c.strip() for c in a.cells.split(",") if c.strip()]
    unknown = [c for c in cells if c not in CELLS]
    if unknown:
        ap.error(f"no such cell: {', '.join(unknown)} (there are {', '.join(CELLS)})")
    gpu = gpu_available() and not a.dry_run
    t0 = time.perf_counter()
    result = run(cells, a.edits, a.breakdown, gpu, a.timeout, restart=not a.no_restart)
    result["wall_s"] = time.perf_counter() - t0
    text = [f"### An edited cell's miss, end to end: {a.edits} edits per cell, medians, "
            f"alternated ({'GPU' if gpu else 'no GPU: compile-only'})", "",
            f"{result['date']}; {result['machine']}", "",
            ", ".join(f"{k} {v}" for k, v in result["versions"].items()), "",
            *(f"- {n}" for n in result["notes"]), "", *table(result)]
    if result["restarts"]:
        text += ["", "#### The first edit after a kernel restart (same cache folder, same compile "
                 "server)", "", *restart_table(result)]
    if a.breakdown:
        text += ["", "#### Where cudamagic's miss goes", "", *breakdown(result)]
    text += ["", f"(wall time {result['wall_s']:.0f} s)"]
    print("\n" + "\n".join(text), flush=True)
    if a.out:
        write_outputs(a.out, "edit_loop", text, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
