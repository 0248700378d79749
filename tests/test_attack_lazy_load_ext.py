"""``CUDAMAGIC_EAGER_CONTEXT`` read as a person writes a switch: ``0``, ``false``, ``no``, ``off``
keep ``%load_ext`` from making device 0's primary context, and a value that is neither on nor
off is said, not taken silently for on (a context holds a few hundred MiB of device 0)."""

from __future__ import annotations

import threading
import warnings

import pytest

import cudamagic
from cudamagic import InputWarning
from cudamagic.toolchain import driver

from .test_load_ext_start import _load

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
