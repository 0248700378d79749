"""Resolution: which symbol of a CUBIN each name expression names, and how that was found.

The rules (DESIGN.md, "Resolution"):

1. a stored map entry whose symbol is among the image's kernels is taken (``"stored"``);
2. a stored symbol that the image lacks makes the whole entry bad (the caller recompiles);
3. without a stored entry, the canonical form of the expression must equal the canonical form of
   exactly one demangled kernel name (``"demangled"``);
4. anything else is unresolved, with the closest candidates: never a guess.

Pure: no CUDA, no IPython.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .names import Signature, Signatures, parse_expression

__all__ = ["Resolved", "Unresolved", "Resolution", "resolve", "plain_kernels", "closest"]

NVRTC = "nvrtc"
STORED = "stored"
DEMANGLED = "demangled"
EXTERN_C = "extern-c"


@dataclass(frozen=True)
class Resolved:
    """A name expression and the symbol it names."""

    name_expression: str
    symbol: str
    resolved_by: str


@dataclass(frozen=True)
class Unresolved:
    """A name expression that named no kernel, or more than one."""

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
        Expressions whose stored symbol the image does not hold: the entry is bad.
    """

    resolved: tuple[Resolved, ...]
    unresolved: tuple[Unresolved, ...] = ()
    stale: tuple[str, ...] = field(default=())

    @property
    def complete(self) -> bool:
        """Every expression resolved and nothing stale."""
        return not self.unresolved and not self.stale


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
    stored = stored or {}
    by_name: dict[str, list[tuple[str, Signature]]] | None = None  # built when first needed

    resolved: list[Resolved] = []
    unresolved: list[Unresolved] = []
    stale: list[str] = []
    for expr in expressions:
        if expr in stored:
            if stored[expr] in kernels:
                resolved.append(Resolved(expr, stored[expr], STORED))
            else:
                stale.append(expr)
            continue
        want = parse_expression(expr)
        if by_name is None:
            by_name = {}
            for symbol, sig in kernels.items():
                by_name.setdefault(sig.name, []).append((symbol, sig))
        hits = [sym for sym, sig in by_name.get(want.name, ())
                if want.params is None or sig.params == want.params]
        if len(hits) == 1:
            resolved.append(Resolved(expr, hits[0], DEMANGLED))
        elif hits:
            unresolved.append(Unresolved(
                expr, f"it matches {len(hits)} kernels; add a cast such as "
                      f"(void(*)({', '.join(kernels[hits[0]].params or ())}))"
                      f"{want.name} to pick one", tuple(kernels[h].text for h in hits)))
        else:
            unresolved.append(Unresolved(
                expr, "no kernel's demangled name matches it",
                closest(want.name, [sig.name for sig in kernels.values()],
                        [sig.text for sig in kernels.values()])))
    return Resolution(tuple(resolved), tuple(unresolved), tuple(stale))


def plain_kernels(kernels: Signatures, taken: set[str]) -> list[Resolved]:
    """Kernels a user can call by their plain name without a name expression.

    ``extern "C"`` kernels (their symbol is their name) and non-template kernels whose name no
    other kernel shares; ``taken`` holds symbols already named by an expression. Template
    instances are never plain, and are not parsed to find that out.
    """
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


def closest(wanted: str, names: Sequence[str], labels: Sequence[str] | None = None,
            n: int = 3) -> tuple[str, ...]:
    """Up to ``n`` labels whose names are most like ``wanted`` (labels default to the names)."""
    labels = list(labels) if labels is not None else list(names)
    picked = difflib.get_close_matches(wanted, list(names), n=n, cutoff=0.4)
    out: list[str] = []
    for p in picked:
        for name, label in zip(names, labels):
            if name == p and label not in out:
                out.append(label)
                break
    return tuple(out[:n])
