"""The timing and occupancy records as a user is handed them: each the record itself (a
subclass, every field and method the same) with its text for a terminal and its HTML for a
notebook (:mod:`.bench`'s words). The records are made below the views (a table by
:mod:`cudamagic.toolchain.device.occupancy`, a timing by :mod:`cudamagic.launch.bench`) and know no
words; what hands one to the user shows it here: ``kernel.occupancy()`` and ``kernel.bench()``
(through the :class:`~cudamagic.launch.kernel.KernelTools` a module gives its kernels) and
``%cuda_bench``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..launch import bench as timing
from ..launch.bench import BenchResult
from ..toolchain.device.occupancy import DEFAULT_BLOCK_SIZES, OccupancyTable, table
from .bench import occupancy_html, occupancy_text, timing_html, timing_text

__all__ = ["ShownOccupancy", "ShownBench", "show_occupancy", "show_bench", "kernel_occupancy",
           "kernel_bench"]


class ShownOccupancy(OccupancyTable):
    """An :class:`~cudamagic.toolchain.device.occupancy.OccupancyTable` that prints as its table and
    shows as its plot."""

    def __str__(self) -> str:
        return occupancy_text(self)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))  # a terminal (and a notebook's text/plain) shows the table, not the record

    def _repr_html_(self) -> str:
        return occupancy_html(self)


class ShownBench(BenchResult):
    """A :class:`~cudamagic.launch.bench.BenchResult` that prints as its table and shows as its
    plot."""

    def __str__(self) -> str:
        return timing_text(self)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str:
        return timing_html(self)


def _as(cls: type, record: Any) -> Any:
    """``record`` as an instance of ``cls`` (a subclass of its type adding views alone)."""
    return cls(**{f.name: getattr(record, f.name) for f in dataclasses.fields(record)})


def show_occupancy(t: OccupancyTable) -> ShownOccupancy:
    """The table, with its text and HTML."""
    return t if isinstance(t, ShownOccupancy) else _as(ShownOccupancy, t)


def show_bench(result: BenchResult) -> ShownBench:
    """The timing result, with its text and HTML."""
    return result if isinstance(result, ShownBench) else _as(ShownBench, result)


def kernel_occupancy(kernel: Any, block_sizes: Sequence[int] | None = None,
                     dynamic_shared: Sequence[int] = (0,), **options: Any) -> ShownOccupancy:
    """``kernel.occupancy()``: :func:`cudamagic.toolchain.device.occupancy.table`, shown."""
    return show_occupancy(table(kernel, DEFAULT_BLOCK_SIZES if block_sizes is None
                                else block_sizes, dynamic_shared, **options))


def kernel_bench(kernel: Any, grid: Any, block: Any, args: Sequence[Any] = (),
                 **options: Any) -> ShownBench:
    """``kernel.bench()``: :func:`cudamagic.launch.bench.bench`, shown."""
    return show_bench(timing.bench(kernel, grid, block, args, **options))
