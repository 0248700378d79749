"""C++ names as people read them: the one rule the build report and the launch's messages share."""

from __future__ import annotations

import re

__all__ = ["tidy_name", "with_void"]

# inline namespaces a library versions itself with: libcu++'s __4, libstdc++'s __cxx11, CCCL's
# THRUST_300102_SM_900_NS (the same type to the user whatever the version)
_INTERNAL_NS = re.compile(r"\b(?:__\d+|__cxx11|(?:THRUST|CUB|CCCL)_\w*?_NS)::")
_CONST_AFTER_TEMPLATE = re.compile(r">(const|volatile)\b")
_COMMA = re.compile(r",(?=\S)")
_CLOSE_CLOSE = re.compile(r"(?<=>) (?=>)")


def tidy_name(text: str) -> str:
    """A C++ name or type for people: library-internal inline namespaces gone
    (``cuda::std::__4::complex<double>`` is ``cuda::std::complex<double>``,
    ``thrust::THRUST_300102_SM_900_NS::complex<float>`` ``thrust::complex<float>``), a space
    after each comma and before a ``const`` that follows a template (the canonical form writes
    ``complex<double>const*``), none between closing brackets."""
    text = _CONST_AFTER_TEMPLATE.sub(r"> \1", _INTERNAL_NS.sub("", text))
    return _CLOSE_CLOSE.sub("", _COMMA.sub(", ", text))


def plain_signature(name: str, param_sizes: tuple[int, ...] | None) -> str:
    """An ``extern "C"`` kernel's signature, whose symbol carries no types: its parameters as
    the sizes its CUBIN records (``void fill(8 bytes, 4 bytes)``; ``?`` where it records none).
    The report's row and :attr:`Kernel.signature` both say it so."""
    from ..core.units import counted

    sizes = "?" if param_sizes is None else ", ".join(counted(n, "byte") for n in param_sizes)
    return with_void(f"{name}({sizes})")


def with_void(signature: str) -> str:
    """A kernel's signature with its return type, as C++ declares it (``void k(int*)``): a
    demangled name carries the return type of a template only."""
    return signature if signature.startswith("void ") else f"void {signature}"
