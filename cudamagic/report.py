"""The report of one build: a plain record that the widget, the text and the HTML views render.

Pure: no CUDA, no IPython, no widgets.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

__all__ = ["KernelRow", "BuildReport"]


@dataclass(frozen=True)
class KernelRow:
    """One kernel of the name map."""

    python_name: str
    name_expression: str
    symbol: str
    signature: str
    resolved_by: str
    attributes: dict[str, int] | None = None


@dataclass(frozen=True)
class BuildReport:
    """What a build did and found.

    Attributes
    ----------
    key : str
        The cache key (sha256 hex).
    hit : bool
        Served from the cache without compiling.
    origin : str
        ``"cache"``, ``"compiled"`` or ``"cubin"`` (:func:`cudamagic.load_cubin`).
    miss_reason : str or None
        Why the cache did not serve it (no entry, corrupt entry, stored name missing, ...).
    timings : dict of str to float
        Seconds per phase (``lookup``, ``compile``, ``enumerate``, ``demangle``, ``resolve``,
        ``total``).
    demangler, enumerated_by, arch, nvrtc_version, cache_dir : str
    log : str
        Compile warnings.
    rows : tuple of KernelRow
    warnings : tuple of str
    """

    key: str
    hit: bool
    origin: str
    miss_reason: str | None
    timings: dict[str, float]
    demangler: str
    enumerated_by: str
    arch: str
    nvrtc_version: str
    cache_dir: str
    log: str = ""
    rows: tuple[KernelRow, ...] = ()
    warnings: tuple[str, ...] = field(default=())

    @property
    def short_key(self) -> str:
        """The first 12 hex digits of the key."""
        return self.key[:12]

    @property
    def status(self) -> str:
        """``"cache hit"``, ``"cache miss"`` or ``"loaded CUBIN"``."""
        return {"cache": "cache hit", "compiled": "cache miss", "cubin": "loaded CUBIN"}[self.origin]

    def headline(self) -> str:
        """One line: status, time, kernel count, key."""
        total = self.timings.get("total", 0.0) * 1e3
        what = self.status + (f" ({self.miss_reason})" if self.miss_reason else "")
        return (f"cudamagic: {what}, {total:.1f} ms, {len(self.rows)} kernel"
                f"{'s' if len(self.rows) != 1 else ''}, {self.arch}, key {self.short_key}")

    _COLUMNS = ("Python name", "name expression", "symbol", "signature", "resolved by")
    _GPU_COLUMNS = ("registers", "shared (static)", "local")

    @property
    def columns(self) -> tuple[str, ...]:
        """The name map's columns; the per-kernel resources where a GPU reported them."""
        gpu = any(r.attributes for r in self.rows)
        return self._COLUMNS + (self._GPU_COLUMNS if gpu else ())

    def cells(self, row: KernelRow) -> tuple[str, ...]:
        """One row of the name map as text, in :attr:`columns` order."""
        out = (row.python_name, row.name_expression, row.symbol, row.signature, row.resolved_by)
        if len(self.columns) > len(self._COLUMNS):
            a = row.attributes or {}
            out += (str(a.get("registers", "")), f"{a.get('static_shared_bytes', '')} B",
                    f"{a.get('local_bytes', '')} B")
        return out

    def text(self) -> str:
        """The report as plain text (terminal IPython, logs)."""
        lines = [self.headline(),
                 f"  demangler {self.demangler}, kernels enumerated by {self.enumerated_by}, "
                 f"NVRTC {self.nvrtc_version}, cache {self.cache_dir}"]
        lines += _table_text(self.columns, [self.cells(r) for r in self.rows])
        lines += [f"  warning: {w}" for w in self.warnings]
        if self.log:
            lines += ["  compile log:"] + [f"    {ln}" for ln in self.log.splitlines()]
        return "\n".join(lines)

    def html(self) -> str:
        """The report as an HTML fragment (notebook exports where widgets do not render)."""
        esc = html.escape
        head = "".join(f"<th>{esc(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td><code>{esc(c)}</code></td>" for c in self.cells(r))
                       + "</tr>" for r in self.rows)
        warn = "".join(f"<li>{esc(w)}</li>" for w in self.warnings)
        log = (f"<details><summary>compile log</summary><pre>{esc(self.log)}</pre></details>"
               if self.log else "")
        return (f'<div class="cudamagic-report"><p><b>{esc(self.headline())}</b><br>'
                f"demangler {esc(self.demangler)}, kernels enumerated by "
                f"{esc(self.enumerated_by)}, NVRTC {esc(self.nvrtc_version)}</p>"
                f'<table class="cudamagic-names"><thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table>"
                f"{'<ul>' + warn + '</ul>' if warn else ''}{log}</div>")

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(self.text())

    def _repr_html_(self) -> str:
        return self.html()


def _table_text(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    table = [columns, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(columns))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]


def _table_html(columns: tuple[str, ...], rows: list[tuple[str, ...]], cls: str) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


class _Record:
    """Text and HTML views of a small record: its ``pairs()`` and an optional table."""

    title = ""
    columns: tuple[str, ...] = ()

    def pairs(self) -> list[tuple[str, str]]:
        return []

    def table(self) -> list[tuple[str, ...]]:
        return []

    def text(self) -> str:
        lines = [self.title] + [f"  {k}: {v}" for k, v in self.pairs()]
        if self.columns:
            lines += _table_text(self.columns, self.table())
        return "\n".join(lines)

    def html(self) -> str:
        esc = html.escape
        dl = "".join(f"<tr><th style='text-align:left'>{esc(k)}</th><td>{esc(v)}</td></tr>"
                     for k, v in self.pairs())
        tab = _table_html(self.columns, self.table(), "cudamagic-list") if self.columns else ""
        return f"<div><b>{esc(self.title)}</b><table>{dl}</table>{tab}</div>"

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(self.text())

    def _repr_html_(self) -> str:
        return self.html()


def _when(t: float | None) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:.2f} MiB"


@dataclass(frozen=True)
class CacheStats(_Record):
    """``%cuda_cache stats``."""

    location: str
    entries: int
    volume: int
    size_limit: int
    hits: int
    misses: int
    note: str = ""
    title = "cudamagic cache"

    @classmethod
    def of(cls, cache, note: str = "") -> "CacheStats":
        """Read the numbers off a :class:`~cudamagic.cache.KernelCache` (``note``: what a
        command just did, shown first)."""
        hits, misses = cache.stats()
        return cls(cache.location, len(cache), cache.volume(), cache.size_limit, hits, misses,
                   note)

    def pairs(self) -> list[tuple[str, str]]:
        return [*([("done", self.note)] if self.note else []),
                ("location", self.location), ("entries", str(self.entries)),
                ("size", f"{_mib(self.volume)} of {_mib(self.size_limit)}"),
                ("lookups", f"{self.hits} hits, {self.misses} misses")]


@dataclass(frozen=True)
class CacheListing(_Record):
    """``%cuda_cache list``: entries, newest first."""

    entries: tuple
    title = "cudamagic cache entries (newest first)"
    columns = ("key", "size", "created", "last used", "name expressions")

    def table(self) -> list[tuple[str, ...]]:
        return [(e.key[:12], f"{e.size / 1024:.1f} KiB", _when(e.created), _when(e.last_used),
                 ", ".join(e.name_expressions) if e.readable else "(unreadable: rebuilt on use)")
                for e in self.entries]


@dataclass(frozen=True)
class EnvironmentInfo(_Record):
    """``%cuda_info``: what a build would use here."""

    fields: tuple[tuple[str, str], ...]
    title = "cudamagic environment"

    def pairs(self) -> list[tuple[str, str]]:
        return list(self.fields)
