"""C++ as the compiler sees it: template arguments and demangled names, compared and resolved.

The names below are the package's; each is imported from its module when first asked for
(``importlib.import_module``), so a cache hit, which reads stored names and signatures, does not
import the C++ reader (:mod:`.parse`, :mod:`.args`) a compile's names need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from . import types
    from .compare import contradicts
    from .display import tidy_name, with_void
    from .parse import Signature, parse_demangled
    from .pyname import python_name, valid_python_name
    from .signatures import Signatures, recorded_texts, stored_signatures, symbol_record
    from .resolve import NVRTC, Resolved, plain_kernels, resolve, similar_names
    from .types import INTEGERS, SCALARS, TARGET, TYPEDEFS, DataModel, Scalar, integer, scalar

#: each name, with the module (of this package) that defines it
_HOME = {
    "contradicts": "compare", "tidy_name": "display", "with_void": "display",
    "Signature": "parse", "parse_demangled": "parse",
    "python_name": "pyname", "valid_python_name": "pyname",
    "Signatures": "signatures", "recorded_texts": "signatures",
    "stored_signatures": "signatures", "symbol_record": "signatures",
    "NVRTC": "resolve", "Resolved": "resolve", "plain_kernels": "resolve", "resolve": "resolve",
    "similar_names": "resolve",
    **dict.fromkeys(("INTEGERS", "SCALARS", "TARGET", "TYPEDEFS", "DataModel", "Scalar",
                     "integer", "scalar"), "types"),
}

__all__ = ["INTEGERS", "NVRTC", "Resolved", "SCALARS", "Scalar", "Signature", "Signatures",
           "DataModel", "TARGET", "TYPEDEFS", "contradicts", "integer", "parse_demangled",
           "plain_kernels", "python_name", "recorded_texts", "resolve", "scalar", "similar_names",
           "stored_signatures", "symbol_record",
           "tidy_name", "types", "with_void",
           "valid_python_name"]


def __getattr__(name: str) -> Any:
    import importlib

    if name == "types":
        return importlib.import_module(".types", __name__)
    if name in _HOME:
        return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The package's names with the lazy ones, importing none."""
    return sorted(set(globals()) | set(__all__))
