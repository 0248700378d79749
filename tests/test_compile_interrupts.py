"""Ctrl-C at any step between a compile's start and its stored entry keeps the finished build:
the interrupt is raised after the entry is stored, and the next run is a hit."""

from __future__ import annotations

import signal

import pytest

from cudamagic import pipeline
from cudamagic.options import options_from_args
from cudamagic.pipeline import build_module
from cudamagic.store.cache import KernelCache

SOURCE = 'extern "C" __global__ void k(float* x, int n) { if (n) x[0] = 1.0f; }\n'

# the step where Ctrl-C comes: (the object, the attribute the build calls, its options)
STEPS = {
    "the nvJitLink link of a -dlto build": (pipeline, "link_compiled", ["-dlto"]),
    "the link of an -rdc build": (pipeline, "link_compiled", ["-rdc=true"]),
    "the header manifest": (pipeline, "_manifest", []),
    "reading the CUBIN": (pipeline, "read_cubin", []),
    "the type probes' answers": (pipeline, "answers", []),
    "the symbols' record": (pipeline, "symbol_record", []),
    "the store": (KernelCache, "put", []),
}


def _interrupting(real):
    """``real``, with Ctrl-C delivered as it is entered (the process's own SIGINT)."""

    def call(*args, **kwargs):
        signal.raise_signal(signal.SIGINT)
        return real(*args, **kwargs)

    return call


@pytest.mark.parametrize("step", list(STEPS))
def test_ctrl_c_at_each_step_keeps_the_finished_build(step, cache, compiler, monkeypatch):
    owner, name, options = STEPS[step]
    monkeypatch.setattr(owner, name, _interrupting(getattr(owner, name)))
    opts = options_from_args(options)
    with pytest.raises(KeyboardInterrupt, match="interrupted after .* next run is a hit"):
        build_module(SOURCE, opts, cache=cache, compiler=compiler)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back
    monkeypatch.undo()
    again = build_module(SOURCE, opts, cache=cache, compiler=compiler)
    assert again.hit and len(compiler.calls) == 1


def test_ctrl_c_then_a_failure_after_the_compile_says_nothing_is_kept(cache, compiler,
                                                                      monkeypatch):
    """A build that fails after Ctrl-C (here: a step after the compile raises a project error)
    raises the interrupt, saying the build failed; nothing is stored."""
    from cudamagic.errors import NameResolutionError

    def fails(*args, **kwargs):
        raise NameResolutionError("a failure after the compile")

    monkeypatch.setattr(pipeline, "read_cubin", _interrupting(pipeline.read_cubin))
    monkeypatch.setattr(pipeline, "answers", fails)
    with pytest.raises(KeyboardInterrupt, match="it failed, so nothing is kept"):
        build_module(SOURCE, options_from_args([]), cache=cache, compiler=compiler)
    assert not list(cache.keys())
