"""The issue-21 benchmark harnesses (benchmarks/whole_notebook.py, fresh_process.py, perf.py)
measure what they say: the launch cell times each phase and launches the first kernel with its
arguments; the fresh-process harness runs end to end here, compile-only, served from the cache."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    """The benchmarks folder on sys.path, as the scripts run."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import fresh_process
        import whole_notebook
        yield whole_notebook, fresh_process
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


class _FakeCupy:
    """What the launch cell calls on CuPy, recorded (no GPU here)."""

    float32, complex64 = "float32", "complex64"

    def __init__(self, log: list):
        self.log = log
        self.cuda = self
        self.syncs = 0

    def Device(self, i):   # noqa: N802 - CuPy's name
        return self

    def synchronize(self):
        self.log.append("sync")

    def zeros(self, n, dtype):
        self.log.append(("zeros", n, dtype))
        return f"buf{n}"

    def int32(self, v):
        return ("int32", v)


class _FakeModule:
    def __init__(self, log: list):
        self.log = log

    def load(self):
        self.log.append("load")
        return self

    def __getitem__(self, expr):
        return lambda grid, block, args: self.log.append(("call", expr, grid, block, args))


@pytest.mark.parametrize("kind", ["small", "heavy", "cccl"])
@pytest.mark.parametrize("tool", ["cudamagic", "cupy"])
def test_the_launch_cell_times_every_phase_and_launches_the_first_kernel(bench, tool, kind):
    whole_notebook, _ = bench
    log: list = []
    cp = _FakeCupy(log)
    ns = {"cp": cp, "cuda_module": _FakeModule(log),
          "kernels": [lambda g, b, a: log.append(("call", "kernels[0]", g, b, a))]}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(whole_notebook.launch_cell(tool, kind), ns)
    cell = type("Cell", (), {"text": lambda self, name=None: out.getvalue()})()
    phases = whole_notebook._phases(cell)
    want = (["context", "alloc", "module load", "first call", "sync"] if tool == "cudamagic"
            else ["alloc", "first call", "sync"])
    assert list(phases) == want
    assert all(v >= 0 for v in phases.values())
    calls = [e for e in log if isinstance(e, tuple) and e[0] == "call"]
    assert len(calls) == 1
    _, expr, grid, block, args = calls[0]
    first = {"small": "k<0>", "heavy": "h<0>", "cccl": "r<0>"}[kind]
    assert expr == (first if tool == "cudamagic" else "kernels[0]")
    assert (grid, block) == ((4,), (256,))
    pointers = 2 if kind == "cccl" else 1
    assert all(a.startswith("buf") for a in args[:pointers])
    assert args[pointers:] == ((1024,) if tool == "cudamagic" else (("int32", 1024),))
    if tool == "cudamagic":   # loaded before the call, the context made before both
        assert log.index("load") < log.index(calls[0])
        assert log[0] == "sync"


def test_the_launch_cell_says_so_when_it_printed_no_phases(bench):
    whole_notebook, _ = bench
    cell = type("Cell", (), {"text": lambda self, name=None: "Traceback ..."})()
    with pytest.raises(AssertionError, match="printed no phases"):
        whole_notebook._phases(cell)


def test_a_fresh_process_is_served_from_the_cache_and_tabled(bench, capsys):
    _, fresh_process = bench
    res = fresh_process.run(sizes=(2,), cccl=0, repeats=1, dry_run=True)
    case, = res["cases"]
    med = case["median"]["cudamagic"]
    assert {"seconds", "import", "build", "load", "process"} <= set(med)
    assert med["process"] > med["seconds"] >= med["build"]
    assert res["table"][2].startswith("| small, 2 names |")
    # the hit's own import count is in the row (tests/test_startup.py holds the list)
    assert 20 < case["modules"] < 80 and res["table"][2].endswith(f"| {case['modules']} |")


def test_the_warm_cell_floor_reads_every_kernel_of_the_cached_entry(tmp_path):
    """The floor (benchmarks/warm_cell.py's ``%%floor``) does a warm cell's least work on the
    real entry: it must find each of the cell's kernels in the CUBIN the cache holds."""
    import os
    import subprocess
    import textwrap

    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, "benchmarks")
        import cudamagic, warm_cell
        from common import SOURCES, cuda_cell, names
        n = 12
        cudamagic.build(SOURCES["small"][0], name_expressions=names("small", n))
        from IPython.testing.globalipapp import start_ipython
        ip = start_ipython()
        ip.run_cell(warm_cell.FLOOR_SETUP)
        cell = cuda_cell("small", n).replace("%%cuda ", "%%floor ", 1)
        line, source = cell.split("\\n", 1)
        ip.run_cell_magic("floor", line.removeprefix("%%floor "), source)
        print("FOUND", ip.user_ns["floor_kernels"])
    """)
    env = {**os.environ, "CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FOUND 12" in proc.stdout, proc.stdout


def test_the_startup_benchmark_sets_load_ext_against_ipythons_start(bench):
    """benchmarks/startup.py (issue 30 item 2's rows): a bare interpreter, IPython's start and
    %load_ext + the first %%cuda cell, in fresh processes, with the budget's verdict."""
    import startup

    row = startup.run(repeats=1)
    assert 0 < row["bare"] and 0 < row["load_ext"] and 0 < row["first_cell"]
    assert row["ratio"] == row["load_ext"] / row["ipython"]
    assert row["met"] is (row["ratio"] <= startup.LOAD_EXT_BUDGET)
    head, _, line = startup.table(row)
    assert "IPython's start" in head and ("met" in line or "missed" in line)


def _git(folder: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c",
                           "commit.gpgsign=false", *args], cwd=folder, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_a_copy_without_git_never_prints_the_commit_of_a_repository_around_it(bench, tmp_path,
                                                                             monkeypatch):
    """The GPU machine's copy of the tree has no .git but sits inside another repository: perf.py
    printed that one's commit. git is asked only where the tree is a work tree's top; a copy says
    the commit stamped into it, or that it has none, and the tree hash of cudamagic/ as found,
    which is git's own for the same files."""
    import shutil

    import common

    outer = tmp_path / "outer"
    outer.mkdir()
    (outer / "other.txt").write_text("another project\n")
    _git(outer, "init", "-q")
    _git(outer, "add", "other.txt")
    _git(outer, "commit", "-q", "-m", "another project")
    theirs = _git(outer, "rev-parse", "--short", "HEAD")
    copy = outer / "copy"
    shutil.copytree(REPO / "cudamagic", copy / "cudamagic",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.delenv(common.COMMIT_ENV, raising=False)
    said = common.project_commit(copy)
    assert theirs not in said and said.startswith("unknown (no .git); cudamagic tree "), said
    (copy / common.COMMIT_FILE).write_text("abc1234\n")
    assert common.project_commit(copy).startswith("abc1234 (stamped, no .git); ")
    monkeypatch.setenv(common.COMMIT_ENV, "def5678")
    assert common.project_commit(copy).startswith("def5678 (stamped, no .git); ")
    # the copy made a repository of its own: its commit, and git's tree hash is the one printed
    _git(copy, "init", "-q")
    _git(copy, "add", "cudamagic")
    _git(copy, "commit", "-q", "-m", "the copy")
    ours, tree = _git(copy, "rev-parse", "--short", "HEAD"), _git(copy, "rev-parse", "HEAD:cudamagic")
    assert common.package_tree(copy / "cudamagic") == tree
    assert common.project_commit(copy) == f"{ours}; cudamagic tree {tree[:12]}"
    (copy / "cudamagic" / "errors.py").write_text("# changed\n")
    # files over an older commit's work tree (the GPU machine's copy): the stamp made where the
    # copy was made names them, and git's HEAD is said to be another's
    changed = common.project_commit(copy)
    assert changed.startswith(f"def5678 (stamped; git's HEAD here {ours} has another "
                              "cudamagic); ") and tree[:12] not in changed, changed
    monkeypatch.delenv(common.COMMIT_ENV)
    (copy / common.COMMIT_FILE).unlink()
    changed = common.project_commit(copy)
    assert changed.startswith(f"{ours}, uncommitted changes; ") and tree[:12] not in changed
