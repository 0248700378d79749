"""What ``%load_ext cudamagic`` starts ahead of the notebook's first launch: the driver and
device 0's primary context, in a background thread started before anything else it does
(a restarted notebook waits for the driver longer than for anything else on its way to a
launch). The GPU half checks the context itself; the rest runs anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import threading
import warnings
import cudamagic
from cudamagic import InputWarning
from cudamagic.toolchain.device import driver

REPO = Path(__file__).resolve().parent.parent

#: a fresh IPython that loads the extension and prints what the driver thread saw and did
_LOAD = textwrap.dedent("""
    import json, sys, threading
    seen = {}
    _start = threading.Thread.start
    def start(self):
        if self.name == "cudamagic-driver":
            seen["imported when it started"] = sorted(
                m for m in sys.modules if m.startswith("cudamagic."))
        return _start(self)
    threading.Thread.start = start
    from IPython.testing.globalipapp import start_ipython
    ip = start_ipython()
    ip.run_line_magic("load_ext", "cudamagic")
    import cudamagic
    from cudamagic.toolchain.device import driver
    for t in threading.enumerate():
        if t.name == cudamagic.DRIVER_THREAD:
            t.join(60)
    seen["primary"] = {str(k): bool(v) for k, v in driver._primary.items()}
    seen["available"] = driver.available()
    if seen["available"]:
        from cuda.bindings import driver as cu
        err, dev = cu.cuDeviceGet(0)
        err, flags, active = cu.cuDevicePrimaryCtxGetState(dev)
        seen["active"] = bool(active)
    print("SEEN " + json.dumps(seen))
""")


def _load(env: dict[str, str] | None = None) -> dict:
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get(
        "PYTHONPATH", "")]), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", _LOAD], capture_output=True, text=True,
                          timeout=180, cwd=REPO, env=full)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("SEEN "))
    return json.loads(line[5:])


def test_the_driver_thread_starts_before_the_pipeline_is_imported():
    seen = _load()
    early = seen["imported when it started"]
    assert "cudamagic.pipeline.steps" not in early and "cudamagic.shell.magic" not in early, early


@pytest.mark.gpu
def test_load_ext_makes_device_0s_primary_context():
    seen = _load()
    assert seen["available"]
    assert seen["primary"] == {"0": True}
    assert seen["active"], "device 0's primary context is not active after %load_ext"


@pytest.mark.gpu
def test_cudamagic_eager_context_0_leaves_the_context_to_the_first_launch():
    seen = _load({"CUDAMAGIC_EAGER_CONTEXT": "0"})
    assert seen["available"]
    assert seen["primary"] == {}
    assert not seen["active"], "the context was made although CUDAMAGIC_EAGER_CONTEXT=0"


@pytest.mark.gpu
def test_a_launch_and_cupy_share_the_context_made_ahead():
    code = _LOAD + textwrap.dedent("""
        import cupy as cp, numpy as np, ctypes
        mod = cudamagic.build('extern "C" __global__ void f(float* x) { x[threadIdx.x] = 2; }')
        x = cp.zeros(32, dtype=cp.float32)
        mod["f"]((1,), (32,), (x,))
        assert float(x.sum()) == 64.0
        err, cur = cu.cuCtxGetCurrent()
        print("SAME " + json.dumps(int(cur) == driver._primary[0]))
    """)
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get(
        "PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180, cwd=REPO, env=full)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SAME true" in proc.stdout, proc.stdout


_OPENED = textwrap.dedent("""
    import json, warnings
    from IPython.testing.globalipapp import start_ipython
    ip = start_ipython()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ip.run_line_magic("load_ext", "cudamagic")
    from cudamagic.store import default_cache_opened
    print("OPENED " + json.dumps({"opened": default_cache_opened(),
                                  "said": [str(w.message) for w in caught]}))
""")


def _opened(folder: Path) -> dict:
    env = {**os.environ, "CUDAMAGIC_CACHE_DIR": str(folder), "PYTHONPATH": os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _OPENED], capture_output=True, text=True,
                          timeout=180, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("OPENED "))
    return json.loads(line[7:])


@pytest.mark.parametrize("mode", [None, 0o777, 0o770, 0o707])
def test_load_ext_leaves_the_cache_to_the_first_cell(tmp_path, mode):
    """%load_ext opens no cache (issue 38: it imports nothing a cell needs, and diskcache and
    SQLite are a cell's), and says nothing of a folder that would warn: the first %%cuda cell
    opens it and says it in its report
    (tests/test_magic.py::test_an_untrusted_cache_folder_is_said_once_in_the_report)."""
    folder = tmp_path / "shared"
    if mode is not None:
        folder.mkdir()
        os.chmod(folder, mode)
    seen = _opened(folder)
    assert seen == {"opened": False, "said": []}


# --------------------------------------------------------------------------------------------------
# ``CUDAMAGIC_EAGER_CONTEXT`` read as a person writes a switch: ``0``, ``false``, ``no``, ``off``
# keep ``%load_ext`` from making device 0's primary context, and a value that is neither on nor
# off is said, not taken silently for on (a context holds a few hundred MiB of device 0).

OFF = ["0", "false", "False", "FALSE", "no", "No", "off", "OFF", " 0 ", "off\n"]
ON = ["1", "true", "True", "yes", "on", "ON", " 1", ""]
NEITHER = ["2", "disable", "none", "nein", "-0", "0.0", "f", "n"]


def _started(monkeypatch, tmp_path, value: str | None) -> tuple[list[int], list[warnings.WarningMessage]]:
    """The devices whose primary context ``%load_ext`` made, with ``value`` set, and what it
    warned (the driver is replaced by a recorder: there is no GPU here)."""
    import IPython.core.interactiveshell as shell

    if value is None:
        monkeypatch.delenv(cudamagic.EAGER_CONTEXT_ENV, raising=False)
    else:
        monkeypatch.setenv(cudamagic.EAGER_CONTEXT_ENV, value)
    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "cache"))  # %load_ext opens it
    made: list[int] = []
    monkeypatch.setattr(driver, "available", lambda: True)
    monkeypatch.setattr(driver, "retain_primary", lambda device: made.append(device) or 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cudamagic.load_ipython_extension(shell.InteractiveShell.instance())
    for t in threading.enumerate():
        if t.name == cudamagic.DRIVER_THREAD:
            t.join(60)
    return made, [w for w in caught if issubclass(w.category, InputWarning)]


@pytest.mark.parametrize("value", OFF)
def test_an_off_value_makes_no_context(monkeypatch, tmp_path, value):
    made, said = _started(monkeypatch, tmp_path, value)
    assert made == [] and said == [], value


@pytest.mark.parametrize("value", [*ON, None])
def test_an_on_value_or_none_makes_device_0s_context_silently(monkeypatch, tmp_path, value):
    made, said = _started(monkeypatch, tmp_path, value)
    assert made == [0] and said == [], value


@pytest.mark.parametrize("value", NEITHER)
def test_a_value_neither_on_nor_off_is_said_and_taken_as_on(monkeypatch, tmp_path, value):
    made, said = _started(monkeypatch, tmp_path, value)
    assert made == [0], value
    assert len(said) == 1, value
    text = str(said[0].message)
    assert f"CUDAMAGIC_EAGER_CONTEXT={value!r}" in text and "0, false, no, off" in text


@pytest.mark.gpu
@pytest.mark.parametrize("value", ["false", "off", "No"])
def test_cudamagic_eager_context_off_words_leave_the_context_to_the_first_launch(value):
    seen = _load({"CUDAMAGIC_EAGER_CONTEXT": value})
    assert seen["available"]
    assert seen["primary"] == {}
    assert not seen["active"], f"the context was made although CUDAMAGIC_EAGER_CONTEXT={value}"
