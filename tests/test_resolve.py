"""Resolution: stored map verified against the image, demangling where it decides, never a guess."""

from __future__ import annotations

import pytest

from cudamagic.names import Signatures, parse_demangled
from cudamagic.resolve import plain_kernels, resolve

from .test_names import UNDECIDABLE


def _kernels(rows, column: str):
    placeholders = column == "cufilt"
    return {r.symbol: parse_demangled(getattr(r, column), placeholders) for r in rows}


@pytest.mark.parametrize("column", ["cufilt", "libstdcxx"])
def test_without_stored_map_decidable_ones_resolve_exactly(rows, column):
    res = resolve([r.expression for r in rows], _kernels(rows, column))
    truth = {r.expression: r.symbol for r in rows}
    got = {x.name_expression: x.symbol for x in res.resolved}
    assert all(x.resolved_by == "demangled" for x in res.resolved)
    assert got == {e: s for e, s in truth.items() if e not in UNDECIDABLE}  # never a wrong symbol
    assert {u.name_expression for u in res.unresolved} == UNDECIDABLE
    assert not res.complete


def test_stored_map_is_taken_when_its_symbols_exist(rows):
    truth = {r.expression: r.symbol for r in rows}
    res = resolve(list(truth), _kernels(rows, "cufilt"), stored=truth)
    assert res.complete
    assert {x.name_expression: x.symbol for x in res.resolved} == truth
    # verified where the demangled name decides; accepted unverified where it cannot
    assert {x.name_expression: x.resolved_by for x in res.resolved} == {
        e: "stored-unverified" if e in UNDECIDABLE else "stored" for e in truth}


def test_stored_symbol_missing_from_image_is_stale(rows):
    truth = {r.expression: r.symbol for r in rows}
    kernels = _kernels(rows, "cufilt")
    del kernels[truth["fill<float>"]]
    res = resolve(["fill<float>", "fill<int>"], kernels, stored=truth)
    assert res.stale == ("fill<float>",) and not res.complete


def test_overloads_need_a_cast(rows):
    kernels = _kernels(rows, "cufilt")
    res = resolve(["overloaded"], kernels)
    assert res.unresolved[0].reason.startswith("it matches 2 kernels")
    assert len(res.unresolved[0].candidates) == 2


def test_unknown_expression_lists_close_candidates(rows):
    res = resolve(["fil<float>"], _kernels(rows, "libstdcxx"))
    assert res.unresolved and any("fill<float>" in c for c in res.unresolved[0].candidates)


def test_plain_kernels_are_extern_c_and_unique_non_templates(rows):
    kernels = Signatures({r.symbol: r.cufilt for r in rows}, placeholders=True)
    plain = {p.name_expression: p for p in plain_kernels(kernels, set())}
    assert set(plain) == {"c_kernel"}  # "overloaded" has two kernels: not plain
    assert plain["c_kernel"].resolved_by == "extern-c"
    assert len(kernels._parsed) == 3  # template instances were not parsed to find that out
