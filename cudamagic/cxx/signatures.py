"""The signatures of an image's kernels, by symbol, parsed on first use; what an entry stores of them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from .mangled import is_too_long
from .parse import Signature, parse_demangled

__all__ = ["Signatures", "stored_signatures", "symbol_record"]


class Signatures(Mapping[str, Signature]):
    """symbol -> :class:`Signature` of every kernel of an image, each parsed on first use.

    A restore whose name expressions all come from the stored map parses only their kernels'
    names (to verify them); plain-kernel lookup parses only the non-template ones. A text that
    stands for a name too long to keep (:func:`cudamagic.cxx.mangled.is_too_long`) is never
    parsed: its signature is opaque (inexact, no parameters) and it is never a plain kernel.
    """

    def __init__(self, demangled: Mapping[str, str], placeholders: bool) -> None:
        self._text = dict(demangled)
        self._placeholders = placeholders
        self._parsed: dict[str, Signature] = {}

    @property
    def placeholders(self) -> bool:
        """Whether the texts name template parameters ``T1``... (cu++filt's)."""
        return self._placeholders

    def __getitem__(self, symbol: str) -> Signature:
        sig = self._parsed.get(symbol)
        if sig is None:
            text = self._text[symbol]
            # opaque: a name too long to keep, or a mangled one the demangler gave back as it
            # was (libstdc++ refuses a name of over about 1000 characters): nothing to compare
            opaque = is_too_long(text) or (text == symbol and symbol.startswith("_Z"))
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
        """The demangled text, unparsed."""
        return self._text[symbol]

    def texts(self) -> dict[str, str]:
        """symbol -> demangled text, for every kernel (what an entry stores)."""
        return dict(self._text)

    def untyped(self) -> list[str]:
        """Symbols whose text is the bare symbol (``extern "C"`` kernels: no types known)."""
        return [s for s, text in self._text.items()
                if text == s and not s.startswith("_Z") and s.isidentifier()]

    def with_texts(self, texts: Mapping[str, str]) -> "Signatures":
        """These signatures with some symbols' texts replaced (an ``extern "C"`` kernel's
        parameter types, as the compiler declared them)."""
        return Signatures({**self._text, **texts}, self._placeholders)

    def maybe_plain(self, symbol: str) -> bool:
        """Whether the kernel can be a non-template one (its name, before any parameter list,
        has no template arguments): only those need parsing to find plain names."""
        text = self._text[symbol]
        return "<" not in text.split("(", 1)[0] and not is_too_long(text)


def stored_signatures(stored: Mapping[str, object] | None, symbols: Sequence[str],
                      demangler: str) -> Signatures | None:
    """The signatures an entry stored (:func:`symbol_record`), where they are this demangler's
    texts for exactly these symbols; None where they are not (demangle again)."""
    if not stored or stored.get("demangler") != demangler:
        return None
    texts = stored.get("texts")
    placeholders = stored.get("placeholders")
    if not isinstance(texts, Mapping) or not isinstance(placeholders, bool) \
            or len(texts) != len(symbols) or not all(s in texts for s in symbols):
        return None
    return Signatures({s: texts[s] for s in symbols}, placeholders)


def symbol_record(sigs: Signatures, demangler: str) -> dict[str, object]:
    """What an entry stores of its kernels' texts, so that a hit demangles nothing."""
    return {"demangler": demangler, "placeholders": sigs.placeholders, "texts": sigs.texts()}
