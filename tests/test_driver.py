"""The driver module without a GPU: what a driver status means, and what a machine without one
says. (With one, tests/test_gpu.py drives the real calls.)"""

from __future__ import annotations

import threading

import pytest

from cudamagic.toolchain.device import driver
from cudamagic.errors import ContextPoisonedError, LaunchError, NoDeviceError

# CUresult codes and names as the driver reports them (cuda.h)
STATUS = {700: ("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"),
          209: ("CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution"),
          1: ("CUDA_ERROR_INVALID_VALUE", "invalid argument")}


@pytest.fixture
def names(monkeypatch):
    monkeypatch.setattr(driver, "_error_name", lambda status: STATUS[status])


def test_success_is_silent(names):
    assert driver.check(0, "cuLaunchKernel") is None


def test_a_fault_says_the_context_is_gone(names):
    with pytest.raises(ContextPoisonedError, match="restart the notebook kernel"):
        driver.check(700, "launching k")


def test_a_cubin_for_another_gpu_says_so(names):
    with pytest.raises(LaunchError, match="built for another GPU architecture"):
        driver.check(209, "cuKernelGetFunction")


def test_other_errors_name_the_call_and_the_status(names):
    with pytest.raises(LaunchError, match="cuLaunchKernel failed with CUDA_ERROR_INVALID_VALUE: "
                                          "invalid argument"):
        driver.check(1, "cuLaunchKernel")


@pytest.mark.skipif(driver.available(), reason="this machine has a GPU")
def test_without_a_gpu_every_device_call_says_what_works():
    assert driver.device_count() == 0 and driver.driver_version() is None
    with pytest.raises(NoDeviceError, match="Compiling, caching and name resolution work"):
        driver.current_device()


def test_the_driver_starts_once_however_many_threads_ask(monkeypatch, fresh_process):
    """%load_ext starts the driver in a thread while a cell may ask too: one cuInit."""
    calls = []
    started = threading.Event()

    def first_init():
        calls.append(1)
        started.wait(0.2)  # a slow cuInit, while others ask
        return None

    monkeypatch.setattr(driver, "_first_init", first_init)
    threads = [threading.Thread(target=driver._init) for _ in range(8)]
    for t in threads:
        t.start()
    started.set()
    for t in threads:
        t.join()
    assert calls == [1] and driver._init() is None


@pytest.mark.parametrize("cluster, cooperative", [(None, True), ((2, 3, 4), False),
                                                  ((8, 1, 1), True), (None, False)])
def test_launch_config_is_laid_out_as_cuda_bindings_lays_it_out(cluster, cooperative):
    """cuLaunchKernelEx's CUlaunchConfig and CUlaunchAttribute as written through ctypes: the
    same bytes as cuda.bindings' own structs (which know cuda.h), field for field."""
    import ctypes

    from cuda.bindings import driver as cu

    config = driver.launch_config(driver.ExtendedLaunch((7, 5, 3), (32, 4, 2), 4096, 0x1234,
                                                         cluster, cooperative))
    ref = cu.CUlaunchConfig()
    ref.gridDimX, ref.gridDimY, ref.gridDimZ = 7, 5, 3
    ref.blockDimX, ref.blockDimY, ref.blockDimZ = 32, 4, 2
    ref.sharedMemBytes, ref.hStream = 4096, 0x1234
    attrs = []
    if cooperative:
        a = cu.CUlaunchAttribute()
        a.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        a.value.cooperative = 1
        attrs.append(a)
    if cluster is not None:
        a = cu.CUlaunchAttribute()
        a.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = cluster
        attrs.append(a)
    ref.numAttrs = len(attrs)
    size = ctypes.sizeof(config)
    ours = bytearray(ctypes.string_at(ctypes.addressof(config), size))
    want = bytearray(ctypes.string_at(ref.getPtr(), size))
    attrs_at = type(config).attrs.offset
    ours[attrs_at:attrs_at + 8] = want[attrs_at:attrs_at + 8] = bytes(8)  # the one pointer
    assert ours == want
    got = [ctypes.string_at(ctypes.addressof(config.attrs[i]), 72) for i in range(len(attrs))]
    assert got == [ctypes.string_at(a.getPtr(), 72) for a in attrs]


def test_device_attribute_numbers_are_the_drivers():
    from cuda.bindings import driver as cu

    a = cu.CUdevice_attribute
    assert (driver._SM_COUNT, driver._COOPERATIVE_LAUNCH, driver._CLUSTER_LAUNCH) == (
        int(a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        int(a.CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH), int(a.CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH))


@pytest.mark.parametrize("major, minor, sm", [(7, 5, 75), (8, 0, 80), (8, 6, 86), (9, 0, 90),
                                              (10, 0, 100), (10, 3, 103), (12, 0, 120),
                                              (12, 1, 121)])
def test_a_compute_capability_is_one_sm_number_everywhere(monkeypatch, major, minor, sm):
    """major * 10 + minor, as nvcc's sm_XY counts: the default arch, %cuda_info's device line
    and the occupancy's driver check all take it from driver.device_sm (the driver's answer is
    stood in for: no GPU here)."""
    from cudamagic.shell import info
    from cudamagic.pipeline import steps as pipeline

    assert driver.sm_of(major, minor) == sm
    monkeypatch.setattr(driver, "compute_capability", lambda device: (major, minor))
    monkeypatch.setattr(driver, "available", lambda: True)
    monkeypatch.setattr(driver, "current_device", lambda: 0)
    monkeypatch.setattr(driver, "device_count", lambda: 1)
    monkeypatch.setattr(driver, "device_name", lambda device: "Stand-in GPU")
    monkeypatch.setattr(driver, "driver_version", lambda: "13.0")
    assert driver.device_sm(0) == sm
    assert pipeline.default_arch() == f"sm_{sm}"
    assert dict(info.environment_info().fields)["device 0"] == f"Stand-in GPU (sm_{sm})"


class CUDARuntimeError(Exception):
    """A stand-in named as CuPy's, carrying the runtime's number as ``.status``."""

    def __init__(self, status: int) -> None:
        super().__init__(f"cudaError {status}")
        self.status = status


class CUresult(int):
    """A stand-in named as cuda.bindings' driver status enum (an int subclass)."""


def _chained(inner: BaseException, explicit: bool) -> BaseException:
    """``inner`` under a RuntimeError: by ``raise ... from`` or raised while handling it."""
    try:
        try:
            raise inner
        except BaseException as exc:
            if explicit:
                raise RuntimeError("wrapped") from exc
            raise RuntimeError("while handling")  # noqa: B904 - the implicit chain on purpose
    except RuntimeError as outer:
        return outer


# (what was raised, the sticky error it carries: None where the context is not lost)
STICKY_CASES = [
    ("CuPy 700", lambda: CUDARuntimeError(700), driver.Sticky.ILLEGAL_ADDRESS),
    ("CuPy 701 out of resources", lambda: CUDARuntimeError(701), None),
    ("CuPy 2 out of memory", lambda: CUDARuntimeError(2), None),
    ("bindings 716", lambda: RuntimeError(CUresult(716)), driver.Sticky.MISALIGNED_ADDRESS),
    ("bindings 701", lambda: RuntimeError(CUresult(701)), None),
    ("explicit cause 710", lambda: _chained(CUDARuntimeError(710), True), driver.Sticky.ASSERT),
    ("implicit context 710", lambda: _chained(CUDARuntimeError(710), False),
     driver.Sticky.ASSERT),
    ("implicit context 701", lambda: _chained(CUDARuntimeError(701), False), None),
]


@pytest.mark.parametrize("name, raised, sticky", STICKY_CASES, ids=[c[0] for c in STICKY_CASES])
def test_sticky_of_tells_a_lost_context_from_a_failed_call(name, raised, sticky):
    """Only a sticky error (the context lost) is one, and it is found through an explicit
    cause and through an implicit context alike: a 701 (too many resources asked for a
    launch) leaves the context usable."""
    assert driver.sticky_of(raised()) is sticky
