"""Nsight Compute's answer for one launch as a frozen :class:`Profile`: ``ncu``'s command line
for one child, and its report read through its own report interface (the ``ncu_report``
package, or the ``extras/python`` folder of an Nsight Compute install), never its console text.

What is read, by ncu's metric names (:data:`METRICS`): the duration; compute (SM) and memory
throughput as % of peak; DRAM bytes and bandwidth; achieved and theoretical occupancy; the
floating-point operations (a roofline point); the warp-stall reasons (every
``smsp__average_warps_issue_stalled_*`` ratio the report holds); and, from the source counters
of a ``-lineinfo`` build, the cell's lines with the most warp samples.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import CudaMagicError, ProfileReadError
from ...core.lines import cell_lines

__all__ = ["Profile", "Stall", "HotLine", "SourceCounters", "PcCounts", "Comparison", "ProfileReadError", "ncu_argv",
           "read_report", "profile_of", "METRICS"]

#: what each figure is read from (ncu's metric names)
METRICS = {
    "duration_ns": "gpu__time_duration.sum",
    "compute_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_bytes": "dram__bytes.sum",
    "dram_bytes_per_s": "dram__bytes.sum.per_second",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
}
# floating-point instructions, and the operations each counts (an FMA is two)
_FLOP_METRICS = {
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 2,
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 1,
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": 1,
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum": 2,
    "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum": 1,
    "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum": 1,
}
_STALL_PREFIX = "smsp__average_warps_issue_stalled_"
_STALL_SUFFIX = "_per_issue_active.ratio"
# per-instruction counters, by preference: warp samples, then executed instructions
_LINE_METRICS = ("smsp__pcsamp_sample_count", "inst_executed")
# per-instruction counters beside the samples (ncu's SourceCounters section): executed warp
# instructions, thread instructions predicated on, global accesses' L2 sectors (and the fewest
# they could take), divergent branch targets; the stall reasons' samples share a prefix
_PC_METRICS = {"executed": "inst_executed", "threads": "thread_inst_executed_true",
               "sectors": "memory_l2_theoretical_sectors_global",
               "ideal_sectors": "memory_l2_theoretical_sectors_global_ideal",
               "divergent": "smsp__branch_targets_threads_divergent"}
_PC_SAMPLES = "smsp__pcsamp_sample_count"
_PC_STALL_PREFIX = "smsp__pcsamp_warps_issue_stalled_"
_FUNCTION_PC = "launch__function_pcs"
_SECTIONS = ("SpeedOfLight", "SpeedOfLight_RooflineChart", "Occupancy", "LaunchStats",
             "WarpStateStats", "SourceCounters", "MemoryWorkloadAnalysis")



@dataclass(frozen=True)
class Stall:
    """One warp-stall reason: ncu's name for it and the average warps stalled so per issue."""

    reason: str
    ratio: float


@dataclass(frozen=True)
class HotLine:
    """A cell line and the share of the kernel's samples (or instructions) at it."""

    line: int
    text: str
    share: float
    count: int


@dataclass(frozen=True)
class SourceCounters:
    """ncu's source counters over some instructions (None: the report has no such counter).

    ``samples`` are warp samples; ``stalls`` the samples stalled for each reason (non-zero
    only); ``executed`` warp instructions run and ``threads`` the thread instructions of them
    whose predicate was true (``threads / (32 * executed)`` is how full the warps ran);
    ``sectors`` the L2 sectors the global accesses took and ``ideal_sectors`` the fewest they
    could; ``divergent`` branch targets taken by part of a warp.
    """

    samples: int = 0
    stalls: tuple[tuple[str, int], ...] = ()
    executed: int | None = None
    threads: int | None = None
    sectors: int | None = None
    ideal_sectors: int | None = None
    divergent: int | None = None


@dataclass(frozen=True)
class PcCounts(SourceCounters):
    """ncu's counters at one instruction: ``offset`` is its from the kernel's start
    (nvdisasm's offsets), ``file`` and ``line`` ncu's source place for it."""

    offset: int = 0
    file: str = ""
    line: int = 0


@dataclass(frozen=True)
class Profile:
    """One launch as Nsight Compute measured it (None: the report lacks that figure);
    ``occupancy_pct`` and ``limited_by`` are cudamagic's own occupancy for the launch's block
    (:mod:`~cudamagic.toolchain.device.occupancy`), shown beside ncu's theoretical figure."""

    label: str
    kernel: str
    duration_ns: float | None = None
    compute_pct: float | None = None
    memory_pct: float | None = None
    dram_pct: float | None = None
    dram_bytes: float | None = None
    dram_bytes_per_s: float | None = None
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    flops: float | None = None
    stalls: tuple[Stall, ...] = ()
    hot_lines: tuple[HotLine, ...] = ()
    occupancy_pct: float | None = None
    limited_by: tuple[str, ...] = ()
    tool: str = ""
    seconds: float = field(default=0.0, compare=False)
    #: the kernel's symbol (ncu's mangled name), and its counters per instruction
    symbol: str = ""
    pcs: tuple[PcCounts, ...] = field(default=(), compare=False, repr=False)

    @property
    def intensity(self) -> float | None:
        """Floating-point operations per DRAM byte (the roofline's x)."""
        if not self.flops or not self.dram_bytes:
            return None
        return self.flops / self.dram_bytes

    @property
    def flops_per_s(self) -> float | None:
        """Achieved floating-point operations per second (the roofline's y)."""
        if self.flops is None or not self.duration_ns:
            return None
        return self.flops / (self.duration_ns * 1e-9)


@dataclass(frozen=True)
class Comparison:
    """Several launches profiled side by side (``%cuda_profile a(...); b(...)``)."""

    profiles: tuple[Profile, ...]


def ncu_argv(program: str, symbol: str, report: str | os.PathLike,
             child: Sequence[str]) -> list[str]:
    """The command line that profiles the child's one launch of ``symbol`` into ``report``."""
    argv = [program, "--target-processes", "all", "--kernel-name-base", "mangled",
            "--kernel-name", symbol, "--launch-count", "1", "--force-overwrite",
            "--export", os.fspath(report), "--import-source", "no",
            "--metrics", ",".join([*METRICS.values(), *_FLOP_METRICS]),
            # the clocks as the notebook's own launches run (ncu's default locks them to base
            # clocks, and a kernel's duration then disagrees with kernel.bench's:
            # docs/performance.md, section 7)
            "--clock-control", "none"]
    for section in _SECTIONS:
        argv += ["--section", section]
    return argv + list(child)


def _extras_folders(ncu_path: str, version: str) -> list[Path]:
    """Where Nsight Compute's ``extras/python`` may be for the ncu at ``ncu_path``: beside the
    program it resolves to, in the toolkit's ``nsight-compute-*`` folder (``bin/ncu`` of a CUDA
    toolkit is a launcher script, not a link), and in ``/opt/nvidia/nsight-compute/*``; the
    install whose folder name is ncu's version first, then the newest."""
    home = Path(os.path.realpath(ncu_path)).parent
    near = [home / "extras" / "python", home.parent / "extras" / "python"]
    installs = [Path(p) for p in (*glob.glob(os.fspath(home.parent / "nsight-compute*")),
                                  *glob.glob("/opt/nvidia/nsight-compute/*"))]
    number = next((w for w in version.split() if w[:1].isdigit()), "")
    number = ".".join(number.split(".")[:3])  # "2025.3.1.0" -> "2025.3.1"
    installs.sort(key=lambda p: (bool(number) and number in p.name, p.name), reverse=True)
    return near + [p / "extras" / "python" for p in installs]


def _report_module() -> Any:
    """ncu's report interface: the ``ncu_report`` package, else the ``extras/python`` folder
    of the Nsight Compute install of the ncu found (:func:`_extras_folders`)."""
    try:
        import ncu_report
        return ncu_report
    except ImportError:
        pass
    from . import tools

    tool = tools.find(tools.ToolKind.NCU)
    if isinstance(tool, tools.Tool):
        for extras in _extras_folders(tool.path, tool.version):
            if (extras / "ncu_report.py").exists():
                sys.path.append(str(extras))
                import ncu_report
                return ncu_report
    raise ProfileReadError("ncu's report interface is not installed: pip install ncu-report "
                           "(or use the extras/python folder of Nsight Compute)")


def read_report(path: str | os.PathLike, *, label: str = "", source: str = "",
                line_offset: int = 0, program: str = "cell.cu", tool: str = "",
                seconds: float = 0.0) -> Profile:
    """The profile of the first launch in an ncu report file.

    :raises ProfileReadError: no report interface, or a report with no launch in it.
    """
    ncu_report = _report_module()
    try:
        context = ncu_report.load_report(os.fspath(path))
    except Exception as exc:  # noqa: BLE001 - the interface raises its own kinds
        raise ProfileReadError(f"ncu's report {path} cannot be read ({exc})") from None
    if context.num_ranges() == 0 or context.range_by_idx(0).num_actions() == 0:
        raise ProfileReadError(f"ncu's report {path} holds no launch: the kernel was not "
                               "profiled (was it launched?)")
    action = context.range_by_idx(0).action_by_idx(0)
    return profile_of(action, label=label, source=source, line_offset=line_offset,
                      program=program, tool=tool, seconds=seconds)


def _value(action: Any, name: str) -> float | None:
    metric = action.metric_by_name(name)
    if metric is None:
        return None
    try:
        value = metric.as_double()
    except Exception:  # noqa: BLE001 - a metric without a number
        return None
    return float(value)


def profile_of(action: Any, *, label: str = "", source: str = "", line_offset: int = 0,
               program: str = "cell.cu", tool: str = "", seconds: float = 0.0) -> Profile:
    """A :class:`Profile` from one of the report interface's actions (one launch)."""
    # the float | None fields of Profile named by METRICS (mypy cannot match a spread's keys)
    figures: dict[str, Any] = {key: _value(action, name) for key, name in METRICS.items()}
    counts = [(_value(action, name), weight) for name, weight in _FLOP_METRICS.items()]
    flops = sum(v * w for v, w in counts if v is not None) \
        if any(v is not None for v, _ in counts) else None
    names = list(action.metric_names())
    stalls = []
    for name in names:
        if name.startswith(_STALL_PREFIX) and name.endswith(_STALL_SUFFIX):
            ratio = _value(action, name)
            if ratio:
                stalls.append(Stall(name[len(_STALL_PREFIX):-len(_STALL_SUFFIX)], ratio))
    stalls.sort(key=lambda s: -s.ratio)
    return Profile(label=label or str(action.name()), kernel=str(action.name()), **figures,
                   flops=flops, stalls=tuple(stalls[:5]),
                   hot_lines=_hot_lines(action, source, line_offset, program), tool=tool,
                   seconds=seconds, symbol=_mangled(action), pcs=pc_counts(action))


def _mangled(action: Any) -> str:
    """The launch's kernel by its symbol (an interface without name bases: its one name)."""
    try:
        return str(action.name(action.NameBase_MANGLED))
    except (AttributeError, TypeError):
        return str(action.name())


def _per_pc(action: Any, name: str) -> dict[int, int]:
    """A per-instruction metric as {pc: value}; empty where the report lacks it."""
    metric = action.metric_by_name(name)
    if metric is None or not metric.has_correlation_ids():
        return {}
    pcs = metric.correlation_ids()
    return {int(pcs.as_uint64(i)): int(metric.as_uint64(i)) for i in range(metric.num_instances())}


def pc_counts(action: Any) -> tuple[PcCounts, ...]:
    """Every instruction ncu counted, by its offset from the kernel's start (the report's
    function address, ``launch__function_pcs``; without it, the lowest PC counted), with its
    samples, stall reasons and the source counters (:data:`_PC_METRICS`)."""
    samples = _per_pc(action, _PC_SAMPLES)
    figures = {key: _per_pc(action, name) for key, name in _PC_METRICS.items()}
    stalls = {name[len(_PC_STALL_PREFIX):]: _per_pc(action, name)
              for name in action.metric_names()
              if name.startswith(_PC_STALL_PREFIX) and not name.endswith("_not_issued")}
    every = set(samples).union(*figures.values())
    if not every:
        return ()
    base = _per_pc(action, _FUNCTION_PC)  # one instance: the function's address
    start = next(iter(base.values()), 0) or min(every)
    out = []
    for pc in sorted(every):
        info = action.source_info(pc)
        reasons = tuple((r, by_pc[pc]) for r, by_pc in stalls.items() if by_pc.get(pc))
        out.append(PcCounts(offset=pc - start,
                            file=str(info.file_name()) if info is not None else "",
                            line=int(info.line()) if info is not None else 0,
                            samples=samples.get(pc, 0), stalls=reasons,
                            **{k: v.get(pc) for k, v in figures.items()}))
    return tuple(out)


def _hot_lines(action: Any, source: str, line_offset: int, program: str,
               keep: int = 5) -> tuple[HotLine, ...]:
    """The cell's lines with the most per-instruction counts, from the source counters (each
    instruction's address mapped to its source line by the report's own line table)."""
    for name in _LINE_METRICS:
        metric = action.metric_by_name(name)
        if metric is None or not metric.has_correlation_ids():
            continue
        pcs = metric.correlation_ids()
        by_line: dict[int, int] = {}
        total = 0
        for i in range(metric.num_instances()):
            count = int(metric.as_uint64(i))
            total += count
            info = action.source_info(int(pcs.as_uint64(i)))
            if info is None or os.path.basename(str(info.file_name())) != program:
                continue
            by_line[int(info.line())] = by_line.get(int(info.line()), 0) + count
        if not total:
            continue
        lines = cell_lines(source)
        top = sorted(by_line.items(), key=lambda kv: -kv[1])[:keep]
        return tuple(HotLine(n + line_offset, lines[n - 1].strip() if 0 < n <= len(lines)
                             else "", count / total, count) for n, count in top)
    return ()
