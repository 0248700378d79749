"""What a build knows of types beyond the kernels' mangled names: the probe's answers (the
variables' types and the ``extern "C"`` kernels' parameter types, :mod:`~cudamagic.toolchain.compile.probe`) and
the name expressions that name variables (``-n "&z::tv<float>"``), checked on a hit as a kernel's
are. The pipeline's helper; no IPython."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..toolchain.binary.demangle import Demangler, concrete_demangler, variable_texts
from ..toolchain.binary.image import CubinImage

if TYPE_CHECKING:  # pragma: no cover  (the probe's compile: not a hit's)
    from ..toolchain.compile.probe import ProbeAnswers, TypedCompile
    from ..cxx.signatures import Signatures
    from ..toolchain.binary.variables import VarType

__all__ = ["PROBE_RETRIED", "answers", "variable_expressions", "contradicted", "stored_types"]

PROBE_RETRIED = ("the compiler could not answer some of cudamagic's questions about the types "
                 "of this cell's variables and extern \"C\" kernels (a name the cell's text "
                 "declares in code that is not compiled, or that another declaration hides), "
                 "so the cell was compiled {} times, the last without those questions; where "
                 "no answer came, a variable is its bytes and an extern \"C\" kernel takes "
                 "its arguments by their sizes")


def _demangle(fallback: Demangler) -> Callable[[list[str]], list[str | None]]:
    """The demangling for the probe's answers: in this process where libstdc++ can (a pending
    cu++filt serves one batch, which the kernels' signatures took)."""
    return (concrete_demangler() or fallback).demangle


def answers(typed: TypedCompile, image: CubinImage, sigs: Signatures, fallback: Demangler
            ) -> tuple[Signatures, ProbeAnswers]:
    """The signatures with each ``extern "C"`` kernel's parameter types where the probe said
    them, and everything the probe said."""
    from ..toolchain.compile.probe import ProbeAnswers, read_answers

    if not typed.probes:  # nothing was asked: no symbol to demangle (a CCCL CUBIN has hundreds)
        return sigs, ProbeAnswers()
    untyped = sigs.untyped()
    said = read_answers(typed.probes, typed.lowered, _demangle(fallback),
                        [g.name for g in image.globals], untyped)
    return sigs.with_texts(dict(said.functions)), said


def variable_expressions(names: Sequence[str], lowered: Mapping[str, str], image: CubinImage
                         ) -> dict[str, str]:
    """The name expressions NVRTC lowered to variables of the CUBIN, with their symbols (the
    variables' table is read only where an expression names no kernel: a hit of kernels alone
    leaves it unread)."""
    kernels = set(image.symbols)
    others = {e: lowered[e] for e in names if e in lowered and lowered[e] not in kernels}
    if not others:
        return {}
    held = {g.name for g in image.globals}
    return {e: s for e, s in others.items() if s in held}


def contradicted(found: Mapping[str, str]) -> str | None:
    """The first expression whose variable's demangled name decidably names another entity,
    or None (demangled in this process: a hit starts no demangler; without libstdc++ only
    plain names are compared)."""
    if not found:
        return None
    from ..cxx.compare import contradicts  # a cell with variables only
    from ..toolchain.binary.variables import strip_internal

    texts = variable_texts(list(found.values()), may_start=False)  # a hit starts no demangler
    return next((expr for expr, s in found.items()
                 if texts.get(s) is not None or not s.startswith("_Z")  # too long: not compared
                 if contradicts(expr, strip_internal(texts.get(s) or s))), None)


def stored_types(table: Mapping[str, object] | None) -> dict[str, VarType]:
    """The variables' types an entry stored (checked when it was decoded)."""
    if not table:
        return {}
    from ..toolchain.binary.variables import VarType  # an entry with variables only

    return {k: VarType.from_json(v) for k, v in table.items()}
