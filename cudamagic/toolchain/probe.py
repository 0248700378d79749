"""Types from the compiler, asked in the one compile: probes added to the cell's NVRTC program.

The CUBIN keeps a variable's size and an ``extern "C"`` kernel's parameter sizes, not their C++
types. NVRTC knows them, and says them through the lowered names of two variable templates
instantiated by name expressions beside the user's:

- ``&__cudamagic_p::ty<decltype(Q)>`` lowers to a name whose template argument is the type of
  the entity ``Q`` names, mangled (``A8_f``: ``float[8]``), typedefs and macros resolved;
- ``&__cudamagic_p::en<Q>`` lowers to a name whose template argument is that entity itself,
  which demangles to the entity's own name, so the answer is matched to the CUBIN symbol it
  belongs to (an ``extern "C"`` symbol ``k`` is not the C++ ``k(float, float*)``).

Which names to ask about comes from a token reading of the cell (:func:`candidates`): the
declarations at namespace scope that hold ``__device__``, ``__constant__`` or ``__managed__``, and
the ``extern "C"`` kernels. That reading only chooses questions; every answer is the compiler's,
for the entity it names. A name the reading finds in text that is not compiled (a dead ``#if``
branch) finds a fallback the probe declares, and no answer; a variable the reading does not find
(one a macro or a header declares) is not asked about, and is listed as bytes, saying so.
A compile whose probes fail where the cell's code does not is compiled again without them
(:func:`typed_compile`): the probes never make a cell fail.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import CompileError
from .image import PROBE_MARK
from .nvrtc import CompileResult

__all__ = ["Candidate", "CandidateKind", "Probe", "ProbeAnswers", "VarType", "TypeGap",
           "candidates", "typed_compile", "PROBE_MARK", "strip_internal"]

_NS = "__cudamagic_p"
_FALLBACK = "__cudamagic_f"
#: The most names one compile asks about (a generated cell of 100 000 variables asks none).
MAX_CANDIDATES = 4000


class CandidateKind(enum.Enum):
    """What a probed name was declared as."""

    VARIABLE = "variable"
    EXTERN_C = "extern-c"   # an extern "C" kernel: its parameter types are asked


class TypeGap(enum.Enum):
    """Why a variable has no dtype (its bytes are shown, never a guess)."""

    NOT_ASKED = "not-asked"          # not declared in the cell's own text (a header, a macro)
    NOT_ARITHMETIC = "not-arithmetic"  # a class, a pointer to member, a type NumPy has no dtype for
    NO_SOURCE = "no-source"          # a CUBIN from elsewhere: no compiler to ask
    SIZE = "size"                    # the compiler's type and the CUBIN's size disagree


@dataclass(frozen=True)
class Scope:
    """One namespace of a declaration's path: ``name`` "" for an anonymous one."""

    name: str
    inline: bool = False


@dataclass(frozen=True)
class Candidate:
    """A name to ask the compiler about: its namespaces, its name, what it was declared as;
    ``expression`` is the entity's expression where the user gave it (``-n "&z::tv<float>"``)."""

    path: tuple[Scope, ...]
    name: str
    kind: CandidateKind
    expression: str = ""

    @property
    def qualified(self) -> str:
        """The expression that names the entity from anywhere (``::a::k``)."""
        if self.expression:
            return self.expression
        return "::" + "".join(f"{s.name}::" for s in self.path if s.name) + self.name


@dataclass(frozen=True)
class Probe:
    """The two name expressions asked for one candidate."""

    candidate: Candidate
    type_expr: str
    entity_expr: str


@dataclass(frozen=True)
class VarType:
    """A variable's type as the compiler gave it.

    Attributes
    ----------
    ctype : str or None
        The C++ type as the demangler spells the compiler's answer (``float [8]``); None where
        none was asked or answered.
    dtype : str or None
        The NumPy dtype name of its element, where the element is an arithmetic type.
    shape : tuple of int
        The array's extents (``()`` for a scalar, or an array of unknown bound).
    gap : TypeGap or None
        Why ``dtype`` is None.
    """

    ctype: str | None
    dtype: str | None
    shape: tuple[int, ...] = ()
    gap: TypeGap | None = None

    def to_json(self) -> list[object]:
        return [self.ctype, self.dtype, list(self.shape), self.gap.value if self.gap else None]

    @classmethod
    def from_json(cls, value: object) -> "VarType":
        """:raises ValueError: not what :meth:`to_json` writes."""
        if not (isinstance(value, list) and len(value) == 4):
            raise ValueError("a variable's type is not a list of 4")
        ctype, dtype, shape, gap = value
        if not (ctype is None or isinstance(ctype, str)) or not (
                dtype is None or isinstance(dtype, str)) or not isinstance(shape, list) or \
                not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 40
                        for d in shape) or len(shape) > 32:
            raise ValueError("a variable's type has fields of the wrong type")
        if dtype is not None and dtype not in _DTYPES:
            raise ValueError(f"a variable's dtype {dtype!r} is not one cudamagic writes")
        return cls(ctype, dtype, tuple(shape), TypeGap(gap) if gap is not None else None)


@dataclass(frozen=True)
class ProbeAnswers:
    """What the probes said, by CUBIN symbol: variables' types and ``extern "C"`` kernels'
    texts (``k(int, int*)``, as a demangler gives a C++ function)."""

    variables: Mapping[str, VarType] = field(default_factory=dict)
    functions: Mapping[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Reading the cell's tokens: which names to ask about
# --------------------------------------------------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_NUMBER = re.compile(r"\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*")
_SPACE = re.compile(r"[ \t\r\f\v]+")
_STRING_PREFIX = ("u8", "u", "U", "L")
_SPECIFIERS = frozenset(("__device__", "__constant__", "__managed__"))
_ATTRIBUTE_CALLS = frozenset(("__align__", "alignas", "__attribute__", "__declspec",
                              "__launch_bounds__", "__cluster_dims__", "__maxnreg__",
                              "__nv_register_params__", "_Alignas"))
_NOT_NAMES = frozenset((
    "const", "volatile", "static", "extern", "inline", "constexpr", "constinit", "thread_local",
    "__device__", "__constant__", "__managed__", "__shared__", "__global__", "__host__",
    "__restrict__", "__grid_constant__", "unsigned", "signed", "int", "long", "short", "char",
    "float", "double", "bool", "void", "auto", "struct", "class", "union", "enum", "operator",
    "typename", "register", "mutable", "__forceinline__", "__noinline__", "decltype"))
_DECL_STARTS = frozenset(("extern", "static", "const", "constexpr", "inline", "volatile",
                          "__device__", "__constant__", "__managed__", "__global__"))
_SKIPPED_STARTS = frozenset(("template", "typedef", "using", "friend", "static_assert",
                             "namespace", "asm", "__asm__"))


def _skip_directive(text: str, i: int) -> int:
    """The end of the preprocessor line that starts at ``i`` (its comments skipped whole)."""
    n = len(text)
    while i < n and text[i] != "\n":
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            return n if j < 0 else j
        else:
            i += 1
    return i


def _skip_quoted(text: str, i: int, quote: str) -> int:
    """The index after a string or character literal opened at ``i`` (a line end closes it)."""
    n = len(text)
    i += 1
    while i < n and text[i] != quote and text[i] != "\n":
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _skip_raw(text: str, i: int) -> int:
    """The index after a raw string literal whose ``"`` is at ``i``."""
    open_ = text.find("(", i)
    if open_ < 0 or open_ - i > 17:
        return i + 1
    close = text.find(")" + text[i + 1:open_] + '"', open_)
    return len(text) if close < 0 else close + open_ - i + 1


def tokens(source: str) -> list[str]:
    """The cell as tokens, without comments, preprocessor lines or character literals:
    identifiers, numbers, ``::``, single punctuation characters, and string literals as ``"``
    followed by their text (``"C`` for ``"C"``)."""
    text = source.replace("\\\r\n", "").replace("\\\n", "")  # line splices first, as C++ does
    out: list[str] = []
    i, n, line_start = 0, len(text), True
    while i < n:
        c = text[i]
        if c == "\n":
            i, line_start = i + 1, True
            continue
        m = _SPACE.match(text, i)
        if m:
            i = m.end()
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if c == "#" and line_start:
            i = _skip_directive(text, i)
            continue
        line_start = False
        m = _IDENT.match(text, i)
        if m:
            word, i = m.group(), m.end()
            if i < n and text[i] == '"' and word.endswith("R") and word[:-1] in (*_STRING_PREFIX, ""):
                i = _skip_raw(text, i)
                out.append('"')
            elif i < n and text[i] in "\"'" and word in _STRING_PREFIX:
                continue  # the literal itself is read next
            else:
                out.append(word)
            continue
        m = _NUMBER.match(text, i)
        if m:
            out.append(m.group())
            i = m.end()
        elif c == '"':
            j = _skip_quoted(text, i, '"')
            out.append('"' + text[i + 1:j - 1])
            i = j
        elif c == "'":
            i = _skip_quoted(text, i, "'")
            out.append("'")
        elif text.startswith("::", i):
            out.append("::")
            i += 2
        else:
            out.append(c)
            i += 1
    return out


def _strip_attributes(stmt: list[str]) -> list[str]:
    """A statement without its attributes (``__align__(16)``, ``[[nodiscard]]``...)."""
    out: list[str] = []
    i, n = 0, len(stmt)
    while i < n:
        t = stmt[i]
        if t in _ATTRIBUTE_CALLS and i + 1 < n and stmt[i + 1] == "(":
            i = _closing(stmt, i + 1, "(", ")") + 1
        elif t == "[" and i + 1 < n and stmt[i + 1] == "[":
            i = _closing(stmt, i, "[", "]") + 1
        else:
            out.append(t)
            i += 1
    return out


def _closing(toks: list[str], i: int, open_: str, close: str) -> int:
    """The index of the token that closes the bracket at ``i`` (the last token if none)."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j] == open_:
            depth += 1
        elif toks[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


def _declarators(stmt: list[str]) -> list[tuple[tuple[str, ...], str]]:
    """The names a namespace-scope variable declaration declares, each with the namespaces
    written before it (``ns::x``); a function's declaration declares none here."""
    out = []
    depth = angle = 0
    segment: list[str] = []
    for t in [*stmt, ","]:
        if t in "([{":
            depth += 1
        elif t in ")]}":
            depth -= 1
        elif t == "<" and depth == 0 and segment and _IDENT.fullmatch(segment[-1]) \
                and "=" not in segment:
            angle += 1
        elif t == ">" and angle and depth == 0:
            angle -= 1
        if t == "," and depth == 0 and angle == 0:
            named = _declared_name(segment)
            if named is not None:
                out.append(named)
            segment = []
        else:
            segment.append(t)
    return out


def _declared_name(seg: list[str]) -> tuple[tuple[str, ...], str] | None:
    """The name one declarator declares (the last identifier before its extents or its
    initialiser), with its written qualifiers; None for a function or what holds no name."""
    end = len(seg)
    for j, t in enumerate(seg):
        if t in ("[", "=", "{"):
            end = j
            break
        if t == "(":
            return None  # a function (or a pointer to one): not a variable probed here
    head = seg[:end]
    for j in range(len(head) - 1, -1, -1):
        t = head[j]
        if _IDENT.fullmatch(t) and t not in _NOT_NAMES:
            quals: list[str] = []
            k = j - 1
            while k >= 1 and head[k] == "::" and _IDENT.fullmatch(head[k - 1]):
                quals.insert(0, head[k - 1])
                k -= 2
            return tuple(quals), t
        if t not in ("*", "&", "const", "volatile", "__restrict__"):
            return None
    return None


def _statement(stmt: list[str], path: tuple[Scope, ...], c_block: bool,
               found: dict[tuple[tuple[Scope, ...], str], Candidate], templates: set[str]
               ) -> None:
    """Add the candidates one namespace-scope statement declares (and the names of the
    variable templates it declares to ``templates``)."""
    toks = _strip_attributes(stmt)
    if len(toks) > 1 and toks[0] == "template" and toks[1] != "<":
        _instantiation(toks[1:], path, found)
        return
    if len(toks) > 1 and toks[0] == "template":
        rest = toks[_closing(toks, 1, "<", ">") + 1:]
        if _SPECIFIERS.intersection(rest) and "(" not in rest:
            for _, name in _declarators(rest):
                templates.add(name)
        return
    if not toks or toks[0] in _SKIPPED_STARTS:
        return
    # what stands before the declaration's first specifier (a macro's invocation without a
    # ';', such as DECLARE(x)) is not part of it
    start = next((j for j, t in enumerate(toks) if t in _DECL_STARTS), None)
    if start is None:
        return
    if start and "template" in toks[:start]:
        return
    extern_c = c_block or any(a == "extern" and b == '"C' for a, b in zip(toks, toks[1:]))
    toks = toks[start:]
    if "__global__" in toks:
        at = toks.index("(") if "(" in toks else 0
        if extern_c and at and _IDENT.fullmatch(toks[at - 1]) and toks[at - 1] not in _NOT_NAMES:
            name = toks[at - 1]
            found.setdefault((path, name), Candidate(path, name, CandidateKind.EXTERN_C))
        return
    if not _SPECIFIERS.intersection(toks):
        return
    for quals, name in _declarators(toks):
        where = path + tuple(Scope(q) for q in quals)
        found.setdefault((where, name), Candidate(where, name, CandidateKind.VARIABLE))


def _joined(toks: list[str]) -> str:
    """Tokens as C++ text: a space only between two words."""
    out = ""
    for t in toks:
        out += (" " if out and (out[-1].isalnum() or out[-1] == "_")
                and (t[0].isalnum() or t[0] == "_") else "") + t
    return out


def _instantiation(toks: list[str], path: tuple[Scope, ...],
                   found: dict[tuple[tuple[Scope, ...], str], Candidate]) -> None:
    """An explicit instantiation of a variable template (``template __device__ float
    zero<float>;``): the instance, asked about by its template-id."""
    if not _SPECIFIERS.intersection(toks) or "(" in toks or "<" not in toks:
        return
    at = toks.index("<")
    end = _closing(toks, at, "<", ">")
    if not at or not _IDENT.fullmatch(toks[at - 1]) or end != len(toks) - 1 and \
            toks[end + 1] not in ("=", "{"):
        return
    j = at - 1
    while j >= 2 and toks[j - 1] == "::" and _IDENT.fullmatch(toks[j - 2]):
        j -= 2
    quals = "".join(f"{s.name}::" for s in path if s.name)
    text = "::" + quals + _joined(toks[j:end + 1])
    found.setdefault((path, text), Candidate(path, text, CandidateKind.VARIABLE,
                                             expression=text))


def _namespace(toks: list[str], i: int) -> tuple[tuple[Scope, ...], int] | None:
    """The namespaces a ``namespace`` definition at ``i`` opens and the index after its ``{``;
    None where it is no definition (an alias)."""
    inline = toks[i] == "inline"
    i += 2 if inline else 1
    scopes: list[Scope] = []
    n = len(toks)
    while i < n and toks[i] != "{":
        t = toks[i]
        if t == "inline":
            inline = True
        elif _IDENT.fullmatch(t) and t not in _ATTRIBUTE_CALLS:
            scopes.append(Scope(t, inline))
            inline = False
        elif t in _ATTRIBUTE_CALLS or t == "[":
            i = _closing(toks, i + 1 if t != "[" else i, "(" if t != "[" else "[",
                         ")" if t != "[" else "]")
        elif t != "::":
            return None
        i += 1
    if i >= n:
        return None
    return (tuple(scopes) or (Scope("", inline),)), i + 1


def candidates(source: str) -> list[Candidate]:
    """The names at namespace scope the cell declares as variables (``__device__``,
    ``__constant__``, ``__managed__``) or as ``extern "C"`` kernels, in order, each once."""
    return scan(source)[0]


def scan(source: str) -> tuple[list[Candidate], frozenset[str]]:
    """:func:`candidates`, and the names of the variable templates the cell declares."""
    toks = tokens(source)
    found: dict[tuple[tuple[Scope, ...], str], Candidate] = {}
    templates: set[str] = set()
    stack: list[tuple[tuple[Scope, ...], bool]] = []  # (namespaces opened, an extern "C" block)
    stmt: list[str] = []
    i, n = 0, len(toks)
    while i < n:
        t = toks[i]
        path = tuple(s for scopes, _ in stack for s in scopes)
        c_block = any(c for _, c in stack)
        if not stmt and (t == "namespace" or (t == "inline" and i + 1 < n
                                              and toks[i + 1] == "namespace")):
            opened = _namespace(toks, i)
            if opened is not None:
                stack.append((opened[0], False))
                i = opened[1]
                continue
        if not stmt and t == "extern" and toks[i + 1:i + 3] == ['"C', "{"]:
            stack.append(((), True))
            i += 3
            continue
        if t == "}":
            if stack:
                stack.pop()
            stmt = []
        elif t == ";":
            _statement(stmt, path, c_block, found, templates)
            stmt = []
        elif t == "{":
            end = _closing(toks, i, "{", "}")
            flat = _strip_attributes(stmt)
            if "(" in flat and "=" not in flat and not {"struct", "class", "union",
                                                         "enum"}.intersection(flat):
                _statement(stmt, path, c_block, found, templates)  # a function's definition
                stmt = []
            else:
                stmt.append("{")
                stmt.append("}")
            i = end
        else:
            stmt.append(t)
        i += 1
        if len(found) > MAX_CANDIDATES:
            return [], frozenset()
    return list(found.values()), frozenset(templates)


# --------------------------------------------------------------------------------------------
# The probe: its source, its name expressions, and reading what they lowered to
# --------------------------------------------------------------------------------------------

def _probes(cands: Sequence[Candidate]) -> list[Probe]:
    """One probe per entity name (a name found in two branches asks once)."""
    out: dict[str, Probe] = {}
    for c in cands:
        out.setdefault(c.qualified, Probe(c, f"&{_NS}::ty<decltype({c.qualified})>",
                                          f"&{_NS}::en<{c.qualified}>"))
    return list(out.values())


def probe_source(cands: Sequence[Candidate], avoid: frozenset[str] = frozenset()
                 ) -> tuple[str, dict[int, tuple[Scope, ...]]]:
    """What the probe adds after the cell: the two templates, and for each namespace a name was
    looked for in, a fallback the name finds where the cell compiled no declaration of it
    (qualified lookup reaches a using-directive's namespace only when the name is not a direct
    member). Names in ``avoid`` (words of the user's own name expressions, which are looked up
    unqualified after the probe) get no fallback at global scope. Also returns which
    namespace each fallback line serves, by its line in the text (0: the cell's last line)."""
    lines = ["", "", "#pragma nv_diagnostic push", "#pragma nv_diag_suppress 177",
             f"namespace {_NS} {{ struct none {{}}; template <class T> __device__ char ty; "
             f"template <auto& V> __device__ char en; }}"]
    by_path: dict[tuple[Scope, ...], list[str]] = {}
    for c in cands:
        if c.expression or (not c.path and c.name in avoid):
            continue
        names = by_path.setdefault(c.path, [])
        if c.name not in names:
            names.append(c.name)
    owners: dict[int, tuple[Scope, ...]] = {}
    for k, (path, names) in enumerate(by_path.items()):
        owners[len(lines)] = owners[len(lines) + 1] = path
        lines.append(f"namespace {_FALLBACK}{k} {{ __device__ ::{_NS}::none "
                     + ", ".join(names) + "; }")
        opened = "".join(f"{'inline ' if s.inline else ''}namespace {s.name} {{ " for s in path)
        lines.append(f"{opened}using namespace ::{_FALLBACK}{k};{' }' * len(path)}")
    lines.append("#pragma nv_diagnostic pop")
    return "\n".join(lines) + "\n", owners


# the dtypes of the builtin types' one-letter Itanium codes, and of CUDA's own scalar classes
_BUILTIN = {"f": "float32", "d": "float64", "b": "bool", "c": "int8", "a": "int8",
            "h": "uint8", "s": "int16", "t": "uint16", "i": "int32", "j": "uint32",
            "l": "int64", "m": "uint64", "x": "int64", "y": "uint64", "Ds": "uint16",
            "Di": "uint32", "Du": "uint8", "DF16_": "float16", "6__half": "float16"}
_DTYPES = frozenset(_BUILTIN.values())
_EXTENT = re.compile(r"A(\d*)_")


def decode_type(mangled: str) -> tuple[str | None, tuple[int, ...]]:
    """(dtype, extents) of an Itanium-mangled type (``A3_A5_d``: float64, (3, 5)); the dtype
    is None where the element is no arithmetic type NumPy has (a class, a pointer is uint64:
    its value is an address). An array of unknown bound has no extent here."""
    shape: list[int] = []
    i = 0
    while True:
        m = _EXTENT.match(mangled, i)
        if not m:
            break
        if m.group(1):
            shape.append(int(m.group(1)))
        i = m.end()
    while mangled[i:i + 1] in ("K", "V", "r"):
        i += 1
    element = mangled[i:]
    if element.startswith("P"):
        return "uint64", tuple(shape)
    return _BUILTIN.get(element), tuple(shape)


_INTERNAL = re.compile(r"^_INTERNAL_[0-9A-Za-z_]*::")


def strip_internal(text: str) -> str:
    """A demangled name without NVRTC's per-program namespace for internal entities
    (``_INTERNAL_00000000_7_cell_cu_k::fl`` is the static ``fl``), and with an anonymous
    namespace spelled one way whichever demangler wrote it."""
    return _INTERNAL.sub("", text).replace("<unnamed>", "(anonymous namespace)")


def _argument(demangled: str, template: str) -> str | None:
    """The template argument of ``__cudamagic_p::TEMPLATE<...>`` in a demangled name."""
    head = f"{_NS}::{template}<"
    at = demangled.find(head)
    if at < 0 or not demangled.endswith(">"):
        return None
    return demangled[at + len(head):-1].strip()


def _mangled_argument(lowered: str, template: str) -> str | None:
    head = f"{len(_NS)}{_NS}{len(template)}{template}I"
    at = lowered.find(head)
    if at < 0 or not lowered.endswith("EE"):
        return None
    return lowered[at + len(head):-2]


def read_answers(probes: Sequence[Probe], lowered: Mapping[str, str],
                 demangle: Callable[[list[str]], list[str]], globals_: Sequence[str],
                 kernels: Sequence[str]) -> ProbeAnswers:
    """The probes' answers, each given to the CUBIN symbol of the entity it names (the
    entity's demangled name is the symbol's); an answer that names no symbol of the CUBIN, or
    names the probe's fallback, is no answer."""
    asked = [p for p in probes if p.type_expr in lowered and p.entity_expr in lowered]
    symbols = [*globals_, *kernels]
    texts = demangle([*(lowered[p.type_expr] for p in asked),
                      *(lowered[p.entity_expr] for p in asked), *symbols])
    types, entities = texts[:len(asked)], texts[len(asked):2 * len(asked)]
    by_name: dict[str, str] = {}
    for symbol, text in zip(symbols, texts[2 * len(asked):]):
        by_name.setdefault(strip_internal(text), symbol)
    variables: dict[str, VarType] = {}
    functions: dict[str, str] = {}
    kernel_set = set(kernels)
    for p, type_text, entity_text in zip(asked, types, entities):
        entity = _argument(entity_text, "en")
        ctype = _argument(type_text, "ty")
        mangled = _mangled_argument(lowered[p.type_expr], "ty")
        owner = by_name.get(strip_internal(entity)) if entity else None
        if owner is None or ctype is None or mangled is None:
            continue
        if owner in kernel_set:
            if p.candidate.kind is CandidateKind.EXTERN_C and ctype.startswith("void (") \
                    and ctype.endswith(")"):
                functions[owner] = f"{owner}({ctype[len('void ('):-1]})"
            continue
        dtype, shape = decode_type(mangled)
        variables[owner] = VarType(ctype, dtype, shape,
                                    None if dtype else TypeGap.NOT_ARITHMETIC)
    return ProbeAnswers(variables, functions)


# --------------------------------------------------------------------------------------------
# The compile
# --------------------------------------------------------------------------------------------

_ERROR_LINE = re.compile(r"^line (\d+): (?:catastrophic )?error", re.M)
_EXPR_ERROR = re.compile(r'^name expression -n "(.*)": (?:catastrophic )?error', re.M)


def _words(expressions: Sequence[str]) -> frozenset[str]:
    return frozenset(w for e in expressions for w in _IDENT.findall(e))


def variable_candidates(expressions: Sequence[str], templates: frozenset[str] = frozenset()
                        ) -> list[Candidate]:
    """The user's name expressions that can name a variable, as candidates asked about by the
    expression itself: an address (``&z::tv<float>``), or an instance of a variable template
    the cell declares (``table<float>``: a kernel's expression is never asked about, since a
    function template's name is no variable's)."""
    out = []
    for e in expressions:
        rest = e.strip()
        if rest.startswith("&") and not rest[1:].lstrip().startswith("("):
            out.append(Candidate((), "", CandidateKind.VARIABLE, expression=rest[1:].strip()))
        elif "<" in rest and rest.split("<", 1)[0].rsplit("::", 1)[-1].strip() in templates:
            out.append(Candidate((), "", CandidateKind.VARIABLE, expression=rest))
    return out


@dataclass(frozen=True)
class TypedCompile:
    """A compile with its probes' questions: the result as the cell's own compile would give
    it (the user's name expressions only), the probes asked, and their lowered names."""

    result: CompileResult
    probes: tuple[Probe, ...]
    lowered: Mapping[str, str]
    compiles: int


def typed_compile(compiler: Callable[..., CompileResult], source: str,
                  name_expressions: Sequence[str], options: Sequence[str], *,
                  line_offset: int = 0, **kwargs: object) -> TypedCompile:
    """Compile ``source`` with the probes added, as ``compiler`` (``compile_cubin``'s
    signature) does; the result is the one a compile without them would give.

    A compile the probes alone break (their name expressions, their lines after the cell) is
    done again without the probes that failed, then without any; an error of the cell's own is
    raised as NVRTC said it (again without probes where a probe's error came with it).

    :raises CompileError: the cell's own error.
    """
    found, templates = scan(source)
    cands = [*found, *variable_candidates(name_expressions, templates)]
    probes = _probes(cands) if _modern(options) else []
    first_line = source.count("\n") + 1 + line_offset  # the probe text's line 0
    compiles = 0
    while True:
        exprs = [*name_expressions, *(e for p in probes for e in (p.type_expr, p.entity_expr))]
        text, owners = probe_source([p.candidate for p in probes], _words(name_expressions)) \
            if probes else ("", {})
        compiles += 1
        try:
            result = compiler(source + text, exprs, options, line_offset=line_offset, **kwargs)
        except CompileError as exc:
            kept = _without_failed(str(exc), probes, first_line, owners)
            if kept is None:
                raise
            probes = kept
            continue
        lowered = dict(result.lowered)
        own = {e: lowered[e] for e in name_expressions if e in lowered}
        probe_lowered = {e: lowered[e] for p in probes for e in (p.type_expr, p.entity_expr)
                         if e in lowered}
        return TypedCompile(dataclasses.replace(result, lowered=own), tuple(probes),
                            probe_lowered, compiles)


_OLD_STANDARDS = ("c++03", "c++11", "c++14")


def _modern(options: Sequence[str]) -> bool:
    """Whether the compile's C++ is C++17 or later, which the probe's ``auto&`` template
    parameter needs (NVRTC's default is)."""
    std = [o.split("=", 1)[1] for o in options if o.startswith(("-std=", "--std="))]
    return not std or std[-1] not in _OLD_STANDARDS


def _without_failed(text: str, probes: list[Probe], first_line: int,
                    owners: Mapping[int, tuple[Scope, ...]]) -> list[Probe] | None:
    """What to compile with after a compile that failed with ``text``: None where no probe took
    part (the cell's own error, raised as it is); the probes that did not fail where only
    probes failed (their name expressions, the fallback lines of a namespace); else none (the
    cell's own compile, whose error is then the cell's alone)."""
    if not probes:
        return None
    mine = {e for p in probes for e in (p.type_expr, p.entity_expr)}
    exprs = _EXPR_ERROR.findall(text)
    lines = [int(n) - first_line for n in _ERROR_LINE.findall(text)]
    if not any(e in mine for e in exprs) and not any(n > 0 for n in lines):
        return None
    if any(e not in mine for e in exprs) or any(n not in owners for n in lines):
        return []
    failed_exprs = set(exprs)
    failed_paths = {owners[n] for n in lines}
    return [p for p in probes if p.type_expr not in failed_exprs
            and p.entity_expr not in failed_exprs and p.candidate.path not in failed_paths]
