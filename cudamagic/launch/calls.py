"""A line magic's launches, read and not run: ``k(grid, block, args); k2(...)`` after some
options (``%cuda_bench``, ``%cuda_sanitize``, ``%cuda_profile``), each part evaluated in the
notebook's namespace. One reader for every such magic; each says which options it takes and how
it names itself in messages (:class:`CallSyntax`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import OptionError

__all__ = ["CallSyntax", "Call", "read_options", "read_calls", "evaluate", "number"]

_OPTION = re.compile(r"""\s*(--?[A-Za-z][\w-]*)(?:[ =]("[^"]*"|'[^']*'|[^\s;"']+))?""")
_NAMES = ("grid", "block", "args", "shared_mem")


@dataclass(frozen=True)
class CallSyntax:
    """How one magic reads its line.

    Attributes
    ----------
    magic : str
        Its name in messages (``%cuda_bench``).
    verb : str
        What it does to a launch (``time``), for "no launch to time".
    flags : frozenset of str
        Options without a value.
    valued : mapping of str to str
        Options with a value, and the key each is found under.
    usage : str
    stream_note : str
        Why ``stream=`` is refused, and what to do instead.
    """

    magic: str
    verb: str
    flags: frozenset[str]
    valued: Mapping[str, str]
    usage: str
    stream_note: str


@dataclass(frozen=True)
class Call:
    """One launch as written: its text, the kernel and the evaluated parts; ``arg_labels`` are
    the expressions of the args tuple's items where it is written as a tuple (``x``, ``n``)."""

    label: str
    kernel: Any
    grid: Any
    block: Any
    args: Any = ()
    shared_mem: Any = 0
    arg_labels: tuple[str, ...] = field(default=(), compare=False)


def read_options(line: str, syntax: CallSyntax) -> tuple[dict[str, str], str]:
    """The leading options of the line, and the calls after them.

    :raises OptionError: an option the magic does not take, or one without its value.
    """
    found: dict[str, str] = {}
    pos = 0
    while True:
        m = _OPTION.match(line, pos)
        if m is None:
            return found, line[pos:]
        flag, value = m.group(1), m.group(2)
        if flag in syntax.flags:
            found[flag] = ""
            pos = m.end(1)
        elif flag in syntax.valued and value is not None:
            found[syntax.valued[flag]] = value.strip("\"'") if value[:1] in "\"'" else value
            pos = m.end()
        else:
            raise OptionError(f"{syntax.magic}: {flag} is not an option here"
                              + (" (it takes a value)" if flag in syntax.valued else "")
                              + f". Usage: {syntax.usage}")


def evaluate(text: str, namespace: dict, what: str, syntax: CallSyntax) -> Any:
    """The user's expression's value in the namespace.

    :raises OptionError: it raised (the message quotes it and the error).
    """
    try:
        return eval(compile(text, f"<{syntax.magic}>", "eval"), namespace)  # noqa: S307
    except Exception as exc:  # noqa: BLE001 - any error in the user's expression
        raise OptionError(f"{syntax.magic}: {what} {text!r} raised {type(exc).__name__}: "
                          f"{exc}") from exc


def number(value: str | None, kind: type, what: str, syntax: CallSyntax) -> Any:
    """An option's value as an int or a float (None where it was not given).

    :raises OptionError: it is not one.
    """
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        raise OptionError(f"{syntax.magic}: {what} {value!r} is not "
                          + ("an int" if kind is int else "a number")) from None


def _labels(node: ast.expr | None) -> tuple[str, ...]:
    return tuple(ast.unparse(e) for e in node.elts) \
        if isinstance(node, (ast.Tuple, ast.List)) else ()


def _call(stmt: ast.stmt, text: str, namespace: dict, syntax: CallSyntax) -> Call:
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    source = ast.get_source_segment(text, stmt) or ast.unparse(stmt)
    if not isinstance(call, ast.Call) or len(call.args) + len(call.keywords) < 2 \
            or len(call.args) > 4:
        raise OptionError(f"{syntax.magic}: {source!r} is not a launch: write "
                          "kernel(grid, block, args) as you would call it")
    starred = [a for a in call.args if isinstance(a, ast.Starred)]
    if starred:  # *parts: how many parts it holds is not seen before it runs
        raise OptionError(f"{syntax.magic}: {source!r}: {ast.unparse(starred[0])} is not read "
                          "here: write grid, block and args as parts of their own (args a tuple)")
    parts = [evaluate(ast.unparse(a), namespace, "argument", syntax) for a in call.args]
    spread = [k for k in call.keywords if k.arg is None]
    if spread:  # **mapping: its keys are not seen before it runs
        raise OptionError(f"{syntax.magic}: {source!r}: **{ast.unparse(spread[0].value)} is not "
                          "one of them: give grid, block and args (and shared_mem=) by name")
    keywords = {str(k.arg): evaluate(ast.unparse(k.value), namespace, str(k.arg), syntax)
                for k in call.keywords}
    kernel = evaluate(ast.unparse(call.func), namespace, "kernel", syntax)
    if not callable(kernel) or not hasattr(type(kernel), "attributes"):
        # a GPU kernel answers for its attributes (a module's Kernel, CuPy's RawKernel); a
        # function, a lambda or a NumPy ufunc is called on the host and would be timed as one
        raise OptionError(f"{syntax.magic}: {ast.unparse(call.func)} is a "
                          f"{type(kernel).__name__}, not a GPU kernel: give a kernel of a "
                          f"module (%%cuda pushes each under its name) or a cupy.RawKernel")
    twice = sorted(set(_NAMES[:len(parts)]) & set(keywords))
    if twice:  # Python's own call would refuse it (a TypeError); the keyword would win here
        raise OptionError(f"{syntax.magic}: {source!r}: {twice[0]} is given twice, by position "
                          "and by name: give it once")
    given = dict(zip(_NAMES, parts)) | keywords
    if "stream" in given:
        raise OptionError(f"{syntax.magic}: {source!r}: {syntax.stream_note}")
    unknown = sorted(set(given) - set(_NAMES))
    if unknown or not {"grid", "block"} <= set(given):
        raise OptionError(f"{syntax.magic}: {source!r}: give grid, block and args "
                          f"(and shared_mem=); {', '.join(unknown) or 'grid or block'} "
                          "is not one of them")
    args_node = call.args[2] if len(call.args) > 2 else next(
        (k.value for k in call.keywords if k.arg == "args"), None)
    return Call(label=source, kernel=kernel, arg_labels=_labels(args_node), **given)


def read_calls(text: str, namespace: dict, syntax: CallSyntax) -> list[Call]:
    """Each ``kernel(grid, block, args, shared_mem=...)`` statement, its parts evaluated in the
    namespace (nothing is launched).

    :raises OptionError: a statement that is not such a launch, or none at all.
    """
    text = text.strip()
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise OptionError(f"{syntax.magic}: the calls do not parse ({exc.msg}). Usage: "
                          f"{syntax.usage}") from None
    calls = [_call(stmt, text, namespace, syntax) for stmt in tree.body]
    if not calls:
        raise OptionError(f"{syntax.magic}: no launch to {syntax.verb}. Usage: {syntax.usage}")
    return calls
