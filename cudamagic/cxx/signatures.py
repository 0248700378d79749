"""The signatures of an image's kernels, by symbol, parsed on first use; what an entry stores of them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover  (the C++ reader: imported by the first signature parsed)
    from .parse import Signature

__all__ = ["Signatures", "stored_signatures", "symbol_record", "recorded_texts"]

#: What the demangler gave in place of a name too long to keep before it gave None (and a
#: stored record listed such symbols as ``too_long``): a record written then still holds these
#: words as the symbol's text (:func:`recorded_texts` reads them; nothing else does).
_OLD_TOO_LONG = "too long to show (the demangled name of a {}-character symbol is over "


class Signatures(Mapping[str, "Signature"]):
    """symbol -> :class:`Signature` of every kernel of an image, each parsed on first use.

    A restore whose name expressions all come from the stored map parses only their kernels'
    names (to verify them); plain-kernel lookup parses only the non-template ones. A symbol
    whose demangled name was too long to keep (the demangler gave None for it: see
    :attr:`too_long`) is never parsed: its signature is opaque (inexact, no parameters), its
    text is the symbol itself, and it is never a plain kernel.
    """

    def __init__(self, demangled: Mapping[str, str | None], placeholders: bool) -> None:
        self._text = {s: s if t is None else t for s, t in demangled.items()}
        self._too_long = frozenset(s for s, t in demangled.items() if t is None) \
            if None in demangled.values() else frozenset()
        self._placeholders = placeholders
        self._parsed: dict[str, Signature] = {}

    @property
    def too_long(self) -> frozenset[str]:
        """The symbols whose demangled name was too long to keep (a view says so in words)."""
        return self._too_long

    @property
    def placeholders(self) -> bool:
        """Whether the texts name template parameters ``T1``... (cu++filt's)."""
        return self._placeholders

    def __getitem__(self, symbol: str) -> Signature:
        sig = self._parsed.get(symbol)
        if sig is None:
            from .parse import Signature, parse_demangled

            text = self._text[symbol]
            # opaque: a name too long to keep, or a mangled one the demangler gave back as it
            # was (libstdc++ refuses a name of over about 1000 characters): nothing to compare
            opaque = symbol in self._too_long or (text == symbol and symbol.startswith("_Z"))
            sig = Signature(symbol, text, False, None) if opaque else \
                parse_demangled(text, self._placeholders)
            self._parsed[symbol] = sig
        return sig

    def __iter__(self) -> Iterator[str]:
        return iter(self._text)

    def __len__(self) -> int:
        return len(self._text)

    def __contains__(self, symbol: object) -> bool:
        return symbol in self._text

    def text(self, symbol: str) -> str:
        """The demangled text, unparsed (the symbol itself where that was too long to keep)."""
        return self._text[symbol]

    def texts(self) -> dict[str, str]:
        """symbol -> demangled text, for every kernel (as :meth:`text`)."""
        return dict(self._text)

    def demangled(self) -> dict[str, str | None]:
        """symbol -> demangled text, None where that was too long to keep (as the demangler
        gave them)."""
        return {s: None if s in self._too_long else t for s, t in self._text.items()}

    def untyped(self) -> list[str]:
        """Symbols whose text is the bare symbol (``extern "C"`` kernels: no types known)."""
        return [s for s, text in self._text.items()
                if text == s and not s.startswith("_Z") and s.isidentifier()]

    def with_texts(self, texts: Mapping[str, str]) -> "Signatures":
        """These signatures with some symbols' texts replaced (an ``extern "C"`` kernel's
        parameter types, as the compiler declared them)."""
        return Signatures({**self.demangled(), **texts}, self._placeholders)

    def maybe_plain(self, symbol: str) -> bool:
        """Whether the kernel can be a non-template one (its name, before any parameter list,
        has no template arguments): only those need parsing to find plain names."""
        text = self._text[symbol]
        return "<" not in text.split("(", 1)[0] and symbol not in self._too_long


def stored_signatures(stored: Mapping[str, object] | None, symbols: Sequence[str],
                      demangler: str) -> Signatures | None:
    """The signatures an entry stored (:func:`symbol_record`), where they are this demangler's
    texts for exactly these symbols; None where they are not (demangle again)."""
    if not stored or stored.get("demangler") != demangler:
        return None
    texts, too_long = stored.get("texts"), stored.get("too_long")
    placeholders = stored.get("placeholders")
    if not isinstance(texts, Mapping) or not isinstance(placeholders, bool) \
            or not (too_long is None or isinstance(too_long, list)):
        return None
    demangled = recorded_texts(texts, too_long)
    if len(demangled) != len(symbols) or not all(s in demangled for s in symbols):
        return None
    return Signatures({s: demangled[s] for s in symbols}, placeholders)


def recorded_texts(texts: Mapping[str, str], too_long: Iterable[str] | None
                   ) -> dict[str, str | None]:
    """symbol -> demangled text, or None where that was too long to keep, as a stored record
    holds them: its texts and its ``too_long`` symbols; a record written before there was a
    ``too_long`` (None here) holds the words the demangler gave then in place of such a name,
    and only there are they read as that."""
    if too_long is not None:
        return {**texts, **dict.fromkeys(too_long)}
    head = _OLD_TOO_LONG[:_OLD_TOO_LONG.index("{")]  # one test per text; the format for few
    return {s: None if t.startswith(head) and s.startswith("_Z")
            and t.startswith(_OLD_TOO_LONG.format(len(s))) else t for s, t in texts.items()}


def symbol_record(sigs: Signatures, demangler: str) -> dict[str, object]:
    """What an entry stores of its kernels' texts, so that a hit demangles nothing: the texts,
    and the symbols whose demangled name was too long to keep (an empty list says the record
    is of this form: :func:`recorded_texts`)."""
    too_long = sigs.too_long
    return {"demangler": demangler, "placeholders": sigs.placeholders,
            "texts": {s: t for s, t in sigs.texts().items() if s not in too_long},
            "too_long": sorted(too_long)}
