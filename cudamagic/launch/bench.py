"""Timing kernels on the GPU: CUDA events around each launch, variants interleaved round-robin.

One timed round enqueues, for each variant in turn (the order rotates every round, so that drift
and clock changes hit every variant alike): an optional L2 flush, a start event, the launch, an
end event. The device time of a launch is the time between its two events. So that the GPU is
never waiting for Python while a round is enqueued (an idle GPU between the start event and the
kernel would count the host's launch cost as device time), each round starts behind a short
*hold* kernel that keeps the stream busy for about twice as long as the round took to enqueue in
the warm-up. The host side (the launch call alone, measured with ``perf_counter``) is kept apart,
as its own samples.

With output checks each variant is launched once before any timing and its output compared with
the reference (given, or the baseline's output); a variant that differs is marked and left out of
the ranking.
"""

from __future__ import annotations

import ctypes
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ArgumentValueError, NoDeviceError
from .calls import CallSyntax, evaluate, number, read_calls, read_options
from .capture import check_launch

__all__ = ["Settings", "Variant", "Timing", "BenchResult", "bench", "compare", "CupyDevice"]

# FP32 lanes per SM (the FMA peak is 2 * lanes * SMs * clock), by architecture
_FP32_LANES = {70: 64, 72: 64, 75: 64, 80: 64, 86: 128, 87: 128, 88: 128, 89: 128, 90: 128,
               100: 128, 103: 128, 110: 128, 120: 128, 121: 128}

# the hold kernel: sleeps on the GPU for a given number of nanoseconds (globaltimer), so the
# stream is busy while the host enqueues a round
_HOLD_NAME = "cudamagic_hold"
_HOLD_SOURCE = r"""
extern "C" __global__ void cudamagic_hold(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(2000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
"""
_HOLD_MARGIN_S = 50e-6
_HOLD_MAX_S = 0.05


@dataclass(frozen=True)
class Settings:
    """How a run times.

    Attributes
    ----------
    warmup : int
        Untimed rounds first (each variant launched once a round).
    repeat : int or None
        Timed rounds; None: as many as fit in ``budget_s`` (at least ``min_repeat``).
    budget_s : float
        Seconds of timed rounds when ``repeat`` is None.
    flush_l2 : bool
        Overwrite a buffer twice the size of L2 before every timed launch (cold-cache times).
    min_repeat, max_repeat : int
        Bounds on the timed rounds a budget gives.
    """

    warmup: int = 5
    repeat: int | None = None
    budget_s: float = 1.0
    flush_l2: bool = False
    min_repeat: int = 5
    max_repeat: int = 10_000


@dataclass(frozen=True)
class Variant:
    """One launch to time: a kernel, its launch configuration and arguments.

    Attributes
    ----------
    label : str
        How the views name it.
    kernel : callable
        A :class:`cudamagic.Kernel` (anything called as ``kernel(grid, block, args,
        shared_mem=, stream=)``).
    bytes, flops : int or None
        Bytes the launch moves and operations it does, for GB/s and FLOP/s.
    output : array or None
        What the launch writes, compared after one launch with the reference (see
        :func:`compare`).
    """

    label: str
    kernel: Any
    grid: Any
    block: Any
    args: Sequence[Any] = ()
    shared_mem: int = 0
    bytes: int | None = None
    flops: int | None = None
    output: Any = field(default=None, compare=False)


@dataclass(frozen=True)
class Timing:
    """Every sample of one variant and what follows from them (times in milliseconds).

    Attributes
    ----------
    label : str
    samples_ms : tuple of float
        Device time of each timed launch (CUDA events), in the order they ran.
    host_ms : tuple of float
        The launch call's host time, each timed launch.
    bytes, flops : int or None
    peak_gbps, peak_tflops : float or None
        The device's memory bandwidth and FP32 FMA peak, for the fractions.
    ratio : float or None
        This median over the baseline's median (None for a variant whose output differs).
    matches : bool or None
        Whether the output equals the reference (None: not checked).
    mismatch : str
        How it differs, where it does.
    """

    label: str
    samples_ms: tuple[float, ...]
    host_ms: tuple[float, ...] = ()
    bytes: int | None = None
    flops: int | None = None
    peak_gbps: float | None = None
    peak_tflops: float | None = None
    ratio: float | None = None
    matches: bool | None = None
    mismatch: str = ""

    def _q(self, q: float) -> float:
        return float(np.quantile(self.samples_ms, q)) if self.samples_ms else math.nan

    @property
    def min(self) -> float:
        """The fastest launch."""
        return min(self.samples_ms) if self.samples_ms else math.nan

    @property
    def median(self) -> float:
        """The median launch (what the ratio compares)."""
        return self._q(0.5)

    @property
    def p10(self) -> float:
        """The 10th percentile."""
        return self._q(0.1)

    @property
    def p90(self) -> float:
        """The 90th percentile."""
        return self._q(0.9)

    @property
    def mean(self) -> float:
        """The mean launch."""
        return statistics.fmean(self.samples_ms) if self.samples_ms else math.nan

    @property
    def std(self) -> float:
        """The samples' standard deviation (0 for one sample)."""
        return statistics.stdev(self.samples_ms) if len(self.samples_ms) > 1 else 0.0

    @property
    def host_median_ms(self) -> float:
        """The launch call's median host time."""
        return statistics.median(self.host_ms) if self.host_ms else math.nan

    @property
    def gbps(self) -> float | None:
        """Bytes moved over the median time, in GB/s (1e9 bytes a second)."""
        return None if self.bytes is None else self.bytes / (self.median * 1e-3) / 1e9

    @property
    def tflops(self) -> float | None:
        """Operations over the median time, in TFLOP/s."""
        return None if self.flops is None else self.flops / (self.median * 1e-3) / 1e12

    @property
    def bandwidth_fraction(self) -> float | None:
        """GB/s over the device's peak memory bandwidth."""
        return None if self.gbps is None or not self.peak_gbps else self.gbps / self.peak_gbps

    @property
    def flops_fraction(self) -> float | None:
        """TFLOP/s over the device's FP32 FMA peak."""
        return None if self.tflops is None or not self.peak_tflops \
            else self.tflops / self.peak_tflops


@dataclass(frozen=True)
class BenchResult:
    """The timings of one run, one per variant, in the order given.

    Attributes
    ----------
    timings : tuple of Timing
    baseline : str
        The variant the ratios compare with.
    device : str
        The GPU's name.
    settings : Settings
    order : tuple of str
        The labels in the order their launches were enqueued (every round, one after another).

    A record: its text and HTML are :mod:`cudamagic.view.bench`'s; ``kernel.bench()`` and
    ``%cuda_bench`` give it with them (:class:`cudamagic.view.shown.ShownBench`).
    """

    timings: tuple[Timing, ...]
    baseline: str
    device: str
    settings: Settings
    order: tuple[str, ...] = field(default=(), repr=False)

    def __getitem__(self, label: str) -> Timing:
        for t in self.timings:
            if t.label == label:
                return t
        raise KeyError(label)

    def ranked(self) -> list[Timing]:
        """Fastest median first; variants whose output differs after all, unranked."""
        good = sorted((t for t in self.timings if t.matches is not False), key=lambda t: t.median)
        return good + [t for t in self.timings if t.matches is False]


class CupyDevice:
    """The GPU side of a run, through CuPy: events and streams, the L2 flush, the hold kernel,
    the device's name and peaks."""

    def __init__(self) -> None:
        import cupy

        from ..toolchain.device import driver

        self.cupy = cupy
        self.index = driver.current_device()
        self.name = driver.device_name(self.index)
        self.sm = driver.device_sm(self.index)
        attrs = _device_attributes(self.index)
        self.l2_bytes = attrs.get("l2_cache_size") or 64 << 20
        self.peak_gbps, self.peak_tflops = _peaks(attrs, self.sm)
        self._flush_buffer: Any = None
        self._hold: _HoldKernel | None = None

    def stream(self, stream: Any) -> Any:
        """The CuPy stream the events go on: the one given, or CuPy's current stream."""
        if stream is None:
            return self.cupy.cuda.get_current_stream()
        if isinstance(stream, self.cupy.cuda.Stream):
            return stream
        from .encode import stream_handle

        return self.cupy.cuda.ExternalStream(stream_handle("bench", stream))

    def event(self) -> Any:
        """A timing event."""
        return self.cupy.cuda.Event()

    def record(self, event: Any, stream: Any) -> None:
        """Record an event on the stream."""
        event.record(stream)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Milliseconds between two recorded events."""
        return float(self.cupy.cuda.get_elapsed_time(start, end))

    def synchronize(self, stream: Any) -> None:
        """Wait for the stream."""
        stream.synchronize()

    def flush_l2(self, stream: Any) -> None:
        """Overwrite twice L2's size so the next launch starts with a cold cache."""
        if self._flush_buffer is None:
            self._flush_buffer = self.cupy.empty(2 * self.l2_bytes, dtype=self.cupy.uint8)
        self.cupy.cuda.runtime.memsetAsync(self._flush_buffer.data.ptr, 0,
                                           self._flush_buffer.nbytes, stream.ptr)

    def prepare(self) -> None:
        """Make the hold kernel, so that no round's enqueueing time holds a compile."""
        if self._hold is None:
            self._hold = _HoldKernel(self.sm, self.index)

    def hold(self, stream: Any, seconds: float) -> None:
        """Keep the stream busy for ``seconds`` on the GPU (the round enqueues meanwhile)."""
        self.prepare()
        assert self._hold is not None
        self._hold(stream.ptr, int(seconds * 1e9))

    def to_host(self, array: Any) -> np.ndarray:
        """An output array's values on the host."""
        if hasattr(array, "__cuda_array_interface__"):
            return self.cupy.asnumpy(self.cupy.asarray(array))
        return np.asarray(array)


def hold_cubin(sm: int) -> bytes:
    """The hold kernel's CUBIN for ``sm_{sm}``, compiled by NVRTC (a small kernel, no header).
    No cudamagic build: the launch layer builds nothing through the pipeline or its cache."""
    from ..compiler.client import ServedCompiler
    from ..store.cache import default_cache_dir
    from ..toolchain.compile.nvrtc import compile_cubin

    compile_served = ServedCompiler(compile_cubin, default_cache_dir)  # NVRTC's server's
    return compile_served(_HOLD_SOURCE, (), (f"-arch=sm_{sm}",), program_name="hold.cu",
                         trace=False).cubin


class _HoldKernel:
    """The hold kernel on one device: :func:`hold_cubin` loaded by the driver, once per
    :class:`CupyDevice`, before any round (docs/timing-design.md says what that costs)."""

    def __init__(self, sm: int, device: int) -> None:
        from ..toolchain.device import driver

        self.library = driver.Library.load(hold_cubin(sm))  # kept: the kernel lives as long as it
        self.kernel = self.library.kernel(_HOLD_NAME)
        self.device = device

    def __call__(self, stream: int, ns: int) -> None:
        """Launch it on ``stream`` (a ``CUstream`` handle) for ``ns`` nanoseconds."""
        from ..toolchain.device import driver

        arg = ctypes.c_uint64(ns)
        params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
        driver.launch(self.kernel, (1, 1, 1), (1, 1, 1), 0, stream, ctypes.addressof(params),
                      self.device, _HOLD_NAME)


_ATTRIBUTES = ("L2_CACHE_SIZE", "MEMORY_CLOCK_RATE", "GLOBAL_MEMORY_BUS_WIDTH", "CLOCK_RATE",
               "MULTIPROCESSOR_COUNT")


def _device_attributes(index: int) -> dict[str, int]:
    """The device attributes timing reads (kHz, bits, bytes, counts) by lower-case name; one
    the driver does not answer is left out."""
    from cuda.bindings import driver as cu

    out = {}
    for name in _ATTRIBUTES:
        attr = getattr(cu.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}", None)
        if attr is None:
            continue
        status, value = cu.cuDeviceGetAttribute(attr, cu.CUdevice(index))
        if status == cu.CUresult.CUDA_SUCCESS:
            out[name.lower()] = int(value)
    return out


def _peaks(attrs: dict, sm: int) -> tuple[float | None, float | None]:
    """Peak memory bandwidth (GB/s: two transfers a memory clock over the bus) and FP32 FMA
    peak (TFLOP/s) from the device's attributes; None where an attribute is missing."""
    mem_khz, bus_bits = attrs.get("memory_clock_rate", 0), attrs.get("global_memory_bus_width", 0)
    clock_khz, sms = attrs.get("clock_rate", 0), attrs.get("multiprocessor_count", 0)
    gbps = 2 * mem_khz * 1e3 * bus_bits / 8 / 1e9 if mem_khz and bus_bits else None
    lanes = _FP32_LANES.get(sm)
    tflops = 2 * lanes * sms * clock_khz * 1e3 / 1e12 if lanes and clock_khz and sms else None
    return gbps, tflops


def _check_settings(settings: Settings) -> None:
    for name, least in (("warmup", 0), ("min_repeat", 0), ("max_repeat", 1)):
        value = getattr(settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ArgumentValueError(f"bench: {name}={value!r}: give an int >= {least}"
                                     + (" (no timed launch would leave nothing to show)"
                                        if least else ""))
    if settings.min_repeat > settings.max_repeat:
        raise ArgumentValueError(f"bench: min_repeat={settings.min_repeat} is over "
                                 f"max_repeat={settings.max_repeat}")
    r = settings.repeat
    if r is not None and (isinstance(r, bool) or not isinstance(r, int) or r < 1):
        raise ArgumentValueError(f"bench: repeat={r!r}: give the timed launches as an int >= 1, "
                                 "or None to fill budget_s")
    b = settings.budget_s
    if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0 < b < math.inf:
        raise ArgumentValueError(f"bench: budget_s={b!r}: give seconds > 0")


def _check_variants(variants: Sequence[Variant], baseline: str | int) -> str:
    """The baseline's label, after checking the variants can be told apart."""
    if not variants:
        raise ArgumentValueError("bench: no variants to time")
    labels = [v.label for v in variants]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ArgumentValueError(f"bench: two variants are labelled {twice[0]!r}: give each "
                                 "its own label")
    for v in variants:
        for what in ("bytes", "flops"):
            n = getattr(v, what)
            if n is not None and (isinstance(n, bool) or not isinstance(n, (int, float))
                                  or n < 0):
                raise ArgumentValueError(f"bench: {v.label}: {what}={n!r}: give a count >= 0")
    if isinstance(baseline, int) and not isinstance(baseline, bool):
        if not 0 <= baseline < len(variants):
            raise ArgumentValueError(f"bench: baseline={baseline}: there are {len(variants)} "
                                     "variants")
        return labels[baseline]
    if baseline not in labels:
        raise ArgumentValueError(f"bench: baseline={baseline!r} is none of the variants: "
                                 f"{', '.join(map(repr, labels))}")
    return baseline


def _check_launches(variants: Sequence[Variant]) -> None:
    """Each variant's launch checked as its launcher checks it, before a GPU is asked for: a bad
    grid, block, shared memory or argument is said as itself, with or without a GPU (it was a
    NoDeviceError without one). A kernel without a parameter table (CuPy's) is checked when
    launched.

    :raises ArgumentTypeError, ArgumentValueError: a launch the kernel would refuse.
    """
    for v in variants:
        specs = getattr(v.kernel, "params", None)
        name = getattr(v.kernel, "name_expression", None)
        if specs is not None and isinstance(name, str):
            check_launch(name, specs, v.grid, v.block, v.args, v.shared_mem)


def _default_equal(got: np.ndarray, want: np.ndarray) -> str:
    """"" where two outputs agree (floats to NumPy's allclose, others exactly), else how not."""
    if got.shape != want.shape:
        return f"shape {got.shape}, the reference's {want.shape}"
    if got.dtype.kind in "fc" or want.dtype.kind in "fc":
        close = np.isclose(got, want, rtol=1e-5, atol=1e-8, equal_nan=True)
    else:
        close = got == want
    if bool(np.all(close)):
        return ""
    bad = np.argwhere(~close)
    first = tuple(int(i) for i in bad[0])
    return (f"{len(bad)} of {got.size} values, first at {first}: {got[first]!r}, the "
            f"reference {want[first]!r}")


def _check_outputs(variants: Sequence[Variant], base: str, reference: Any,
                   check: Callable[[np.ndarray, np.ndarray], Any] | None, device: Any,
                   stream: Any) -> dict[str, str | None]:
    """Launch each variant that has an output once; label -> "" (equal), how it differs, or
    None (not checked)."""
    outputs: dict[str, np.ndarray] = {}
    for v in variants:
        if v.output is not None:
            _launch(v, stream)
            device.synchronize(stream)
            outputs[v.label] = device.to_host(v.output)
    if not outputs:
        return {v.label: None for v in variants}
    if reference is None:
        if base not in outputs:
            raise ArgumentValueError(f"bench: outputs to check, but the baseline {base!r} has "
                                     "none to check them against: give it output= or pass "
                                     "reference=")
        want = outputs[base]
    else:
        want = device.to_host(reference)
    found: dict[str, str | None] = {}
    for v in variants:
        if v.label not in outputs:
            found[v.label] = None
        elif check is None:
            found[v.label] = _default_equal(outputs[v.label], want)
        else:
            verdict = check(outputs[v.label], want)
            found[v.label] = "" if verdict else f"check returned {verdict!r}"
    return found


def _launch(v: Variant, stream: Any) -> float:
    """Launch one variant; the host time of the call, in milliseconds."""
    start = time.perf_counter()
    v.kernel(v.grid, v.block, v.args, shared_mem=v.shared_mem, stream=stream)
    return (time.perf_counter() - start) * 1e3


def _round(variants: Sequence[Variant], rotate: int, device: Any, stream: Any, flush: bool,
           hold_s: float) -> tuple[list[tuple[str, Any, Any, float]], float]:
    """Enqueue one round: the hold, then each variant (rotated) between two events; returns
    ``(label, start, end, host ms)`` each and the seconds the enqueueing took."""
    n = len(variants)
    order = [variants[(i + rotate) % n] for i in range(n)]
    began = time.perf_counter()
    if hold_s > 0:
        device.hold(stream, hold_s)
    marks = []
    for v in order:
        if flush:
            device.flush_l2(stream)
        start, end = device.event(), device.event()
        device.record(start, stream)
        host = _launch(v, stream)
        device.record(end, stream)
        marks.append((v.label, start, end, host))
    return marks, time.perf_counter() - began


def compare(variants: Sequence[Variant], *, baseline: str | int = 0,
            settings: Settings | None = None, reference: Any = None,
            check: Callable[[np.ndarray, np.ndarray], Any] | None = None, stream: Any = None,
            device: Any = None) -> BenchResult:
    """Time several launches side by side, interleaved round-robin.

    Parameters
    ----------
    variants : sequence of Variant
        The launches; labels must differ.
    baseline : str or int
        The variant the ratios divide by (label or position; default the first).
    settings : Settings
        Warm-up, repeats or time budget, L2 flush.
    reference : array, optional
        What each variant's ``output`` must equal (default: the baseline's output).
    check : callable, optional
        ``check(output, reference) -> bool`` in place of the default comparison (NumPy's
        ``allclose`` for floating point, equality otherwise).
    stream : stream, optional
        Where launches and events go (default: CuPy's current stream).

    :raises NoDeviceError: no GPU.
    :raises ArgumentValueError: settings or variants that cannot be timed as given.
    """
    settings = settings or Settings()
    _check_settings(settings)
    base = _check_variants(variants, baseline)
    _check_launches(variants)
    device = _timing_device() if device is None else device
    st = device.stream(stream)
    getattr(device, "prepare", lambda: None)()  # the hold kernel built before any round
    verdicts = _check_outputs(variants, base, reference, check, device, st)
    samples: dict[str, list[float]] = {v.label: [] for v in variants}
    host: dict[str, list[float]] = {v.label: [] for v in variants}
    order: list[str] = []
    hold_s = 0.0
    for r in range(settings.warmup):
        _, took = _round(variants, r, device, st, settings.flush_l2, hold_s)
        device.synchronize(st)
        hold_s = min(2 * took + _HOLD_MARGIN_S, _HOLD_MAX_S)
    started, rounds = time.perf_counter(), 0
    while _more(settings, rounds, time.perf_counter() - started):
        marks, took = _round(variants, rounds, device, st, settings.flush_l2, hold_s)
        device.synchronize(st)
        hold_s = min(2 * took + _HOLD_MARGIN_S, _HOLD_MAX_S)
        for label, start, end, h in marks:
            samples[label].append(device.elapsed_ms(start, end))
            host[label].append(h)
            order.append(label)
        rounds += 1
    base_median = float(np.median(samples[base]))
    timings = tuple(_timing(v, samples[v.label], host[v.label], verdicts[v.label], base_median,
                            device) for v in variants)
    return BenchResult(timings=timings, baseline=base, device=device.name, settings=settings,
                       order=tuple(order))


def _timing_device() -> Any:
    """The GPU that times launches (through CuPy).

    :raises NoDeviceError: no GPU.
    """
    from ..toolchain.device import driver

    if not driver.available():
        raise NoDeviceError("timing needs a GPU: no CUDA device is available here. "
                            "Occupancy (kernel.occupancy()) works without one.")
    return CupyDevice()


def _more(settings: Settings, rounds: int, elapsed: float) -> bool:
    """Whether another timed round runs."""
    if settings.repeat is not None:
        return rounds < settings.repeat
    if rounds >= settings.max_repeat:
        return False
    return rounds < settings.min_repeat or elapsed < settings.budget_s


def _timing(v: Variant, samples: list[float], host: list[float], verdict: str | None,
            base_median: float, device: Any) -> Timing:
    median = float(np.median(samples))
    differs = bool(verdict)
    return Timing(label=v.label, samples_ms=tuple(samples), host_ms=tuple(host), bytes=v.bytes,
                  flops=v.flops, peak_gbps=getattr(device, "peak_gbps", None),
                  peak_tflops=getattr(device, "peak_tflops", None),
                  ratio=None if differs or not base_median else median / base_median,
                  matches=None if verdict is None else not differs, mismatch=verdict or "")


def bench(kernel: Any, grid: Any, block: Any, args: Sequence[Any] = (), *, shared_mem: int = 0,
          stream: Any = None, warmup: int = 5, repeat: int | None = None, budget_s: float = 1.0,
          flush_l2: bool = False, bytes: int | None = None, flops: int | None = None,
          label: str | None = None, device: Any = None) -> BenchResult:
    """Time one launch: ``kernel(grid, block, args, shared_mem, stream)`` on the GPU.

    ``repeat`` timed launches (default: as many as fit in ``budget_s`` seconds) after
    ``warmup`` untimed ones; ``flush_l2`` gives cold-cache times; ``bytes`` and ``flops`` give
    GB/s and TFLOP/s with the device's peak for the fraction. The result prints as a table
    and shows as a plot in a notebook.

    :raises NoDeviceError: no GPU.
    """
    name = str(label or getattr(kernel, "name_expression", None)
               or getattr(kernel, "__name__", "kernel"))
    variant = Variant(label=name, kernel=kernel, grid=grid, block=block, args=args,
                      shared_mem=shared_mem, bytes=bytes, flops=flops)
    return compare([variant], settings=Settings(warmup=warmup, repeat=repeat, budget_s=budget_s,
                                                flush_l2=flush_l2), stream=stream, device=device)


# --- %cuda_bench: a line of calls (read by :mod:`.calls`) -------------------------------------

BENCH_SYNTAX = CallSyntax(
    magic="%cuda_bench", verb="time", flags=frozenset({"--flush-l2"}),
    valued={"-n": "repeat", "--repeat": "repeat", "-t": "budget", "--budget": "budget",
            "-w": "warmup", "--warmup": "warmup", "--bytes": "bytes", "--flops": "flops",
            "--baseline": "baseline", "--check": "check", "--reference": "reference"},
    usage="%cuda_bench [-n REPEAT | -t SECONDS] [-w WARMUP] [--flush-l2] [--bytes EXPR] "
          "[--flops EXPR] [--baseline N|LABEL] [--check OUTPUT [--reference EXPR]] "
          "kernel(grid, block, args[, shared_mem]) [; other(grid, block, args) ...]",
    stream_note="the calls run on CuPy's current stream; for another, time from Python: "
                "cudamagic.launch.bench.compare(variants, stream=s)")


def run_line(line: str, namespace: dict, *, device: Any = None) -> BenchResult:
    """What ``%cuda_bench`` does with its line: parse the options, read the calls in the
    user's namespace, time them (several: side by side, interleaved).

    :raises OptionError: a line that does not say what to time.
    :raises NoDeviceError: no GPU.
    """
    syntax = BENCH_SYNTAX
    opts, rest = read_options(line, syntax)
    base = opts.get("baseline", "0")
    baseline: str | int = int(base) if base.isdigit() else base
    settings = Settings(warmup=number(opts.get("warmup"), int, "-w", syntax) if "warmup" in opts
                        else Settings.warmup,
                        repeat=number(opts.get("repeat"), int, "-n", syntax),
                        budget_s=number(opts.get("budget"), float, "-t", syntax)
                        if "budget" in opts else Settings.budget_s,
                        flush_l2="--flush-l2" in opts)
    extra: dict[str, Any] = {}
    for what in ("bytes", "flops"):
        if what in opts:
            extra[what] = evaluate(opts[what], namespace, f"--{what}", syntax)
    if "check" in opts:
        extra["output"] = evaluate(opts["check"], namespace, "--check", syntax)
    variants = [Variant(label=c.label, kernel=c.kernel, grid=c.grid, block=c.block, args=c.args,
                        shared_mem=c.shared_mem, **extra)
                for c in read_calls(rest, namespace, syntax)]
    reference = evaluate(opts["reference"], namespace, "--reference", syntax) \
        if "reference" in opts else None
    return compare(variants, baseline=baseline, settings=settings, reference=reference,
                   device=device)
