"""The kernels a cell's text defines, by name, read with regular expressions: for the hints of a
compile error and of a cell's report (a template kernel without a ``-n``), never for a build's
answer (the compiler and the CUBIN give those). The expressions are compiled on first use: a
cache hit whose cell has no template kernel left unnamed compiles only what it reads with.
"""

from __future__ import annotations

import bisect
import re

from ..core.process import InTest, cached

__all__ = ["template_kernels", "plain_kernels"]


@cached(None, test=InTest.KEPT)
def _reading() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """(a template's opening, a launch attribute's arguments, a kernel's declaration after a
    ``>``, a scope mark), compiled once.

    A template's head is read in two linear passes, not one expression:
    ``template\\s*<[^{};]*?>`` followed by the declaration retries every later ``>`` from every
    ``template <``, which is quadratic in text such as a long comment of repeated
    ``template<``. Launch attributes (``__launch_bounds__(256)``, ``__cluster_dims__(2, 1, 1)``)
    stand before or after ``void``; their arguments are dropped first (one linear pass), then
    the name is the word after.
    """
    return (re.compile(r"\btemplate\s*<"),
            re.compile(r"\b(__\w{1,64}__)\s*\([^()]{0,200}\)"),
            re.compile(r">\s*(?:(?:__\w{1,64}__|static|inline|extern|void)\s+)*"
                       r"(?:__global__\s+(?:\w+\s+)*void|void\s+__global__)\s+"
                       r"(?:__\w{1,64}__\s+){0,4}(?P<name>\w+)\s*\("),
            re.compile(r"[{};]"))


@cached(None, test=InTest.KEPT)
def _any_kernel() -> re.Pattern[str]:
    return re.compile(r"(?:__global__\s+(?:\w+\s+){0,16}void|void\s+__global__)\s+"
                      r"(?:__\w{1,64}__\s+){0,4}(?P<name>\w+)\s*\(")


def plain_kernels(source: str) -> list[str]:
    """The non-template ``__global__`` functions a source defines, by name, in order (a regular
    expression's reading, as :func:`template_kernels`)."""
    source = _reading()[1].sub(r"\1", source)
    templates = set(template_kernels(source))
    return [n for n in dict.fromkeys(m.group("name") for m in _any_kernel().finditer(source))
            if n not in templates]


def template_kernels(source: str) -> list[str]:
    """The ``__global__`` function templates a source defines, by name, in order (a regular
    expression's reading: good for a hint, not a parse).

    A ``>`` followed by a kernel's declaration closes a template head where a ``template <``
    came before it with no ``{``, ``}`` or ``;`` between.
    """
    if "template" not in source:  # no template head: none to read, nothing to compile
        return []
    opening, attributes, after, scope = _reading()
    source = attributes.sub(r"\1", source)
    opens = [m.end() for m in opening.finditer(source)]
    scopes = [m.start() for m in scope.finditer(source)]
    names = []
    for m in after.finditer(source):
        at = m.start()
        i = bisect.bisect_right(opens, at)  # the last template head opened before the '>'
        if i and bisect.bisect_left(scopes, at) == bisect.bisect_left(scopes, opens[i - 1]):
            names.append(m.group("name"))
    return list(dict.fromkeys(names))
