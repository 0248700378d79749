"""A stand-in for ``libcuda.so.1`` below cudamagic's driver module: a machine with one GPU,
for the tests of what the package does around the driver (a fork after CUDA started) where
there is none. Only the driver library is stood in for: cudamagic's own code above it
(``toolchain/device/driver.py``'s init, its fork hook, the pipeline, the kernels) runs as it is.
"""

from __future__ import annotations

import os

from cudamagic.toolchain.device import driver

NOT_INITIALIZED = 3  # CUDA_ERROR_NOT_INITIALIZED


class StandInCuda:
    """The driver calls a build makes, answered as one device of compute capability ``cc``
    would; and, as the real driver does, every call in a process forked after CUDA started
    (``cuInit`` among them) answers CUDA_ERROR_NOT_INITIALIZED. ``started``: CUDA is started
    already in this process, by another library (CuPy)."""

    def __init__(self, cc: tuple[int, int] = (8, 6), started: bool = False) -> None:
        self.cc = cc
        self.started_in: int | None = os.getpid() if started else None
        self.calls: list[str] = []

    def _forked(self) -> bool:
        return self.started_in is not None and os.getpid() != self.started_in

    @staticmethod
    def _set(ref, value) -> None:
        ref._obj.value = value  # what ctypes.byref(x) points at

    def cuInit(self, flags):
        self.calls.append("cuInit")
        if self._forked():
            return NOT_INITIALIZED
        self.started_in = os.getpid()
        return 0

    def cuDeviceGetCount(self, count):
        return self._answer(count, 1)

    def cuDeviceGet(self, device, ordinal):
        return self._answer(device, ordinal)

    def cuDeviceGetAttribute(self, value, attribute, device):
        return self._answer(value, {75: self.cc[0], 76: self.cc[1]}.get(attribute, 0))

    def cuCtxGetCurrent(self, ctx):
        return self._answer(ctx, None)  # no context current: device 0

    def _answer(self, ref, value) -> int:
        if self._forked():
            return NOT_INITIALIZED
        self._set(ref, value)
        return 0

    def cuGetErrorName(self, status, name):
        self._set(name, b"CUDA_ERROR_NOT_INITIALIZED" if status == NOT_INITIALIZED else None)
        return 0

    def cuGetErrorString(self, status, text):
        self._set(text, b"initialization error" if status == NOT_INITIALIZED else None)
        return 0


def install(cuda: StandInCuda) -> StandInCuda:
    """Make ``cuda`` the driver library of this process (before its first driver call)."""
    lib = driver._Driver.__new__(driver._Driver)
    lib._lib = cuda
    # the functions as _Driver keeps them once looked up (a Python method takes no argtypes)
    lib.__dict__.update({name: getattr(cuda, name) for name in dir(type(cuda))
                         if name.startswith("cu")})
    driver._lib = lambda: lib  # the module's one way to its library
    return cuda
