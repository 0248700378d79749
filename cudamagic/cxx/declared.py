"""Which names a cell declares at namespace scope, read from its tokens: the variables
(``__device__``, ``__constant__``; a ``__managed__`` one NVRTC cannot be asked about) and the
``extern "C"`` kernels, with their
namespaces. The type probe (:mod:`cudamagic.toolchain.compile.probe`) asks the compiler about each; this
reading only chooses the questions, and knows no type. Pure text: no CUDA, no compiler.

Comments, strings, character literals and preprocessor lines are skipped; object-like macros the
cell (or an option's ``-D``) defines are replaced by their tokens; a function-like macro's
invocation stays as written (what it declares is not found, and not asked about).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Candidate", "CandidateKind", "Scope", "candidates", "scan", "tokens",
           "included_headers", "MAX_CANDIDATES"]

#: The most names one compile asks about (a generated cell of 100 000 variables asks none).
MAX_CANDIDATES = 4000


class CandidateKind(enum.Enum):
    """What a probed name was declared as."""

    VARIABLE = "variable"
    EXTERN_C = "extern-c"   # an extern "C" kernel: its parameter types are asked


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


def _lex(text: str) -> list[str]:
    """:func:`tokens` before macros: a preprocessor line is one item, ``#`` and its text."""
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
            j = _skip_directive(text, i)
            out.append(text[i:j])
            i = j
            continue
        line_start = False
        i = _lex_one(text, i, out)
    return out


def _lex_one(text: str, i: int, out: list[str]) -> int:
    """Append the token at ``i`` (none for a character literal or a raw string's body);
    returns the index after it."""
    n, c = len(text), text[i]
    m = _IDENT.match(text, i)
    if m:
        word, i = m.group(), m.end()
        if i < n and text[i] == '"' and word.endswith("R") and word[:-1] in (*_STRING_PREFIX, ""):
            out.append('"')
            return _skip_raw(text, i)
        if not (i < n and text[i] in "\"'" and word in _STRING_PREFIX):
            out.append(word)  # (a string's prefix: the literal itself is read next)
        return i
    m = _NUMBER.match(text, i)
    if m:
        out.append(m.group())
        return m.end()
    if c in "\"'":
        j = _skip_quoted(text, i, c)
        out.append('"' + text[i + 1:j - 1] if c == '"' else "'")
        return j
    if text.startswith("::", i):
        out.append("::")
        return i + 2
    out.append(c)
    return i + 1


_DEFINE = re.compile(r"#\s*define\s+([A-Za-z_]\w*)(?!\()(.*)", re.S)
_UNDEF = re.compile(r"#\s*undef\s+([A-Za-z_]\w*)")


def tokens(source: str, defines: Mapping[str, str] | None = None) -> list[str]:
    """The cell as tokens, without comments, preprocessor lines or character literals:
    identifiers, numbers, ``::``, single punctuation characters, and string literals as ``"``
    followed by their text (``"C`` for ``"C"``). Object-like macros the cell defines (and
    ``defines``, the options' ``-D``) are replaced by their tokens, so that ``#define KERNEL
    extern "C" __global__`` declares what it declares; a function-like macro's invocation stays
    as written."""
    text = _spliced(source)
    macros = {k: [t for t in _lex(v) if not t.startswith("#")]
              for k, v in (defines or {}).items()}
    out: list[str] = []
    budget = [4 * len(text) + 100_000]  # tokens macros' expansions may add, in all
    for t in _lex(text):
        if t.startswith("#") and len(t) > 1:
            m = _DEFINE.match(t)
            if m:
                macros[m.group(1)] = [x for x in _lex(m.group(2)) if not x.startswith("#")]
            elif _UNDEF.match(t):
                macros.pop(_UNDEF.match(t).group(1), None)  # type: ignore[union-attr]
            continue
        if t in macros and budget[0] > 0:
            out.extend(_expand(t, macros, frozenset(), budget))
        else:
            out.append(t)
    return out


def _spliced(source: str) -> str:
    """The source with its line splices joined, as C++ does first."""
    return source.replace("\\\r\n", "").replace("\\\n", "")


_INCLUDE = re.compile(r'#\s*include(?:_next)?\s*(?:<([^>\n]+)>|"([^"\n]+)")')


def included_headers(source: str) -> tuple[str, ...]:
    """The header names the cell's own ``#include`` directives name (``<h>`` and ``"h"``), in
    order, read as the preprocessor reads its lines: splices joined, comments and string
    literals no directives (one inside a conditional counts: what is compiled needs the
    preprocessor; an include through a macro is not read)."""
    out: list[str] = []
    for item in _lex(_spliced(source)):
        if item.startswith("#"):
            m = _INCLUDE.match(re.sub(r"/\*.*?\*/", " ", item, flags=re.S))
            if m:
                out.append(m.group(1) or m.group(2))
    return tuple(out)


def _expand(name: str, macros: Mapping[str, list[str]], active: frozenset[str],
            budget: list[int]) -> list[str]:
    """An object-like macro's tokens, its own macros expanded (never one within itself), at
    most ``budget[0]`` of them, which it lowers: macros that double each other's tokens
    (``#define M1 M0 M0``...) reach 2**30 tokens in 30 lines, and where their use is in an
    ``#if 0`` branch NVRTC never expands them (what lies past the budget stays unexpanded:
    a question not asked, never a wrong answer)."""
    if len(active) > 32:
        return [name]
    out: list[str] = []
    for t in macros[name]:
        if budget[0] <= 0:
            out.append(t)
        elif t in macros and t not in active and t != name:
            out.extend(_expand(t, macros, active | {name}, budget))
        else:
            out.append(t)
            budget[0] -= 1
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


def _without_decltype(seg: list[str]) -> list[str]:
    """A declarator with each ``decltype(...)`` one token: its parentheses are a type's, not a
    function's (``__device__ decltype(x) y;`` declares ``y``)."""
    out: list[str] = []
    i = 0
    while i < len(seg):
        if seg[i] == "decltype" and i + 1 < len(seg) and seg[i + 1] == "(":
            i = _closing(seg, i + 1, "(", ")") + 1
            out.append("decltype")
        else:
            out.append(seg[i])
            i += 1
    return out


def _declared_name(seg: list[str]) -> tuple[tuple[str, ...], str] | None:
    """The name one declarator declares (the last identifier before its extents or its
    initialiser), with its written qualifiers; None for a function or what holds no name."""
    seg = _without_decltype(seg) if "decltype" in seg else seg
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
    if not _SPECIFIERS.intersection(toks) or "__managed__" in toks:
        return  # (NVRTC takes a __managed__ variable in neither question: not asked)
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


def candidates(source: str, defines: Mapping[str, str] | None = None) -> list[Candidate]:
    """The names at namespace scope the cell declares as variables (``__device__``,
    ``__constant__``, ``__managed__``) or as ``extern "C"`` kernels, in order, each once."""
    return scan(source, defines)[0]


def scan(source: str, defines: Mapping[str, str] | None = None
         ) -> tuple[list[Candidate], frozenset[str]]:
    """:func:`candidates`, and the names of the variable templates the cell declares."""
    toks = tokens(source, defines)
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


