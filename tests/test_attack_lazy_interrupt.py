"""Ctrl-C in the middle of a lazy first read leaves nothing half made: the next read of the
same kernel, row or record gives what an uninterrupted read gives."""

from __future__ import annotations

import pytest

from cudamagic.launch import kernel as kernel_module
from cudamagic.toolchain import image as image_module
from cudamagic.toolchain.image import read_cubin
from cudamagic.view import report as report_module

from .test_lazy_restore import EXPRS, hit  # noqa: F401  (the fixture: a module from the cache)


def _interrupting(real):
    """``real`` whose first call raises KeyboardInterrupt (Ctrl-C inside it)."""
    calls = []

    def once_interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    return once_interrupted


# where Ctrl-C comes: (module, function), and the read that reaches it
WHERE = {
    "a kernel's parameter table": (kernel_module, "param_specs", lambda m: m[EXPRS[2]].params),
    "a kernel's records": (image_module, "_kparams", lambda m: m[EXPRS[2]].image.params),
    "a report row's signature": (report_module, "display_signature",
                                 lambda m: m.report.rows[2].signature),
    "a kernel's resources": (image_module, "KernelResources",
                             lambda m: m[EXPRS[2]].image.resources),
}


@pytest.mark.parametrize("where", list(WHERE))
def test_ctrl_c_in_a_first_read_leaves_the_next_read_whole(hit, monkeypatch, where):
    module, name, read = WHERE[where]
    monkeypatch.setattr(module, name, _interrupting(getattr(module, name)))
    with pytest.raises(KeyboardInterrupt):
        read(hit)
    again = read(hit)
    assert again == read(hit)
    fresh = read_cubin(hit.cubin)
    k = hit[EXPRS[2]]
    assert k.image.params == fresh.kernel(k.symbol).params
    assert k.image.resources == fresh.kernel(k.symbol).resources
    assert again is not None and again != ()
