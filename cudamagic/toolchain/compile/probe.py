"""Types from the compiler, asked in the one compile: probes added to the cell's NVRTC program.

The CUBIN keeps a variable's size and an ``extern "C"`` kernel's parameter sizes, not their C++
types. NVRTC knows them, and says them through the lowered names of two variable templates
instantiated by name expressions beside the user's:

- ``&__cudamagic_p::__cudamagic_ty<decltype(Q)>`` lowers to a name whose template argument is the type of
  the entity ``Q`` names, mangled (``A8_f``: ``float[8]``), typedefs and macros resolved;
- ``&__cudamagic_p::__cudamagic_en<Q>`` lowers to a name whose template argument is that entity itself,
  which demangles to the entity's own name, so the answer is matched to the CUBIN symbol it
  belongs to (an ``extern "C"`` symbol ``k`` is not the C++ ``k(float, float*)``).

Which names to ask about comes from a token reading of the cell
(:func:`cudamagic.cxx.declared.candidates`): the
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
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ...cxx.declared import Candidate, CandidateKind, Scope, scan
from ...errors import CompileError, LogError
from ...core.options import object_macros, standard
from ..binary.image import PROBE_MARK
from .nvrtc import CompileResult
from ..binary.variables import BUILTIN_DTYPES, TypeGap, VarType, strip_internal

__all__ = ["Probe", "ProbeAnswers", "VarType", "TypeGap", "typed_compile", "read_answers",
           "decode_type", "PROBE_MARK", "strip_internal"]

_NS = "__cudamagic_p"
_FALLBACK = "__cudamagic_f"
# every identifier the probe writes is reserved (a cell's own #define T, V, none, ty or en
# would reach the probe's text and its name expressions, which NVRTC macro-expands)
_TY, _EN, _NONE = "__cudamagic_ty", "__cudamagic_en", "__cudamagic_none"


@dataclass(frozen=True)
class Probe:
    """The two name expressions asked for one candidate."""

    candidate: Candidate
    type_expr: str
    entity_expr: str


@dataclass(frozen=True)
class ProbeAnswers:
    """What the probes said, by CUBIN symbol: variables' types and ``extern "C"`` kernels'
    texts (``k(int, int*)``, as a demangler gives a C++ function)."""

    variables: Mapping[str, VarType] = field(default_factory=dict)
    functions: Mapping[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# The probe: its source, its name expressions, and reading what they lowered to
# --------------------------------------------------------------------------------------------

def _probes(cands: Sequence[Candidate]) -> list[Probe]:
    """One probe per entity name (a name found in two branches asks once)."""
    out: dict[str, Probe] = {}
    for c in cands:
        out.setdefault(c.qualified, Probe(c, f"&{_NS}::{_TY}<decltype({c.qualified})>",
                                          f"&{_NS}::{_EN}<{c.qualified}>"))
    return list(out.values())


def probe_source(cands: Sequence[Candidate], avoid: frozenset[str] = frozenset(),
                 resume: tuple[int, str] | None = None
                 ) -> tuple[str, dict[int, tuple[Scope, ...]]]:
    """What the probe adds after the cell: the two templates, and for each namespace a name was
    looked for in, a fallback the name finds where the cell compiled no declaration of it
    (qualified lookup reaches a using-directive's namespace only when the name is not a direct
    member). Names in ``avoid`` (words of the user's own name expressions, which are looked up
    unqualified after the probe) get no fallback at global scope. Also returns which
    namespace each fallback line serves, by its line in the text (0: the cell's last line).
    ``resume`` is the line number and file name the text's fourth line has: a ``#line``
    directive gives them back whatever ``#line`` the cell ended with, so that NVRTC says the
    probe's own errors at the probe's lines (two empty lines first: the cell's last line may
    end in a splice)."""
    restart = [f'#line {resume[0]} "{_escaped(resume[1])}"'] if resume else []
    # a cell's own macro named decltype would answer every type question (NVRTC expands the
    # name expressions at the end of the program): undefined from here on, after the cell
    lines = ["", "", *restart, "#undef decltype", "#pragma nv_diagnostic push",
             "#pragma nv_diag_suppress 177",
             f"namespace {_NS} {{ struct {_NONE} {{}}; template <class __cudamagic_T> "
             f"__device__ char {_TY}; template <auto& __cudamagic_V> __device__ char {_EN}; }}"]
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
        lines.append(f"namespace {_FALLBACK}{k} {{ __device__ ::{_NS}::{_NONE} "
                     + ", ".join(names) + "; }")
        opened = "".join(f"{'inline ' if s.inline else ''}namespace {s.name} {{ " for s in path)
        lines.append(f"{opened}using namespace ::{_FALLBACK}{k};{' }' * len(path)}")
    lines.append("#pragma nv_diagnostic pop")
    return "\n".join(lines) + "\n", owners


def _escaped(name: str) -> str:
    """A file name as a ``#line`` directive's string literal holds it."""
    return name.replace("\\", "\\\\").replace('"', '\\"')


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
    return BUILTIN_DTYPES.get(element), tuple(shape)


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
                 demangle: Callable[[list[str]], list[str | None]], globals_: Sequence[str],
                 kernels: Sequence[str]) -> ProbeAnswers:
    """The probes' answers, each given to the CUBIN symbol of the entity it names (the
    entity's demangled name is the symbol's); an answer that names no symbol of the CUBIN, or
    names the probe's fallback, is no answer."""
    asked = [p for p in probes if p.type_expr in lowered and p.entity_expr in lowered]
    if not asked:
        return ProbeAnswers()
    symbols = [*globals_, *kernels]
    texts = demangle([*(lowered[p.type_expr] for p in asked),
                      *(lowered[p.entity_expr] for p in asked), *symbols])
    types, entities = texts[:len(asked)], texts[len(asked):2 * len(asked)]
    by_name: dict[str, str] = {}
    for symbol, text in zip(symbols, texts[2 * len(asked):]):
        if text is not None:  # a name too long to keep names nothing
            by_name.setdefault(strip_internal(text), symbol)
    variables: dict[str, VarType] = {}
    functions: dict[str, str] = {}
    kernel_set = set(kernels)
    for p, type_text, entity_text in zip(asked, types, entities):
        if type_text is None or entity_text is None:  # too long to keep: no answer
            continue
        entity = _argument(entity_text, _EN)
        ctype = _argument(type_text, _TY)
        mangled = _mangled_argument(lowered[p.type_expr], _TY)
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

_WORD = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")


def _words(expressions: Sequence[str]) -> frozenset[str]:
    return frozenset(w for e in expressions for w in _WORD.findall(e))


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
    it (the user's name expressions only), the probes asked, and their lowered names;
    ``compiles`` counts the compiles with probes and the retries without them (not the check
    without them of a compile whose warnings are errors)."""

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
    found, templates = scan(source, object_macros(options))
    cands = [*found, *variable_candidates(name_expressions, templates)]
    probes = _probes(cands) if _modern(options) else []
    first_line = source.count("\n") + 1 + line_offset  # the probe text's line 0
    compiles = 0
    while True:
        exprs = [*name_expressions, *(e for p in probes for e in (p.type_expr, p.entity_expr))]
        # a #line only where the cell has one of its own: any #line in the program keeps
        # NVRTC from making a precompiled header ("PCH creation disabled because #line
        # directive encountered"), and without the cell's the probe's lines follow its own
        resume = (source.count("\n") + 4, str(kwargs.get("program_name", "cell.cu"))) \
            if _LINE_DIRECTIVE.search(source) else None
        text, owners = probe_source([p.candidate for p in probes], _words(name_expressions),
                                    resume) if probes else ("", {})
        compiles += 1
        try:
            result = compiler(source + text, exprs, options, line_offset=line_offset, **kwargs)
        except CompileError as exc:
            kept = _without_failed(exc.errors, probes, first_line, owners)
            if kept is None and probes and _elevated(options, source):
                kept = []  # the probe's uses change which warnings the cell gets: its own text
            if kept is None:
                raise
            probes = kept
            continue
        if probes and _elevated(options, source):  # may the probe's uses hide a warning?
            compiler(source, list(name_expressions), options, line_offset=line_offset, **kwargs)
        lowered = dict(result.lowered)
        own = {e: lowered[e] for e in name_expressions if e in lowered}
        probe_lowered = {e: lowered[e] for p in probes for e in (p.type_expr, p.entity_expr)
                         if e in lowered}
        return TypedCompile(dataclasses.replace(result, lowered=own), tuple(probes),
                            probe_lowered, compiles)


#: a ``#line`` directive, or the preprocessor's own line marker (``# 12 "file"``)
_LINE_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(line\b|\d)", re.MULTILINE)

_ELEVATING = ("-Werror", "--Werror", "--warning-as-error", "-diag-error", "--diag-error",
              "-diag_error", "--diag_error")


def _elevated(options: Sequence[str], source: str) -> bool:
    """Whether warnings can be errors in this compile (``-Werror=all-warnings``, a
    ``--diag-error``, a ``#pragma nv_diag_error``): the probe's uses of a variable turn "declared
    but never referenced" into "set but never used", or into nothing, so such a compile is also
    done without the probe, whose error (if any) is the cell's (a second compile on a miss,
    only for such cells)."""
    return any(o.startswith(_ELEVATING) for o in options) or "diag_error" in source


_OLD_STANDARDS = ("c++03", "c++11", "c++14")


def _modern(options: Sequence[str]) -> bool:
    """Whether the compile's C++ is C++17 or later, which the probe's ``auto&`` template
    parameter needs (NVRTC's default is)."""
    std = standard(options)
    return std is None or std not in _OLD_STANDARDS


def _without_failed(errors: Sequence[LogError], probes: list[Probe], first_line: int,
                    owners: Mapping[int, tuple[Scope, ...]]) -> list[Probe] | None:
    """What to compile with after a compile that failed with ``errors`` (its
    :class:`~cudamagic.errors.LogError` records, never its words): None where no probe took
    part (the cell's own error, raised as it is); the probes that did not fail where only
    probes failed (their name expressions, the fallback lines of a namespace); else none (the
    cell's own compile, whose error is then the cell's alone)."""
    if not probes:
        return None
    mine = {e for p in probes for e in (p.type_expr, p.entity_expr)}
    exprs = [e.expression for e in errors if e.expression is not None]
    lines = [e.line - first_line for e in errors if e.line is not None]
    if not any(e in mine for e in exprs) and not any(n > 0 for n in lines):
        return None
    if any(e not in mine for e in exprs) or any(n not in owners for n in lines):
        return []
    failed_exprs = set(exprs)
    failed_paths = {owners[n] for n in lines}
    return [p for p in probes if p.type_expr not in failed_exprs
            and p.entity_expr not in failed_exprs and p.candidate.path not in failed_paths]
