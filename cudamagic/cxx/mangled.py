"""How long a mangled name demangles to, worked out without demangling it.

An Itanium-mangled name refers back to its earlier parts (``S0_``, ``T_``), so 200 characters can
demangle to gigabytes (``P<P<P<...>>>`` with each level named twice). :func:`demangled_bound`
reads the name once, as the demangler's parser would, keeping for each part that a later one can
refer to (each substitution candidate, each template argument) an upper bound of its printed
length, so a reference costs what its target costs; the total is an upper bound of the
demangled text's length, in time linear in the mangled name's length.

Each part is charged generously (:data:`_NODE`: more than any part prints besides its children),
so the bound is loose (a few times the text) but never below it; tests/test_demangle.py checks
both on real NVRTC symbols. A name this reader does not follow (a construct it does not know, or
one that is not well formed) gets the coarse bound :func:`coarse_bound`: every back reference
counted as doubling everything before it.
"""

from __future__ import annotations

import re

__all__ = ["demangled_bound", "coarse_bound", "Unreadable"]

# printed characters a part can add beside its children: ``unsigned long long``, `` const``,
# ``(*)``, ``, ``, ``::``, ``(anonymous namespace)``, ``{lambda(`` ... ``)#12}``
_NODE = 24
# the standard abbreviations print at most this (``Ss``: std::basic_string<char, ...>)
_ABBREVIATION = 80
_ABBREVIATIONS = frozenset("tabsiod")
_BUILTIN = frozenset("vwbcahstijlmxynofdegz")
_D_BUILTIN = frozenset("defhisuacn")
_OPERATOR = re.compile(r"[a-z][a-zA-Z]")
_DIGITS = re.compile(r"\d+")
_SEQ = re.compile(r"[0-9A-Z]*_")
_REFERENCE = re.compile(r"[ST][0-9A-Z]*_")

# expression operators by arity (the Itanium ABI's <operator-name> table)
_UNARY = frozenset("ps ng ad de co nt pp mm sz az te st at ti dl da nx tw sp".split())
_BINARY = frozenset(
    "pl mi ml dv rm an or eo aS pL mI mL dV rM aN oR eO ls rs lS rS eq ne lt gt le ge ss nt aa oo "
    "cm pm pt dt ds".split())


class Unreadable(Exception):
    """The name is not one this reader follows (the caller falls back to a coarse bound)."""


def coarse_bound(symbol: str) -> int:
    """An upper bound of the demangled length that needs no parse: each back reference may
    print everything before it again."""
    return (len(symbol) + 1) * _ABBREVIATION << len(_REFERENCE.findall(symbol))


def demangled_bound(symbol: str) -> int:
    """An upper bound of the length of ``symbol`` demangled (its own length if not mangled).

    :raises Unreadable: the name is mangled in a way this reader does not follow.
    """
    if not symbol.startswith("_Z"):
        return len(symbol)
    reader = _Reader(symbol)
    size = reader.encoding()
    if reader.pos < len(symbol):
        if symbol[reader.pos] != ".":  # a clone suffix (.constprop.0) prints as written
            raise Unreadable(f"unread text at {reader.pos}")
        size += len(symbol) - reader.pos
    return size


class _Reader:
    """One pass over a mangled name: sizes of its parts, candidates, template arguments."""

    __slots__ = ("s", "pos", "subs", "targs", "depth")

    def __init__(self, s: str) -> None:
        self.s = s
        self.pos = 2
        self.subs: list[int] = []      # substitution candidates' printed-length bounds
        self.targs: list[int] = []     # the last template argument list's bounds (T_, T0_...)
        self.depth = 0

    # --- the characters ------------------------------------------------------------------

    def peek(self, n: int = 1) -> str:
        return self.s[self.pos:self.pos + n]

    def take(self, text: str) -> bool:
        if self.s.startswith(text, self.pos):
            self.pos += len(text)
            return True
        return False

    def expect(self, text: str) -> None:
        if not self.take(text):
            raise Unreadable(f"expected {text!r} at {self.pos}")

    def number(self) -> int:
        self.take("n")
        m = _DIGITS.match(self.s, self.pos)
        if m is None:
            raise Unreadable(f"expected a number at {self.pos}")
        self.pos = m.end()
        return len(m.group())

    def seq(self) -> int | None:
        """A ``<seq-id>_`` (base 36) as an index: ``_`` is 0, ``0_`` is 1; None if absent."""
        m = _SEQ.match(self.s, self.pos)
        if m is None:
            return None
        self.pos = m.end()
        digits = m.group()[:-1]
        return int(digits, 36) + 1 if digits else 0

    def nest(self) -> None:
        self.depth += 1
        if self.depth > 512:
            raise Unreadable("nested too deep")

    # --- the grammar ---------------------------------------------------------------------

    def encoding(self) -> int:
        if self.peek() in ("T", "G"):
            raise Unreadable("a special name")  # vtables, guards: not kernels
        size, _ = self.name(outer=True)
        while self.pos < len(self.s) and self.peek() not in (".", "E"):
            size += self.type() + 2  # the parameters (a template's return type first)
        return size + _NODE

    def name(self, outer: bool = False) -> tuple[int, bool]:
        """A <name>: its bound and whether it ends in template arguments. ``outer``: the name
        of the encoding, whose template arguments T_, T0_... refer to."""
        c = self.peek()
        if c == "N":
            return self.nested(outer)
        if c == "Z":
            return self.local(), False
        if self.take("St"):
            size = 5 + self.unqualified()
        elif c == "S":
            size = self.substitution()
            if self.peek() != "I":
                raise Unreadable("a substitution as a whole name")
        else:
            size = self.unqualified()
        if self.peek() == "I":
            self.subs.append(size)  # an unscoped template name is a candidate
            size += self.template_args(outer)
            return size, True
        return size, False

    def nested(self, outer: bool) -> tuple[int, bool]:
        self.expect("N")
        self.nest()
        size = self.qualifiers()
        if self.peek() in ("R", "O"):
            self.pos += 1
            size += 3
        prefix = 0
        template = False
        first = True
        while not self.take("E"):
            if self.pos >= len(self.s):
                raise Unreadable("an unterminated nested name")
            c = self.peek()
            template = False
            if c == "I":
                if first:
                    raise Unreadable("template arguments without a name")
                prefix += self.template_args(outer)
                template = True
            elif c == "S" and self.peek(2) != "St":
                prefix += self.substitution()
                first = False
                continue  # a substitution is not a new candidate
            elif self.take("St"):
                prefix += 5
                continue
            elif c == "T":
                prefix += self.template_param()
            elif c == "D" and self.peek(2) in ("Dt", "DT"):
                prefix += self.decltype()
            elif c == "M":
                self.pos += 1
                continue
            else:
                prefix += self.unqualified() + 2
            first = False
            if self.peek() != "E":
                self.subs.append(prefix)  # each proper prefix is a candidate
        self.depth -= 1
        return prefix + size, template

    def local(self) -> int:
        self.expect("Z")
        self.nest()
        saved = self.targs
        size = self.encoding()
        self.targs = saved
        self.expect("E")
        if self.take("s"):
            size += 20  # a string literal
        else:
            size += self.name()[0]
        self.discriminator()
        self.depth -= 1
        return size + _NODE

    def discriminator(self) -> None:
        if self.take("__"):
            self.number()
            self.expect("_")
        elif self.take("_"):
            self.number()

    def unqualified(self) -> int:
        """A source name, operator, constructor or destructor, unnamed type or lambda, with any
        ABI tags."""
        c = self.peek()
        if self.take("L"):  # internal linkage
            c = self.peek()
        if c.isdigit():
            size = self.source_name()
        elif c == "C" and self.peek(2)[1:] in ("1", "2", "3", "4", "5", "I"):
            self.pos += 2
            if self.s[self.pos - 1] == "I":
                self.pos += 1
                self.type()
            size = _NODE
        elif c == "D" and self.peek(2)[1:] in ("0", "1", "2", "4", "5"):
            self.pos += 2
            size = _NODE
        elif self.take("Ut"):
            self.seq_or_underscore()
            size = _NODE
        elif self.take("Ul"):
            size = _NODE
            self.nest()
            while not self.take("E"):
                if self.pos >= len(self.s):
                    raise Unreadable("an unterminated lambda")
                size += self.type() + 2
            self.depth -= 1
            self.seq_or_underscore()
        elif self.take("DC"):
            size = _NODE
            while not self.take("E"):
                if self.pos >= len(self.s):
                    raise Unreadable("an unterminated binding")
                size += self.source_name()
        elif self.take("cv"):
            size = self.type() + _NODE
        elif self.take("li"):
            size = self.source_name() + _NODE
        elif c == "v" and self.s[self.pos + 1:self.pos + 2].isdigit():
            self.pos += 2
            size = self.source_name() + _NODE
        elif _OPERATOR.match(self.s, self.pos):
            self.pos += 2
            size = _NODE
        else:
            raise Unreadable(f"unknown name at {self.pos}")
        while self.take("B"):  # ABI tags: [abi:cxx11]
            size += self.source_name() + 6
        return size

    def seq_or_underscore(self) -> None:
        if self.take("_"):
            return
        self.number()
        self.expect("_")

    def source_name(self) -> int:
        m = _DIGITS.match(self.s, self.pos)
        if m is None:
            raise Unreadable(f"expected a source name at {self.pos}")
        n = int(m.group())
        if n <= 0 or m.end() + n > len(self.s):
            raise Unreadable("a source name longer than the symbol")
        self.pos = m.end() + n
        return n + 2

    def substitution(self) -> int:
        self.expect("S")
        c = self.peek()
        if c in _ABBREVIATIONS and c:
            self.pos += 1
            return _ABBREVIATION
        index = self.seq()
        if index is None:
            raise Unreadable(f"a bad substitution at {self.pos}")
        if index < len(self.subs):
            return self.subs[index]
        raise Unreadable(f"substitution {index} of {len(self.subs)}")

    def template_param(self) -> int:
        self.expect("T")
        if self.take("L"):  # a lambda's auto parameter: TL<level>__<n>_
            self.number()
            self.expect("__")
            self.seq()
            return _NODE
        index = self.seq()
        if index is None:
            raise Unreadable(f"a bad template parameter at {self.pos}")
        if index < len(self.targs):
            return self.targs[index]
        # a parameter of a template whose arguments come later (a conversion operator) or of
        # a generic lambda: bound it by everything seen
        return max(self.targs + self.subs + [_NODE]) * 2

    def template_args(self, outer: bool = False) -> int:
        self.expect("I")
        self.nest()
        sizes: list[int] = []
        while not self.take("E"):
            if self.pos >= len(self.s):
                raise Unreadable("unterminated template arguments")
            sizes.append(self.template_arg())
        self.depth -= 1
        if outer:
            self.targs = sizes  # T_ and T0_ refer to the innermost enclosing template's
        return sum(sizes) + 2 * len(sizes) + 4

    def template_arg(self) -> int:
        c = self.peek()
        if c == "X":
            self.pos += 1
            size = self.expression()
            self.expect("E")
            return size
        if c == "L":
            return self.literal()
        if c == "J":
            self.pos += 1
            size = 4
            while not self.take("E"):
                if self.pos >= len(self.s):
                    raise Unreadable("an unterminated pack")
                size += self.template_arg() + 2
            return size
        return self.type()

    def literal(self) -> int:
        self.expect("L")
        if self.take("_Z"):
            saved = self.targs
            size = self.encoding()
            self.targs = saved
            self.expect("E")
            return size
        size = self.type() + _NODE
        start = self.pos
        while self.pos < len(self.s) and self.s[self.pos] != "E":
            self.pos += 1
        self.expect("E")
        return size + (self.pos - start)

    def qualifiers(self) -> int:
        size = 0
        while self.peek() in ("r", "V", "K") and self.peek():
            self.pos += 1
            size += 10
        return size

    def type(self) -> int:
        self.nest()
        try:
            size = self._type()  # None: one of the rest (no frame left between the two)
            return self._compound_type() if size is None else size
        finally:
            self.depth -= 1

    def _type(self) -> int | None:
        c = self.peek()
        if not c:
            raise Unreadable("a type missing at the end")
        if c in _BUILTIN:
            self.pos += 1
            return _NODE
        if c in ("r", "V", "K"):
            size = self.qualifiers() + self.type()
            self.subs.append(size)
            return size
        if c in ("P", "R", "O", "C", "G"):
            self.pos += 1
            size = self.type() + _NODE
            self.subs.append(size)
            return size
        if c == "U":
            self.pos += 1
            size = self.source_name()
            if self.peek() == "I":
                size += self.template_args()
            size += self.type()
            self.subs.append(size)
            return size
        if c == "u":
            self.pos += 1
            size = self.source_name()
            if self.peek() == "I":
                size += self.template_args()
            return size
        if c == "F":
            size = self.function_type()
            self.subs.append(size)
            return size
        return None

    def _compound_type(self) -> int:
        """The rest of :meth:`_type`: arrays, members, template parameters, substitutions and
        class names."""
        c = self.peek()
        if c == "A":
            self.pos += 1
            if self.peek() == "_":
                size = _NODE
            elif self.peek().isdigit():
                size = self.number() + _NODE
            else:
                size = self.expression() + _NODE
            self.expect("_")
            size += self.type()
            self.subs.append(size)
            return size
        if c == "M":
            self.pos += 1
            size = self.type() + self.type() + _NODE
            self.subs.append(size)
            return size
        if c == "T" and self.peek(2)[1:] in ("s", "u", "e"):
            self.pos += 2
            size = self.name()[0] + _NODE
            self.subs.append(size)
            return size
        if c == "T":
            size = self.template_param()
            self.subs.append(size)
            if self.peek() == "I":
                size += self.template_args()
                self.subs.append(size)
            return size
        if c == "D":
            return self.d_type()
        if c == "S" and self.peek(2) != "St":
            size = self.substitution()
            if self.peek() == "I":
                size += self.template_args()
                self.subs.append(size)
            return size
        # a class or enumeration name
        size, _ = self.name()
        self.subs.append(size)
        return size

    def d_type(self) -> int:
        c2 = self.peek(2)[1:]
        if c2 in _D_BUILTIN:
            self.pos += 2
            return _NODE
        if c2 == "F":  # _FloatN, std::bfloat16_t
            self.pos += 2
            self.number()
            if not self.take("b"):
                self.expect("_")
            return _NODE
        if c2 in ("B", "U"):  # _BitInt(N)
            self.pos += 2
            if self.peek().isdigit():
                self.number()
            else:
                self.expression()
            self.expect("_")
            return _NODE
        if c2 in ("t", "T"):
            size = self.decltype()
            self.subs.append(size)
            return size
        if c2 == "p":  # a pack expansion
            self.pos += 2
            size = self.type() + 3
            self.subs.append(size)
            return size
        if c2 in ("o", "O", "w", "x"):  # exception specifications, then a function type
            size = self.exception_spec()
            size += self.type()
            return size
        raise Unreadable(f"unknown D type at {self.pos}")

    def exception_spec(self) -> int:
        if self.take("Do") or self.take("Dx"):
            return 10
        if self.take("DO"):
            size = self.expression()
            self.expect("E")
            return size + _NODE
        self.expect("Dw")
        size = _NODE
        while not self.take("E"):
            if self.pos >= len(self.s):
                raise Unreadable("an unterminated throw specification")
            size += self.type() + 2
        return size

    def decltype(self) -> int:
        self.pos += 2
        size = self.expression() + _NODE
        self.expect("E")
        return size

    def function_type(self) -> int:
        self.expect("F")
        self.take("Y")
        size = _NODE
        while not self.take("E"):
            if self.pos >= len(self.s):
                raise Unreadable("an unterminated function type")
            if self.peek() in ("R", "O") and self.peek(2)[1:] == "E":
                self.pos += 1
                size += 3
                continue
            size += self.type() + 2
        return size

    def expression(self) -> int:
        self.nest()
        try:
            size = self._expression()  # None: an operation (no frame left between the two)
            return self._operation() if size is None else size
        finally:
            self.depth -= 1

    def _expression(self) -> int | None:
        s = self.s
        c = self.peek()
        if not c:
            raise Unreadable("an expression missing at the end")
        if c == "L":
            return self.literal()
        if c == "T":
            return self.template_param()
        if self.take("fp"):
            self.qualifiers()
            if self.peek() != "_":
                self.number()
            self.expect("_")
            return _NODE
        if self.take("fL"):
            self.number()
            self.expect("p")
            self.qualifiers()
            if self.peek() != "_":
                self.number()
            self.expect("_")
            return _NODE
        if self.take("sr"):
            size = _NODE
            if self.take("N"):
                size += self.type()
                while not self.take("E"):
                    size += self.unresolved_name()
            else:
                size += self.type() if self.peek() in ("T", "S", "D") else 0
            return size + self.unresolved_name()
        if self.take("cl") or self.take("tl") or self.take("il"):
            if s[self.pos - 2:self.pos] == "tl":
                self.type()
            size = _NODE
            while not self.take("E"):
                if self.pos >= len(s):
                    raise Unreadable("an unterminated call")
                size += self.expression() + 2
            return size
        if self.take("cv"):
            size = self.type() + _NODE
            if self.take("_"):
                while not self.take("E"):
                    if self.pos >= len(s):
                        raise Unreadable("an unterminated conversion")
                    size += self.expression() + 2
                return size
            return size + self.expression()
        return None

    def _operation(self) -> int:
        """The rest of :meth:`_expression`: sizeof and casts, member access, folds, operators."""
        c = self.peek()
        if self.peek(2) in ("st", "at", "ti") and self.take(self.peek(2)):
            return self.type() + _NODE
        if self.peek(2) in ("sZ",) and self.take("sZ"):
            return (self.template_param() if self.peek() == "T" else self.expression()) + _NODE
        if self.take("sP"):
            size = _NODE
            while not self.take("E"):
                size += self.template_arg() + 2
            return size
        if self.peek(2) in ("dc", "sc", "cc", "rc") and self.take(self.peek(2)):
            return self.type() + self.expression() + _NODE
        if self.peek(2) in ("dt", "pt") and self.take(self.peek(2)):
            return self.expression() + self.unresolved_name() + _NODE
        if self.peek(2) in ("fl", "fr") and self.take(self.peek(2)):
            self.pos += 2
            return self.expression() + _NODE
        if self.peek(2) in ("fL", "fR") and self.take(self.peek(2)):
            self.pos += 2
            return self.expression() + self.expression() + _NODE
        if self.take("qu"):
            return self.expression() + self.expression() + self.expression() + _NODE
        if self.take("sp"):
            return self.expression() + 3
        if self.take("tw"):
            return self.expression() + _NODE
        if self.take("tr"):
            return _NODE
        op = self.peek(2)
        if op in _UNARY and self.take(op):
            return self.expression() + _NODE
        if op in _BINARY and self.take(op):
            return self.expression() + self.expression() + _NODE
        if c.isdigit() or c in ("o", "d", "S") or op == "on" or op == "dn":
            return self.unresolved_name()
        raise Unreadable(f"unknown expression at {self.pos}")

    def unresolved_name(self) -> int:
        """A name in an expression: a source name, an operator or a destructor, with any
        template arguments."""
        if self.take("gs"):
            pass
        if self.peek() == "S" and self.peek(2) != "St":
            size = self.substitution()
        elif self.take("on"):
            self.pos += 2
            size = _NODE
        elif self.take("dn"):
            size = self.type() + 1 if not self.peek().isdigit() else self.source_name() + 1
        else:
            size = self.unqualified()
        if self.peek() == "I":
            size += self.template_args()
        return size
