"""Canonical forms of C++ names, so that a name expression and a demangled symbol can be compared.

A user writes ``ns::scale<float, 3>``; cu++filt prints ``void ns::scale<float, (int)3>(T1 *, int)``
and libstdc++ prints ``void ns::scale<float, 3>(float*, int)``. The canonical form makes all three
agree on what they can agree on: white space, integer literal spellings (``0x10``, ``5u``, ``'a'``),
casts to builtin integer types (``(int)3``), ``(bool)1`` against ``true``, the order of ``const``,
and the spelling of builtin types (``unsigned`` against ``unsigned int``). It leaves alone what
cannot be decided from the text (``Mode::Exact`` against ``(Mode)1``, ``size_t`` against
``unsigned long``, default template arguments): those never compare equal, so they are never
guessed. This module is pure: no CUDA, no IPython.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

__all__ = [
    "Signature",
    "Signatures",
    "canonical",
    "parse_demangled",
    "parse_expression",
    "python_name",
    "split_top_level",
]

_TOKEN = re.compile(
    r"""
    (?P<char>'(?:\\.|[^'\\])+')
  | (?P<num>(?:0[xX][0-9a-fA-F']+|0[bB][01']+|\d[\d']*(?:\.\d*)?(?:[eE][+-]?\d+)?)[uUlLfF]*)
  | (?P<ident>[A-Za-z_$][\w$]*)
  | (?P<punct>::|\.\.\.|\S)
    """,
    re.VERBOSE,
)

# Words that together spell one builtin type ("unsigned long int" is one type).
_BUILTIN_WORDS = frozenset(
    "unsigned signed char short int long float double bool void wchar_t char8_t char16_t "
    "char32_t __int128".split()
)
_INTEGER_TYPES = frozenset(
    "char|signed char|unsigned char|short|unsigned short|int|unsigned int|long|unsigned long|"
    "long long|unsigned long long|wchar_t|char8_t|char16_t|char32_t|__int128|unsigned __int128"
    .split("|")
)
_CV = frozenset({"const", "volatile"})
_SIMPLE_ESCAPES = {"n": 10, "t": 9, "r": 13, "0": 0, "\\": 92, "'": 39, '"': 34, "a": 7,
                   "b": 8, "f": 12, "v": 11, "?": 63}


@dataclass(frozen=True)
class _Tok:
    kind: str  # "word" (identifier, builtin type or number) or "punct"
    text: str


def _char_value(literal: str) -> str:
    body = literal[1:-1]
    if body.startswith("\\"):
        esc = body[1:]
        if esc[:1] in ("x", "X"):
            return str(int(esc[1:], 16))
        if esc[:1].isdigit():
            return str(int(esc, 8))
        if esc in _SIMPLE_ESCAPES:
            return str(_SIMPLE_ESCAPES[esc])
        return literal
    if len(body) == 1:
        return str(ord(body))
    return literal  # multi-character literal: leave as written


def _number_value(literal: str) -> str:
    text = literal.replace("'", "")
    core = text.rstrip("uUlL")
    try:
        if core[:2] in ("0x", "0X"):
            return str(int(core, 16))
        if core[:2] in ("0b", "0B"):
            return str(int(core[2:], 2))
        if core.isdigit():
            return str(int(core, 8)) if len(core) > 1 and core[0] == "0" else str(int(core))
    except ValueError:
        pass
    return text  # a floating-point literal: keep its spelling


def _builtin_type(words: list[str]) -> str:
    """One canonical spelling for a run of builtin type words."""
    unsigned = "unsigned" in words
    signed = "signed" in words
    for base in ("char", "wchar_t", "char8_t", "char16_t", "char32_t", "float", "bool", "void"):
        if base in words:
            if base == "char" and (unsigned or signed):
                return ("unsigned " if unsigned else "signed ") + "char"
            return base
    if "double" in words:
        return "long double" if "long" in words else "double"
    if "__int128" in words:
        return "unsigned __int128" if unsigned else "__int128"
    longs = words.count("long")
    base = "short" if "short" in words else ("long long" if longs >= 2 else
                                              "long" if longs == 1 else "int")
    return ("unsigned " if unsigned else "") + base


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        value = m.group()
        if kind == "char":
            toks.append(_Tok("word", _char_value(value)))
        elif kind == "num":
            toks.append(_Tok("word", _number_value(value)))
        elif kind == "ident":
            toks.append(_Tok("word", value))
        else:
            toks.append(_Tok("punct", value))
    return toks


def _merge_builtin_types(toks: list[_Tok]) -> list[_Tok]:
    out: list[_Tok] = []
    i = 0
    while i < len(toks):
        if toks[i].text in _BUILTIN_WORDS:
            j = i
            while j < len(toks) and toks[j].text in _BUILTIN_WORDS:
                j += 1
            out.append(_Tok("word", _builtin_type([t.text for t in toks[i:j]])))
            i = j
        else:
            out.append(toks[i])
            i += 1
    return out


def _is_number(tok: _Tok) -> bool:
    return tok.kind == "word" and tok.text[:1].isdigit()


def _drop_integer_casts(toks: list[_Tok]) -> list[_Tok]:
    """``(int)3`` -> ``3``, ``(int)-3`` -> ``-3``, ``(bool)1`` -> ``true``."""
    out: list[_Tok] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        if (t.text == "(" and i + 3 < len(toks) and toks[i + 2].text == ")"
                and (toks[i + 1].text in _INTEGER_TYPES or toks[i + 1].text == "bool")):
            j = i + 3
            neg = toks[j].text == "-"
            if neg:
                j += 1
            if j < len(toks) and (_is_number(toks[j]) or toks[j].text in ("true", "false")):
                value = toks[j].text
                if toks[i + 1].text == "bool":
                    value = {"0": "false", "1": "true"}.get(value, value)
                if neg:
                    out.append(_Tok("punct", "-"))
                out.append(_Tok("word", value))
                i = j + 1
                continue
        out.append(t)
        i += 1
    return out


def _type_name_end(toks: list[_Tok], start: int) -> int:
    """Index just past a (possibly qualified, possibly templated) type name starting at ``start``."""
    i = start
    expect_name = True
    while i < len(toks):
        t = toks[i]
        if expect_name and t.kind == "word" and t.text not in _CV:
            i += 1
            expect_name = False
        elif not expect_name and t.text == "::":
            i += 1
            expect_name = True
        elif not expect_name and t.text == "<":
            depth = 0
            while i < len(toks):
                if toks[i].text == "<":
                    depth += 1
                elif toks[i].text == ">":
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
            i += 1
        else:
            break
    return i


def _move_cv_after(toks: list[_Tok]) -> list[_Tok]:
    """``const float *`` -> ``float const*`` (libstdc++'s order), so both demanglers agree."""
    toks = list(toks)
    i = 0
    while i < len(toks):
        t = toks[i]
        prev = toks[i - 1].text if i else ","
        if t.text in _CV and prev in (",", "<", "(", "const", "volatile"):
            end = _type_name_end(toks, i + 1)
            if end > i + 1:
                toks = toks[:i] + toks[i + 1:end] + [t] + toks[end:]
                i = end
                continue
        i += 1
    return toks


def _drop_global_qualifier(toks: list[_Tok]) -> list[_Tok]:
    return [t for i, t in enumerate(toks)
            if not (t.text == "::" and (i == 0 or toks[i - 1].kind == "punct"))]


def _join(toks: list[_Tok]) -> str:
    parts: list[str] = []
    for i, t in enumerate(toks):
        if i and t.kind == "word" and toks[i - 1].kind == "word":
            parts.append(" ")
        parts.append(t.text)
    return "".join(parts)


def _canonical_tokens(text: str) -> list[_Tok]:
    toks = _merge_builtin_types(_tokenize(text))
    toks = _drop_integer_casts(toks)
    toks = _move_cv_after(toks)
    return _drop_global_qualifier(toks)


def canonical(text: str) -> str:
    """The canonical spelling of a C++ name, type or template argument list.

    Parameters
    ----------
    text : str
        A name expression, a demangled name, or a fragment of either.

    Returns
    -------
    str
        A spelling in which the equivalent forms listed in this module's docstring are equal.
    """
    return _join(_canonical_tokens(text))


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split ``text`` at ``sep`` where it is outside any (), <>, [] or {} pair."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _matching_open(text: str, close_at: int, open_ch: str, close_ch: str) -> int:
    """Index of the bracket that opens the one closing at ``close_at`` (-1 if unbalanced)."""
    depth = 0
    for i in range(close_at, -1, -1):
        if text[i] == close_ch:
            depth += 1
        elif text[i] == open_ch:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _matching_close(text: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _template_args(name: str) -> list[str]:
    """The template argument list of a canonical name (``f<a,b>`` -> ``["a", "b"]``)."""
    if not name.endswith(">"):
        return []
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        if name[i] in ")":
            depth += 1
        elif name[i] == "(":
            depth -= 1
        elif name[i] == "<" and depth == 0:
            # the '<' that balances the final '>'
            inner = name[i + 1:-1]
            if _balanced_angles(inner):
                return [a for a in split_top_level(inner) if a] if inner else []
    return []


def _balanced_angles(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch == "<"
        depth -= ch == ">"
        if depth < 0:
            return False
    return depth == 0


def _canonical_params(params: str, template_args: list[str] | None) -> tuple[str, ...]:
    """Canonical parameter types; ``template_args`` replaces cu++filt's ``T1``, ``T2``, ``T1...``."""
    if not params.strip() or canonical(params) == "void":
        return ()
    out: list[str] = []
    for p in split_top_level(params):
        toks = _canonical_tokens(p)
        if template_args is not None:
            toks = _substitute_placeholders(toks, template_args)
        out.extend(_join(toks).split("\0"))
    return tuple(x for x in out if x)


_PLACEHOLDER = re.compile(r"T(\d+)$")


def _substitute_placeholders(toks: list[_Tok], args: list[str]) -> list[_Tok]:
    out: list[_Tok] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        m = _PLACEHOLDER.match(t.text) if t.kind == "word" else None
        if m and 0 < int(m.group(1)) <= len(args) + 1:
            n = int(m.group(1)) - 1
            if i + 1 < len(toks) and toks[i + 1].text == "...":
                # a pack: one parameter per remaining argument ("\0" splits them later)
                out.append(_Tok("punct", "\0".join(args[n:])))
                i += 2
                continue
            if n < len(args):
                out.append(_Tok("word" if args[n][-1:].isalnum() else "punct", args[n]))
                i += 1
                continue
        out.append(t)
        i += 1
    return out


@dataclass(frozen=True)
class Signature:
    """A kernel's name and parameter types, both canonical.

    Attributes
    ----------
    name : str
        Canonical qualified name with template arguments (``ns::scale<float,3>``).
    params : tuple of str or None
        Canonical parameter types, or None where the text gives none (``extern "C"``
        symbols, expressions without a cast).
    text : str
        The text it was read from, for display.
    """

    name: str
    params: tuple[str, ...] | None
    text: str

    @property
    def template_args(self) -> list[str]:
        """The canonical template arguments, in order."""
        return _template_args(self.name)


def parse_demangled(demangled: str, placeholders: bool = False) -> Signature:
    """Read a demangled kernel name into a :class:`Signature`.

    Parameters
    ----------
    demangled : str
        ``void ns::scale<float, (int)3>(T1 *, int)``, ``overloaded(float*)``, or a bare
        ``extern "C"`` name.
    placeholders : bool
        True for cu++filt's output, whose parameter lists name template parameters ``T1``,
        ``T2``...; they are replaced by the template arguments.
    """
    text = demangled.strip()
    params: tuple[str, ...] | None = None
    head = text
    if text.endswith(")"):
        open_at = _matching_open(text, len(text) - 1, "(", ")")
        if open_at > 0:
            head = text[:open_at]
            name = canonical(_strip_return_type(head))
            args = _template_args(name) if placeholders else None
            params = _canonical_params(text[open_at + 1:-1], args)
            return Signature(name, params, demangled)
    return Signature(canonical(_strip_return_type(head)), params, demangled)


def _strip_return_type(head: str) -> str:
    head = head.strip()
    # A template function's demangled name starts with its return type: kernels return void.
    return head[5:] if head.startswith("void ") else head


def parse_expression(expr: str) -> Signature:
    """Read a user's name expression into a :class:`Signature`.

    ``(void(*)(float*))overloaded`` gives the parameter types of the cast; an expression without a
    cast gives none.
    """
    text = expr.strip()
    if text.startswith("("):
        close = _matching_close(text, 0)
        if close > 0:
            cast = text[1:close].strip()
            name = text[close + 1:].strip()
            if cast.endswith(")"):
                open_at = _matching_open(cast, len(cast) - 1, "(", ")")
                if open_at > 0:
                    return Signature(canonical(name),
                                     _canonical_params(cast[open_at + 1:-1], None), expr)
    return Signature(canonical(text), None, expr)


def python_name(expr: str) -> str:
    """A Python identifier for a name expression: ``ns::scale<float, 3>`` -> ``ns_scale_float_3``.

    Spelling variants of one expression give one identifier (the canonical form is used).
    """
    sig = parse_expression(expr)
    text = sig.name
    if sig.params:
        text += "_" + "_".join(sig.params)
    text = text.replace("::", "_").replace("*", "_ptr").replace("&", "_ref")
    text = re.sub(r"-(?=\d)", "m", text)
    text = re.sub(r"\W+", "_", text)
    text = re.sub(r"_+", "_", text).strip("_")
    if not text:
        text = "kernel"
    if text[0].isdigit():
        text = "_" + text
    if keyword.iskeyword(text) or keyword.issoftkeyword(text):
        text += "_"
    return text


class Signatures(Mapping[str, Signature]):
    """symbol -> :class:`Signature` of every kernel of an image, each parsed on first use.

    A restore whose name expressions all come from the stored map parses none of the template
    instances (1000 of them cost about 30 ms to parse); lookups by demangling parse them all.
    """

    def __init__(self, demangled: Mapping[str, str], placeholders: bool) -> None:
        self._text = dict(demangled)
        self._placeholders = placeholders
        self._parsed: dict[str, Signature] = {}

    def __getitem__(self, symbol: str) -> Signature:
        sig = self._parsed.get(symbol)
        if sig is None:
            sig = self._parsed[symbol] = parse_demangled(self._text[symbol], self._placeholders)
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

    def maybe_plain(self, symbol: str) -> bool:
        """Whether the kernel can be a non-template one (its name, before any parameter list,
        has no template arguments): only those need parsing to find plain names."""
        return "<" not in self._text[symbol].split("(", 1)[0]
