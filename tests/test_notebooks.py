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


def test_quickstart_runs_and_a_rerun_is_a_hit(cache_env):
    first = _execute(cache_env)
    magic_cell = next(c for c in first.cells if c.source.startswith("%%cuda"))
    bundle = magic_cell.outputs[0]["data"]
    assert "application/vnd.jupyter.widget-view+json" in bundle  # the widget
    assert "cache miss" in bundle["text/plain"] and "<table" in bundle["text/html"]
    assert any("takes 4 arguments" in t for t in _outputs(first))
    second = _execute(cache_env)  # a fresh kernel: a restart
    bundle = next(c for c in second.cells if c.source.startswith("%%cuda")).outputs[0]["data"]
    assert "cache hit" in bundle["text/plain"]
    for name in ("saxpy_float", "ns_scale_float_3", "fill"):
        assert name in bundle["text/plain"]
