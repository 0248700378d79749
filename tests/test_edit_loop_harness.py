"""benchmarks/edit_loop.py's harness (issues 37 and 49) run end to end on CPU: real Jupyter
kernels, real NVRTC, a real compile server; one edit of the small cell per tool and then the
restart, so that the restart column's code is what CI runs. The restart figure must come from a
fresh kernel (another pid) on the same cache folder, and for the server's column from the same
server as the edits before it, which never loaded NVRTC into the kernel."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def edit_loop():
    """benchmarks/edit_loop.py as the script imports it (its folder on sys.path)."""
    from .conftest import benchmark_module

    yield from benchmark_module("edit_loop")


@pytest.fixture(scope="module")
def result(edit_loop):
    return edit_loop.run(["small"], edits=1, breakdown=False, gpu=False, timeout=300,
                         restart=True)


def test_every_tool_has_a_column_and_its_restart(result, edit_loop):
    assert result["tools"] == list(edit_loop.TOOLS)
    for tool in edit_loop.TOOLS:
        assert len(result["raw"]["small"][tool]) == 2  # the first compile and one edit
        assert result["restarts"]["small"][tool]["cell"] > 0


def test_the_restart_edit_runs_in_a_fresh_kernel_on_the_same_cache_folder(result, edit_loop):
    for tool in edit_loop.TOOLS:
        before = result["raw"]["small"][tool]
        after = result["restarts"]["small"][tool]
        assert len({r["pid"] for r in before}) == 1, tool  # the edits share one kernel
        assert after["pid"] != before[0]["pid"], tool
        assert after["cache"] == before[0]["cache"] is not None, tool


def test_the_server_column_is_served_by_one_server_across_the_restart(result):
    runs = [*result["raw"]["small"]["server"], result["restarts"]["small"]["server"]]
    pids = {r["server_pid"] for r in runs}
    assert len(pids) == 1 and None not in pids
    assert not any(r["nvrtc_loaded"] for r in runs)
    # the in-process column is the control: NVRTC in the kernel, no server
    inproc = [*result["raw"]["small"]["pch"], result["restarts"]["small"]["pch"]]
    assert all(r["nvrtc_loaded"] and r["server_pid"] is None for r in inproc)
    # the run stopped its server (it would outlive the run by its idle time otherwise)
    (pid,) = pids
    _ends(pid)


def _ends(pid: int) -> None:
    """``pid`` (a compile server, told to stop) exits within 10 s."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"the compile server {pid} outlived the run")


def test_a_restart_whose_kernel_does_not_start_still_ends_the_server(edit_loop, monkeypatch):
    servers: list[int] = []
    one, started = edit_loop._one, edit_loop._started

    def seen(*args, **kwargs):
        got = one(*args, **kwargs)
        servers.append(got.get("server_pid"))
        return got

    def fails_to_restart(tool, *args):
        if tool == "server" and args[-1] == "restarted":  # the old kernel is shut down by then
            raise RuntimeError("the fresh kernel did not start")
        return started(tool, *args)

    monkeypatch.setattr(edit_loop, "_one", seen)
    monkeypatch.setattr(edit_loop, "_started", fails_to_restart)
    with pytest.raises(RuntimeError, match="did not start"):
        edit_loop.run(["small"], edits=0, breakdown=False, gpu=False, timeout=300)
    (pid,) = {p for p in servers if p is not None}
    _ends(pid)


def test_the_restart_table_shows_each_tools_restart_edit_against_cupys(result, edit_loop):
    rows = edit_loop.restart_table(result)
    assert len(rows) == 3 and "server / CuPy (goal ≤ 0.3x)" in rows[0]
    cells = [c.strip() for c in rows[2].strip("|").split("|")]
    restarts = result["restarts"]["small"]
    assert cells[0] == "small"
    assert cells[1:5] == [f"{restarts[t]['cell'] * 1e3:.0f}" for t in edit_loop.TOOLS]
    assert cells[5] == f"{restarts['server']['cell'] / restarts['cupy']['cell']:.2f}x"
    assert cells[6] == f"{restarts['pch']['cell'] / restarts['cupy']['cell']:.2f}x"
    assert cells[9] == "–, –"  # what the PCH did: the small cell includes no header
    # and the loop's own table has the server's column beside the in-process one
    head = edit_loop.table(result)[0]
    assert head.index("cudamagic server ms") < head.index("cudamagic + PCH ms")
    assert "server / in-process" in head


def test_cupys_column_compiles_the_cute_cell_with_the_folders_given_by_hand(edit_loop):
    """CuPy's column of the CuTe cell: CuPy's own compile (as without a GPU) given by hand what
    cudamagic adds itself, the wheel's headers and the cccl/ layout; NVRTC itself says it
    compiles (CuPy's RawModule already passes -default-device's long spelling)."""
    cell = edit_loop.CELLS["cute"]
    if not cell.cupy_options:
        pytest.skip("the nvidia-cutlass wheel is absent")
    ns: dict = {}
    exec(edit_loop.CUPY_NO_GPU, ns)
    source = edit_loop.edited(cell, "1.000000000123")
    options = cell.cupy_options + edit_loop.cupy_options() + cell.options
    assert ns["_cupy_compile"](source, options, cell.names)  # a CUBIN's bytes
    # and what the timed cell sends CuPy's kernel is that compile
    assert edit_loop.timed_cell("cupy", cell, "1.000000000123", False, True) == (
        f"_cupy_compile({source!r}, {options!r}, {cell.names!r})")
