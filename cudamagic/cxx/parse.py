"""Kernel names read: a name expression or a demangled name into a :class:`Signature`.

One job: turn ``ns::scale<float, (short)70000>`` (a user's name expression) and
``void ns::scale<float, (short)4464>(T1 *, int)`` (cu++filt) or ``void ns::scale<float,
(short)4464>(float*, int)`` (libstdc++) into a :class:`Signature`, which :mod:`cudamagic.cxx.compare` compares. Pure: no CUDA, no IPython.

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

Everything is read by one tokenizer (:data:`TOKEN`) and one bracket walker (:func:`split`).
"""


from __future__ import annotations

import functools
import re

from ..core.process import cached, InTest
from .args import (CV, LIB_SUFFIX, NOT_NAMES, PTR_OPS, SUFFIX, Arg, Part,
                   Type, Unknown, Value, cast, fits, is_name, is_number, join, name_key,
                   real_value, split, tokens, typed, unary, user_char, user_integer)
from .types import BUILTIN_WORDS as _BUILTIN_WORDS, INTEGERS as _INT, TYPEDEFS
from .types import builtin_type as _builtin_type

__all__ = ["Signature", "canonical", "parse_demangled", "parse_expression"]

# ---------------------------------------------------------------------------------------------
# The parser (one per text): names, template arguments, types, values
# ---------------------------------------------------------------------------------------------

# Deeper nesting than this (``-(-(-...))``, ``S<S<S<...>>>``) is read as unknown, not recursed
# into until Python's stack gives out.
_MAX_DEPTH = 100


class _TooDeep(Exception):
    pass


_DEMANGLED_LITERAL = re.compile(r"(\d{1,41})(|u|l|ul|ll|ull)")  # see args._INT_LITERAL


class _Parser:
    """Recursive descent over one text's tokens. ``user``: a name expression, whose literals are
    C++ literals; otherwise a demangled name, whose literals are the demangler's typed values."""

    __slots__ = ("toks", "user", "subst", "depth")

    def __init__(self, toks: list[str], user: bool) -> None:
        self.toks = toks
        self.user = user
        self.subst: dict[str, Arg] = {}  # cu++filt's placeholder -> the template argument
        self.depth = 0  # nesting of names and values: see _MAX_DEPTH

    def name(self, i: int, end: int) -> tuple[int, tuple[Part, ...]] | None:
        """A qualified name with template arguments starting at ``i``: (index past it, parts)."""
        self.depth += 1
        try:
            return self._name(i, end)
        finally:
            self.depth -= 1

    def _name(self, i: int, end: int) -> tuple[int, tuple[Part, ...]] | None:
        if self.depth > _MAX_DEPTH:
            raise _TooDeep
        toks = self.toks
        parts: list[Part] = []
        if i < end and toks[i] == "::":
            i += 1  # the global qualifier: names are looked up from the global scope anyway
        while i < end:
            t = toks[i]
            if t == "(" and toks[i + 1:i + 4] == ["anonymous", "namespace", ")"]:
                t, i = "(anonymous namespace)", i + 3
            elif t == "template":  # ns::template k<1>
                i += 1
                continue
            elif not is_name(t):
                return None
            i += 1
            args = None
            if i < end and toks[i] == "<":
                found = split(toks, i, end)
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

    def arg(self, i: int, j: int) -> Arg:
        """One template argument (tokens i..j): a value, else a type or entity, else unknown."""
        if i >= j:
            return Unknown("")
        v = self.value(i, j) if self.user else self.demangled_value(i, j)
        if v is not None:
            return v
        t = self.type(i, j)
        if t is not None:
            return t
        return self.generic(i, j)

    def type(self, i: int, j: int, parameter: bool = False) -> Type | None:
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
            if t in CV:
                if CV[t] not in cv:
                    cv.append(CV[t])
                i += 1
            elif t in _BUILTIN_WORDS and base is None:
                words.append(t)
                i += 1
            elif base is None and not words and (t == "::" or t == "(" or t == "template"
                                                  or is_name(t)):
                found = self.name(i, j)
                if found is None:
                    return None
                i, base = found
            else:
                break
        tail = [CV.get(t, t) for t in toks[i:j]]
        if (not words and base is None) or any(t not in PTR_OPS for t in tail):
            return None
        if parameter:
            while tail and tail[-1] not in ("*", "&", "&&"):
                tail = tail[:-1]
            if not tail:
                cv = []
        return self._type_of(words, base, sorted(cv), tail)  # "const volatile" in one order

    def _type_of(self, words: list[str], base: tuple[Part, ...] | None, cv: list[str],
                 tail: list[str]) -> Type | None:
        """The type of builtin ``words`` or a name ``base``, then ``cv`` and ``tail``."""
        closed = base is None
        if words:
            head = _builtin_type(words)
            if head is None:
                return None
        else:
            head = name_key(base or ())
            if head in self.subst:  # cu++filt's T1: "const T1 *" is "float const* const*"
                arg = self.subst[head]
                if not isinstance(arg, Type):
                    return None
                head, closed, base = arg.key, arg.closed, ()
        spelled = None
        if base and len(base) == 1 and base[0][1] is None and base[0][0] in TYPEDEFS:
            spelled, head, closed = head, TYPEDEFS[head], True  # size_t: a builtin type here
        key = join([head, *cv, *tail]) if cv or tail else head
        if closed:
            return Type(key, True, spelled=spelled and (
                join([spelled, *cv, *tail]) if cv or tail else spelled))
        exact = all(a.exact for _, args in base or () if args for a in args)
        if base and not cv and not tail and base[-1][1] is not None:
            return Type(key, False, exact, name_key(base[:-1] + ((base[-1][0], None),)),
                         base[-1][1])
        return Type(key, False, exact)

    def generic(self, i: int, j: int) -> Arg:
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
            if is_number(t) or t[-1] == "'" or t in ("+", "-", "/", "%", "^", "|", "~", "!", "=",
                                                       "?", ".", "->", "{", "}", "sizeof"):
                return Unknown(join(toks[i:j]))
            if k > i and t == "<" and is_name(toks[k - 1]):
                found = split(toks, k, j)
                if found is None:
                    return Unknown(join(toks[i:j]))
                close, items = found
                out.append("<" + ",".join(self.arg(a, b).key for a, b in items) + ">")
                k = close + 1
                continue
            out.append(t)
            k += 1
        return Type(join(out), False)

    def value(self, i: int, j: int) -> Value | Unknown | None:
        """A user's value expression (None: not one; unknown: one the model cannot evaluate)."""
        self.depth += 1
        try:
            return self._value(i, j)
        finally:
            self.depth -= 1

    def _value(self, i: int, j: int) -> Value | Unknown | None:
        if self.depth > _MAX_DEPTH:
            raise _TooDeep
        toks = self.toks
        t = toks[i]
        if j - i == 1:
            if is_number(t):
                return user_integer(t)
            if len(t) > 1 and t[-1] == "'":
                return user_char(t)
            if t == "true" or t == "false":
                return Value("bool", int(t == "true"))
            return None
        text = join(toks[i:j])
        if t in ("-", "+", "~", "!"):
            return unary(t, self.value(i + 1, j), text)
        if t == "(":
            return self._parenthesized(i, j, text)
        if t == "static_cast" and toks[i + 1] == "<":
            found = split(toks, i + 1, j)
            if found and found[0] + 1 < j and toks[found[0] + 1] == "(":
                after = split(toks, found[0] + 1, j)
                to = self.type(i + 2, found[0])
                if after and after[0] == j - 1 and to is not None:
                    return cast(to, self.value(found[0] + 2, j - 1), text)
            return Unknown(text)
        if t in _BUILTIN_WORDS and toks[i + 1] in ("(", "{"):
            return self._functional_cast(i, j, text)
        return None  # a type, an entity, or an expression: generic() tells them apart

    def _parenthesized(self, i: int, j: int, text: str) -> Value | Unknown | None:
        """``(v)`` or the cast ``(T)v``."""
        found = split(self.toks, i, j)
        if found is None:
            return None
        close = found[0]
        if close == j - 1:
            inner = self.value(i + 1, close)
            return inner if inner is not None else Unknown(text)
        to = self.type(i + 1, close)
        return Unknown(text) if to is None else cast(to, self.value(close + 1, j), text)

    def _functional_cast(self, i: int, j: int, text: str) -> Value | Unknown | None:
        """``int(v)``, ``unsigned(v)``; ``int{v}`` where it does not narrow (ill-formed where it
        does, though NVRTC takes ``short{70000}``: unknown)."""
        toks = self.toks
        found = split(toks, i + 1, j)
        to = _builtin_type([toks[i]])
        if not found or found[0] != j - 1 or to is None:
            return None
        inner = self.value(i + 2, j - 1)
        if inner is None:
            return None  # void(int): a function type
        held = real_value(inner) if isinstance(inner, Value) and inner.builtin else None
        if toks[i + 1] == "{" and not (
                isinstance(inner, Value) and held is not None and to in _INT
                and fits(held, to) and (to != "bool" or inner.type == "bool")):
            return Unknown(text)
        return cast(Type(to, True), inner, text)

    def demangled_value(self, i: int, j: int) -> Value | Unknown | None:
        """A demangler's typed value: ``3``, ``-3``, ``5u``, ``5ull``, ``true``, ``(T)v``."""
        toks = self.toks
        start, t, to = i, toks[i], None
        if t == "(":
            found = split(toks, i, j)
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
            return Value("bool", int(t == "true"))
        negative = t == "-"
        if negative:
            i += 1
        if j - i != 1 or not is_number(toks[i]):
            return None if to is None else Unknown(join(toks[start:j]))
        m = _DEMANGLED_LITERAL.fullmatch(toks[i])
        if m is None:
            return Unknown(toks[i])
        value = -int(m.group(1)) if negative else int(m.group(1))
        if to is None:
            return typed(LIB_SUFFIX[m.group(2)], value, join(toks[start:j]))
        if m.group(2):
            return Unknown(join(toks[start:j]))
        if to.closed and to.key in _INT:
            return typed(to.key, value, join(toks[start:j]))
        if to.closed and not to.key.endswith(("*", "&")):
            return Unknown(f"({to.key}){value}")  # float, double: not integers
        return Value(to.key, value, builtin=False)



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

    def __init__(self, name: str, text: str, exact: bool, parts: tuple[Part, ...] | None,
                 param_nodes: tuple[Arg, ...] | None = None, lazy=None) -> None:
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

    @property
    def param_args(self) -> tuple[Arg, ...] | None:
        """The parameter types as parsed arguments (what :func:`~cudamagic.cxx.compare.compare`
        weighs), or None where the text gives none."""
        self.params
        return self._param_nodes

    def __repr__(self) -> str:
        return f"Signature({self.name!r}, params={self.params!r})"


def _param_list(p: _Parser, items: list[tuple[int, int]]) -> tuple[Arg, ...]:
    """Parameter types (top-level cv dropped); ``(void)`` is no parameters."""
    out = tuple(p.type(a, b, parameter=True) or p.generic(a, b) for a, b in items)
    return () if len(out) == 1 and out[0].key == "void" else out


@cached(16384, test=InTest.KEPT)
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


@cached(16384, test=InTest.KEPT)
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
    toks = tokens(demangled)
    n = len(toks)
    p = _Parser(toks, user=False)
    i = 1 if n > 1 and toks[0] == "void" else 0  # a template instance's return type
    found = p.name(i, n)
    if found is None or (found[0] < n and toks[found[0]] != "("):
        return Signature(join(toks[i:]), demangled, False, None)
    end, parts = found
    exact = all(a.exact for _, args in parts if args for a in args)
    name = name_key(parts)
    if end == n:
        return Signature(name, demangled, exact, parts)
    plist = split(toks, end, n)
    if plist is None or plist[0] != n - 1:
        return Signature(name, demangled, False, parts)
    return Signature(name, demangled, exact, parts,
                     lazy=functools.partial(_params, p, plist[1], parts[-1][1], placeholders))


def _params(p: _Parser, items: list[tuple[int, int]], targs: tuple[Arg, ...] | None,
            placeholders: bool) -> tuple[Arg, ...]:
    """A demangled parameter list (token slices of ``p``). cu++filt names the template parameters
    T1, T2...; ``T1...`` is a pack: one parameter per remaining argument."""
    if not placeholders:
        return _param_list(p, items)
    targs = targs or ()
    p.subst = {f"T{k}": a for k, a in enumerate(targs, 1)}
    toks = p.toks
    out: list[Arg] = []
    for a, b in items:
        t = toks[a]
        if b - a == 2 and toks[a + 1] == "..." and t[:1] == "T" and t[1:].isdigit() \
                and len(t) < 12:
            out.extend(targs[int(t[1:]) - 1:])  # nothing for an empty pack
        else:
            out.extend(_param_list(p, [(a, b)]))
    return tuple(out)


def _full_expression(expr: str) -> Signature:
    toks = tokens(expr)
    n = len(toks)
    p = _Parser(toks, user=True)
    i = 0
    param_nodes = None
    if n and toks[0] == "(":
        found = split(toks, 0, n)
        if found is None:
            return Signature(join(toks), expr, False, None)
        param_nodes = _function_pointer_params(p, 1, found[0])
        if param_nodes is None:
            return Signature(join(toks), expr, False, None)
        i = found[0] + 1
    if i < n and toks[i] == "&":
        i += 1
    named = p.name(i, n)
    if named is None or named[0] != n:
        return Signature(join(toks[i:]), expr, False, None, param_nodes)
    parts = named[1]
    exact = all(a.exact for _, args in parts if args for a in args) and \
        (param_nodes is None or all(x.exact for x in param_nodes))
    return Signature(name_key(parts), expr, exact, parts, param_nodes)


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


def _fast_words(words: str) -> Arg | None:
    if words == "true" or words == "false":
        return Value("bool", int(words == "true"))
    split = words.split()
    if all(w in _BUILTIN_WORDS for w in split):
        key = _builtin_type(split)
        return None if key is None else Type(key, True)
    if len(split) == 1 and words in TYPEDEFS:
        return Type(TYPEDEFS[words], True, spelled=words)
    if len(split) == 1 and is_name(words):
        return Type(words, False)
    return None


def _fast_demangled_arg(text: str) -> Arg | None:
    m = _FAST_DEMANGLED_ARG.fullmatch(text)
    if m is None:
        return None
    cast, minus, digits, suffix, words = m.groups()
    if words is not None:
        return _fast_words(words)
    value = -int(digits) if minus else int(digits)
    if cast is None:
        return typed(LIB_SUFFIX[suffix], value, text)
    to = _builtin_type(cast.split()) if not suffix and all(
        w in _BUILTIN_WORDS for w in cast.split()) else None
    return typed(to, value, text) if to is not None and to in _INT else None


def _fast_user_arg(text: str) -> Arg | None:
    m = _FAST_USER_ARG.fullmatch(text)
    if m is None:
        return None
    minus, literal, words = m.groups()
    if words is not None:
        return _fast_words(words)
    v = user_integer(literal)
    if minus:
        v = unary("-", v, "")
    return v if v.exact else Unknown(join(tokens(text)))  # spelled as the full parser does


def _fast_signature(m: re.Match, text: str, read_arg) -> Signature | None:
    qualified, arglist = m.group(1, 2)
    if "::" in qualified:
        idents = [c.strip() for c in qualified.split("::")]
        qualified = "::".join(idents)
    else:
        idents = [qualified]
    for c in idents:
        if c in NOT_NAMES:
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
        targs = sig.parts[-1][1] if sig.parts else None
        sig._lazy = functools.partial(_lazy_params, m.group(3), targs, placeholders)
    return sig


def _lazy_params(text: str, targs: tuple[Arg, ...] | None, placeholders: bool
                 ) -> tuple[Arg, ...]:
    """The parameters of a fast-path name: ``text`` is one parenthesized list, no parentheses
    inside (the regular expression saw to that)."""
    toks = tokens(text)
    found = split(toks, 0, len(toks))
    return _params(_Parser(toks, user=False), found[1] if found else [], targs, placeholders)


def _fast_expression(text: str) -> Signature | None:
    m = _FAST_EXPRESSION.fullmatch(text)
    return None if m is None else _fast_signature(m, text, _fast_user_arg)


def _function_pointer_params(p: _Parser, i: int, j: int) -> tuple[Arg, ...] | None:
    """The parameter types of ``void(*)(float*, int)`` (tokens i..j), or None if it is not a
    function pointer or reference type."""
    toks = p.toks
    k = i
    while k < j and toks[k] != "(":
        k += 1
    inner = split(toks, k, j) if k < j else None
    if inner is None or toks[k + 1:inner[0]] not in (["*"], ["&"]) or inner[0] + 1 >= j:
        return None
    plist = split(toks, inner[0] + 1, j)
    if plist is None or plist[0] != j - 1:
        return None
    return _param_list(p, plist[1])


def canonical(text: str) -> str:
    """The canonical spelling of a name expression, a type or a template argument."""
    toks = tokens(text)
    sig = parse_expression(text)
    if sig.parts is not None:
        return sig.name
    try:
        return _Parser(toks, user=True).arg(0, len(toks)).key
    except _TooDeep:
        return text


