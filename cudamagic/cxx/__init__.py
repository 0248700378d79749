"""C++ as the compiler sees it: template arguments and demangled names, compared and resolved."""

from . import types
from .compare import contradicts
from .display import tidy_name, with_void
from .parse import Signature, parse_demangled
from .pyname import python_name, valid_python_name
from .signatures import Signatures, recorded_texts, stored_signatures, symbol_record
from .resolve import NVRTC, Resolved, plain_kernels, resolve, similar_names
from .types import INTEGERS, SCALARS, TARGET, TYPEDEFS, DataModel, Scalar, integer, scalar

__all__ = ["INTEGERS", "NVRTC", "Resolved", "SCALARS", "Scalar", "Signature", "Signatures",
           "DataModel", "TARGET", "TYPEDEFS", "contradicts", "integer", "parse_demangled",
           "plain_kernels", "python_name", "recorded_texts", "resolve", "scalar", "similar_names",
           "stored_signatures", "symbol_record",
           "tidy_name", "types", "with_void",
           "valid_python_name"]
