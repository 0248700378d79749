"""C++ as the compiler sees it: template arguments and demangled names, compared and resolved."""

from .names import (Signature, Signatures, parse_demangled, python_name, valid_python_name)
from .resolve import NVRTC, Resolved, closest, plain_kernels, resolve

__all__ = ["NVRTC", "Resolved", "Signature", "Signatures", "closest", "parse_demangled",
           "plain_kernels", "python_name", "resolve", "valid_python_name"]
