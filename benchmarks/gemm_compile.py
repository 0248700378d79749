"""Compile at NVRTC's own speed (issue 54): the CuTe tutorial's SGEMM and a CUB cell, compiled
once and edited four times, by cudamagic, by NVRTC alone and by CuPy, alternated in one run.

The cells (``--cells``):

- ``sgemm``: the ``gemm_device`` kernel of CUTLASS's own CuTe tutorial,
  ``examples/cute/tutorial/sgemm_sm80.cu``, read at run time from the installed
  ``nvidia-cutlass`` wheel (``cutlass_library/source/...``; nothing of it is kept in this
  project). Its device part is taken by the file's own structure (:func:`sgemm_device_part`:
  its ``cute/`` includes, then everything from the first template to the template line of the
  host function ``gemm_nt``), and a small instantiation is appended: the types of the
  tutorial's NT SGEMM as its ``gemm_nt`` builds them (float everywhere, a 128x128x8 tile, three
  stages, ``SM80_CP_ASYNC_CACHEALWAYS`` copies, a 16x16x1 ``UniversalFMA`` MMA), as aliases
  the name expression ``-n "gemm_device<...>"`` names. No ``__global__`` of ours.
- ``cub``: a ``cub::BlockReduce`` and a ``cub::BlockScan`` in one kernel.

Each edit changes one constant of the cell, salted per run, tool and edit, so that no compile
repeats a source any process compiled before (NVRTC's own program cache never answers).

The tools, one process, the order rotating with each edit:

- *cudamagic*: ``cudamagic.build()`` with a fresh cache folder for the run (so the first
  compile is the header set's first, where the PCH is made); its ``report.timings`` give the
  split: NVRTC's compile (``compile``), the header listing's time past it (``listing``, and
  whether it ran beside the compile), and what the precompiled header did (``report.pch``).
- *NVRTC alone*: ``cuda.bindings.nvrtc`` called directly on the same edited text (another
  salt) with the options cudamagic's main compile passed to ``nvrtcCompileProgram``, recorded
  as tests/test_header_listing.py records them (the call whose program was given the cell's
  name expression), less the options of cudamagic's PCH (``-create-pch=``/``-use-pch=`` and
  the warnings they suppress: a file in cudamagic's cache folder, which NVRTC alone must
  neither rewrite nor read).
- *CuPy*: ``cp.RawModule(code=..., options=..., name_expressions=...)`` and ``get_function``
  with the folders and dialect cudamagic uses (benchmarks/edit_loop.py's options); without a
  GPU, what RawModule's compile runs without a device (CuPy's ``_NVRTCProgram`` with
  RawModule's options for sm_90, edit_loop.py's ``CUPY_NO_GPU``).

Goals: every cudamagic compile ≤ 1.1x NVRTC alone; the CUB cell's PCH edits ≤ 0.2x CuPy on the
GPU machine.

Here (no GPU; the SGEMM cell is 10-20 s a compile on 2 cores, about 5 minutes in all):
    .venv/bin/python benchmarks/gemm_compile.py --out /tmp/gemm_compile
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from common import cupy_options, gpu_available, machine, median, versions, write_outputs
from edit_loop import CUPY_NO_GPU, Cell, Salt, cutlass_folders, edited

#: where the wheel keeps the tutorial, under the cutlass_library package's folder
SGEMM_FILE = ("source", "examples", "cute", "tutorial", "sgemm_sm80.cu")

#: the tutorial's NT SGEMM as its host function gemm_nt builds it (main's types are
#: cute::half_t; the SGEMM is the float instance), and a constant an edit changes
SGEMM_INSTANCE = r"""
// --- appended by benchmarks/gemm_compile.py: the types gemm_nt builds for float ---
namespace sgemm_nt {
using namespace cute;
using T = float;
using Problem = decltype(make_shape(int(0), int(0), int(0)));
using Tiler = decltype(make_shape(Int<128>{}, Int<128>{}, Int<8>{}));
using Stride = decltype(make_stride(Int<1>{}, int(0)));
using SmemA = decltype(make_layout(make_shape(Int<128>{}, Int<8>{}, Int<3>{})));
using SmemC = decltype(make_layout(make_shape(Int<128>{}, Int<128>{})));
using Copy = decltype(make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEALWAYS<uint128_t>, T>{},
                                      Layout<Shape<_32, _8>>{}, Layout<Shape<_4, _1>>{}));
using S2R = Copy_Atom<AutoVectorizingCopy, T>;
using Mma = decltype(make_tiled_mma(UniversalFMA<T, T, T>{}, Layout<Shape<_16, _16, _1>>{}));
}  // namespace sgemm_nt
__device__ const float sgemm_edit = @C@f;
"""
SGEMM_NAME = ("gemm_device<sgemm_nt::Problem, sgemm_nt::Tiler, "
              "float, sgemm_nt::Stride, sgemm_nt::SmemA, sgemm_nt::Copy, sgemm_nt::S2R, "
              "float, sgemm_nt::Stride, sgemm_nt::SmemA, sgemm_nt::Copy, sgemm_nt::S2R, "
              "float, sgemm_nt::Stride, sgemm_nt::SmemC, sgemm_nt::Mma, float, float>")

CUB = r"""
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
template <int N> __global__ void reduce_scan(const float* x, float* sums, float* scan, int n) {
  using Reduce = cub::BlockReduce<float, 256>;
  using Scan = cub::BlockScan<float, 256>;
  __shared__ union { typename Reduce::TempStorage r; typename Scan::TempStorage s; } tmp;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? x[i] * @C@f : 0.0f;
  float s = Reduce(tmp.r).Sum(v);
  __syncthreads();
  float p;
  Scan(tmp.s).InclusiveSum(v, p);
  if (i < n) scan[i] = p * N;
  if (threadIdx.x == 0) sums[blockIdx.x] = s; }
"""


class ShapeChanged(RuntimeError):
    """The wheel's tutorial file no longer has the shape the device part is cut by."""


def cutlass_library_folder() -> Path:
    """The installed cutlass_library package's folder (the nvidia-cutlass wheel)."""
    try:
        import cutlass_library
    except ImportError:
        raise RuntimeError("the SGEMM cell needs the nvidia-cutlass wheel (pip install "
                           "nvidia-cutlass): no cutlass_library in this Python") from None
    return Path(cutlass_library.__file__).resolve().parent


def sgemm_file() -> Path:
    path = cutlass_library_folder().joinpath(*SGEMM_FILE)
    if not path.is_file():
        raise ShapeChanged(f"{path}: the CuTe tutorial's SGEMM is not where the nvidia-cutlass "
                           "wheel kept it (cutlass_library/source/examples/cute/tutorial)")
    return path


def sgemm_device_part(text: str, where: str = "sgemm_sm80.cu") -> str:
    """The tutorial's device part: its ``#include <cute/...>`` lines, then its text from the
    first line that starts a template to the template line of the host function ``gemm_nt``
    (``template <...>`` / ``void`` / ``gemm_nt(``), which starts the host code.

    :raises ShapeChanged: the file is not shaped so (no cute include, no host ``gemm_nt`` after
        one ``gemm_device`` definition, host code left before the cut).
    """
    lines = text.split("\n")

    def bad(what: str) -> ShapeChanged:
        return ShapeChanged(f"{where}: {what}; the tutorial's shape changed, and "
                            "benchmarks/gemm_compile.py's cut (sgemm_device_part) must follow it")

    includes = [ln for ln in lines if re.match(r"\s*#\s*include\s*<cute/", ln)]
    if not includes:
        raise bad("no #include <cute/...> line")
    host = next((i for i, ln in enumerate(lines) if re.match(r"gemm_nt\s*\(", ln)), None)
    if host is None:
        raise bad("no line starting the host function gemm_nt(")
    cut = next((i for i in range(host - 1, -1, -1) if lines[i].startswith("template")), None)
    first = next((i for i, ln in enumerate(lines) if ln.startswith("template")), None)
    if cut is None or first is None or first >= cut:
        raise bad("no template before the host function gemm_nt but its own")
    part = lines[first:cut]
    body = "\n".join(part)
    if len(re.findall(r"^gemm_device\s*\(", body, re.M)) != 1 or "__global__" not in body:
        raise bad("not one __global__ gemm_device definition before gemm_nt")
    for host_only in ("<<<", "thrust::", "main(", "cudaStream_t"):
        if host_only in body:
            raise bad(f"host code ({host_only!r}) before the host function gemm_nt")
    return "\n".join(includes) + "\n\n" + body.rstrip() + "\n"


def sgemm_cell() -> Cell:
    """The SGEMM cell, its kernel read now from the installed wheel."""
    path = sgemm_file()
    source = sgemm_device_part(path.read_text(), str(path)) + SGEMM_INSTANCE
    return Cell("sgemm", source, (SGEMM_NAME,), (SGEMM_NAME,), cupy_options=cutlass_folders())


def cells() -> dict[str, Callable[[], Cell]]:
    return {"sgemm": sgemm_cell,
            "cub": lambda: Cell("cub", CUB, ("reduce_scan<1>",), ("reduce_scan<1>",))}


# ---- the options cudamagic passed NVRTC ---------------------------------------------------------

#: the options of cudamagic's precompiled header (toolchain/compile/pch.py's PchPlan.options)
PCH_OPTIONS = ("-create-pch=", "-use-pch=", "--create-pch=", "--use-pch=")
#: the trace, where cudamagic's compile still carried it (its report says so: ``traced``)
TRACE_OPTIONS = ("--fdevice-time-trace", "-fdevice-time-trace")


@contextmanager
def recorded_compiles() -> Iterator[list[dict]]:
    """Every ``nvrtcCompileProgram`` of this process while inside, as
    tests/test_header_listing.py records them: its options, and the name expressions its
    program was given (``nvrtcAddNameExpression``)."""
    from cuda.bindings import nvrtc

    calls: list[dict] = []
    named: dict[int, list[bytes]] = {}
    real_compile, real_name = nvrtc.nvrtcCompileProgram, nvrtc.nvrtcAddNameExpression

    def add_name(prog, expr):
        named.setdefault(id(prog), []).append(bytes(expr))
        return real_name(prog, expr)

    def compile_program(prog, n, opts):
        calls.append({"options": [bytes(o).decode() for o in opts],
                      "names": [e.decode() for e in named.get(id(prog), [])]})
        return real_compile(prog, n, opts)

    nvrtc.nvrtcAddNameExpression, nvrtc.nvrtcCompileProgram = add_name, compile_program
    try:
        yield calls
    finally:
        nvrtc.nvrtcAddNameExpression, nvrtc.nvrtcCompileProgram = real_name, real_compile


def main_compile_options(calls: list[dict], names: tuple[str, ...]) -> list[str]:
    """The options of cudamagic's main compile (the call given the cell's name expressions),
    less its PCH's own."""
    mine = [c for c in calls if c["names"] == list(names)]
    if not mine:
        raise RuntimeError(f"no recorded NVRTC compile was given {names}: {calls}")
    from cudamagic.toolchain.compile.pch import SUPPRESSED

    return [o for o in mine[-1]["options"]
            if not o.startswith(PCH_OPTIONS + TRACE_OPTIONS) and o != SUPPRESSED]


def nvrtc_alone(source: str, names: tuple[str, ...], options: list[str]) -> float:
    """NVRTC through cuda.bindings alone: create, name, compile, the CUBIN and lowered names."""
    from cuda.bindings import nvrtc

    t = time.perf_counter()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"cell.cu", 0, [], [])
    assert int(err) == 0, err
    try:
        for n in names:
            nvrtc.nvrtcAddNameExpression(prog, n.encode())
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        if int(status) != 0:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = bytearray(size)
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"NVRTC alone failed ({status}):\n{log.decode(errors='replace')}")
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = bytearray(size)
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        for n in names:
            nvrtc.nvrtcGetLoweredName(prog, n.encode())
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return time.perf_counter() - t


# ---- the run ------------------------------------------------------------------------------------

TOOLS = ("cudamagic", "nvrtc", "cupy")
LABELS = {"cudamagic": "cudamagic", "nvrtc": "NVRTC alone", "cupy": "CuPy"}


def _cupy(gpu: bool) -> Callable[[Cell, str], float]:
    def options_of(cell: Cell) -> tuple[str, ...]:
        """edit_loop.py's CuPy options: CUTLASS's folders by hand, cudamagic's dialect and
        header folders (RawModule adds its arch and execution space itself)."""
        return cell.cupy_options + cupy_options() + cell.options

    if gpu:
        import cupy as cp

        def on_gpu(cell: Cell, source: str) -> float:
            t = time.perf_counter()
            mod = cp.RawModule(code=source, options=options_of(cell),
                               name_expressions=list(cell.names))
            for k in cell.kernels:
                mod.get_function(k)
            return time.perf_counter() - t
        return on_gpu
    ns: dict[str, Any] = {}
    exec(CUPY_NO_GPU, ns)  # edit_loop.py's: RawModule's compile without a device

    def no_gpu(cell: Cell, source: str) -> float:
        t = time.perf_counter()
        ns["_cupy_compile"](source, options_of(cell), cell.names)
        return time.perf_counter() - t
    return no_gpu


def _cudamagic(cell: Cell, source: str, cache: str) -> dict:
    import cudamagic

    with recorded_compiles() as calls:
        t = time.perf_counter()
        m = cudamagic.build(source, name_expressions=list(cell.names), options=list(cell.options),
                            cache=cache)
        seconds = time.perf_counter() - t
    r = m.report
    if r.hit:
        raise RuntimeError(f"cudamagic: an edit of {cell.name} was a cache hit")
    listing = getattr(r, "listing", None)
    return {"seconds": seconds,
            "timings": {str(getattr(k, "value", k)): v for k, v in r.timings.items()},
            "pch": r.pch[0].value if getattr(r, "pch", None) else None,
            # (NVRTC's compile with the PCH, the compile that made it) where one served
            "pch_seconds": list(r.pch[1:]) if getattr(r, "pch", None) else None,
            "listing_beside": bool(getattr(listing, "beside", False)),
            # the listing child's start to its reaping (after the main compile), not its own work
            "listing_seconds": float(getattr(listing, "seconds", 0.0)),
            "in_pch": bool(getattr(listing, "in_pch", False)),
            "traced": str(getattr(listing, "traced", None) or "") or None,
            "options": main_compile_options(calls, cell.names),
            "calls": calls}  # every NVRTC compile of the build: its options and names


def run(names: list[str], edits: int, gpu: bool) -> dict:
    made = cells()
    salt = Salt()
    work = tempfile.mkdtemp(prefix="cudamagic-gemm-compile-")
    cupy = _cupy(gpu)
    raw: dict[str, dict[str, list[dict]]] = {n: {t: [] for t in TOOLS} for n in names}
    try:
        for ci, name in enumerate(names):
            cell = made[name]()
            cache = os.path.join(work, f"cache-{name}")
            options: list[str] | None = None  # cudamagic's last compile's, for NVRTC alone
            for edit in range(edits + 1):
                order = TOOLS[edit % 3:] + TOOLS[:edit % 3]
                if options is None:  # the first compile: cudamagic's options are needed first
                    order = ("cudamagic", *(t for t in order if t != "cudamagic"))
                got: dict[str, dict] = {}
                for tool in order:
                    source = edited(cell, salt.constant(TOOLS.index(tool), ci, edit))
                    if tool == "cudamagic":
                        got[tool] = _cudamagic(cell, source, cache)
                        options = got[tool]["options"]
                    elif tool == "nvrtc":
                        assert options is not None
                        got[tool] = {"seconds": nvrtc_alone(source, cell.names, options),
                                     "options": options}
                    else:
                        got[tool] = {"seconds": cupy(cell, source)}
                for tool in TOOLS:
                    raw[name][tool].append(got[tool])
                print(f"  {name:5} {'first' if edit == 0 else f'edit {edit}'}: " + ", ".join(
                    f"{LABELS[t]} {got[t]['seconds'] * 1e3:7.0f} ms" for t in TOOLS)
                    + f" (cudamagic's PCH: {got['cudamagic']['pch']})", flush=True)
            given = {tuple(r["options"]) for r in raw[name]["cudamagic"] + raw[name]["nvrtc"]}
            if len(given) != 1:
                raise RuntimeError(f"{name}: cudamagic's compiles passed NVRTC other options "
                                   f"from one edit to the next: {given}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(),
            "versions": {**versions(), **_cutlass_version()}, "gpu": gpu, "edits": edits, "raw": raw,
            "sgemm_file": str(sgemm_file()) if "sgemm" in names else None}


def _cutlass_version() -> dict[str, str]:
    """The nvidia-cutlass wheel's version, which common.versions() does not list."""
    import importlib.metadata as md

    try:
        return {"nvidia-cutlass": md.version("nvidia-cutlass")}
    except md.PackageNotFoundError:
        return {}


# ---- the table ----------------------------------------------------------------------------------

def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x * 1e3:.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if a is None or b is None else f"{a / b:.2f}x"


def summary(result: dict) -> dict:
    """Per cell and tool: the first compile, the median edit and the edits (seconds); and per
    cell the worst of cudamagic / NVRTC alone over every compile (same edit index)."""
    out: dict[str, dict] = {}
    for name, by_tool in result["raw"].items():
        s: dict[str, Any] = {}
        for tool, runs in by_tool.items():
            xs = [r["seconds"] for r in runs]
            s[tool] = {"first": xs[0], "edit": median(xs[1:] or xs[:1]), "all": xs}
        s["worst"] = max(a / b for a, b in zip(s["cudamagic"]["all"], s["nvrtc"]["all"]))
        cm = by_tool["cudamagic"]
        used = [r for r in cm[1:] if r["pch"] == "used"]
        s["pch_edit"] = median([r["seconds"] for r in used]) if used else None
        s["split"] = {k: median([r["timings"].get(k, 0.0) for r in cm[1:] or cm[:1]])
                      for k in ("compile", "listing", "total")}
        s["pch"] = [r["pch"] or "–" for r in cm]
        s["beside"] = sum(r["listing_beside"] for r in cm)
        s["in_pch"] = sum(r["in_pch"] for r in cm)
        s["traced"] = sorted({r["traced"] for r in cm if r["traced"]})
        out[name] = s
    return out


def table(result: dict) -> list[str]:
    s = summary(result)
    rows = ["| cell | " + " | ".join(f"{LABELS[t]} ms: first / median edit" for t in TOOLS)
            + " | cudamagic / NVRTC alone: first, edit, worst compile (goal ≤ 1.1x) | "
            "PCH edits / CuPy | cudamagic's edit split (median ms): NVRTC's compile, "
            "listing past it | PCH per compile | header list: beside the compile, from the PCH |",
            "| --- |" + " ---: |" * (len(TOOLS) + 3) + " --- | ---: |"]
    for name, m in s.items():
        c, n, p = m["cudamagic"], m["nvrtc"], m["cupy"]
        rows.append(
            f"| {name} | " + " | ".join(f"{_ms(m[t]['first'])} / {_ms(m[t]['edit'])}"
                                        for t in TOOLS)
            + f" | {_ratio(c['first'], n['first'])}, {_ratio(c['edit'], n['edit'])}, "
            f"{m['worst']:.2f}x | {_ratio(m['pch_edit'], p['edit'])} | "
            f"{_ms(m['split']['compile'])}, {_ms(m['split']['listing'])} | "
            f"{', '.join(m['pch'])} | {m['beside']}, {m['in_pch']} of {len(m['pch'])}"
            + (f" (traced: {', '.join(m['traced'])})" if m["traced"] else "") + " |")
    return rows


def compiles(result: dict) -> list[str]:
    """Every cudamagic compile against NVRTC alone's of the same edit, and where its time went:
    NVRTC's compile (the report's ``compile``), the header listing (how the list was had, and
    the seconds it added past the compile), the PCH (what it did; NVRTC's compile with it and the
    compile that made it, as the report says)."""
    rows = ["| cell | compile | cudamagic ms | NVRTC alone ms | ratio | NVRTC's compile in "
            "cudamagic ms | header list: how, ms it added past the compile | PCH: kind, "
            "compile with it / making it ms |", "| --- | --- |" + " ---: |" * 4 + " --- | --- |"]
    for name, by_tool in result["raw"].items():
        for i, (c, n) in enumerate(zip(by_tool["cudamagic"], by_tool["nvrtc"])):
            how = ("beside" if c["listing_beside"] else "from the PCH" if c["in_pch"]
                   else f"traced ({c['traced']})" if c["traced"] else "none")
            pch = c["pch"] or "–"
            if c["pch_seconds"] and c["pch"] == "used":
                pch += " " + " / ".join(_ms(x) for x in c["pch_seconds"])
            rows.append(f"| {name} | {'first' if i == 0 else f'edit {i}'} | {_ms(c['seconds'])}"
                        f" | {_ms(n['seconds'])} | {c['seconds'] / n['seconds']:.2f}x | "
                        f"{_ms(c['timings'].get('compile'))} | {how}, "
                        f"{_ms(c['timings'].get('listing'))} | "
                        f"{pch} |")
    return rows


# ---- --split: what of the first compile is the listing's, what the PCH's ------------------------

SPLIT = ("nvrtc", "untraced", "listed", "no_pch")
SPLIT_LABELS = {"nvrtc": "NVRTC alone", "untraced": "cudamagic's compile_cubin, no listing",
                "listed": "compile_cubin, the listing beside it",
                "no_pch": "cudamagic.build(pch=False), a fresh cache"}


def split(names: list[str], reps: int) -> dict:
    """Each cell compiled ``reps`` times each way, alternated, a new salt each time:
    NVRTC alone, cudamagic's own NVRTC call (``toolchain.nvrtc.compile_cubin``) without the
    header listing and with it beside the compile, and a whole ``build()`` without the PCH in
    a fresh cache folder; the options are cudamagic's (``pipeline.entry_key``'s)."""
    import cudamagic
    from cudamagic.core.options import BuildOptions
    from cudamagic.pipeline.steps import entry_key
    from cudamagic.toolchain.compile.nvrtc import compile_cubin

    made, salt, out = cells(), Salt(), {}
    for ci, name in enumerate(names):
        cell = made[name]()
        options = list(entry_key(edited(cell, "1.0"), BuildOptions(
            name_expressions=cell.names, options=cell.options))[2])
        out[name] = {w: [] for w in SPLIT}
        for rep in range(reps):
            for wi, way in enumerate(SPLIT[rep % 4:] + SPLIT[:rep % 4]):
                source = edited(cell, salt.constant(wi, ci, rep))
                t, listing = time.perf_counter(), None
                if way == "nvrtc":
                    nvrtc_alone(source, cell.names, options)
                elif way == "no_pch":
                    with tempfile.TemporaryDirectory() as cache:
                        listing = cudamagic.build(source, name_expressions=list(cell.names),
                                                  options=list(cell.options), cache=cache,
                                                  pch=False).report.listing
                else:
                    listing = compile_cubin(source, list(cell.names), options,
                                            trace=way == "listed").listing
                how = None if listing is None else (
                    "beside" if listing.beside else str(listing.traced or "none"))
                out[name][way].append({"seconds": time.perf_counter() - t, "listing": how})
    return out


def split_table(got: dict) -> list[str]:
    rows = ["| cell | " + " | ".join(f"{SPLIT_LABELS[w]} s" for w in SPLIT)
            + " | listing beside / NVRTC alone (median) | the listing's outcomes |",
            "| --- |" + " ---: |" * (len(SPLIT) + 1) + " --- |"]
    for name, by in got.items():
        med = {w: median([r["seconds"] for r in by[w]]) for w in SPLIT}
        seen = sorted({r["listing"] for w in ("listed", "no_pch") for r in by[w]})
        rows.append(f"| {name} | " + " | ".join(
            f"{med[w]:.2f} (" + ", ".join(f"{r['seconds']:.1f}" for r in by[w]) + ")"
            for w in SPLIT)
            + f" | {med['listed'] / med['nvrtc']:.2f}x | {', '.join(seen)} |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for gemm_compile.md and gemm_compile.json")
    ap.add_argument("--edits", type=int, default=4, help="edits of each cell (default 4)")
    ap.add_argument("--cells", default="sgemm,cub", help="which cells (default sgemm,cub)")
    ap.add_argument("--dry-run", action="store_true", help="as without a GPU, even with one")
    ap.add_argument("--split", type=int, metavar="REPS", default=0,
                    help="instead: each cell's compile REPS times each way (NVRTC alone, "
                         "cudamagic's compile with and without the header listing beside it, "
                         "build() without the PCH)")
    a = ap.parse_args()
    names = [c.strip() for c in a.cells.split(",") if c.strip()]
    unknown = [c for c in names if c not in cells()]
    if unknown:
        ap.error(f"no such cell: {', '.join(unknown)} (there are {', '.join(cells())})")
    if a.split:
        print("\n".join([f"### What of a compile is the header listing's ({a.split} each, "
                          f"alternated; medians, then each)", "", machine(), "",
                          *split_table(split(names, a.split))]), flush=True)
        return 0
    gpu = gpu_available() and not a.dry_run
    t0 = time.perf_counter()
    result = run(names, a.edits, gpu)
    result["wall_s"] = time.perf_counter() - t0
    opts = {name: by["nvrtc"][0]["options"] for name, by in result["raw"].items()}
    text = [f"### Compiles against NVRTC alone (issue 54): the first compile and {a.edits} edits "
            f"per cell, alternated ({'GPU' if gpu else 'no GPU: compile-only'})", "",
            f"{result['date']}; {result['machine']}", "",
            ", ".join(f"{k} {v}" for k, v in result["versions"].items()), "",
            *([f"- the SGEMM cell's kernel: {result['sgemm_file']}"]
              if result["sgemm_file"] else []),
            *(f"- NVRTC alone's options for {name} (cudamagic's main compile's, its PCH's "
              f"left out): `{' '.join(o)}`" for name, o in opts.items()),
            *([] if gpu else ["- no GPU: CuPy's column is what RawModule's compile runs "
                              "without a device (CuPy's _NVRTCProgram with RawModule's "
                              "options for sm_90), not RawModule"]),
            "", *table(result), "", "#### Each compile", "", *compiles(result), "",
            f"(wall time {result['wall_s']:.0f} s)"]
    print("\n" + "\n".join(text), flush=True)
    if a.out:
        write_outputs(a.out, "gemm_compile", text, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
