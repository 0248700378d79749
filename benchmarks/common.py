"""Shared pieces of the benchmarks: sources, the cells users write, fresh-process runs, notebooks
run in fresh Jupyter kernels (nbclient) with per-cell times, medians, the machine line."""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # this checkout's package, as the children and kernels get it
    sys.path.insert(1, str(REPO))

SMALL = r"""
template <int N> __global__ void k(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += N; }
"""
HEAVY = r"""
#include <cuda/std/complex>
template <int N> __global__ void h(cuda::std::complex<float>* z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) z[i] = cuda::std::exp(z[i]) * cuda::std::sqrt(z[i]) + cuda::std::pow(z[i], float(N)); }
"""
#: CCCL as people use it: CUB's BlockReduce over cuda::std::complex math
CCCL = r"""
#include <cub/block/block_reduce.cuh>
#include <cuda/std/complex>
template <int N> __global__ void r(const cuda::std::complex<float>* z, float* out, int n) {
  using Reduce = cub::BlockReduce<float, 256>;
  __shared__ typename Reduce::TempStorage tmp;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = 0.0f;
  if (i < n) v = cuda::std::abs(cuda::std::exp(z[i]) * cuda::std::sqrt(z[i])
                                + cuda::std::pow(z[i], float(N)));
  float s = Reduce(tmp).Sum(v);
  if (threadIdx.x == 0) out[blockIdx.x] = s; }
"""
SOURCES = {"small": (SMALL, "k"), "heavy": (HEAVY, "h"), "cccl": (CCCL, "r")}


def names(kind: str, n: int) -> list[str]:
    """``n`` name expressions for a source kind: ``k<0>`` ... ``k<n-1>``."""
    return [f"{SOURCES[kind][1]}<{i}>" for i in range(n)]


def median(xs) -> float:
    return statistics.median(xs)


def bench_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a benchmark's child process or Jupyter kernel: this one's, the repo on
    ``PYTHONPATH``, bytecode written and read as an installed package has it, then ``env``.

    Some images disable writing bytecode, and the GPU machine's wheels are installed without it;
    then every fresh process would compile IPython, ipywidgets, ... from source again, and a
    first, untimed run could not warm anything.
    """
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            "PYTHONPYCACHEPREFIX": "/tmp/cudamagic-bench-pycache", **(env or {})}
    full.pop("PYTHONDONTWRITEBYTECODE", None)
    return full


def compile_bytecode() -> None:
    """Compile the package's bytecode where the benchmark's children read it (the
    ``PYTHONPYCACHEPREFIX`` of :func:`bench_env`), as a wheel install leaves it: no timed child
    compiles cudamagic's source."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "cudamagic")],
                   check=True, env=bench_env(), stdout=subprocess.DEVNULL)


def fresh(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object last."""
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=bench_env(env), timeout=900, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def machine() -> str:
    """One line naming the machine and the versions measured."""
    parts = [platform.node() or "?", f"Python {platform.python_version()}"]
    try:
        from cudamagic.toolchain.compile import nvrtc as compiler
        from cudamagic.toolchain.device import driver

        if driver.available():
            parts.insert(0, f"{driver.device_name(0)} x{driver.device_count()}, driver CUDA "
                            f"{driver.driver_version()}")
        parts.append(f"NVRTC {compiler.nvrtc_version()}")
    except Exception:  # pragma: no cover
        pass
    try:
        import importlib.metadata as md

        parts.append(f"CuPy {md.version('cupy-cuda13x')}")
        parts.append(f"cuda-bindings {md.version('cuda-bindings')}")
    except Exception:  # pragma: no cover
        pass
    return ", ".join(parts)


def versions() -> dict[str, str]:
    """Versions of what a notebook benchmark runs through, and the repo's commit."""
    import importlib.metadata as md

    out = {}
    for dist in ("ipykernel", "ipython", "ipywidgets", "nbclient", "jupyter_client", "pyzmq",
                 "diskcache", "cupy-cuda13x", "cupy-cuda12x", "cuda-bindings", "pyinstrument"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    try:
        import cudamagic

        out["cudamagic"] = getattr(cudamagic, "__version__", "?")
    except ImportError:  # pragma: no cover
        out["cudamagic"] = "?"
    out["cudamagic"] += f" ({project_commit()})"
    return out


#: the commit a copy of the tree without ``.git`` was made from: set by scripts/device.sh from
#: the environment's ``CUDAMAGIC_COMMIT`` or the copy's own ``.commit`` file
COMMIT_ENV, COMMIT_FILE = "CUDAMAGIC_COMMIT", ".commit"


def project_commit(root: Path = REPO) -> str:
    """The commit of the cudamagic tree at ``root``, and the git tree hash of its ``cudamagic/``
    folder as found on disk (equal to ``git rev-parse COMMIT:cudamagic`` where nothing in it
    changed, so a copy's figures can be tied to a commit).

    git is asked only where ``root`` is itself the top of a work tree: a copy without ``.git``
    inside another repository (the GPU machine's) must not print that repository's commit.
    Elsewhere the commit is ``CUDAMAGIC_COMMIT`` or the ``.commit`` file, stamped where the copy
    was made, else "unknown (no .git)".
    """
    tree = f"cudamagic tree {package_tree(root / 'cudamagic')[:12]}"
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, cwd=root, timeout=10).stdout.strip()
    except OSError:  # no git on this machine
        top = ""
    stamp = os.environ.get(COMMIT_ENV, "").strip()
    if not stamp and (root / COMMIT_FILE).is_file():
        stamp = (root / COMMIT_FILE).read_text().strip()
    if top and os.path.realpath(top) == os.path.realpath(root):
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=root, timeout=10).stdout.strip()
        head_tree = subprocess.run(["git", "rev-parse", "HEAD:cudamagic"], capture_output=True,
                                   text=True, cwd=root, timeout=10).stdout.strip()
        if head_tree[:12] == package_tree(root / "cudamagic")[:12]:
            return f"{commit}; {tree}"
        # the GPU machine's copy is a work tree at an older commit with this one's files over
        # it: the stamp made where the copy was made names the commit
        if stamp:
            return f"{stamp} (stamped; git's HEAD here {commit} has another cudamagic); {tree}"
        return f"{commit}, uncommitted changes; {tree}"
    return f"{stamp + ' (stamped, no .git)' if stamp else 'unknown (no .git)'}; {tree}"


def package_tree(folder: Path) -> str:
    """git's tree hash of ``folder`` as it is on disk, bytecode folders left out: what
    ``git rev-parse COMMIT:cudamagic`` answers for a commit whose folder holds the same files."""
    import hashlib

    entries = []
    for entry in os.scandir(folder):
        if entry.name == "__pycache__" or entry.name.endswith(".pyc"):
            continue
        if entry.is_dir(follow_symlinks=False):
            mode, sha, key = b"40000", package_tree(Path(entry.path)), entry.name + "/"
        else:
            data = Path(entry.path).read_bytes()
            blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            mode = b"100755" if os.access(entry.path, os.X_OK) else b"100644"
            sha, key = blob, entry.name
        entries.append((key.encode(), mode + b" " + entry.name.encode() + b"\0"
                        + bytes.fromhex(sha)))
    body = b"".join(e for _, e in sorted(entries))
    return hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()


def gpu_available() -> bool:
    """Whether a CUDA device answers (False where cudamagic's driver module cannot say)."""
    try:
        from cudamagic.toolchain.device import driver

        return bool(driver.available())
    except Exception:  # pragma: no cover
        return False


def system_include_dirs() -> tuple[str, ...]:
    """The header folders cudamagic gives every build (CuPy's CCCL, the toolkit's): a CuPy
    ``RawModule`` measured against it must compile against the same headers."""
    import importlib

    # where the package has kept them: toolkit().include_dirs, or a system_include_dirs()
    for where, get in (("cudamagic.core.toolkit", lambda m: m.toolkit().include_dirs),
                       ("cudamagic.core.toolkit", lambda m: m.system_include_dirs()),
                       ("cudamagic.core.options", lambda m: m.system_include_dirs())):
        try:
            return tuple(get(importlib.import_module(where)))
        except (ImportError, AttributeError):
            continue
    raise RuntimeError("cudamagic's system include folders are in neither cudamagic.core.toolkit "
                       "nor cudamagic.core.options: tell benchmarks/common.py where they went")


# ---- the cells users write -----------------------------------------------------------------------

def cell0(cudamagic: bool, gpu: bool = True) -> str:
    """Cell 0: import CuPy, create the context (so that it is made before the cell under test,
    for both tools; left out without a GPU), and ``%load_ext cudamagic`` for cudamagic."""
    lines = ["import cupy as cp"]
    if gpu:
        lines.append("cp.cuda.Device(0).synchronize()")
    if cudamagic:
        lines.append("%load_ext cudamagic")
    return "\n".join(lines)


def magic_line(kind: str, n: int, extra: str = "") -> str:
    """The ``%%cuda`` line (without ``%%cuda``) a user writes for ``n`` instances."""
    opts = [f"-n {shlex.quote(e)}" for e in names(kind, n)]
    return " ".join(opts + ([extra] if extra else []))


def cuda_cell(kind: str, n: int, extra: str = "") -> str:
    """The ``%%cuda`` cell: one ``-n`` per instance, the report shown (no ``-q``)."""
    return f"%%cuda {magic_line(kind, n, extra)}\n{SOURCES[kind][0].strip()}\n"


def cupy_cell(kind: str, n: int, options: tuple[str, ...]) -> str:
    """The same work in CuPy: ``RawModule(code=..., name_expressions=...)`` and ``get_function``
    for every name."""
    return (f'code = r"""\n{SOURCES[kind][0].strip()}\n"""\n'
            f"name_expressions = {names(kind, n)!r}\n"
            f"mod = cp.RawModule(code=code, name_expressions=name_expressions,\n"
            f"                   options={tuple(options)!r})\n"
            f"kernels = [mod.get_function(e) for e in name_expressions]\n")


def write_outputs(out: str, stem: str, text: list[str], result: dict) -> None:
    """A benchmark's table as ``OUT/STEM.md`` and its figures as ``OUT/STEM.json``."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{stem}.md"), "w") as f:
        f.write("\n".join(text) + "\n")
    with open(os.path.join(out, f"{stem}.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(f"{out}/{stem}.md, {stem}.json")


def cupy_options() -> tuple[str, ...]:
    """CuPy's options for :func:`cupy_cell`: cudamagic's default dialect and system headers
    (CuPy adds its own arch and include folder)."""
    return ("-std=c++17", *(f"-I{d}" for d in system_include_dirs()))


# ---- notebooks in fresh Jupyter kernels ---------------------------------------------------------

def _kernel_date(stamp: str) -> datetime.datetime:
    # nbclient's record_timing writes the kernel's header dates in this form
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class CellTime:
    """One executed cell: its kernel-side and client-side time, and its outputs."""

    source: str
    started: datetime.datetime   # the kernel's execute_input date
    replied: datetime.datetime   # the kernel's execute_reply date
    sent: float                  # perf_counter here when the execute_request went out
    done: float                  # perf_counter here when the reply and the idle status were in
    outputs: list = field(default_factory=list)

    @property
    def kernel_s(self) -> float:
        """execute_input -> execute_reply: the cell as the kernel ran it (both its dates)."""
        return (self.replied - self.started).total_seconds()

    @property
    def client_s(self) -> float:
        """execute_request sent -> reply and idle received: what the front end waited."""
        return self.done - self.sent

    def text(self, name: str | None = None) -> str:
        """What the cell printed (stream ``name``, or all) and displayed as text/plain."""
        parts = []
        for out in self.outputs:
            if out.get("output_type") == "stream":
                if name is None or out.get("name") == name:
                    parts.append(out.get("text", ""))
            elif name is None:
                parts.append(out.get("data", {}).get("text/plain", ""))
        return "".join(p if isinstance(p, str) else "".join(p) for p in parts)


@dataclass
class NotebookRun:
    """A notebook executed top to bottom in a fresh kernel."""

    cells: list[CellTime]
    kernel_start_s: float   # asking for a kernel -> sending cell 0 (client clock)

    def span(self, first: int, last: int) -> float:
        """Kernel-side seconds from cell ``first``'s execute_input to cell ``last``'s reply."""
        return (self.cells[last].replied - self.cells[first].started).total_seconds()

    def client_span(self, first: int, last: int) -> float:
        """Client-side seconds from sending cell ``first`` to cell ``last``'s reply and idle."""
        return self.cells[last].done - self.cells[first].sent


def run_notebook(cells: list[str], *, cwd: str | os.PathLike, env: dict[str, str] | None = None,
                 timeout: int = 600, pause_before: dict[int, float] | None = None,
                 kernel_stderr: Any = None) -> NotebookRun:
    """Run ``cells`` in a fresh ``python3`` Jupyter kernel through nbclient, as "Restart Kernel
    and Run All Cells" does: each cell is sent once the one before has replied and gone idle.

    ``env`` is added to :func:`bench_env` for the kernel; ``pause_before`` maps a cell index to
    seconds the client waits before sending that cell (a person reading the last output);
    ``kernel_stderr`` is an open file that receives the kernel process's own stderr.

    :raises nbclient.exceptions.CellExecutionError: a cell raised.
    """
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    sent: dict[int, float] = {}
    done: dict[int, float] = {}

    def on_execute(cell, cell_index):
        if pause_before and cell_index in pause_before:
            time.sleep(pause_before[cell_index])
        sent[cell_index] = time.perf_counter()

    def on_executed(cell, cell_index, execute_reply):
        done[cell_index] = time.perf_counter()

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=True,
                            on_cell_execute=on_execute, on_cell_executed=on_executed,
                            resources={"metadata": {"path": str(cwd)}})
    kernel_args: dict[str, Any] = {"env": bench_env(env), "cwd": str(cwd)}
    if kernel_stderr is not None:
        kernel_args["stderr"] = kernel_stderr
    t0 = time.perf_counter()
    client.execute(**kernel_args)
    out = []
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata["execution"]
        started, replied = (_kernel_date(meta[k]) for k in ("iopub.execute_input",
                                                             "shell.execute_reply"))
        out.append(CellTime(cell.source, started, replied, sent[i], done[i],
                            list(cell.get("outputs", []))))
    return NotebookRun(out, sent[0] - t0)
