"""Python names for kernels, derived from their name expressions. Pure: no CUDA, no IPython."""

from __future__ import annotations

import keyword
import re

from .args import SUFFIX, Arg, Type, Value
from .parse import parse_expression

__all__ = ["python_name", "valid_python_name"]

# ---------------------------------------------------------------------------------------------
# Python names
# ---------------------------------------------------------------------------------------------

def _py_arg(a: Arg) -> str:
    """An argument as identifier text, from its typed value: ``(bool)2`` is ``true``, ``(short)-1``
    is ``short_m1``, ``5u`` is ``5u``, ``'a'`` is ``char_97`` (``97`` is another kernel's)."""
    if isinstance(a, Value):
        number = f"m{-a.value}" if a.value < 0 else str(a.value)
        if a.builtin and a.type == "bool":
            return a.key
        if a.builtin and a.type in SUFFIX:
            return number + SUFFIX[a.type]
        return f"{a.type}_{number}"
    if isinstance(a, Type) and a.args is not None and a.template is not None:
        return a.template + "_" + "_".join(_py_arg(x) for x in a.args)
    if isinstance(a, Type) and a.spelled:
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

