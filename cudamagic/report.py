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

    def _cells(self, row: KernelRow) -> tuple[str, ...]:
        return (row.python_name, row.name_expression, row.symbol, row.signature, row.resolved_by)

    def text(self) -> str:
        """The report as plain text (terminal IPython, logs)."""
        lines = [self.headline(),
                 f"  demangler {self.demangler}, kernels enumerated by {self.enumerated_by}, "
                 f"NVRTC {self.nvrtc_version}, cache {self.cache_dir}"]
        table = [self._COLUMNS] + [self._cells(r) for r in self.rows]
        widths = [max(len(r[i]) for r in table) for i in range(len(self._COLUMNS))]
        for r in table:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        lines += [f"  warning: {w}" for w in self.warnings]
        if self.log:
            lines += ["  compile log:"] + [f"    {ln}" for ln in self.log.splitlines()]
        return "\n".join(lines)

    def html(self) -> str:
        """The report as an HTML fragment (notebook exports where widgets do not render)."""
        esc = html.escape
        head = "".join(f"<th>{esc(c)}</th>" for c in self._COLUMNS)
        body = "".join("<tr>" + "".join(f"<td><code>{esc(c)}</code></td>" for c in self._cells(r))
                       + "</tr>" for r in self.rows)
        warn = "".join(f"<li>{esc(w)}</li>" for w in self.warnings)
        log = (f"<details><summary>compile log</summary><pre>{esc(self.log)}</pre></details>"
               if self.log else "")
        return (f'<div class="cudamagic-report"><p><b>{esc(self.headline())}</b><br>'
                f"demangler {esc(self.demangler)}, kernels enumerated by "
                f"{esc(self.enumerated_by)}, NVRTC {esc(self.nvrtc_version)}</p>"
                f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
                f"{'<ul>' + warn + '</ul>' if warn else ''}{log}</div>")

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(self.text())

    def _repr_html_(self) -> str:
        return self.html()
