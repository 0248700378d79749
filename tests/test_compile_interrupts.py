"""Ctrl-C at any step between a compile's start and its stored entry keeps the finished build:
the interrupt is raised after the entry is stored, and the next run is a hit."""

from __future__ import annotations

import re
import signal

import pytest

from cudamagic.pipeline import steps as pipeline
from cudamagic.toolchain.compile import link
from cudamagic.core.options import options_from_args
from cudamagic.pipeline.steps import build_module
from cudamagic.store.cache import KernelCache

SOURCE = 'extern "C" __global__ void k(float* x, int n) { if (n) x[0] = 1.0f; }\n'

# the step where Ctrl-C comes: (the object, the attribute the build calls, its options)
STEPS = {
    "the nvJitLink link of a -dlto build": (link, "link_compiled", ["-dlto"]),
    "the link of an -rdc build": (link, "link_compiled", ["-rdc=true"]),
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


#: what the interrupt says: when it came into the build, the build's whole time, what was kept
SAID = re.compile(r"interrupted (\d+\.\d) s into the build; .* ran to its end \((\d+\.\d) s\): "
                  r".*next run is a hit")


@pytest.mark.parametrize("step", list(STEPS))
def test_ctrl_c_at_each_step_keeps_the_finished_build(step, cache, compiler, monkeypatch,
                                                      capsys):
    """The interrupt is said at once on stderr (the build goes on), and raised after the
    build, saying when it came (never after the build's end) and that the result was kept."""
    owner, name, options = STEPS[step]
    monkeypatch.setattr(owner, name, _interrupting(getattr(owner, name)))
    opts = options_from_args(options)
    with pytest.raises(KeyboardInterrupt) as raised:
        build_module(SOURCE, opts, cache=cache, compiler=compiler)
    said = SAID.search(str(raised.value))
    assert said and float(said.group(1)) <= float(said.group(2)), str(raised.value)
    assert capsys.readouterr().err.count("interrupt received") == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back
    monkeypatch.undo()
    again = build_module(SOURCE, opts, cache=cache, compiler=compiler)
    assert again.hit and len(compiler.calls) == 1


def test_the_interrupt_says_when_the_ctrl_c_came_not_when_the_build_ended(cache, compiler,
                                                                          monkeypatch):
    """Ctrl-C at the header manifest, then a store that takes 0.6 s more: the message gives the
    Ctrl-C's moment into the build, well before the build's end, and the build's whole time."""
    import threading

    real_put = KernelCache.put

    def slow_put(*args, **kwargs):
        threading.Event().wait(0.6)  # a slow disk: the store's own time, not a synchronisation
        return real_put(*args, **kwargs)

    monkeypatch.setattr(pipeline, "_manifest", _interrupting(pipeline._manifest))
    monkeypatch.setattr(KernelCache, "put", slow_put)
    with pytest.raises(KeyboardInterrupt) as raised:
        build_module(SOURCE, options_from_args([]), cache=cache, compiler=compiler)
    said = SAID.search(str(raised.value))
    assert said, str(raised.value)
    came, total = float(said.group(1)), float(said.group(2))
    assert total >= 0.6 and came <= total - 0.5, str(raised.value)


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


# --- what became of the entry: a StoreOutcome, worded by the view -------------------------------

def _racy(real):
    def call(*args, **kwargs):
        manifest = real(*args, **kwargs)
        manifest.racy = "a header changed while the compile read it"
        return manifest
    return call


# the case: (BuildOptions' fields, (the object, the attribute, its stand-in) or None, outcome, words kept)
OUTCOMES = {
    "kept": ({}, None, "KEPT", "its CUBIN is kept in the cache, so the next run is a hit"),
    "--no-cache": ({"no_cache": True}, None, "NO_CACHE", "its CUBIN is not cached (--no-cache)"),
    "a racy manifest": ({}, (pipeline, "_manifest", _racy), "RACY",
                        "its CUBIN is not cached (a header changed while the compile read it)"),
    "a busy database": ({}, (KernelCache, "put", lambda real: lambda *a, **k: False), "BUSY",
                        "its CUBIN is not cached (the cache's database was locked)"),
}


@pytest.mark.parametrize("case", list(OUTCOMES))
def test_what_became_of_the_entry_is_an_outcome_the_view_words(case, cache, compiler,
                                                                monkeypatch):
    """_store answers by StoreOutcome (not a sentence); the interrupt's words stay as they were."""
    from cudamagic.core.miss import StoreOutcome

    options, patch, outcome, words = OUTCOMES[case]
    if patch is not None:
        owner, name, make = patch
        monkeypatch.setattr(owner, name, make(getattr(owner, name)))
    seen = []
    real_store = pipeline._store
    monkeypatch.setattr(pipeline, "_store", lambda *a: seen.append(real_store(*a)) or seen[-1])
    with pytest.raises(KeyboardInterrupt) as raised:
        build_module(SOURCE, options_from_args([], **options), cache=cache,
                     compiler=_interrupting(compiler))
    assert [s.outcome for s in seen] == [StoreOutcome[outcome]]
    assert re.search(r"ran to its end \(\d+\.\d s\): " + re.escape(words) + "$", str(raised.value))
    assert bool(list(cache.keys())) is (outcome == "KEPT")


def test_a_reworded_outcome_changes_nothing_but_the_words(cache, compiler, monkeypatch):
    """The pipeline decides by the outcome: with the view's sentence reworded the entry is still
    kept (the next run is a hit) and the interrupt carries the new words."""
    from cudamagic.pipeline import interrupts

    monkeypatch.setattr(interrupts, "stored_text",
                        lambda stored: f"reworded {stored.outcome.name}")
    with pytest.raises(KeyboardInterrupt, match=r"ran to its end \(\d+\.\d s\): reworded KEPT$"):
        build_module(SOURCE, options_from_args([]), cache=cache,
                     compiler=_interrupting(compiler))
    monkeypatch.undo()
    assert build_module(SOURCE, options_from_args([]), cache=cache, compiler=compiler).hit
