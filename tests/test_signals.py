"""NVRTC 13.0 replaces the process's SIGINT and SIGTERM handlers while it compiles (its own end
the process with exit status 4: a Ctrl-C, or Jupyter's interrupt, killed the kernel), and puts
them back with other flags. cudamagic.toolchain.signals puts Python's back while the compile runs
and exactly as they were after it (docs/magics.md, on Ctrl-C during a build).

Here NVRTC's replacement is played by the test: while a real compile is held at a header's open
(tests/held_open.py), another thread writes a handler of its own for both signals with
``sigaction``, as NVRTC 13.0 does, and the test goes on only once the package has put Python's
back; then the Ctrl-C comes. On the GPU machine's NVRTC 13.0, tests/test_nvrtc_trace.py's Ctrl-C
test meets the real one.
"""

from __future__ import annotations

import sys

import pytest

from .conftest import run_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's sigaction")

CHILD = r"""
import ctypes, os, signal, sys, threading, time
from cudamagic.toolchain import signals
from cudamagic.toolchain.nvrtc import compile_cubin
from tests.held_open import HeldOpen, LeaseUnavailable

libc = ctypes.CDLL(None, use_errno=True)
def record(sig):
    r = signals._Sigaction()
    libc.sigaction(sig, None, ctypes.byref(r))
    return (r.handler, r.flags & ~0x04000000, r.mask[0])  # SA_RESTORER: the C library's;
    # the mask's first word is the kernel's (glibc leaves the rest as the buffer held it)

folder = sys.argv[1]
try:
    held = HeldOpen(os.path.join(folder, "held.h"))
except LeaseUnavailable as exc:
    print("skip:", exc)
    sys.exit(0)
python_int, python_term = record(signal.SIGINT), record(signal.SIGTERM)
foreign = ctypes.CFUNCTYPE(None, ctypes.c_int)(lambda sig: os._exit(4))  # NVRTC 13.0's own end
seen = {}
def nvrtc_like():
    if not held.opened(60):
        return
    for sig in (signal.SIGINT, signal.SIGTERM):   # as NVRTC 13.0 does, SA_RESTART and all
        r = signals._Sigaction()
        r.handler = ctypes.cast(foreign, ctypes.c_void_p).value
        r.flags = 0x10000000
        libc.sigaction(sig, ctypes.byref(r), None)
    deadline = time.monotonic() + 20
    while record(signal.SIGINT) != python_int and time.monotonic() < deadline:
        time.sleep(0.001)   # the package puts Python's back: only then the Ctrl-C
    seen["put back"] = record(signal.SIGINT) == python_int and record(signal.SIGTERM) == python_term
    if seen["put back"]:
        os.kill(os.getpid(), signal.SIGINT)
    held.let_go()
threading.Thread(target=nvrtc_like, daemon=True).start()
try:
    compile_cubin('#include "held.h"\n__global__ void k() {}\n', [], ["-arch=sm_90", "-I" + folder])
    outcome = "not interrupted"
except KeyboardInterrupt:
    outcome = "interrupted"
held.release()
print(outcome, seen.get("put back"),
      record(signal.SIGINT) == python_int, record(signal.SIGTERM) == python_term)
"""


def test_a_ctrl_c_during_a_compile_whose_nvrtc_took_the_handlers_is_raised(tmp_path):
    out = run_python(CHILD.replace("sys.argv[1]", repr(str(tmp_path))), timeout=120).strip()
    if out.startswith("skip:"):
        pytest.skip(f"the compile is held with a file lease: {out}")
    assert out == "interrupted True True True", out
