"""Numbers as people read them: sizes in bytes, durations and counted nouns. One place, so every
view and message prints them the same way."""

from __future__ import annotations

__all__ = ["size_text", "counted", "duration_text"]

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def size_text(n: int) -> str:
    """A size in bytes in the largest binary unit it reaches (``512 bytes``, ``48.0 KiB``,
    ``3.2 MiB``, ``120 MiB``): never ``0.0 MiB`` for a size that is not zero."""
    if n < 1024:
        return counted(n, "byte")
    value, unit = float(n), "bytes"
    for unit in _UNITS:
        value /= 1024
        if value < 1024:
            break
    return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 kernel``, ``2 kernels``, ``0 entries`` (``plural`` where adding an s is wrong)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def duration_text(seconds: float) -> str:
    """A duration as a report shows it: ``0.42 ms``, ``7.6 ms``, ``1.25 s``."""
    ms = seconds * 1e3
    if ms >= 1000:
        return f"{seconds:.2f} s"
    return f"{ms:.1f} ms" if ms >= 1 else f"{ms:.2f} ms"
