"""Template arguments as C++ reads them: tokens, the one bracket walker, literals, typed values.

The argument model of :mod:`cudamagic.cxx.parse` (whose docstring states it): a non-type argument is a
:class:`Value` (type and value), a type or entity a :class:`Type` (canonical spelling), anything
the model cannot evaluate an :class:`Unknown`. Pure: no CUDA, no IPython.
"""

from __future__ import annotations

import re

from .types import BUILTIN_WORDS, INTEGERS

# ---------------------------------------------------------------------------------------------
# Tokens
# ---------------------------------------------------------------------------------------------

TOKEN = re.compile(r"""
    (?:u8|[LuU])?'(?:\\.|[^'\\])*'      # character literal, with its prefix
  | \.?\d(?:[eEpP][+-]|[\w'.])*         # number (a preprocessing number: 0x1F, 5ull, 1'000, 1e+3f)
  | [A-Za-z_$][\w$]*                    # identifier or keyword
  | ::|\.\.\.|&&|\S                     # punctuation; ">>" stays two tokens (it closes two lists)
""", re.X)

tokens = TOKEN.findall

# Words that together spell one builtin type ("unsigned long int" is one type).
_BUILTIN_WORDS = BUILTIN_WORDS
# cv-qualifiers and restrict, by their canonical spelling (libstdc++ writes "restrict")
CV = {"const": "const", "volatile": "volatile", "__restrict__": "__restrict__",
       "__restrict": "__restrict__", "restrict": "__restrict__"}
PTR_OPS = frozenset({"*", "&", "&&", *CV})
# Words that are not names of types or entities.
NOT_NAMES = frozenset(
    "sizeof alignof decltype noexcept nullptr true false this operator new delete typeid "
    "static_cast reinterpret_cast const_cast dynamic_cast throw typename template struct class "
    "enum union auto".split()) | _BUILTIN_WORDS | PTR_OPS


def is_name(tok: str) -> bool:
    return (tok[0].isalpha() or tok[0] in "_$") and tok[-1] != "'" and tok not in NOT_NAMES


def is_number(tok: str) -> bool:
    return tok[0].isdigit() or (tok[0] == "." and len(tok) > 1)


_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}
_OPENERS = frozenset("([{")
_CLOSERS = frozenset(")]}")


def split(toks: list[str], at: int, end: int) -> tuple[int, list[tuple[int, int]]] | None:
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
            if is_name(toks[k - 1]) or toks[k - 1] in ("static_cast", "template"):
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


def join(toks) -> str:
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
SIGN_BY_PLATFORM = ("char", "wchar_t")
# how libstdc++ writes a value of the type (cu++filt writes every one as "(type)value")
SUFFIX = {t: s.suffix for t, s in INTEGERS.items() if s.suffix is not None}
# the type of a demangled literal, by its libstdc++ suffix
LIB_SUFFIX = {v: k for k, v in SUFFIX.items()}


def convert(value: int, to: str) -> int:
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


def fits(value: int, type_: str) -> bool:
    return _INT[type_].fits(value)


def user_integer(tok: str) -> "Value | Unknown":
    """A user's integer literal with its C++ type; a float, or one too large for any, is unknown."""
    if tok.isdigit() and (tok[0] != "0" or len(tok) == 1) and len(tok) < 10:
        return Value("int", int(tok))  # the common case: a small decimal int
    m = _INT_LITERAL.fullmatch(tok.replace("'", ""))
    if not m or (m.group(2) and m.group(4)):
        return Unknown(tok)
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
        if fits(value, type_):
            return Value(type_, value)
    return Unknown(tok)  # NVRTC takes 9223372036854775808 as unsigned long long; C++ does not


_SIMPLE_ESCAPES = {"n": 10, "t": 9, "r": 13, "\\": 92, "'": 39, '"': 34, "a": 7, "b": 8, "f": 12,
                   "v": 11, "?": 63}
_ESCAPE = re.compile(
    r"\\(?:([0-7]{1,3})|x([0-9a-fA-F]+)|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|(.))|(.)", re.S)
_CHAR_TYPES = {"": "char", "L": "wchar_t", "u": "char16_t", "U": "char32_t"}


def user_char(tok: str) -> "Value | Unknown":
    """A user's character literal: ``'a'`` char 97, ``'\\xff'`` char -1, ``L'a'`` wchar_t 97.

    Multi-character literals are ints of implementation-defined value and ``u8'a'`` is char8_t or
    char by -std: both unknown, as are values out of the type's range (NVRTC refuses those).
    """
    prefix, body = tok[:tok.index("'")], tok[tok.index("'") + 1:-1]
    type_ = _CHAR_TYPES.get(prefix)
    chars = _ESCAPE.findall(body)
    if type_ is None or len(chars) != 1:
        return Unknown(tok)
    octal, hexa, u4, u8, simple, plain = chars[0]
    if plain:
        value = ord(plain)
        if value > 127:
            return Unknown(tok)  # NVRTC reads UTF-8 bytes: several characters
    elif simple:
        if simple not in _SIMPLE_ESCAPES:
            return Unknown(tok)
        value = _SIMPLE_ESCAPES[simple]
    elif octal or hexa:
        value = int(octal, 8) if octal else int(hexa, 16)
        bits = _INT[type_].bits
        if value >> bits:
            return Unknown(tok)
    else:
        if type_ == "char":
            return Unknown(tok)  # a universal character name in a char literal
        value = int(u4 or u8, 16)
    if value >> _INT[type_].bits:
        return Unknown(tok)
    return Value(type_, convert(value, type_))


def real_value(v: "Value") -> int | None:
    """The value as the target holds it: a char with the high bit set depends on char's sign."""
    if v.value < 0 and v.type in SIGN_BY_PLATFORM and _INT[v.type].signed is None:
        return None
    return v.value


# ---------------------------------------------------------------------------------------------
# Parsed arguments: a typed value, a type or entity spelled by name, or an unknown expression
# ---------------------------------------------------------------------------------------------

class Value:
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
        elif type_ in SUFFIX:
            self.key = f"{value}{SUFFIX[type_]}"
        else:
            self.key = f"({type_}){value}"

    def describe(self) -> str:
        return f"{self.type} {self.key if self.type == 'bool' else self.value}"


class Type:
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


class Unknown:
    """An argument the model cannot evaluate (``Mode::Exact`` is a Type; ``1.5f``, ``N+1``,
    ``'ab'`` are these): it never compares equal."""

    __slots__ = ("key",)
    exact = False

    def __init__(self, text: str) -> None:
        self.key = text


Arg = Value | Type | Unknown
# One component of a qualified name: the identifier and its template arguments (None: not a
# template-id; () for "k<>").
Part = tuple[str, "tuple[Arg, ...] | None"]





def typed(type_: str, value: int, text: str) -> Value | Unknown:
    """A demangled value of builtin type; one out of the type's range is not NVRTC's."""
    if _INT[type_].fits(value):
        return Value(type_, value)
    if type_ in SIGN_BY_PLATFORM and 0 <= value < 1 << _INT[type_].bits:
        return Value(type_, convert(value, type_))  # (char)255 where char is unsigned
    return Unknown(join(tokens(text)))


def unary(op: str, operand: Value | Unknown | None, text: str) -> Value | Unknown:
    """``- + ~ !`` with C++'s integral promotion (``-'a'`` is int -97, ``-1u`` unsigned)."""
    if not isinstance(operand, Value) or not operand.builtin:
        return Unknown(text)
    value = real_value(operand)
    if value is None:
        return Unknown(text)
    if op == "!":
        return Value("bool", int(not value))
    to = _INT[operand.type].promoted
    if to is None:
        return Unknown(text)
    value = {"-": -value, "+": value, "~": ~value}[op]
    return Value(to, convert(value, to))


def cast(to: Type, operand: Value | Unknown | None, text: str) -> Value | Unknown:
    """``(T)v``: wrapped to T's width for an integer type; kept as spelled for an enumeration or
    pointer type; unknown for a floating-point type or operand."""
    if not isinstance(operand, Value):
        return Unknown(text)
    if not operand.builtin:
        return operand if operand.type == to.key else Unknown(text)
    value = real_value(operand)
    if value is None:
        return Unknown(text)
    if to.closed:
        if to.key in _INT:
            return Value(to.key, convert(value, to.key))
        if not to.key.endswith(("*", "&")):
            return Unknown(text)
    return Value(to.key, value, builtin=False)


def name_key(parts: tuple[Part, ...]) -> str:
    return "::".join(p if a is None else p + "<" + ",".join(x.key for x in a) + ">"
                     for p, a in parts)


