"""Resolution: which symbol of a CUBIN each name expression names, and how that was found.

One job: name expression -> symbol, never a guess. The rules (docs/architecture.md,
"Resolution"), with :func:`cudamagic.cxx.compare.compare` deciding equal / contradiction /
undecidable:

1. a stored map entry is checked against the image: its symbol must be one of the image's
   kernels, and the symbol's demangled name must not contradict the expression. Then it is taken:
   ``"stored"`` where the comparison decides that they are equal (verified), ``"stored-unverified"``
   where it cannot decide (``size_t`` against ``unsigned long``, ``-1`` against ``-1ll``, an
   enumerator against a cast) and nothing contradicts it;
2. a stored symbol that the image lacks, or whose demangled name contradicts the expression (a map
   that swapped ``t<1>`` and ``t<2>``), makes the entry bad: the expression goes into
   :attr:`Resolution.stale` with the reason in :attr:`Resolution.stale_reasons`, and the caller
   recompiles;
3. without a stored entry, the expression must be decidably equal to exactly one demangled kernel
   name (``"demangled"``); an undecidable one never resolves;
4. anything else is unresolved, with the reason and the candidates: never a guess.

Pure: no CUDA, no IPython.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.miss import WordEnum
from .quick import quick_equal
from .signatures import Signatures

if TYPE_CHECKING:  # pragma: no cover
    from .parse import Signature

# the C++ reader and the comparison (.parse, .args, .compare) are imported where a name is
# compared, not where its stored symbol passes quick_equal: a warm cell's usual case

__all__ = ["Resolved", "Unresolved", "Resolution", "resolve", "plain_kernels", "similar_names",
           "ResolvedBy", "NVRTC", "STORED", "STORED_UNVERIFIED", "DEMANGLED", "EXTERN_C"]


class ResolvedBy(WordEnum):
    """How a name expression's symbol was found (``Kernel.resolved_by``)."""

    NVRTC = "nvrtc"                            # NVRTC's own map, on a miss
    STORED = "stored"                          # stored map, verified by the demangled name
    STORED_UNVERIFIED = "stored-unverified"    # stored map; the demangled name cannot decide it
    DEMANGLED = "demangled"                    # no stored map: the one equal demangled name
    EXTERN_C = "extern-c"                      # an extern "C" kernel: its symbol is its name


NVRTC, STORED, STORED_UNVERIFIED = ResolvedBy.NVRTC, ResolvedBy.STORED, ResolvedBy.STORED_UNVERIFIED
DEMANGLED, EXTERN_C = ResolvedBy.DEMANGLED, ResolvedBy.EXTERN_C

# how many same-named kernels an unresolved expression is compared with to list candidates
_SCAN_LIMIT = 256


@dataclass(frozen=True)
class Resolved:
    """A name expression and the symbol it names."""

    name_expression: str
    symbol: str
    resolved_by: ResolvedBy


@dataclass(frozen=True)
class Unresolved:
    """A name expression that named no kernel, or more than one, or none decidably."""

    name_expression: str
    reason: str
    candidates: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resolution:
    """What :func:`resolve` found.

    Attributes
    ----------
    resolved : tuple of Resolved
        In the order of the expressions asked for.
    unresolved : tuple of Unresolved
    stale : tuple of str
        Expressions whose stored symbol the image does not hold, or whose demangled name
        contradicts them: the entry is bad.
    stale_reasons : tuple of str
        One sentence per stale expression, in the same order.
    """

    resolved: tuple[Resolved, ...]
    unresolved: tuple[Unresolved, ...] = ()
    stale: tuple[str, ...] = field(default=())
    stale_reasons: tuple[str, ...] = field(default=())


class _Index:
    """The image's kernels by canonical name (exact names only: the others never equal anything)
    and by their last identifier (to list candidates), built on first use."""

    def __init__(self, kernels: Mapping[str, Signature]) -> None:
        self.by_name: dict[str, list[str]] = {}
        self.by_ident: dict[str, list[str]] = {}
        for symbol, sig in kernels.items():
            if sig.exact:
                self.by_name.setdefault(sig.name, []).append(symbol)
            if sig.parts is not None:
                self.by_ident.setdefault(sig.parts[-1][0], []).append(symbol)


def resolve(expressions: Sequence[str], kernels: Mapping[str, Signature],
            stored: Mapping[str, str] | None = None) -> Resolution:
    """Map each name expression to a kernel symbol.

    Parameters
    ----------
    expressions : sequence of str
        The user's exact strings.
    kernels : mapping of str to Signature
        Every kernel of the image: symbol -> its demangled signature.
    stored : mapping of str to str, optional
        The lowered-name map stored with the cache entry (expression -> symbol).
    """
    # the module docstring's four rules, in order, one expression at a time
    stored = stored or {}
    index: _Index | None = None

    resolved: list[Resolved] = []
    unresolved: list[Unresolved] = []
    stale: list[str] = []
    reasons: list[str] = []
    # symbol -> demangled text, one dictionary lookup per stored pair (1000 on a large hit)
    texts = kernels.texts() if isinstance(kernels, Signatures) else \
        {symbol: sig.text for symbol, sig in kernels.items()} if stored else {}
    for expr in expressions:
        symbol = stored.get(expr)
        if symbol is not None:
            text = texts.get(symbol)
            if text is None:
                stale.append(expr)
                reasons.append(f"its stored symbol {symbol} is not in the CUBIN")
                continue
            if quick_equal(expr, text):  # no parsing: the common case stays cheap
                resolved.append(Resolved(expr, symbol, STORED))
                continue
            from .compare import CONTRADICTION, EQUAL, compare
            from .parse import parse_expression

            verdict, why = compare(parse_expression(expr), kernels[symbol])
            if verdict == CONTRADICTION:
                stale.append(expr)
                reasons.append(f"its stored symbol {symbol} demangles to "
                               f"{kernels[symbol].text!r}, which contradicts it ({why})")
            else:
                resolved.append(Resolved(expr, symbol, STORED if verdict == EQUAL
                                         else STORED_UNVERIFIED))
            continue
        if index is None:
            index = _Index(kernels)
        found = _by_demangling(expr, kernels, index)
        if isinstance(found, Resolved):
            resolved.append(found)
        else:
            unresolved.append(found)
    return Resolution(tuple(resolved), tuple(unresolved), tuple(stale), tuple(reasons))


def _by_demangling(expr: str, kernels: Mapping[str, Signature], index: _Index
                   ) -> Resolved | Unresolved:
    """The one kernel whose demangled name is decidably equal to ``expr``, or why there is none."""
    from .compare import EQUAL, UNDECIDABLE, compare
    from .parse import parse_expression

    want = parse_expression(expr)
    hits = []
    if want.exact:
        for symbol in index.by_name.get(want.name, ()):
            if want.params is None or compare(want, kernels[symbol])[0] == EQUAL:
                hits.append(symbol)
    if len(hits) == 1:
        return Resolved(expr, hits[0], DEMANGLED)
    if hits:
        return Unresolved(
            expr, f"it matches {len(hits)} kernels; add a cast such as "
                  f"(void(*)({', '.join(kernels[hits[0]].params or ())})){want.name} to pick one",
            tuple(kernels[h].text for h in hits))
    # why not: the kernels it cannot be told apart from, else the closest names
    same = index.by_ident.get(want.parts[-1][0], ()) if want.parts else ()
    maybe: list[tuple[str, str]] = []
    for symbol in same[:_SCAN_LIMIT]:
        verdict, why = compare(want, kernels[symbol])
        if verdict == UNDECIDABLE:
            maybe.append((kernels[symbol].text, why))
    if maybe:
        more = f" (and {len(same) - _SCAN_LIMIT} kernels not compared)" \
            if len(same) > _SCAN_LIMIT else ""
        return Unresolved(
            expr, f"the demangled names cannot decide it ({maybe[0][1]}){more}: a name map "
                  "stored with the CUBIN, or a recompile from the source, decides",
            tuple(text for text, _ in maybe[:3]))
    return Unresolved(expr, "no kernel's demangled name matches it",
                      similar_names(want.name, [sig.name for sig in kernels.values()],
                              [sig.text for sig in kernels.values()]))


def plain_kernels(kernels: Signatures, taken: set[str]) -> list[Resolved]:
    """Kernels a user can call by their plain name without a name expression.

    ``extern "C"`` kernels (their symbol is their name) and non-template kernels whose name no
    other kernel shares; ``taken`` holds symbols already named by an expression. Template
    instances are never plain, and are not parsed to find that out.
    """
    if taken.issuperset(kernels):  # every kernel is named already (a restore's usual case)
        return []
    candidates = [s for s in kernels if kernels.maybe_plain(s)]
    counts: dict[str, int] = {}
    for symbol in candidates:
        counts[kernels[symbol].name] = counts.get(kernels[symbol].name, 0) + 1
    out = []
    for symbol in candidates:
        sig = kernels[symbol]
        if symbol in taken or counts[sig.name] != 1 or "<" in sig.name:
            continue
        how = EXTERN_C if symbol == sig.name else DEMANGLED
        out.append(Resolved(sig.name, symbol, how))
    return out


def template_instances(sigs: Signatures) -> tuple[list[Resolved], list[str]]:
    """The CUBIN's template instances that their demangled name picks out alone (as
    resolution would pick them for that name expression), and the symbols of the others."""
    found: list[Resolved] = []
    ambiguous: list[str] = []
    symbols = [s for s in sigs if not sigs.maybe_plain(s)]
    picked = resolve([sigs[s].name for s in symbols], sigs) if symbols else None
    by_name = {r.name_expression: r for r in picked.resolved} if picked else {}
    for symbol in symbols:
        r = by_name.get(sigs[symbol].name)
        if r is not None and r.symbol == symbol:
            found.append(Resolved(r.name_expression, symbol, r.resolved_by))
        else:
            ambiguous.append(symbol)
    return found, ambiguous


def similar_names(wanted: str, names: Sequence[str], labels: Sequence[str] | None = None,
            n: int = 3) -> tuple[str, ...]:
    """Up to ``n`` labels whose names are most like ``wanted`` (labels default to the names)."""
    import difflib  # an error's suggestions: not a build's import

    labels = list(labels) if labels is not None else list(names)
    picked = difflib.get_close_matches(wanted, list(names), n=n, cutoff=0.4)
    out: list[str] = []
    for p in picked:
        for name, label in zip(names, labels):
            if name == p and label not in out:
                out.append(label)
                break
    return tuple(out[:n])
