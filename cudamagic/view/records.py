"""The line magics' records: ``%cuda_cache stats`` and ``list``, ``%cuda_info``. Each is a small
frozen record with a text view (a terminal, ``str()``) and an HTML table (a notebook)."""

from __future__ import annotations

import html
import re
import time as _time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.units import counted, duration_text, size_text
from .render import CELL_STYLE, plain_table_html, table_text

if TYPE_CHECKING:  # pragma: no cover
    from ..toolchain.compile.pch import PchFiles

__all__ = ["CacheStats", "CacheListing", "EnvironmentInfo", "RemoteCacheStats"]


class _Record:
    """Text and HTML views of a small record: its ``pairs()`` and an optional table.

    Subclasses are dataclasses made with ``repr=False``: IPython's pretty printer takes a class's
    own ``__repr__`` before a base class's ``_repr_pretty_``, so a generated one would be shown
    in a terminal instead of the text.
    """

    title = ""
    columns: tuple[str, ...] = ()

    def pairs(self) -> list[tuple[str, str]]:
        return []

    def table(self) -> list[tuple[str, ...]]:
        return []

    def text(self) -> str:
        """The record as text, as a terminal shows it (``str()`` gives the same)."""
        lines = [self.title] + [f"  {k}: {v}" for k, v in self.pairs()]
        if self.columns:
            rows = self.table()
            lines += table_text(self.columns, rows) if rows else ["  (none)"]
        return "\n".join(lines)

    def html(self) -> str:
        """The record as HTML, as a notebook shows it."""
        esc = html.escape
        dl = "".join(f"<tr><th style='{CELL_STYLE}'>{esc(k)}</th>"
                     f"<td style='{CELL_STYLE}'>{esc(v)}</td></tr>" for k, v in self.pairs())
        tab = plain_table_html(self.columns, self.table(), "cudamagic-list") if self.columns else ""
        return f"<div><b>{esc(self.title)}</b><table>{dl}</table>{tab}</div>"

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.title}>"

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(self.text())

    def _repr_html_(self) -> str:
        return self.html()


def _when(t: float | None) -> str:
    return _time.strftime("%Y-%m-%d %H:%M:%S", _time.localtime(t)) if t else "-"


@dataclass(frozen=True, repr=False)
class CacheStats(_Record):
    """``%cuda_cache stats``."""

    location: str
    entries: int
    volume: int
    size_limit: int
    hits: int
    misses: int
    note: str = ""
    #: the precompiled headers beside the entries (None: the cache is in memory)
    pch: "PchFiles | None" = None
    title = "cudamagic cache"

    @classmethod
    def of(cls, cache, note: str = "") -> "CacheStats":
        """Read the numbers off a :class:`~cudamagic.store.cache.KernelCache` (``note``: what a
        command just did, shown first)."""
        hits, misses = cache.stats()
        return cls(location=cache.location, entries=len(cache), volume=cache.volume(),
                   size_limit=cache.size_limit, hits=hits, misses=misses, note=note,
                   pch=pch_files(cache))

    def pairs(self) -> list[tuple[str, str]]:
        return [*([("done", self.note)] if self.note else []),
                ("location", self.location), ("entries", str(self.entries)),
                ("size", f"{size_text(self.volume)} of {size_text(self.size_limit)}"),
                ("lookups", f"{self.hits} hits, {self.misses} misses"),
                *([("precompiled headers", pch_words(self.pch))] if self.pch else [])]


def pch_files(cache) -> "PchFiles | None":
    """What the cache's PCH folder holds (None: the cache is in memory)."""
    from ..errors import CacheArgumentError
    from ..store.limits import pch_size_limit
    from ..toolchain.compile.pch import DEFAULT_LIMIT, files_of

    folder = cache.pch_folder
    if folder is None:
        return None
    try:
        limit = pch_size_limit()
    except CacheArgumentError:
        limit = DEFAULT_LIMIT
    return files_of(folder, limit)


def limit_words(cache) -> str:
    """What ``%cuda_cache limit SIZE`` did, said plainly: the limit is the entries'; the
    precompiled headers beside them keep a limit of their own, so the folder may hold both."""
    from ..toolchain.compile.pch import LIMIT_ENV

    said = f"the entries' size limit set to {size_text(cache.size_limit)}"
    files = pch_files(cache)
    if files is None:
        return said
    return (f"{said}. The precompiled headers are not under it: they keep a limit of their "
            f"own, {size_text(files.limit)} (${LIMIT_ENV}), and hold {size_text(files.size)} "
            f"now, so this folder may take up to {size_text(cache.size_limit + files.limit)} "
            "in all (%cuda_cache clear --pch removes them)")


def pch_words(files: "PchFiles") -> str:
    """``3 files, 1.0 GB of 2.0 GB, a limit of their own..., 12 hits, last used 2026-...``
    (``%cuda_cache``): the PCHs' limit is another than the entries' and said so."""
    from ..toolchain.compile.pch import LIMIT_ENV

    left = (f" ({counted(files.left, 'file')} left by processes that ended during a compile)"
            if files.left else "")
    return (f"{counted(files.count, 'file')}{left}, {size_text(files.size)} of "
            f"{size_text(files.limit)}, a limit of their own beside the entries' "
            f"(${LIMIT_ENV}; %cuda_cache limit sets the entries'), "
            f"{counted(files.hits, 'hit')}, last used "
            f"{_when(files.last_use or None)} (%cuda_cache clear --pch removes them)")


@dataclass(frozen=True, repr=False)
class RemoteCacheStats(_Record):
    """``%cuda_cache remote``: the team cache's server and this process's numbers with it.

    ``stats`` is a :class:`~cudamagic.store.remote.RemoteStats` (None: no remote tier, and
    ``off`` says why, where one was asked for)."""

    stats: object
    off: str | None = None
    title = "cudamagic remote cache"

    @classmethod
    def of(cls, cache) -> "RemoteCacheStats":
        remote = cache.remote
        return cls(remote.remote_stats() if remote is not None else None, cache.remote_off)

    def pairs(self) -> list[tuple[str, str]]:
        s: Any = self.stats
        if s is None:
            return [("server", "none"), ("why", self.off or "CUDAMAGIC_REMOTE_CACHE is not set "
                                                           "(docs/cache.md: a team cache)")]
        from ..store.remote import RemoteState  # asked for: the tier is configured

        state = "on" if s.state is RemoteState.ON else \
            f"skipped for {s.backoff_left:.0f} s more after: {s.last_error}"
        mean = s.lookup_seconds / s.lookups if s.lookups else 0.0
        return [("server", s.server), ("state", state),
                ("lookups", f"{s.hits} hits, {s.misses} misses, {s.skipped} skipped, "
                            f"{s.slow} too slow for their size"),
                ("bytes", f"{size_text(s.bytes_read)} read, {size_text(s.bytes_sent)} sent "
                          f"({s.sent} records; {s.kept_theirs} already there)"),
                ("errors", f"{s.errors} (last: {s.last_error or '-'})"),
                ("refused", f"{s.refused} records whose signature did not hold"),
                ("not sent", f"{s.too_large} over the size limit, {s.dropped} with the queue "
                             f"full, {s.writes_refused} refused by the server"),
                ("latency", f"{duration_text(mean)} mean, {duration_text(s.slowest_seconds)} "
                            "slowest")]


_DIGITS = re.compile(r"([0-9]+)")  # ASCII digits only: int() is never asked of a name


def _natural(name: str) -> list[tuple[int, int, str]]:
    """A name's sort key: runs of digits by their value (compared as text by length once
    leading zeros are dropped: no int() of 4 000 digits), the rest as text."""
    key = []
    for i, part in enumerate(_DIGITS.split(name)):
        if i % 2:
            digits = part.lstrip("0") or "0"
            key.append((0, len(digits), digits))
        elif part:
            key.append((1, 0, part))
    return key


@dataclass(frozen=True, repr=False)
class CacheListing(_Record):
    """``%cuda_cache list``: entries, newest first, each named by its kernels (the name
    expressions, then the CUBIN's kernels none of them names: ``extern "C"`` ones), the cell's
    first line, and when and where (``host:folder``) it was made."""

    entries: tuple
    title = "cudamagic cache entries (newest first)"
    columns = ("key", "size", "created", "host:folder", "last used", "cell's first line", "kernels")

    #: kernel names shown per entry (an entry of 1000 instances is one line, not 1000 names)
    shown_names = 8

    def table(self) -> list[tuple[str, ...]]:
        return [(e.key[:12], f"{e.size / 1024:.1f} KiB", _when(e.created), e.made_at or "-",
                 _when(e.last_used), e.first_line or "-",
                 self._names(e.name_expressions, e.kernels) if e.readable
                 else "(unreadable: rebuilt on use)")
                for e in self.entries]

    def _names(self, names: tuple[str, ...], kernels: tuple[str, ...] = ()) -> str:
        """The entry's name expressions in natural order (k<2> before k<10>), then its other
        kernels, the first few."""
        ordered = sorted(names, key=_natural) + sorted(kernels, key=_natural)
        more = len(ordered) - self.shown_names
        return ", ".join(ordered[:self.shown_names]) + (f" and {more} more" if more > 0 else "")


@dataclass(frozen=True, repr=False)
class EnvironmentInfo(_Record):
    """``%cuda_info``: what a build would use here."""

    fields: tuple[tuple[str, str], ...]
    title = "cudamagic environment"

    def pairs(self) -> list[tuple[str, str]]:
        return list(self.fields)
