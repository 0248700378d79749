"""A kernel whose name the demangler cannot read is served from the cache.

libstdc++'s demangler gives back a name with an identifier of over about 1000 characters as it
is; the hit then compared the name expression with the mangled symbol, found them to differ,
called the entry's map a lie, deleted the entry and compiled again: the cell never hit. A name
that cannot be read is one that cannot be compared (as one too long to keep): the stored symbol,
one of the CUBIN's kernels, serves unverified.
"""

from __future__ import annotations

import pytest

from cudamagic.pipeline import build_module, options_from_args
from cudamagic.toolchain.demangle import LibStdCxx


@pytest.mark.parametrize("length", [1500, 2000, 5000, 50_000])
def test_a_template_kernel_whose_name_the_demangler_cannot_read_is_a_hit(cache, compiler,
                                                                         length):
    name = "q" * length
    source = (f"template <int N> __global__ void {name}(int* x) {{ x[0] = N; }}\n"
              "template <int N> __global__ void short_one(int* x) { x[0] = N; }\n")
    exprs = [f"{name}<3>", "short_one<2>"]
    opts = options_from_args([], exprs)
    first = build_module(source, opts, cache=cache, compiler=compiler, demangler=LibStdCxx())
    symbol = first[f"{name}<3>"].symbol
    assert LibStdCxx().demangle([symbol]) == [symbol]  # the case: it cannot be read
    for _ in range(2):
        again = build_module(source, opts, cache=cache, compiler=compiler,
                             demangler=LibStdCxx())
        assert again.hit, again.report.miss_reason
        assert again[f"{name}<3>"].symbol == symbol
        assert again[f"{name}<3>"].resolved_by == "stored-unverified"
        assert again["short_one<2>"].resolved_by == "stored"  # read: verified as before
    assert len(compiler.calls) == 1


@pytest.mark.parametrize("length", [1500, 5000])
def test_a_stored_map_that_names_another_kernel_for_an_unreadable_one_is_still_refused(
        cache, compiler, length):
    """Unverified is not unchecked: a stored symbol the CUBIN lacks makes the entry bad."""
    import dataclasses

    name = "q" * length
    source = f"template <int N> __global__ void {name}(int* x) {{ x[0] = N; }}\n"
    opts = options_from_args([], [f"{name}<3>"])
    first = build_module(source, opts, cache=cache, compiler=compiler, demangler=LibStdCxx())
    record, _ = cache.get(first.key)
    bad = {f"{name}<3>": first[f"{name}<3>"].symbol.replace("Li3E", "Li4E")}
    cache.put(first.key, dataclasses.replace(record, lowered=bad))
    again = build_module(source, opts, cache=cache, compiler=compiler, demangler=LibStdCxx())
    assert not again.hit and "does not match its CUBIN" in again.report.miss_reason
    assert again[f"{name}<3>"].symbol == first[f"{name}<3>"].symbol
