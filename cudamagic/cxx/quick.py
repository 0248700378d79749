"""Whether a name expression names a demangled kernel, decided from the text alone where it can
be: a warm cell's stored names pass this check without the C++ reader (:mod:`.parse`,
:mod:`.args`), which :func:`cudamagic.cxx.compare.compare` needs where it says nothing.

Pure: no CUDA, no IPython.
"""

from __future__ import annotations

import re

__all__ = ["quick_equal"]

# Text alone decides the common case: the expression ``k<5>`` is the kernel whose demangled name,
# without its return type and parameters, is ``k<5>`` (libstdc++), or ``k<(int)5>`` (cu++filt,
# read as ``k<5>``), when the text holds only names, ``:: < > , * &``, spaces and integers of at
# most nine digits in libstdc++'s spelling (both readings then give one type and value: a longer
# one may be 2147483648, int for libstdc++ and long for C++). A warm cell verifies its stored map
# this way without parsing either side.
_QUICK_SAFE = re.compile(r"""
    (?!(?:void|const|volatile|unsigned|signed|char|short|int|long|bool|float|double|auto|decltype
         |sizeof|operator|template|typename)\b)        # a name first
    (?:[A-Za-z_]\w*+ | :: | [<>,\ *&]                 # possessive: no backtracking
     | (?:[1-9]\d{0,8}|0)(?:u|l|ul|ll|ull)?(?![\w'.])    # an integer of at most nine digits,
     | -(?:[1-9]\d{0,8}|0)(?:l|ll)?(?![\w'.])            # of a signed type where negative
    )*+""", re.X)
_QUICK_CUFILT = re.compile(
    r"\((int|unsigned int|long|unsigned long|long long|unsigned long long|bool)\)(-?\d+)")


def _libstdcxx_spelling(m: re.Match) -> str:
    type_, value = m.groups()
    if type_ != "bool":
        from .args import SUFFIX  # cu++filt's spelling only: libstdc++'s needs no C++ reader

        return value + SUFFIX[type_]
    return {"0": "false", "1": "true"}.get(value, m.group())


def quick_equal(expr: str, demangled: str) -> bool:
    """True where the text alone shows that ``expr`` names the kernel demangled as ``demangled``.

    False says nothing: parse both and :func:`~cudamagic.cxx.compare.compare` them.
    """
    return _quick_name(demangled) == expr and _QUICK_SAFE.fullmatch(expr) is not None


def _quick_name(demangled: str) -> str:
    """The name part of a demangled name, cu++filt's ``(int)5`` as ``5``."""
    name = demangled[5:] if demangled.startswith("void ") else demangled
    if name.endswith(")"):
        name = name[:name.rfind("(")]  # a parameter list with parentheses inside: not safe
    if "(" in name:
        name = _QUICK_CUFILT.sub(_libstdcxx_spelling, name)
    return name
