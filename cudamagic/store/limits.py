"""Sizes and size limits: parsing them, and the limit that leaves room for entries."""

from __future__ import annotations

import math
import os

from ..errors import CacheArgumentError
from ..core.units import size_text

__all__ = ["DEFAULT_SIZE_LIMIT", "MIN_ENTRY_ROOM", "MAX_SIZE", "parse_size", "short_of",
           "stored_limit_problem", "checked_size", "pch_size_limit"]

DEFAULT_SIZE_LIMIT = 1 << 30  # 1 GiB
#: Room a size limit must leave beside the database for entries (a typical CUBIN fits many
#: times); a limit below the database plus this would evict every entry as it is stored.
MIN_ENTRY_ROOM = 1 << 20
MAX_SIZE = (1 << 63) - 1  # SQLite's largest integer: diskcache keeps the limit in the database

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40,
          "tb": 1 << 40, "tib": 1 << 40}


def parse_size(text: str | int | float) -> int:
    """``"512MB"``, ``"1 GiB"``, ``"1048576"`` -> bytes (binary units).

    :raises CacheArgumentError: (a ``ValueError``) not a size: no number, an unknown unit, a
        negative, infinite or NaN number, or more bytes than the cache's database can record.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise CacheArgumentError(f"{text!r} is not a size: give bytes or a number with a unit, "
                                 "such as 512MB or 1GiB")
    if isinstance(text, int):
        number, scale = float(text) if text <= MAX_SIZE else math.inf, 1
    elif isinstance(text, float):
        number, scale = text, 1
    else:
        t = text.strip().lower().replace(" ", "").replace("_", "")
        num = t.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = t[len(num):]
        try:
            number, scale = float(num), _UNITS[unit]
        except (ValueError, KeyError):
            raise CacheArgumentError(f"{text!r:.80} is not a size: give bytes or a number with "
                                     "a unit (B, KB, MB, GB, TB), such as 512MB or 1GiB") from None
    if math.isnan(number) or number < 0:
        raise CacheArgumentError(f"{text!r:.80} is not a size: a size limit is a number of "
                                 "bytes, 0 or more, such as 512MB")
    size = text if isinstance(text, int) else (int(number * scale) if math.isfinite(number)
                                               else MAX_SIZE + 1)
    if size > MAX_SIZE:
        shown = f"{text!r:.80}" if not isinstance(text, int) else f"{text.bit_length()}-bit number"
        raise CacheArgumentError(f"{shown} is more than the largest size the cache can record "
                                 f"({MAX_SIZE} bytes, 8 EiB); give a size such as 64GB")
    return size


def stored_limit_problem(value: object) -> str | None:
    """Why a size limit read back from a cache folder's database is no size (None: it is one).

    The database is a file anyone with the folder's permissions, plain diskcache or an older
    cudamagic may have written: NULL, text, a blob, a real number or a negative one all occur.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        shown = "NULL" if value is None else f"{type(value).__name__} {value!r:.40}"
        return f"is {shown}, not a number of bytes"
    if not 0 <= value <= MAX_SIZE:
        return f"is {value}, not a number of bytes from 0 to {MAX_SIZE}"
    return None


def short_of(limit: int, database: int) -> str | None:
    """Why ``limit`` leaves no room beside a database of ``database`` bytes, with what works."""
    need = database + MIN_ENTRY_ROOM
    if limit >= need:
        return None
    works = max(-(-need // (1 << 20)), 2)  # whole MiB, rounded up
    db = f"the cache's database alone takes {size_text(database)}, and " if database else ""
    return (f"a size limit of {limit} bytes leaves no room for entries: {db}every entry stored "
            f"would be evicted at once, so every build would compile again. Give at least "
            f"{works}MB (the default is 1GB); to not cache at all, use --no-cache "
            "(build(..., use_cache=False))")


def checked_size(size_limit: object, origin: str, database: int) -> int:
    """A size limit that keeps something; ``origin`` (where it came from) leads any message.

    :raises CacheArgumentError: not a size, or below ``database`` plus MIN_ENTRY_ROOM.
    """
    try:
        limit = parse_size(size_limit)  # type: ignore[arg-type]
        why = short_of(limit, database)
    except CacheArgumentError as exc:
        why = str(exc)
    if why:
        raise CacheArgumentError(f"{origin}: {why}" if origin else why) from None
    return limit


def pch_size_limit() -> int:
    """The size limit of the cache folder's precompiled headers: ``$CUDAMAGIC_PCH_SIZE_LIMIT``
    (a size, as :func:`parse_size` takes it), else the default (2 GiB, six PCHs of a CUB cell).

    :raises CacheArgumentError: the variable holds no size.
    """
    from ..toolchain.compile.pch import DEFAULT_LIMIT, LIMIT_ENV

    text = os.environ.get(LIMIT_ENV)
    if text is None or not text.strip():
        return DEFAULT_LIMIT
    try:
        return parse_size(text)
    except CacheArgumentError as exc:
        raise CacheArgumentError(f"${LIMIT_ENV}: {exc}") from None
