"""Kernel names: read a name expression or a demangled name; decide whether they name one kernel.

One job: turn ``ns::scale<float, (short)70000>`` (a user's name expression) and
``void ns::scale<float, (short)4464>(T1 *, int)`` (cu++filt) or ``void ns::scale<float,
(short)4464>(float*, int)`` (libstdc++) into a :class:`Signature`, and :func:`compare` two of them:
``"equal"``, ``"contradiction"`` or ``"undecidable"``. Pure: no CUDA, no IPython.

The model (docs/architecture.md, "Resolution"), checked against NVRTC's ``nvrtcGetLoweredName`` by
tests/test_resolution_property.py:

* A non-type template argument is a *typed value*. In a name expression it is evaluated with C++
  rules for this target (LP64, char signed on x86-64): literal types (``7`` int, ``7u``,
  ``2147483648`` long, ``0x80000000`` unsigned int, ``'a'`` char 97, ``'\\xff'`` char -1,
  ``L'a'`` wchar_t), unary ``- + ~ !`` with integral promotion, and casts ``(T)v``, ``T(v)``,
  ``T{v}``, ``static_cast<T>(v)`` that wrap to T's width (``(short)70000`` is short 4464,
  ``(bool)2`` is true). In a demangled name the mangling fixes type and value (``(int)3``,
  ``3``, ``5u``, ``-1ll``, ``(char)97``, ``true``, ``(bool)1``).
* The mangling of ``template <auto V>`` and ``template <int V>`` arguments is the same, so a symbol
  cannot tell a typed parameter from ``auto``. Two typed values are *equal* when type and value are
  the same; a *contradiction* when the user's value converted to the demangled type differs from
  the demangled value (it is not this kernel under either reading); otherwise (same value once
  converted, another type: ``-1`` against ``-1ll``) *undecidable*.
* Types and entities compare by canonical spelling (``unsigned`` is ``unsigned int``, ``const
  float*`` is ``float const*``, ``::ns::S`` is ``ns::S``). Different spellings contradict only where
  the user's type is made of builtin words alone (``float`` is never ``double``); anything else may
  be an alias (``size_t``, typedefs, alias templates) and is undecidable.
* Undecidable as well: enumerators against casts (``Tag::B`` against ``(Tag)1``), default template
  arguments (``d<>`` against ``d<float, 4>``), floating-point and other expressions (``N + 1``),
  multi-character and ``u8`` character literals (implementation- and -std-defined), and decimal
  literals too large for ``long long`` (NVRTC makes them unsigned long long; C++ does not).

Everything is read by one tokenizer (:data:`_TOKEN`) and one bracket walker (:func:`_split`).
"""

from __future__ import annotations

import functools
import keyword
import re
from collections.abc import Iterator, Mapping, Sequence

from .mangled import is_too_long
from .types import BUILTIN_WORDS, INTEGERS, TYPEDEFS, builtin_type as _builtin_type

__all__ = [
    "CONTRADICTION",
    "EQUAL",
    "UNDECIDABLE",
    "Signature",
    "Signatures",
    "canonical",
    "compare",
    "parse_demangled",
    "parse_expression",
    "python_name",
    "quick_equal",
    "valid_python_name",
]

EQUAL = "equal"
CONTRADICTION = "contradiction"
UNDECIDABLE = "undecidable"

# ---------------------------------------------------------------------------------------------
# Tokens
# ---------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?:u8|[LuU])?'(?:\\.|[^'\\])*'      # character literal, with its prefix
  | \.?\d(?:[eEpP][+-]|[\w'.])*         # number (a preprocessing number: 0x1F, 5ull, 1'000, 1e+3f)
  | [A-Za-z_$][\w$]*                    # identifier or keyword
  | ::|\.\.\.|&&|\S                     # punctuation; ">>" stays two tokens (it closes two lists)
""", re.X)

_tokens = _TOKEN.findall

# Words that together spell one builtin type ("unsigned long int" is one type).
_BUILTIN_WORDS = BUILTIN_WORDS
# cv-qualifiers and restrict, by their canonical spelling (libstdc++ writes "restrict")
_CV = {"const": "const", "volatile": "volatile", "__restrict__": "__restrict__",
       "__restrict": "__restrict__", "restrict": "__restrict__"}
_PTR_OPS = frozenset({"*", "&", "&&", *_CV})
# Words that are not names of types or entities.
_NOT_NAMES = frozenset(
    "sizeof alignof decltype noexcept nullptr true false this operator new delete typeid "
    "static_cast reinterpret_cast const_cast dynamic_cast throw typename template struct class "
    "enum union auto".split()) | _BUILTIN_WORDS | _PTR_OPS


def _is_name(tok: str) -> bool:
    return (tok[0].isalpha() or tok[0] in "_$") and tok[-1] != "'" and tok not in _NOT_NAMES


def _is_number(tok: str) -> bool:
    return tok[0].isdigit() or (tok[0] == "." and len(tok) > 1)


_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}
_OPENERS = frozenset("([{")
_CLOSERS = frozenset(")]}")


def _split(toks: list[str], at: int, end: int) -> tuple[int, list[tuple[int, int]]] | None:
    """The one bracket walker: the list opened by ``toks[at]`` (``( < [ {``).

    Returns the index of its closing token and the (start, stop) token slices of its top-level
    comma-separated items, or None if it does not close before ``end``. A ``<`` opens a list only
    after a name (a template-id); a ``>`` closes one only when a ``<`` is the innermost open
    bracket, so ``(1 > 2)`` inside a list is an operator; a ``)`` closes through any ``<`` left open
    inside its parentheses (``(a < b)``).
    """
    stack = [toks[at]]
    items: list[tuple[int, int]] = []
    start = at + 1
    for k in range(at + 1, end):
        t = toks[k]
        if t == "," and len(stack) == 1:
            items.append((start, k))
            start = k + 1
        elif t in _OPENERS:
            stack.append(t)
        elif t == "<":
            if _is_name(toks[k - 1]) or toks[k - 1] in ("static_cast", "template"):
                stack.append(t)
        elif t == ">":
            if stack[-1] == "<":
                stack.pop()
        elif t in _CLOSERS:
            while stack and _OPEN[stack[-1]] != t:
                stack.pop()
            if stack:
                stack.pop()
        else:
            continue
        if not stack:
            if start < k or items:
                items.append((start, k))
            return k, items
    return None


def _join(toks) -> str:
    """Tokens as text: a space only between two words (``float const*``, ``k<1,2>``)."""
    out: list[str] = []
    prev_word = False
    for t in toks:
        word = t[-1].isalnum() or t[-1] in "_$"
        if word and prev_word:
            out.append(" ")
        out.append(t)
        prev_word = word
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Integer types of the target, conversions, literals
# ---------------------------------------------------------------------------------------------

# the target's integer model (widths, signs, promotions): cudamagic.cxx.types. Values of char
# and wchar_t are kept in their signed form where the platform's sign is unknown (two spellings
# of one char compare equal either way); a conversion out of one with the high bit set is then
# undecidable.
_INT = INTEGERS
_SIGN_BY_PLATFORM = ("char", "wchar_t")
# how libstdc++ writes a value of the type (cu++filt writes every one as "(type)value")
_SUFFIX = {t: s.suffix for t, s in INTEGERS.items() if s.suffix is not None}


def _convert(value: int, to: str) -> int:
    """``value`` converted to integer type ``to``: C++'s modular wrap; to bool, ``value != 0``."""
    return INTEGERS[to].wrap(value)


# A decimal literal of more digits than any integer type holds (39 for __int128) is never read
# into a Python int: past 4300 digits int() itself raises, and any such literal is too large.
_INT_LITERAL = re.compile(
    r"(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9]\d{0,40})([uU]?)(l|L|ll|LL)?([uU]?)")
# the types an integer literal may take, in order (C++ [lex.icon], LP64)
_DECIMAL = {"": ("int", "long", "long long"),
            "u": ("unsigned int", "unsigned long", "unsigned long long"),
            "l": ("long", "long long"), "ul": ("unsigned long", "unsigned long long"),
            "ll": ("long long",), "ull": ("unsigned long long",)}
_OTHER_BASE = {"": ("int", "unsigned int", "long", "unsigned long", "long long",
                    "unsigned long long"),
               "u": ("unsigned int", "unsigned long", "unsigned long long"),
               "l": ("long", "unsigned long", "long long", "unsigned long long"),
               "ul": ("unsigned long", "unsigned long long"),
               "ll": ("long long", "unsigned long long"), "ull": ("unsigned long long",)}


def _fits(value: int, type_: str) -> bool:
    return _INT[type_].fits(value)


def _user_integer(tok: str) -> "_Value | _Unknown":
    """A user's integer literal with its C++ type; a float, or one too large for any, is unknown."""
    if tok.isdigit() and (tok[0] != "0" or len(tok) == 1) and len(tok) < 10:
        return _Value("int", int(tok))  # the common case: a small decimal int
    m = _INT_LITERAL.fullmatch(tok.replace("'", ""))
    if not m or (m.group(2) and m.group(4)):
        return _Unknown(tok)
    digits = m.group(1)
    suffix = ("u" if m.group(2) or m.group(4) else "") + (m.group(3) or "").lower()
    prefix = digits[:2].lower()
    if prefix == "0x":
        value, table = int(digits[2:], 16), _OTHER_BASE
    elif prefix == "0b":
        value, table = int(digits[2:], 2), _OTHER_BASE
    elif digits[0] == "0":
        value, table = int(digits, 8), _OTHER_BASE
    else:
        value, table = int(digits), _DECIMAL
    for type_ in table[suffix]:
        if _fits(value, type_):
            return _Value(type_, value)
    return _Unknown(tok)  # NVRTC takes 9223372036854775808 as unsigned long long; C++ does not


_SIMPLE_ESCAPES = {"n": 10, "t": 9, "r": 13, "\\": 92, "'": 39, '"': 34, "a": 7, "b": 8, "f": 12,
                   "v": 11, "?": 63}
_ESCAPE = re.compile(
    r"\\(?:([0-7]{1,3})|x([0-9a-fA-F]+)|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|(.))|(.)", re.S)
_CHAR_TYPES = {"": "char", "L": "wchar_t", "u": "char16_t", "U": "char32_t"}


def _user_char(tok: str) -> "_Value | _Unknown":
    """A user's character literal: ``'a'`` char 97, ``'\\xff'`` char -1, ``L'a'`` wchar_t 97.

    Multi-character literals are ints of implementation-defined value and ``u8'a'`` is char8_t or
    char by -std: both unknown, as are values out of the type's range (NVRTC refuses those).
    """
    prefix, body = tok[:tok.index("'")], tok[tok.index("'") + 1:-1]
    type_ = _CHAR_TYPES.get(prefix)
    chars = _ESCAPE.findall(body)
    if type_ is None or len(chars) != 1:
        return _Unknown(tok)
    octal, hexa, u4, u8, simple, plain = chars[0]
    if plain:
        value = ord(plain)
        if value > 127:
            return _Unknown(tok)  # NVRTC reads UTF-8 bytes: several characters
    elif simple:
        if simple not in _SIMPLE_ESCAPES:
            return _Unknown(tok)
        value = _SIMPLE_ESCAPES[simple]
    elif octal or hexa:
        value = int(octal, 8) if octal else int(hexa, 16)
        bits = _INT[type_].bits
        if value >> bits:
            return _Unknown(tok)
    else:
        if type_ == "char":
            return _Unknown(tok)  # a universal character name in a char literal
        value = int(u4 or u8, 16)
    if value >> _INT[type_].bits:
        return _Unknown(tok)
    return _Value(type_, _convert(value, type_))


def _real(v: "_Value") -> int | None:
    """The value as the target holds it: a char with the high bit set depends on char's sign."""
    if v.value < 0 and v.type in _SIGN_BY_PLATFORM and _INT[v.type].signed is None:
        return None
    return v.value


# ---------------------------------------------------------------------------------------------
# Parsed arguments: a typed value, a type or entity spelled by name, or an unknown expression
# ---------------------------------------------------------------------------------------------

class _Value:
    """A typed non-type template argument. ``builtin``: the type is an integer type or bool;
    otherwise an enumeration or pointer type known by its spelling (``(geo::Mode)1``)."""

    __slots__ = ("type", "value", "builtin", "key")
    exact = True

    def __init__(self, type_: str, value: int, builtin: bool = True) -> None:
        self.type, self.value, self.builtin = type_, value, builtin
        if not builtin:
            self.key = f"({type_}){value}"
        elif type_ == "bool":
            self.key = "true" if value else "false"
        elif type_ in _SUFFIX:
            self.key = f"{value}{_SUFFIX[type_]}"
        else:
            self.key = f"({type_}){value}"

    def describe(self) -> str:
        return f"{self.type} {self.key if self.type == 'bool' else self.value}"


class _Type:
    """A type or an entity, by its canonical spelling. ``closed``: builtin words, cv and pointer
    operators only (never an alias). ``template``/``args``: set when it is exactly a template-id.

    ``spelled``: the user's spelling where a typedef NVRTC declares stands for a builtin type
    (``size_t`` is ``unsigned long`` here: :data:`cudamagic.cxx.types.TYPEDEFS`), for names and
    messages; the key is the type it stands for."""

    __slots__ = ("key", "closed", "template", "args", "exact", "spelled")

    def __init__(self, key: str, closed: bool, exact: bool = True, template: str | None = None,
                 args: tuple | None = None, spelled: str | None = None) -> None:
        self.key, self.closed, self.exact = key, closed, exact
        self.template, self.args, self.spelled = template, args, spelled

    def shown(self) -> str:
        """The type for a message: ``size_t (unsigned long on this target)``."""
        return f"{self.spelled} ({self.key} on this target)" if self.spelled else self.key


class _Unknown:
    """An argument the model cannot evaluate (``Mode::Exact`` is a _Type; ``1.5f``, ``N+1``,
    ``'ab'`` are these): it never compares equal."""

    __slots__ = ("key",)
    exact = False

    def __init__(self, text: str) -> None:
        self.key = text


_Arg = _Value | _Type | _Unknown
# One component of a qualified name: the identifier and its template arguments (None: not a
# template-id; () for "k<>").
_Part = tuple[str, "tuple[_Arg, ...] | None"]


# ---------------------------------------------------------------------------------------------
# The parser (one per text): names, template arguments, types, values
# ---------------------------------------------------------------------------------------------

# Deeper nesting than this (``-(-(-...))``, ``S<S<S<...>>>``) is read as unknown, not recursed
# into until Python's stack gives out.
_MAX_DEPTH = 100


class _TooDeep(Exception):
    pass


class _Parser:
    """Recursive descent over one text's tokens. ``user``: a name expression, whose literals are
    C++ literals; otherwise a demangled name, whose literals are the demangler's typed values."""

    __slots__ = ("toks", "user", "subst", "depth")

    def __init__(self, toks: list[str], user: bool) -> None:
        self.toks = toks
        self.user = user
        self.subst: dict[str, _Arg] = {}  # cu++filt's placeholder -> the template argument
        self.depth = 0  # nesting of names and values: see _MAX_DEPTH

    def name(self, i: int, end: int) -> tuple[int, tuple[_Part, ...]] | None:
        """A qualified name with template arguments starting at ``i``: (index past it, parts)."""
        self.depth += 1
        try:
            return self._name(i, end)
        finally:
            self.depth -= 1

    def _name(self, i: int, end: int) -> tuple[int, tuple[_Part, ...]] | None:
        if self.depth > _MAX_DEPTH:
            raise _TooDeep
        toks = self.toks
        parts: list[_Part] = []
        if i < end and toks[i] == "::":
            i += 1  # the global qualifier: names are looked up from the global scope anyway
        while i < end:
            t = toks[i]
            if t == "(" and toks[i + 1:i + 4] == ["anonymous", "namespace", ")"]:
                t, i = "(anonymous namespace)", i + 3
            elif t == "template":  # ns::template k<1>
                i += 1
                continue
            elif not _is_name(t):
                return None
            i += 1
            args = None
            if i < end and toks[i] == "<":
                found = _split(toks, i, end)
                if found is None:
                    return None
                close, items = found
                args = tuple(self.arg(a, b) for a, b in items)
                i = close + 1
            parts.append((t, args))
            if i + 1 < end and toks[i] == "::":
                i += 1
                continue
            return i, tuple(parts)
        return None

    def arg(self, i: int, j: int) -> _Arg:
        """One template argument (tokens i..j): a value, else a type or entity, else unknown."""
        if i >= j:
            return _Unknown("")
        v = self.value(i, j) if self.user else self.demangled_value(i, j)
        if v is not None:
            return v
        t = self.type(i, j)
        if t is not None:
            return t
        return self.generic(i, j)

    def type(self, i: int, j: int, parameter: bool = False) -> _Type | None:
        """A type: cv, builtin words or a qualified name, cv, then ``* & &&`` (None: not one).

        ``parameter``: drop top-level cv and __restrict__, which are not part of a function's type
        (NVRTC lowers ``(void(*)(const int))k`` to ``k(int)``).
        """
        toks = self.toks
        words: list[str] = []
        cv: list[str] = []
        base = None
        while i < j:
            t = toks[i]
            if t in _CV:
                if _CV[t] not in cv:
                    cv.append(_CV[t])
                i += 1
            elif t in _BUILTIN_WORDS and base is None:
                words.append(t)
                i += 1
            elif base is None and not words and (t == "::" or t == "(" or t == "template"
                                                  or _is_name(t)):
                found = self.name(i, j)
                if found is None:
                    return None
                i, base = found
            else:
                break
        tail = [_CV.get(t, t) for t in toks[i:j]]
        if (not words and base is None) or any(t not in _PTR_OPS for t in tail):
            return None
        if parameter:
            while tail and tail[-1] not in ("*", "&", "&&"):
                tail = tail[:-1]
            if not tail:
                cv = []
        return self._type_of(words, base, sorted(cv), tail)  # "const volatile" in one order

    def _type_of(self, words: list[str], base: tuple[_Part, ...] | None, cv: list[str],
                 tail: list[str]) -> _Type | None:
        """The type of builtin ``words`` or a name ``base``, then ``cv`` and ``tail``."""
        closed = base is None
        if words:
            head = _builtin_type(words)
            if head is None:
                return None
        else:
            head = _name_key(base)
            if head in self.subst:  # cu++filt's T1: "const T1 *" is "float const* const*"
                arg = self.subst[head]
                if not isinstance(arg, _Type):
                    return None
                head, closed, base = arg.key, arg.closed, ()
        spelled = None
        if base and len(base) == 1 and base[0][1] is None and base[0][0] in TYPEDEFS:
            spelled, head, closed = head, TYPEDEFS[head], True  # size_t: a builtin type here
        key = _join([head, *cv, *tail]) if cv or tail else head
        if closed:
            return _Type(key, True, spelled=spelled and (
                _join([spelled, *cv, *tail]) if cv or tail else spelled))
        exact = all(a.exact for _, args in base if args for a in args)
        if base and not cv and not tail and base[-1][1] is not None:
            return _Type(key, False, exact, _name_key(base[:-1] + ((base[-1][0], None),)),
                         base[-1][1])
        return _Type(key, False, exact)

    def generic(self, i: int, j: int) -> _Arg:
        """Anything else: function and pointer-to-member types stay text (``void(*)(int)``);
        an expression (a number, an operator) is unknown."""
        toks = self.toks
        out: list[str] = []
        k = i
        while k < j:
            t = toks[k]
            if t == "[" and k + 2 < j and toks[k + 2] == "]" and toks[k + 1].isdigit():
                out.extend(toks[k:k + 3])  # an array bound (int[3]), compared as written
                k += 3
                continue
            if _is_number(t) or t[-1] == "'" or t in ("+", "-", "/", "%", "^", "|", "~", "!", "=",
                                                       "?", ".", "->", "{", "}", "sizeof"):
                return _Unknown(_join(toks[i:j]))
            if k > i and t == "<" and _is_name(toks[k - 1]):
                found = _split(toks, k, j)
                if found is None:
                    return _Unknown(_join(toks[i:j]))
                close, items = found
                out.append("<" + ",".join(self.arg(a, b).key for a, b in items) + ">")
                k = close + 1
                continue
            out.append(t)
            k += 1
        return _Type(_join(out), False)

    def value(self, i: int, j: int) -> _Value | _Unknown | None:
        """A user's value expression (None: not one; unknown: one the model cannot evaluate)."""
        self.depth += 1
        try:
            return self._value(i, j)
        finally:
            self.depth -= 1

    def _value(self, i: int, j: int) -> _Value | _Unknown | None:
        if self.depth > _MAX_DEPTH:
            raise _TooDeep
        toks = self.toks
        t = toks[i]
        if j - i == 1:
            if _is_number(t):
                return _user_integer(t)
            if len(t) > 1 and t[-1] == "'":
                return _user_char(t)
            if t == "true" or t == "false":
                return _Value("bool", int(t == "true"))
            return None
        text = _join(toks[i:j])
        if t in ("-", "+", "~", "!"):
            return _unary(t, self.value(i + 1, j), text)
        if t == "(":
            return self._parenthesized(i, j, text)
        if t == "static_cast" and toks[i + 1] == "<":
            found = _split(toks, i + 1, j)
            if found and found[0] + 1 < j and toks[found[0] + 1] == "(":
                after = _split(toks, found[0] + 1, j)
                to = self.type(i + 2, found[0])
                if after and after[0] == j - 1 and to is not None:
                    return _cast(to, self.value(found[0] + 2, j - 1), text)
            return _Unknown(text)
        if t in _BUILTIN_WORDS and toks[i + 1] in ("(", "{"):
            return self._functional_cast(i, j, text)
        return None  # a type, an entity, or an expression: generic() tells them apart

    def _parenthesized(self, i: int, j: int, text: str) -> _Value | _Unknown | None:
        """``(v)`` or the cast ``(T)v``."""
        found = _split(self.toks, i, j)
        if found is None:
            return None
        close = found[0]
        if close == j - 1:
            inner = self.value(i + 1, close)
            return inner if inner is not None else _Unknown(text)
        to = self.type(i + 1, close)
        return _Unknown(text) if to is None else _cast(to, self.value(close + 1, j), text)

    def _functional_cast(self, i: int, j: int, text: str) -> _Value | _Unknown | None:
        """``int(v)``, ``unsigned(v)``; ``int{v}`` where it does not narrow (ill-formed where it
        does, though NVRTC takes ``short{70000}``: unknown)."""
        toks = self.toks
        found = _split(toks, i + 1, j)
        to = _builtin_type([toks[i]])
        if not found or found[0] != j - 1 or to is None:
            return None
        inner = self.value(i + 2, j - 1)
        if inner is None:
            return None  # void(int): a function type
        if toks[i + 1] == "{" and not (
                isinstance(inner, _Value) and inner.builtin and to in _INT
                and _real(inner) is not None and _fits(_real(inner), to)
                and (to != "bool" or inner.type == "bool")):
            return _Unknown(text)
        return _cast(_Type(to, True), inner, text)

    def demangled_value(self, i: int, j: int) -> _Value | _Unknown | None:
        """A demangler's typed value: ``3``, ``-3``, ``5u``, ``5ull``, ``true``, ``(T)v``."""
        toks = self.toks
        start, t, to = i, toks[i], None
        if t == "(":
            found = _split(toks, i, j)
            if found is None:
                return None
            to = self.type(i + 1, found[0])
            if to is None:
                return None
            i = found[0] + 1
            if i >= j:
                return None
            t = toks[i]
        if j - i == 1 and to is None and (t == "true" or t == "false"):
            return _Value("bool", int(t == "true"))
        negative = t == "-"
        if negative:
            i += 1
        if j - i != 1 or not _is_number(toks[i]):
            return None if to is None else _Unknown(_join(toks[start:j]))
        m = _DEMANGLED_LITERAL.fullmatch(toks[i])
        if m is None:
            return _Unknown(toks[i])
        value = -int(m.group(1)) if negative else int(m.group(1))
        if to is None:
            return _typed(_LIB_SUFFIX[m.group(2)], value, _join(toks[start:j]))
        if m.group(2):
            return _Unknown(_join(toks[start:j]))
        if to.closed and to.key in _INT:
            return _typed(to.key, value, _join(toks[start:j]))
        if to.closed and not to.key.endswith(("*", "&")):
            return _Unknown(f"({to.key}){value}")  # float, double: not integers
        return _Value(to.key, value, builtin=False)


_DEMANGLED_LITERAL = re.compile(r"(\d{1,41})(|u|l|ul|ll|ull)")  # see _INT_LITERAL
_LIB_SUFFIX = {v: k for k, v in _SUFFIX.items()}


def _typed(type_: str, value: int, text: str) -> _Value | _Unknown:
    """A demangled value of builtin type; one out of the type's range is not NVRTC's."""
    if _INT[type_].fits(value):
        return _Value(type_, value)
    if type_ in _SIGN_BY_PLATFORM and 0 <= value < 1 << _INT[type_].bits:
        return _Value(type_, _convert(value, type_))  # (char)255 where char is unsigned
    return _Unknown(_join(_tokens(text)))


def _unary(op: str, operand: _Value | _Unknown | None, text: str) -> _Value | _Unknown:
    """``- + ~ !`` with C++'s integral promotion (``-'a'`` is int -97, ``-1u`` unsigned)."""
    if not isinstance(operand, _Value) or not operand.builtin:
        return _Unknown(text)
    value = _real(operand)
    if value is None:
        return _Unknown(text)
    if op == "!":
        return _Value("bool", int(not value))
    to = _INT[operand.type].promoted
    if to is None:
        return _Unknown(text)
    value = {"-": -value, "+": value, "~": ~value}[op]
    return _Value(to, _convert(value, to))


def _cast(to: _Type, operand: _Value | _Unknown | None, text: str) -> _Value | _Unknown:
    """``(T)v``: wrapped to T's width for an integer type; kept as spelled for an enumeration or
    pointer type; unknown for a floating-point type or operand."""
    if not isinstance(operand, _Value):
        return _Unknown(text)
    if not operand.builtin:
        return operand if operand.type == to.key else _Unknown(text)
    value = _real(operand)
    if value is None:
        return _Unknown(text)
    if to.closed:
        if to.key in _INT:
            return _Value(to.key, _convert(value, to.key))
        if not to.key.endswith(("*", "&")):
            return _Unknown(text)
    return _Value(to.key, value, builtin=False)


def _name_key(parts: tuple[_Part, ...]) -> str:
    return "::".join(p if a is None else p + "<" + ",".join(x.key for x in a) + ">"
                     for p, a in parts)


# ---------------------------------------------------------------------------------------------
# Signatures
# ---------------------------------------------------------------------------------------------

class Signature:
    """A kernel's name (and, where the text gives them, its parameter types), canonical.

    Attributes
    ----------
    name : str
        Canonical qualified name with template arguments: values in libstdc++'s spelling
        (``ns::scale<float,3>``, ``t<true>``, ``t<(short)4464>``, ``t<5u>``).
    params : tuple of str or None
        Canonical parameter types (``float const*``), or None where the text gives none
        (``extern "C"`` symbols, expressions without a cast). Read on first use.
    text : str
        The text it was read from, for display.
    exact : bool
        Whether every part was read into the model; an inexact signature never compares equal.
    """

    __slots__ = ("name", "text", "exact", "parts", "_params", "_param_nodes", "_lazy")

    def __init__(self, name: str, text: str, exact: bool, parts: tuple[_Part, ...] | None,
                 param_nodes: tuple[_Arg, ...] | None = None, lazy=None) -> None:
        self.name, self.text, self.exact, self.parts = name, text, exact, parts
        self._param_nodes = param_nodes
        self._params = None if param_nodes is None else tuple(p.key for p in param_nodes)
        self._lazy = lazy

    @property
    def params(self) -> tuple[str, ...] | None:
        """Canonical parameter types, or None where the text gives none."""
        if self._lazy is not None:
            try:
                self._param_nodes = self._lazy()
                self._params = tuple(p.key for p in self._param_nodes)
            except _TooDeep:
                pass  # unknown: None
            self._lazy = None
        return self._params

    def __repr__(self) -> str:
        return f"Signature({self.name!r}, params={self.params!r})"


def _param_list(p: _Parser, items: list[tuple[int, int]]) -> tuple[_Arg, ...]:
    """Parameter types (top-level cv dropped); ``(void)`` is no parameters."""
    out = tuple(p.type(a, b, parameter=True) or p.generic(a, b) for a, b in items)
    return () if len(out) == 1 and out[0].key == "void" else out


@functools.lru_cache(maxsize=16384)
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
    try:
        return _fast_demangled(demangled, placeholders) or _full_demangled(demangled, placeholders)
    except _TooDeep:
        return Signature(demangled, demangled, False, None)


@functools.lru_cache(maxsize=16384)
def parse_expression(expr: str) -> Signature:
    """Read a user's name expression into a :class:`Signature`.

    ``(void(*)(float*))overloaded`` gives the parameter types of the cast; an expression without a
    cast gives none. One the model cannot read is inexact (never equal to anything).
    """
    try:
        return _fast_expression(expr) or _full_expression(expr)
    except _TooDeep:
        return Signature(expr, expr, False, None)


def _full_demangled(demangled: str, placeholders: bool) -> Signature:
    toks = _tokens(demangled)
    n = len(toks)
    p = _Parser(toks, user=False)
    i = 1 if n > 1 and toks[0] == "void" else 0  # a template instance's return type
    found = p.name(i, n)
    if found is None or (found[0] < n and toks[found[0]] != "("):
        return Signature(_join(toks[i:]), demangled, False, None)
    end, parts = found
    exact = all(a.exact for _, args in parts if args for a in args)
    name = _name_key(parts)
    if end == n:
        return Signature(name, demangled, exact, parts)
    found = _split(toks, end, n)
    if found is None or found[0] != n - 1:
        return Signature(name, demangled, False, parts)
    return Signature(name, demangled, exact, parts,
                     lazy=functools.partial(_params, p, found[1], parts[-1][1], placeholders))


def _params(p: _Parser, items: list[tuple[int, int]], targs: tuple[_Arg, ...] | None,
            placeholders: bool) -> tuple[_Arg, ...]:
    """A demangled parameter list (token slices of ``p``). cu++filt names the template parameters
    T1, T2...; ``T1...`` is a pack: one parameter per remaining argument."""
    if not placeholders:
        return _param_list(p, items)
    targs = targs or ()
    p.subst = {f"T{k}": a for k, a in enumerate(targs, 1)}
    toks = p.toks
    out: list[_Arg] = []
    for a, b in items:
        t = toks[a]
        if b - a == 2 and toks[a + 1] == "..." and t[:1] == "T" and t[1:].isdigit() \
                and len(t) < 12:
            out.extend(targs[int(t[1:]) - 1:])  # nothing for an empty pack
        else:
            out.extend(_param_list(p, [(a, b)]))
    return tuple(out)


def _full_expression(expr: str) -> Signature:
    toks = _tokens(expr)
    n = len(toks)
    p = _Parser(toks, user=True)
    i = 0
    param_nodes = None
    if n and toks[0] == "(":
        found = _split(toks, 0, n)
        if found is None:
            return Signature(_join(toks), expr, False, None)
        param_nodes = _function_pointer_params(p, 1, found[0])
        if param_nodes is None:
            return Signature(_join(toks), expr, False, None)
        i = found[0] + 1
    if i < n and toks[i] == "&":
        i += 1
    found = p.name(i, n)
    if found is None or found[0] != n:
        return Signature(_join(toks[i:]), expr, False, None, param_nodes)
    parts = found[1]
    exact = all(a.exact for _, args in parts if args for a in args) and \
        (param_nodes is None or all(x.exact for x in param_nodes))
    return Signature(_name_key(parts), expr, exact, parts, param_nodes)


# Fast paths: a flat template argument list of integer literals and type words (``k<3>``,
# ``void k<(int)3>(T1 *, int)``, ``saxpy<float>``) is most of what a cell names; these read it
# with one regular expression and the same literal rules, and hand anything else to the full
# parser. tests/test_names.py checks that both give the same signatures.
_FAST_DEMANGLED = re.compile(
    r"(?:void )?((?:[A-Za-z_]\w*+::)*[A-Za-z_]\w*)(?:<([^<>\[\]{}']*)>)?(\([^()]*\))?")
_FAST_EXPRESSION = re.compile(
    r"\s*((?:[A-Za-z_]\w*+\s*::\s*)*[A-Za-z_]\w*+)\s*(?:<([^<>()\[\]{}']*)>)?\s*")
_FAST_DEMANGLED_ARG = re.compile(
    r" ?(?:\(([a-z_0-9 ]+)\))?(-?)(\d{1,41})(|u|l|ul|ll|ull)|([A-Za-z_]\w*(?: [A-Za-z_]\w*)*)")
_FAST_USER_ARG = re.compile(r"\s*(?:(-?)\s*(\d{1,41}[uUlL]*)|([A-Za-z_]\w*(?:\s+[A-Za-z_]\w*)*))\s*")


def _fast_words(words: str) -> _Arg | None:
    if words == "true" or words == "false":
        return _Value("bool", int(words == "true"))
    split = words.split()
    if all(w in _BUILTIN_WORDS for w in split):
        key = _builtin_type(split)
        return None if key is None else _Type(key, True)
    if len(split) == 1 and words in TYPEDEFS:
        return _Type(TYPEDEFS[words], True, spelled=words)
    if len(split) == 1 and _is_name(words):
        return _Type(words, False)
    return None


def _fast_demangled_arg(text: str) -> _Arg | None:
    m = _FAST_DEMANGLED_ARG.fullmatch(text)
    if m is None:
        return None
    cast, minus, digits, suffix, words = m.groups()
    if words is not None:
        return _fast_words(words)
    value = -int(digits) if minus else int(digits)
    if cast is None:
        return _typed(_LIB_SUFFIX[suffix], value, text)
    to = _builtin_type(cast.split()) if not suffix and all(
        w in _BUILTIN_WORDS for w in cast.split()) else None
    return _typed(to, value, text) if to in _INT else None


def _fast_user_arg(text: str) -> _Arg | None:
    m = _FAST_USER_ARG.fullmatch(text)
    if m is None:
        return None
    minus, literal, words = m.groups()
    if words is not None:
        return _fast_words(words)
    v = _user_integer(literal)
    if minus:
        v = _unary("-", v, "")
    return v if v.exact else _Unknown(_join(_tokens(text)))  # spelled as the full parser does


def _fast_signature(m: re.Match, text: str, read_arg) -> Signature | None:
    qualified, arglist = m.group(1, 2)
    if "::" in qualified:
        idents = [c.strip() for c in qualified.split("::")]
        qualified = "::".join(idents)
    else:
        idents = [qualified]
    for c in idents:
        if c in _NOT_NAMES:
            return None
    if arglist is None:
        return Signature(qualified, text, True,
                         tuple((c, None) for c in idents))
    args = tuple(map(read_arg, arglist.split(","))) if arglist.strip() else ()
    exact = True
    for a in args:
        if a is None:
            return None
        exact = exact and a.exact
    parts = (*((c, None) for c in idents[:-1]), (idents[-1], args))
    return Signature(f"{qualified}<{','.join([a.key for a in args])}>", text, exact, parts)


def _fast_demangled(text: str, placeholders: bool) -> Signature | None:
    m = _FAST_DEMANGLED.fullmatch(text)
    if m is None:
        return None
    sig = _fast_signature(m, text, _fast_demangled_arg)
    if sig is not None and m.group(3) is not None:
        sig._lazy = functools.partial(_lazy_params, m.group(3), sig.parts[-1][1], placeholders)
    return sig


def _lazy_params(text: str, targs: tuple[_Arg, ...] | None, placeholders: bool
                 ) -> tuple[_Arg, ...]:
    """The parameters of a fast-path name: ``text`` is one parenthesized list, no parentheses
    inside (the regular expression saw to that)."""
    toks = _tokens(text)
    return _params(_Parser(toks, user=False), _split(toks, 0, len(toks))[1], targs, placeholders)


def _fast_expression(text: str) -> Signature | None:
    m = _FAST_EXPRESSION.fullmatch(text)
    return None if m is None else _fast_signature(m, text, _fast_user_arg)


def _function_pointer_params(p: _Parser, i: int, j: int) -> tuple[_Arg, ...] | None:
    """The parameter types of ``void(*)(float*, int)`` (tokens i..j), or None if it is not a
    function pointer or reference type."""
    toks = p.toks
    k = i
    while k < j and toks[k] != "(":
        k += 1
    inner = _split(toks, k, j) if k < j else None
    if inner is None or toks[k + 1:inner[0]] not in (["*"], ["&"]) or inner[0] + 1 >= j:
        return None
    plist = _split(toks, inner[0] + 1, j)
    if plist is None or plist[0] != j - 1:
        return None
    return _param_list(p, plist[1])


def canonical(text: str) -> str:
    """The canonical spelling of a name expression, a type or a template argument."""
    toks = _tokens(text)
    sig = parse_expression(text)
    if sig.parts is not None:
        return sig.name
    try:
        return _Parser(toks, user=True).arg(0, len(toks)).key
    except _TooDeep:
        return text


# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------

def compare(want: Signature, got: Signature) -> tuple[str, str]:
    """Whether the expression ``want`` names the demangled kernel ``got``.

    Returns
    -------
    (verdict, why)
        ``EQUAL`` (decidably the same kernel), ``CONTRADICTION`` (decidably another one) or
        ``UNDECIDABLE``; ``why`` says which part decided (empty when equal).
    """
    if want.parts is None or got.parts is None:
        return UNDECIDABLE, f"{want.text!r} is not a name the model reads" \
            if want.parts is None else f"{got.text!r} is not a name the model reads"
    if want.exact and got.exact and want.name == got.name:
        verdict, why = EQUAL, ""
    else:
        verdict, why = _compare_names(want.parts, got.parts)
    if verdict == CONTRADICTION or want._param_nodes is None:
        return verdict, why
    have = got.params
    if have is None:
        return UNDECIDABLE, "the kernel's parameter types are unknown"
    pv, pwhy = _compare_params(want._param_nodes, have)
    if pv == CONTRADICTION or verdict == EQUAL:
        return pv, pwhy
    return verdict, why


# Text alone decides the common case: the expression ``k<5>`` is the kernel whose demangled name,
# without its return type and parameters, is ``k<5>`` (libstdc++), or ``k<(int)5>`` (cu++filt,
# read as ``k<5>``), when the text holds only names, ``:: < > , * &``, spaces and integers of at
# most nine digits in libstdc++'s spelling (both readings then give one type and value: a longer
# one may be 2147483648, int for libstdc++ and long for C++). A warm cell verifies its stored map
# this way without parsing either side.
_QUICK_SAFE = re.compile(r"""
    (?!(?:void|const|volatile|unsigned|signed|char|short|int|long|bool|float|double|auto|decltype
         |sizeof|operator|template|typename)\b)        # a name first
    (?:[A-Za-z_]\w*+ | :: | [<>,\ *&]                 # possessive: no backtracking
     | (?:[1-9]\d{0,8}|0)(?:u|l|ul|ll|ull)?(?![\w'.])    # an integer of at most nine digits,
     | -(?:[1-9]\d{0,8}|0)(?:l|ll)?(?![\w'.])            # of a signed type where negative
    )*+""", re.X)
_QUICK_CUFILT = re.compile(
    r"\((int|unsigned int|long|unsigned long|long long|unsigned long long|bool)\)(-?\d+)")


def _libstdcxx_spelling(m: re.Match) -> str:
    type_, value = m.groups()
    if type_ != "bool":
        return value + _SUFFIX[type_]
    return {"0": "false", "1": "true"}.get(value, m.group())


def quick_equal(expr: str, demangled: str) -> bool:
    """True where the text alone shows that ``expr`` names the kernel demangled as ``demangled``.

    False says nothing: parse both and :func:`compare` them.
    """
    return _quick_name(demangled) == expr and _QUICK_SAFE.fullmatch(expr) is not None


def _quick_name(demangled: str) -> str:
    """The name part of a demangled name, cu++filt's ``(int)5`` as ``5``."""
    name = demangled[5:] if demangled.startswith("void ") else demangled
    if name.endswith(")"):
        name = name[:name.rfind("(")]  # a parameter list with parentheses inside: not safe
    if "(" in name:
        name = _QUICK_CUFILT.sub(_libstdcxx_spelling, name)
    return name


def _compare_names(want: tuple[_Part, ...], got: tuple[_Part, ...]) -> tuple[str, str]:
    if want[-1][0] != got[-1][0]:
        return CONTRADICTION, f"another kernel ({got[-1][0]}, not {want[-1][0]})"
    verdict, why = _compare_args(want[-1][1], got[-1][1])
    if verdict != CONTRADICTION and _name_key(want[:-1]) != _name_key(got[:-1]):
        # a using-directive, a namespace alias or an inline namespace may join them
        return UNDECIDABLE, f"the qualifier {_name_key(want[:-1]) or '::'} against " \
                            f"{_name_key(got[:-1]) or '::'}"
    return verdict, why


def _compare_args(want: tuple[_Arg, ...] | None, got: tuple[_Arg, ...] | None) -> tuple[str, str]:
    if want is None:
        return (EQUAL, "") if got is None else (UNDECIDABLE, "template arguments not given")
    if got is None:
        return CONTRADICTION, "the kernel is not a template instance"
    if len(want) > len(got):
        return CONTRADICTION, f"{len(want)} template arguments against {len(got)}"
    undecided = ""
    for n, (a, b) in enumerate(zip(want, got), 1):
        verdict, why = _compare_arg(a, b)
        if verdict == CONTRADICTION:
            return verdict, f"template argument {n}: {why}"
        if verdict == UNDECIDABLE and not undecided:
            undecided = f"template argument {n}: {why}"
    if len(want) < len(got) and not undecided:
        undecided = (f"{len(want)} template arguments against {len(got)} (default or deduced "
                     "arguments)")
    return (UNDECIDABLE, undecided) if undecided else (EQUAL, "")


def _compare_arg(a: _Arg, b: _Arg) -> tuple[str, str]:
    """One template argument of the expression (a) against the demangled one (b)."""
    if a.exact and b.exact and a.key == b.key:
        return EQUAL, ""
    if isinstance(a, _Unknown) or isinstance(b, _Unknown):
        return UNDECIDABLE, f"{a.key or '(empty)'} against {b.key} is not evaluated"
    if isinstance(a, _Value):
        if isinstance(b, _Type):
            return (CONTRADICTION, f"the value {a.key} against {b.key}") if a.builtin else \
                (UNDECIDABLE, f"{a.key} against {b.key}")
        return _compare_values(a, b)
    if isinstance(b, _Type):
        if a.closed:
            return CONTRADICTION, f"{a.shown()} is not {b.key}"
        if a.template is not None and a.template == b.template:
            verdict, why = _compare_args(a.args, b.args)
            if verdict != EQUAL:
                return verdict, f"{a.key} against {b.key}: {why}"
        return UNDECIDABLE, f"{a.key} may be an alias of {b.key}"
    if a.closed:
        return CONTRADICTION, f"the type {a.key} against the value {b.key}"
    return UNDECIDABLE, f"{a.key} may be a constant equal to {b.key}"


def _compare_values(a: _Value, b: _Value) -> tuple[str, str]:
    if a.builtin and b.builtin:
        if a.type == b.type:
            return CONTRADICTION, f"{a.describe()} is not {b.describe()}"
        value = _real(a)
        if value is None:
            return UNDECIDABLE, f"{a.describe()} depends on the sign of {a.type}"
        if _convert(value, b.type) != b.value:
            return CONTRADICTION, (f"{a.describe()} is {_convert(value, b.type)} as {b.type}, "
                                   f"not {b.value}")
        return UNDECIDABLE, (f"{a.describe()} against {b.describe()}: equal only if the parameter "
                             f"is {b.type}, not auto")
    if not a.builtin and not b.builtin and a.type == b.type:
        # an enumeration's underlying type is unknown (and may be bool): another value contradicts
        # only where no integer conversion, nor none, maps one onto the other
        if all(_convert(a.value, t) != b.value for t in _INT) and a.value != b.value:
            return CONTRADICTION, f"{a.key} is not {b.key}"
        return UNDECIDABLE, f"{a.key} against {b.key}: the underlying type is unknown"
    return UNDECIDABLE, f"{a.key} against {b.key}: the types may be aliases"


def _compare_params(want: tuple[_Arg, ...], have: tuple[str, ...]) -> tuple[str, str]:
    if len(want) != len(have):
        return CONTRADICTION, f"{len(want)} parameters against {len(have)}"
    undecided = ""
    for n, (a, b) in enumerate(zip(want, have), 1):
        if a.exact and a.key == b:
            continue
        if isinstance(a, _Type) and a.closed:
            return CONTRADICTION, f"parameter {n}: {a.shown()} is not {b}"
        undecided = undecided or f"parameter {n}: {a.key} may be an alias of {b}"
    return (UNDECIDABLE, undecided) if undecided else (EQUAL, "")


# ---------------------------------------------------------------------------------------------
# Python names
# ---------------------------------------------------------------------------------------------

def _py_arg(a: _Arg) -> str:
    """An argument as identifier text, from its typed value: ``(bool)2`` is ``true``, ``(short)-1``
    is ``short_m1``, ``5u`` is ``5u``, ``'a'`` is ``char_97`` (``97`` is another kernel's)."""
    if isinstance(a, _Value):
        number = f"m{-a.value}" if a.value < 0 else str(a.value)
        if a.builtin and a.type == "bool":
            return a.key
        if a.builtin and a.type in _SUFFIX:
            return number + _SUFFIX[a.type]
        return f"{a.type}_{number}"
    if isinstance(a, _Type) and a.args is not None:
        return a.template + "_" + "_".join(_py_arg(x) for x in a.args)
    if isinstance(a, _Type) and a.spelled:
        return a.spelled  # add<size_t> is add_size_t, as the user wrote it
    return a.key


_NOT_WORD = re.compile(r"\W+")


def python_name(expr: str) -> str:
    """A Python identifier for a name expression: ``ns::scale<float, 3>`` -> ``ns_scale_float_3``.

    Derived from the evaluated arguments, so spelling variants of one kernel give one identifier
    (``(int)3`` and ``3``; ``(bool)2`` and ``true``) and two kernels never share one through a
    dropped cast (``t<(bool)2>`` is ``t_true``, ``t<2>`` is ``t_2``).
    """
    sig = parse_expression(expr)
    if sig.parts is None:
        pieces = [sig.name]
    else:
        pieces = []
        for ident, args in sig.parts:
            pieces.append(ident)
            pieces.extend(_py_arg(a) for a in args or ())
    pieces.extend(sig.params or ())
    text = "_".join(pieces).replace("::", "_").replace("*", "_ptr").replace("&", "_ref")
    text = re.sub(r"-(?=\d)", "m", text)
    text = _NOT_WORD.sub("_", text)
    text = re.sub(r"_+", "_", text).strip("_")
    if not text:
        text = "kernel"
    if text[0].isdigit():
        text = "_" + text
    if not valid_python_name(text):
        text += "_"
    return text


def valid_python_name(name: str) -> bool:
    """Whether ``name`` can be pushed into a namespace: an identifier, not a keyword or soft
    keyword (``match``, ``case``, ``type``, ``_``)."""
    return (isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)
            and not keyword.issoftkeyword(name))


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
