"""An upgrade is clean: a cache folder written by cudamagic at commit eb8d5d5 (before the layout
moved into folders, in entry format 2) is read by the current code, and since format 3 (the
variables' types asked of the compiler, not read from the cell) every such entry is a clean
miss: recompiled once, stored in the current format, then a hit.

The fixture (tests/fixtures/entries/cache-eb8d5d5/ and its .json) was written by
tests/fixtures/entries/write_old_cache.py run on that commit. Three levels:

- the key: since issue 32 (folders by names that travel, no working folder: key version 3)
  the current ``cache_key`` over the inputs the old code recorded gives another key, so an old
  entry is never found by a build's own key;
- the pipeline: each old entry is a miss of kind ``format``, compiled once, with the same kernels,
  and the next build is a hit (portable: the lookup is steered to the recorded key).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from cudamagic.store.keys import cache_key
from cudamagic.pipeline.steps import build_module, entry_key, options_from_args
from cudamagic.core.miss import MissKind
from cudamagic.store import BadEntry, KernelCache, decode_entry

from .conftest import FIXTURES

TAG = "eb8d5d5"
FOLDER = FIXTURES / "entries" / f"cache-{TAG}"
CELLS = json.loads((FIXTURES / "entries" / f"cache-{TAG}.json").read_text())["cells"]
IDS = [c["label"] for c in CELLS]


def _copy(tmp_path: Path) -> Path:
    """The fixture folder copied (a lookup writes last-use times), owner-only as cudamagic
    leaves its folders whatever the checkout's umask made of them."""
    dest = tmp_path / "cache"
    shutil.copytree(FOLDER, dest)
    for path in (dest, *dest.rglob("*")):
        os.chmod(path, 0o700 if path.is_dir() else 0o600)
    return dest


class _Steered(KernelCache):
    """A folder cache whose lookups of this environment's keys go to the recorded ones."""

    def __init__(self, directory: Path, steer: dict[str, str]) -> None:
        super().__init__(directory)
        self.steer = steer

    def lookup(self, key, check=None):
        return super().lookup(self.steer.get(key, key), check)


def _build(cell, cache, compiler):
    return build_module(cell["source"], options_from_args(cell["options"],
                                                           cell["name_expressions"], "sm_90"),
                        cache=cache, compiler=compiler)


def _assert_served(module, cell, hit: bool = True) -> None:
    assert module.hit is hit, (cell["label"], module.report.miss_reason)
    got = {k.name_expression: [k.symbol, k.python_name] for k in module.kernels.values()}
    assert got == cell["kernels"]


@pytest.mark.parametrize("cell", CELLS, ids=IDS)
def test_an_old_key_is_not_a_key_now(cell):
    assert cache_key(source=cell["source"], name_expressions=cell["name_expressions"],
                     options=cell["nvrtc_options"], arch=cell["arch"],
                     nvrtc_version=cell["nvrtc_version"], toolkit=cell["toolkit"]
                     ) != cell["key"]


def test_every_old_entry_is_a_clean_format_miss(tmp_path):
    cache = KernelCache(_copy(tmp_path))
    try:
        assert sorted(cache.keys()) == sorted(c["key"] for c in CELLS)
        for cell in CELLS:
            record, why = cache.get(cell["key"])
            assert record is None and why.kind is MissKind.FORMAT, (cell["label"], why)
            assert "format 2, older than 3" in why.detail
            with pytest.raises(BadEntry):
                decode_entry(cache.raw.get(cell["key"]), cell["key"])
    finally:
        cache.close()


@pytest.mark.parametrize("cell", CELLS, ids=IDS)
def test_an_old_entry_is_rebuilt_once_then_hits(tmp_path, monkeypatch, compiler, cell):
    if os.path.isdir(cell["cwd"]):
        monkeypatch.chdir(cell["cwd"])
    now, _, _, _ = entry_key(cell["source"], options_from_args(
        cell["options"], cell["name_expressions"], "sm_90"))
    cache = _Steered(_copy(tmp_path), {now: cell["key"]})
    try:
        first = _build(cell, cache, compiler)
        _assert_served(first, cell, hit=False)
        assert "older than 3" in first.report.miss_reason and len(compiler.calls) == 1
        cache.steer = {}  # the rebuilt entry is stored under this environment's key
        _assert_served(_build(cell, cache, compiler), cell)
        assert len(compiler.calls) == 1
    finally:
        cache.close()
