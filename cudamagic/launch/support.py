"""The records a module hands its kernels for tool runs (:mod:`.tool_run` runs them): made on
every build, a hit's too, so they live apart from the tool runs' code, which a hit never
imports."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LineinfoBuild", "DebugSupport"]


@dataclass(frozen=True)
class LineinfoBuild:
    """What a child needs of the cell: the module's travelling record (built with
    ``-lineinfo``), and the source its line numbers refer to.

    Attributes
    ----------
    payload : bytes
        The module's record (:meth:`cudamagic.Module.__reduce__`'s).
    source : str
        The cell's source as NVRTC compiled it ("" for a CUBIN from elsewhere).
    line_offset : int
        NVRTC's line numbers plus this are the cell's (1 below the ``%%cuda`` line).
    program : str
        The file name NVRTC gave the source (``cell.cu``).
    lineinfo : bool
        The record's CUBIN has line information.
    cubin : bytes
        The record's CUBIN (what :meth:`cudamagic.Module.annotate` disassembles).
    """

    payload: bytes
    source: str = ""
    line_offset: int = 0
    program: str = "cell.cu"
    lineinfo: bool = False
    cubin: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class DebugSupport:
    """What a module gives its kernels for tool runs: its ``-lineinfo`` build (a callable: made
    and cached on first use) and the view that shows a result."""

    lineinfo: Callable[[], LineinfoBuild]
    present: Callable[[Any], Any] = lambda record: record
