"""The quickstart notebook, executed end to end by nbclient in a real Jupyter kernel."""

from __future__ import annotations

import os

import nbformat
import pytest
from nbclient import NotebookClient

from .conftest import REPO

QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"


def _execute(cache_dir) -> nbformat.NotebookNode:
    nb = nbformat.read(QUICKSTART, as_version=4)
    os.environ["CUDAMAGIC_CACHE_DIR"] = str(cache_dir)  # inherited by the kernel
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(QUICKSTART.parent)}}).execute()
    return nb


def _outputs(nb, mime="text/plain") -> list[str]:
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text") or out.get("data", {}).get(mime, ""))
    return texts


@pytest.fixture
def cache_env(tmp_path):
    old = os.environ.get("CUDAMAGIC_CACHE_DIR")
    yield tmp_path / "cache"
    if old is None:
        os.environ.pop("CUDAMAGIC_CACHE_DIR", None)
    else:
        os.environ["CUDAMAGIC_CACHE_DIR"] = old


WIDGET = "application/vnd.jupyter.widget-view+json"


def _report_bundle(nb) -> dict:
    cell = next(c for c in nb.cells if c.source.startswith("%%cuda"))
    return next(o["data"] for o in cell.outputs if WIDGET in o.get("data", {}))


def test_quickstart_runs_and_a_rerun_is_a_hit(cache_env):
    first = _execute(cache_env)
    bundle = _report_bundle(first)
    assert "cache miss" in bundle["text/plain"] and "<table" in bundle["text/html"]
    assert any("takes 4 arguments" in t for t in _outputs(first))
    second = _execute(cache_env)  # a fresh kernel: a restart
    bundle = _report_bundle(second)
    assert "cache hit" in bundle["text/plain"]
    for name in ("saxpy_float", "ns_scale_float_3", "fill"):
        assert name in bundle["text/plain"]


def test_slow_compile_shows_progress_in_the_notebook(cache_env, tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext cudamagic"),
                nbformat.v4.new_code_cell(
                    '%%cuda -n "k<float>"\n#include <cuda/std/complex>\ntemplate <typename T>\n'
                    "__global__ void k(cuda::std::complex<T>* z) { z[0] = cuda::std::exp(z[0]); }\n")]
    os.environ["CUDAMAGIC_CACHE_DIR"] = str(cache_env)
    NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    texts = [o.get("data", {}).get("text/plain", "") for o in nb.cells[1].outputs]
    # one output, updated in place: it ends saying how long the compile took
    assert any(t.startswith("compiled cell.cu in") for t in texts), texts
