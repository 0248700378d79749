"""Timing without a GPU: the GPU's part (its queue, its clock, events, the L2 flush, the hold) is
a stand-in that runs the queue in order on a clock of its own; everything else (the rounds, the
interleaving, the statistics, the checks, the views, the magic's parsing) is the real code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pytest

import cudamagic
from cudamagic.errors import ArgumentTypeError, ArgumentValueError, NoDeviceError, OptionError
from cudamagic.launch import bench as bench_module
from cudamagic.launch.bench import BenchResult, Settings, Variant, compare, run_line
from cudamagic.view.bench import timing_html, timing_text

from .conftest import FIXTURES


@dataclass
class Event:
    """A CUDA event: the stand-in clock's time when the queue reached it."""

    at: float | None = None


class StandInGPU:
    """One stream: work is queued by the host and runs, in order, on ``synchronize``; the
    clock advances by each kernel's duration (ms) and by the hold's."""

    name = "Stand-in GPU"
    peak_gbps = 2000.0
    peak_tflops = 50.0

    def __init__(self) -> None:
        self.clock = 0  # ns: whole numbers, so that differences are exact
        self.queue: list[tuple] = []
        self.log: list[tuple] = []  # what ran, in order

    def stream(self, stream):
        return "stream-77" if stream is None else stream

    def event(self):
        return Event()

    def record(self, event, stream):
        self.queue.append(("record", event))

    def elapsed_ms(self, start, end):
        assert start.at is not None and end.at is not None, "an event read before it ran"
        return (end.at - start.at) / 1e6

    def synchronize(self, stream):
        for op, *rest in self.queue:
            if op == "record":
                rest[0].at = self.clock
                self.log.append(("record",))
            elif op == "kernel":
                kernel, args = rest
                self.clock += round(kernel.duration(kernel.launches_run) * 1e6)
                kernel.launches_run += 1
                kernel.run(args)
                self.log.append(("kernel", kernel.label))
            else:
                self.clock += round(rest[0] * 1e6)
                self.log.append((op,))
        self.queue.clear()

    def flush_l2(self, stream):
        self.queue.append(("flush", 0.05))

    def hold(self, stream, seconds):
        self.queue.append(("hold", seconds * 1e3))

    def to_host(self, array):
        return np.array(array)


class StandInKernel:
    """A kernel on the stand-in GPU: takes ``duration(n)`` ms on its n-th run, writes ``value``
    into its output array (the first argument), and sleeps ``host_s`` in the launch call."""

    def __init__(self, gpu: StandInGPU, label: str, duration, value: float = 1.0,
                 host_s: float = 0.0) -> None:
        self.gpu, self.label = gpu, label
        self.duration = duration if callable(duration) else (lambda n, d=duration: d)
        self.value, self.host_s = value, host_s
        self.launches_run = 0
        self.calls: list[tuple] = []

    def attributes(self, device=None):  # a GPU kernel answers for its attributes
        return {}

    def __call__(self, grid, block, args=(), shared_mem=0, stream=None):
        self.calls.append((grid, block, shared_mem, stream))
        if self.host_s:
            time.sleep(self.host_s)
        self.gpu.queue.append(("kernel", self, args))

    def run(self, args):
        if args and isinstance(args[0], np.ndarray):
            args[0][:] = self.value


@pytest.fixture
def gpu():
    return StandInGPU()


def variants(gpu, durations, outputs=False, **kw):
    made = []
    for label, d in durations.items():
        out = np.zeros(4, np.float32) if outputs else None
        k = StandInKernel(gpu, label, d, **kw)
        made.append(Variant(label=label, kernel=k, grid=(8,), block=(128,),
                            args=(out,) if outputs else (), output=out))
    return made


# --- rounds, interleaving, samples -------------------------------------------------------------

def test_variants_are_interleaved_round_robin_rotating_each_round(gpu):
    vs = variants(gpu, {"a": 1.0, "b": 2.0, "c": 3.0})
    result = compare(vs, settings=Settings(warmup=2, repeat=4), device=gpu)
    assert result.order == tuple("abc" "bca" "cab" "abc")
    kernels = [e[1] for e in gpu.log if e[0] == "kernel"]
    # warm-up rounds too: every round rotated, launches never batched per variant
    assert kernels == list("abc" "bca" "abc" "bca" "cab" "abc")


def test_samples_are_the_device_time_between_the_events(gpu):
    durations = {"a": lambda n: 1.0 + n % 3, "b": 0.5}
    result = compare(variants(gpu, durations), settings=Settings(warmup=3, repeat=30),
                     device=gpu)
    a = result["a"]
    # a's n-th run takes 1 + n % 3 ms; its timed runs are the 4th to the 33rd
    assert a.samples_ms == tuple(1.0 + n % 3 for n in range(3, 33))
    assert result["b"].samples_ms == (0.5,) * 30
    s = np.array(a.samples_ms)
    assert (a.min, a.median, a.mean) == (s.min(), np.median(s), s.mean())
    assert (a.p10, a.p90) == (np.quantile(s, 0.1), np.quantile(s, 0.9))
    assert a.std == pytest.approx(s.std(ddof=1))
    assert a.ratio == 1.0 and result["b"].ratio == pytest.approx(0.5 / np.median(s))
    assert [t.label for t in result.ranked()] == ["b", "a"]


def test_every_round_after_the_first_starts_behind_the_hold(gpu):
    compare(variants(gpu, {"a": 1.0, "b": 1.0}), settings=Settings(warmup=2, repeat=3),
            device=gpu)
    rounds, current = [], []
    for entry in gpu.log:
        if entry[0] == "hold" and current:
            rounds.append(current)
            current = []
        current.append(entry[0])
    rounds.append(current)
    assert len(rounds) == 5  # the first warm-up round has no estimate yet
    for r in rounds[1:]:
        assert r == ["hold", "record", "kernel", "record", "record", "kernel", "record"]


def test_the_l2_flush_comes_before_each_start_event(gpu):
    result = compare(variants(gpu, {"a": 1.0}), settings=Settings(warmup=0, repeat=3,
                                                                  flush_l2=True), device=gpu)
    ops = [e[0] for e in gpu.log if e[0] != "hold"]
    assert ops == ["flush", "record", "kernel", "record"] * 3
    assert result["a"].samples_ms == (1.0,) * 3  # the flush is not timed


def test_host_time_is_kept_apart_from_device_time(gpu):
    vs = variants(gpu, {"slow host": 0.1}, host_s=0.003)
    t = compare(vs, settings=Settings(warmup=1, repeat=5), device=gpu)["slow host"]
    assert t.samples_ms == (0.1,) * 5
    assert min(t.host_ms) >= 3.0 and t.host_median_ms >= 3.0


def test_a_budget_runs_at_least_min_repeat_and_at_most_max_repeat(gpu):
    r = compare(variants(gpu, {"a": 1.0}), settings=Settings(warmup=0, budget_s=1e-6,
                                                             min_repeat=4), device=gpu)
    assert len(r["a"].samples_ms) == 4
    r = compare(variants(gpu, {"a": 1.0}), settings=Settings(warmup=0, budget_s=60,
                                                             max_repeat=9), device=gpu)
    assert len(r["a"].samples_ms) == 9
    start = time.perf_counter()
    r = compare(variants(gpu, {"a": 1.0}, host_s=0.001),
                settings=Settings(warmup=0, budget_s=0.05), device=gpu)
    assert 0.05 <= time.perf_counter() - start < 1.0
    assert 5 <= len(r["a"].samples_ms) <= 50


@pytest.mark.parametrize("settings,words", [
    (dict(max_repeat=0), r"max_repeat=0: give an int >= 1"),
    (dict(max_repeat=-1), r"max_repeat=-1: give an int >= 1"),
    (dict(min_repeat=5, max_repeat=3), r"min_repeat=5 is over max_repeat=3"),
    (dict(warmup=-1), r"warmup=-1: give an int >= 0"),
], ids=str)
def test_settings_that_would_time_nothing_are_refused(gpu, settings, words):
    """max_repeat=0 timed no launch and printed a table of nan."""
    with pytest.raises(ArgumentValueError, match=words):
        compare(variants(gpu, {"a": 1.0}), settings=Settings(budget_s=1e-6, **settings),
                device=gpu)


def test_rates_and_fractions_of_peak(gpu):
    v = Variant(label="copy", kernel=StandInKernel(gpu, "copy", 2.0), grid=1, block=1,
                bytes=2_000_000_000, flops=10**10)
    t = compare([v], settings=Settings(warmup=0, repeat=3), device=gpu)["copy"]
    assert t.gbps == pytest.approx(1000.0) and t.bandwidth_fraction == pytest.approx(0.5)
    assert t.tflops == pytest.approx(5.0) and t.flops_fraction == pytest.approx(0.1)


# --- output checks -----------------------------------------------------------------------------

def test_a_variant_whose_output_differs_is_marked_not_ranked(gpu):
    vs = variants(gpu, {"base": 2.0, "fast but wrong": 0.5, "same": 1.0}, outputs=True)
    vs[1].kernel.value = 7.0
    result = compare(vs, settings=Settings(warmup=1, repeat=3), device=gpu)
    assert [t.matches for t in result.timings] == [True, False, True]
    wrong = result["fast but wrong"]
    assert wrong.ratio is None and "4 of 4 values" in wrong.mismatch
    assert [t.label for t in result.ranked()] == ["same", "base", "fast but wrong"]
    text = timing_text(result)
    assert "differs" in text and "output differs: 4 of 4 values" in text
    assert text.index("same") < text.index("base") < text.index("fast but wrong")


def test_outputs_are_checked_against_a_given_reference_or_check(gpu):
    vs = variants(gpu, {"a": 1.0, "b": 1.0}, outputs=True)
    vs[1].kernel.value = 2.0
    r = compare(vs, reference=np.full(4, 2.0, np.float32),
                settings=Settings(warmup=0, repeat=1), device=gpu)
    assert [t.matches for t in r.timings] == [False, True]
    r = compare(vs, check=lambda got, want: True, settings=Settings(warmup=0, repeat=1),
                device=gpu)
    assert [t.matches for t in r.timings] == [True, True]


def test_the_check_launch_happens_before_any_timing(gpu):
    vs = variants(gpu, {"a": lambda n: 100.0 if n == 0 else 1.0}, outputs=True)
    r = compare(vs, settings=Settings(warmup=0, repeat=3), device=gpu)
    assert r["a"].samples_ms == (1.0,) * 3 and r["a"].matches is True


# --- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("settings,message", [
    (Settings(repeat=0), "repeat=0"), (Settings(budget_s=0), "budget_s=0"),
    (Settings(warmup=-1), "warmup=-1"), (Settings(repeat=2.5), "repeat=2.5"),
])
def test_bad_settings_say_what(gpu, settings, message):
    with pytest.raises(ArgumentValueError, match=message):
        compare(variants(gpu, {"a": 1.0}), settings=settings, device=gpu)


def test_bad_variants_say_what(gpu):
    with pytest.raises(ArgumentValueError, match="no variants"):
        compare([], device=gpu)
    twice = variants(gpu, {"a": 1.0}) * 2
    with pytest.raises(ArgumentValueError, match="two variants are labelled 'a'"):
        compare(twice, device=gpu)
    with pytest.raises(ArgumentValueError, match="baseline='z' is none of the variants"):
        compare(variants(gpu, {"a": 1.0}), baseline="z", device=gpu)
    with pytest.raises(ArgumentValueError, match="baseline=3"):
        compare(variants(gpu, {"a": 1.0}), baseline=3, device=gpu)


def test_timing_without_a_gpu_is_no_device_error():
    from cudamagic.toolchain.device import driver

    if driver.available():
        pytest.skip("this machine has a GPU")
    mod = cudamagic.load_cubin(FIXTURES / "fixture.cubin", ["fill<float>"])
    with pytest.raises(NoDeviceError, match="timing needs a GPU"):
        mod["fill<float>"].bench((1,), (32,), (None, 1.0, 4))


def test_kernel_bench_and_occupancy_are_thin_methods_whose_results_print_as_tables(gpu,
                                                                                    monkeypatch):
    """A module's kernel times and sizes itself through the tools its module gave it: the
    harness gets the call as made, and what comes back prints as a table (the record's words are
    the view's, the launch layer has none)."""
    mod = cudamagic.load_cubin(FIXTURES / "fixture.cubin", ["fill<float>"])
    k = mod["fill<float>"]
    seen = {}

    def fake_bench(kernel, grid, block, args, **kw):
        seen.update(kernel=kernel, grid=grid, block=block, args=args, **kw)
        return compare(variants(gpu, {"fill": 1.0}), settings=Settings(warmup=0, repeat=2),
                       device=gpu)

    monkeypatch.setattr(bench_module, "bench", fake_bench)
    timed = k.bench((2,), (64,), (None, 1.0, 4), repeat=7, flush_l2=True)
    assert seen["kernel"] is k and seen["repeat"] == 7 and seen["flush_l2"] is True
    assert isinstance(timed, BenchResult) and timed.timings[0].label == "fill"
    assert str(timed).startswith("Stand-in GPU: 0 warm-up, 2 timed launches")
    assert "<svg" in timed._repr_html_()
    t = k.occupancy(block_sizes=(128, 256), sm=90)
    assert [r.block_size for r in t.rows] == [128, 256] and t.source == "computed"
    assert "best block size" in str(t) and "<svg" in t._repr_html_()


def test_a_kernel_made_on_its_own_says_it_has_no_tools():
    from cudamagic.errors import LaunchError
    from cudamagic.launch import Kernel

    k = cudamagic.load_cubin(FIXTURES / "fixture.cubin", ["fill<float>"])["fill<float>"]
    alone = Kernel(k.binary, k.name_expression, k.symbol, k.python_name, k._signatures,
                   k.resolved_by)
    for call in (lambda: alone.bench((1,), (32,), ()), alone.occupancy):
        with pytest.raises(LaunchError, match="made on its own"):
            call()


def test_the_hold_kernel_compiles_without_a_gpu_to_one_8_byte_parameter():
    """The hold kernel is compiled by NVRTC and loaded by the driver (no pipeline build): its
    CUBIN holds the kernel the launch names, taking the one 8-byte count of nanoseconds the
    launch packs."""
    from cudamagic.toolchain.binary.image import read_cubin

    image = read_cubin(bench_module.hold_cubin(90))
    assert image.sm == 90
    (kernel,) = [k for k in image.kernels if k.symbol == bench_module._HOLD_NAME]
    assert [p.size for p in kernel.params] == [8]


# --- views -------------------------------------------------------------------------------------

def test_the_html_view_has_the_distribution_plot_and_table(gpu):
    r = compare(variants(gpu, {"a": 1.0, "b": 2.0}), settings=Settings(warmup=0, repeat=5),
                device=gpu)
    page = timing_html(r)
    assert page.count("<svg") == 1 and page.count("<circle") == 10
    assert "<table" in page and "2.00x" in page


def test_the_text_view_reads_in_a_terminal(gpu):
    r = compare(variants(gpu, {"a": 0.004, "b": 2.0}), settings=Settings(warmup=0, repeat=5),
                device=gpu)
    lines = timing_text(r).splitlines()
    assert lines[0].startswith("Stand-in GPU: 0 warm-up, 5 timed launches each, round-robin")
    assert lines[2].split()[:2] == ["a", "4"] and lines[2].split()[2] == "us"
    assert "500.00x" in lines[3]
    assert max(len(x) for x in lines) < 100


# --- %cuda_bench -------------------------------------------------------------------------------

def test_the_magic_line_times_the_calls_it_names(gpu):
    ns = {"a": StandInKernel(gpu, "a", 1.0), "b": StandInKernel(gpu, "b", 3.0),
          "n": 1000, "out": np.zeros(4, np.float32)}
    r = run_line("-n 4 -w 1 --bytes 8*n a((4,), (256,), (out, 2.0, n)); "
                 "b((4,), (128,), (out, 2.0, n), shared_mem=1024)", ns, device=gpu)
    assert isinstance(r, BenchResult)
    assert [t.label for t in r.timings] == ["a((4,), (256,), (out, 2.0, n))",
                                            "b((4,), (128,), (out, 2.0, n), shared_mem=1024)"]
    assert len(r.timings[0].samples_ms) == 4 and r.timings[1].ratio == pytest.approx(3.0)
    assert r.timings[0].bytes == 8000
    assert ns["b"].calls[-1][2] == 1024 and ns["a"].calls[-1][:2] == ((4,), (256,))


def test_the_magic_line_checks_outputs(gpu):
    ns = {"a": StandInKernel(gpu, "a", 1.0, value=1.0), "b": StandInKernel(gpu, "b", 1.0,
                                                                             value=2.0),
          "out": np.zeros(4, np.float32)}
    r = run_line("-n 2 --check out a(1, 32, (out,)); b(1, 32, (out,))", ns, device=gpu)
    assert [t.matches for t in r.timings] == [True, False]


@pytest.mark.parametrize("line,message", [
    ("", "no launch to time"),
    ("--nope a(1, 2, ())", "--nope is not an option"),
    ("-n a(1, 2, ())", "-n 'a\\(1,' is not an int"),
    ("-n x a(1, 2, ())", "-n 'x' is not an int"),
    ("a(1, 2, (", "do not parse"),
    ("x = 3", "is not a launch"),
    ("missing(1, 2, ())", "kernel 'missing' raised NameError"),
    ("n(1, 2, ())", "n is a int, not a GPU kernel"),
    ("f(1, 2, ())", "f is a function, not a GPU kernel"),
    ("(lambda *a: None)(1, 2, ())", "is a function, not a GPU kernel"),
    ("np.add(1, 2, ())", "np.add is a ufunc, not a GPU kernel"),
    ("print(1, 2, ())", "print is a builtin_function_or_method, not a GPU kernel"),
    ("a(1, 2, (), wrong=3)", "wrong is not one of them"),
    ("a(1, 2, (), stream=n)", "the calls run on CuPy's current stream"),
    ("a(1, 2, (), **{'shared_mem': 0})", r"\*\*\{'shared_mem': 0\} is not one of them"),
    # the keyword won in silence (Python's own call refuses it)
    ("a(1, 2, (), grid=3)", "grid is given twice, by position and by name"),
    ("a(1, 2, (), block=2)", "block is given twice"),
    # was "argument '*t' raised SyntaxError: invalid syntax"
    ("a(1, 2, *t)", r"\*t is not read here"),
])
def test_bad_magic_lines_say_what(gpu, line, message):
    ns = {"a": StandInKernel(gpu, "a", 1.0), "n": 3, "f": len, "np": np, "print": print}
    ns["f"] = lambda *a: None
    with pytest.raises(OptionError, match=message):
        run_line(line, ns, device=gpu)


# a launch a cudamagic kernel refuses -> its error, which came without a GPU as NoDeviceError
# ("timing needs a GPU") and so was found only on one
REFUSED_LAUNCHES = {
    "too many arguments": ("k(1, 32, (None, 4, 5))", ArgumentTypeError, "takes 2 arguments"),
    "no arguments": ("k(1, 32)", ArgumentTypeError, "takes 2 arguments"),
    "args not a tuple": ("k(1, 32, 5)", ArgumentTypeError, "args must be a tuple"),
    "a zero grid": ("k((0,), 32, (None, 4))", ArgumentValueError, "at least 1"),
    "a grid as text": ("k('g', 32, (None, 4))", ArgumentTypeError, "grid must be an int"),
    "negative shared memory": ("k(1, 32, (None, 4), shared_mem=-1)", ArgumentValueError,
                               "shared_mem must be from 0"),
    "an int out of range": ("k(1, 32, (None, 2**40))", ArgumentValueError, "int"),
    "the second call bad": ("k(1, 32, (None, 4)); k(1, 32, (None, 1.5))", ArgumentTypeError,
                            ""),
}


@pytest.fixture(scope="module")
def real_kernel(tmp_path_factory):
    src = 'extern "C" __global__ void k(float* x, int n) { if (n) x[0] = 1.0f; }\n'
    return cudamagic.build(src, cache=tmp_path_factory.mktemp("cache"))["k"]


@pytest.mark.parametrize("case", list(REFUSED_LAUNCHES))
def test_a_launch_the_kernel_refuses_is_said_before_the_gpu_is_asked_for(real_kernel, case,
                                                                          no_gpu):
    line, error, words = REFUSED_LAUNCHES[case]
    with pytest.raises(error, match=words):
        run_line(line, {"k": real_kernel})
    with pytest.raises(NoDeviceError):  # a good launch still says what is missing
        run_line("k(1, 32, (None, 4))", {"k": real_kernel})


def test_kernel_bench_checks_its_launch_first(real_kernel, no_gpu):
    with pytest.raises(ArgumentTypeError, match="takes 2 arguments"):
        real_kernel.bench(1, 32, (None,))


def test_the_magic_is_registered_and_reaches_the_timing(gpu, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    cudamagic.load_ipython_extension(ip)
    from cudamagic.toolchain.device import driver

    monkeypatch.setattr(driver, "available", lambda: True)
    monkeypatch.setattr(bench_module, "CupyDevice", lambda: gpu)
    ip.user_ns["k"] = StandInKernel(gpu, "k", 1.5)
    result = ip.run_line_magic("cuda_bench", "-n 3 -w 0 k((1,), (32,), ())")
    assert result["k((1,), (32,), ())"].samples_ms == (1.5,) * 3
    assert str(result).startswith("Stand-in GPU: 0 warm-up, 3 timed")  # shown as a table


# --- the report's fold -------------------------------------------------------------------------

def test_the_reports_fold_draws_every_kernel_without_the_gpu(monkeypatch):
    from cudamagic.toolchain.device import driver
    from cudamagic.view import widget as W
    from cudamagic.view.bench import timing_fold

    from .test_report import make

    mod = cudamagic.load_cubin(FIXTURES / "fixture.cubin", ["fill<float>", "cast<float, double>"])
    monkeypatch.setattr(driver, "available", lambda: pytest.fail("the fold asked the driver"))
    page = timing_fold(mod)
    assert page.startswith('<details class="cudamagic-fold"><summary>timing and occupancy')
    assert page.count("<svg") == 1 and page.count("<polyline") == len(
        {k.symbol for k in mod.kernels.values()})
    assert "fill_float: best block size 1024 (100% occupancy, limited by warps)" in page
    assert "fill_float.bench(grid, block, args)" in page
    assert "other(grid, block, args) times several side by side" in page
    from comm import create_comm  # no kernel here: comm's own stand-in

    shown = []
    W.show_report(make(2), W.Frontend(shown.append, create_comm),
                  extra=lambda: timing_fold(mod))
    assert "timing and occupancy" in shown[0]["text/html"]


def test_the_hold_covers_the_last_rounds_enqueueing_not_the_slowest(gpu, monkeypatch):
    holds = []
    real = gpu.hold
    gpu.hold = lambda stream, seconds: holds.append(seconds) or real(stream, seconds)
    slow = {"n": 0}

    def first_slow(grid, block, args=(), shared_mem=0, stream=None):
        slow["n"] += 1
        if slow["n"] == 2:  # one slow enqueue in the warm-up (a compile, a page fault)
            time.sleep(0.02)
        gpu.queue.append(("kernel", k, args))

    k = StandInKernel(gpu, "a", 1.0)
    compare([Variant(label="a", kernel=first_slow, grid=1, block=1)],
            settings=Settings(warmup=3, repeat=5), device=gpu)
    assert holds[1] > 0.04  # right after the slow round
    assert max(holds[3:]) < 0.01  # and back down once rounds are quick again


class _TorchLikeStream:
    """A stream of another library: a PyTorch stream gives its handle as ``.cuda_stream``."""

    def __init__(self, handle: int) -> None:
        self.cuda_stream = handle


class _ProtocolStream:
    """A stream speaking the CUDA stream protocol: ``__cuda_stream__() -> (version, handle)``."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self):
        return 0, self.handle


@pytest.mark.parametrize("stream", [_TorchLikeStream(0x1234), _ProtocolStream(0x1234), 0x1234],
                         ids=["torch-like", "cuda-stream-protocol", "raw-handle"])
def test_bench_times_on_a_stream_that_is_not_cupys(stream):
    """Kernel.bench(stream=...) with a stream CuPy did not make: the timing device wraps its
    handle for its events (the wrapping needs no GPU; making the device does, so it is made
    without its GPU queries)."""
    import cupy

    device = bench_module.CupyDevice.__new__(bench_module.CupyDevice)
    device.cupy = cupy
    wrapped = device.stream(stream)
    assert isinstance(wrapped, cupy.cuda.ExternalStream) and wrapped.ptr == 0x1234
    given = cupy.cuda.Stream.null
    assert device.stream(given) is given


def test_bench_refuses_an_object_that_is_no_stream_and_says_where():
    import cupy

    device = bench_module.CupyDevice.__new__(bench_module.CupyDevice)
    device.cupy = cupy
    with pytest.raises(cudamagic.errors.ArgumentTypeError, match="bench: stream"):
        device.stream(object())
