"""A new file beside the cell (or beside a header) shadows only an include NVRTC would have
looked for there: a quoted one. ``#include <ops.h>`` through ``-Iinc`` never searches the
current folder, so a new ``./ops.h`` keeps the entry serving (issue 31 item 5: it was a miss
said to "shadow" the header)."""

from __future__ import annotations

import pytest

import cudamagic
from cudamagic.store import KernelCache

KERN = 'extern "C" __global__ void k(int* x) { x[0] = V; }\n'

# label: (files, cell source, the new file, whether the next build must still hit)
CASES = {
    "angle include from the cell, new ./ops.h": (
        {"inc/ops.h": "#define V 1\n"}, "#include <ops.h>\n", "ops.h", True),
    "quoted include from the cell, new ./ops.h": (
        {"inc/ops.h": "#define V 1\n"}, '#include "ops.h"\n', "ops.h", False),
    "angle include from a header, new file beside that header": (
        {"inc/sub/a.h": "#include <b.h>\n", "inc/b.h": "#define V 1\n"},
        "#include <sub/a.h>\n", "inc/sub/b.h", True),
}


@pytest.mark.parametrize("label", list(CASES))
def test_only_a_place_searched_for_that_include_form_shadows(tmp_path, monkeypatch, label):
    files, src, new, hits = CASES[label]
    monkeypatch.chdir(tmp_path)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    cache = KernelCache(tmp_path / "cache")
    assert not cudamagic.build(src + KERN, options=["-Iinc"], cache=cache).hit
    (tmp_path / new).write_text("#define V 2\n")
    again = cudamagic.build(src + KERN, options=["-Iinc"], cache=cache)
    assert again.hit is hits, again.report.miss_reason
    uncached = cudamagic.build(src + KERN, options=["-Iinc"], use_cache=False)
    assert again.cubin == uncached.cubin  # what was served is what NVRTC builds now
    cache.close()
