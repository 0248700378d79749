"""Whether a name expression names a demangled kernel: :func:`compare` two signatures.

The rules are the model of :mod:`cudamagic.cxx.parse` (its docstring). Pure: no CUDA, no IPython.
The text-level check a hit's stored names pass without parsing is :mod:`.quick`'s.
"""

from __future__ import annotations

from .args import SUFFIX, Arg, Part, Type, Unknown, Value, convert, name_key, real_value
from .parse import Signature, parse_demangled, parse_expression
from .types import INTEGERS as _INT

__all__ = ["CONTRADICTION", "EQUAL", "UNDECIDABLE", "compare", "contradicts"]

EQUAL = "equal"
CONTRADICTION = "contradiction"
UNDECIDABLE = "undecidable"

# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------

def contradicts(expression: str, demangled: str) -> bool:
    """Whether a name expression decidably names another entity than the demangled name (a
    variable's: ``&z::tv<float>`` against ``z::tv<double>``)."""
    return compare(parse_expression(expression), parse_demangled(demangled))[0] == CONTRADICTION


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
    if verdict == CONTRADICTION or want.param_args is None:
        return verdict, why
    have = got.params
    if have is None:
        return UNDECIDABLE, "the kernel's parameter types are unknown"
    pv, pwhy = _compare_params(want.param_args, have)
    if pv == CONTRADICTION or verdict == EQUAL:
        return pv, pwhy
    return verdict, why


def _compare_names(want: tuple[Part, ...], got: tuple[Part, ...]) -> tuple[str, str]:
    if want[-1][0] != got[-1][0]:
        return CONTRADICTION, f"another kernel ({got[-1][0]}, not {want[-1][0]})"
    verdict, why = _compare_args(want[-1][1], got[-1][1])
    if verdict != CONTRADICTION and name_key(want[:-1]) != name_key(got[:-1]):
        # a using-directive, a namespace alias or an inline namespace may join them
        return UNDECIDABLE, f"the qualifier {name_key(want[:-1]) or '::'} against " \
                            f"{name_key(got[:-1]) or '::'}"
    return verdict, why


def _compare_args(want: tuple[Arg, ...] | None, got: tuple[Arg, ...] | None) -> tuple[str, str]:
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


def _compare_arg(a: Arg, b: Arg) -> tuple[str, str]:
    """One template argument of the expression (a) against the demangled one (b)."""
    if a.exact and b.exact and a.key == b.key:
        return EQUAL, ""
    if isinstance(a, Unknown) or isinstance(b, Unknown):
        return UNDECIDABLE, f"{a.key or '(empty)'} against {b.key} is not evaluated"
    if isinstance(a, Value):
        if isinstance(b, Type):
            return (CONTRADICTION, f"the value {a.key} against {b.key}") if a.builtin else \
                (UNDECIDABLE, f"{a.key} against {b.key}")
        return _compare_values(a, b)
    if isinstance(b, Type):
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


def _compare_values(a: Value, b: Value) -> tuple[str, str]:
    if a.builtin and b.builtin:
        if a.type == b.type:
            return CONTRADICTION, f"{a.describe()} is not {b.describe()}"
        value = real_value(a)
        if value is None:
            return UNDECIDABLE, f"{a.describe()} depends on the sign of {a.type}"
        if convert(value, b.type) != b.value:
            return CONTRADICTION, (f"{a.describe()} is {convert(value, b.type)} as {b.type}, "
                                   f"not {b.value}")
        return UNDECIDABLE, (f"{a.describe()} against {b.describe()}: equal only if the parameter "
                             f"is {b.type}, not auto")
    if not a.builtin and not b.builtin and a.type == b.type:
        # an enumeration's underlying type is unknown (and may be bool): another value contradicts
        # only where no integer conversion, nor none, maps one onto the other
        if all(convert(a.value, t) != b.value for t in _INT) and a.value != b.value:
            return CONTRADICTION, f"{a.key} is not {b.key}"
        return UNDECIDABLE, f"{a.key} against {b.key}: the underlying type is unknown"
    return UNDECIDABLE, f"{a.key} against {b.key}: the types may be aliases"


def _compare_params(want: tuple[Arg, ...], have: tuple[str, ...]) -> tuple[str, str]:
    if len(want) != len(have):
        return CONTRADICTION, f"{len(want)} parameters against {len(have)}"
    undecided = ""
    for n, (a, b) in enumerate(zip(want, have), 1):
        if a.exact and a.key == b:
            continue
        if isinstance(a, Type) and a.closed:
            return CONTRADICTION, f"parameter {n}: {a.shown()} is not {b}"
        undecided = undecided or f"parameter {n}: {a.key} may be an alias of {b}"
    return (UNDECIDABLE, undecided) if undecided else (EQUAL, "")


