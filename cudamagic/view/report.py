"""The report of one build: a plain record that holds every word and number a view shows, and
the two plain views that render it (text and HTML; :mod:`cudamagic.widget` wraps the HTML).

The record decides the words: the badge's label and colour class, the headline, why a miss
happened (:class:`Explanation`), each row's display cells, the phases of the time. A view only
lays them out. Each word is worked out once per record, on first use (a ``%%cuda -q`` cell or a
:func:`cudamagic.build` caller that never looks pays nothing).

Pure: no CUDA, no IPython, no widgets.
"""

from __future__ import annotations

import dataclasses
import functools
import html
import re
import time as _time
from dataclasses import dataclass, field

from ..cxx import parse_demangled
from ..units import counted, size_text

__all__ = ["Explanation", "KernelRow", "BuildReport", "Badge", "Phase", "SHOWN_ROWS",
           "display_signature", "render_text", "render_html", "CacheStats", "CacheListing",
           "EnvironmentInfo"]

#: Rows a displayed report lists up front; the rest are one click away (``str(report)`` and
#: ``report.text()`` list them all).
SHOWN_ROWS = 50


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Explanation:
    """Why a build was compiled instead of served, compared with the last build of the same cell
    (same module name, same folder).

    Attributes
    ----------
    kinds : tuple of str
        What changed, as codes tests and tools can check: ``first``, ``source``, ``names``,
        ``options``, ``arch``, ``nvrtc``, ``toolkit``, ``header``, ``evicted``, ``damaged``,
        ``forced``, ``no-cache``, ``other``.
    reasons : tuple of str
        One sentence per change, naming the thing (``"--arch changed: sm_80 -> sm_90"``).
    diff : tuple of str
        For a changed source: a short diff, one line each (``"line 5 - old"``, ``"line 5 + new"``).
    """

    kinds: tuple[str, ...]
    reasons: tuple[str, ...]
    diff: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        """The reasons in one line."""
        return "; ".join(self.reasons)


_INTERNAL_NS = re.compile(r"\b(?:__\d+|__cxx11|(?:THRUST|CUB|CCCL)_\w*?_NS)::")
_CONST_AFTER_TEMPLATE = re.compile(r">(const|volatile)\b")
_COMMA = re.compile(r",(?=\S)")
_CLOSE_CLOSE = re.compile(r"(?<=>) (?=>)")
_PLACEHOLDER = re.compile(r"\bT\d+\b")


def _tidy(text: str) -> str:
    """A C++ name for people: library-internal inline namespaces gone (``cuda::std::__4::``,
    ``thrust::THRUST_300102_SM_900_NS::``), a space after each comma and before a ``const``
    that follows a template (the canonical form writes ``complex<double>const*``)."""
    text = _CONST_AFTER_TEMPLATE.sub(r"> \1", _INTERNAL_NS.sub("", text))
    return _CLOSE_CLOSE.sub("", _COMMA.sub(", ", text))


@functools.lru_cache(maxsize=4096)
def display_signature(demangled: str, placeholders: bool = False,
                      param_sizes: tuple[int, ...] | None = None) -> str:
    """A kernel's signature as a person reads it: ``void saxpy<float>(float, float const*,
    float*, int)``.

    Template placeholders (cu++filt's ``T1``) become the template arguments, library-internal
    namespaces go, the ``void`` return is shown. An ``extern "C"`` kernel's symbol carries no
    types: its parameters are the sizes the CUBIN records (``void fill(8 bytes, 4 bytes)``).
    """
    if "(" not in demangled:  # a plain symbol: extern "C"
        sizes = "?" if param_sizes is None else ", ".join((counted(n, "byte") for n in param_sizes))
        return f"void {demangled}({sizes})"
    if not placeholders:  # libstdc++ prints concrete types already: no parse needed
        text = _tidy(demangled)
        return text if text.startswith("void ") else f"void {text}"
    try:
        sig = parse_demangled(demangled, placeholders)
        params = sig.params if sig.exact else None
    except Exception:  # a name the model cannot read is shown as the demangler gave it
        params = None
    if params is not None and not any(_PLACEHOLDER.search(p) for p in params):
        return f"void {_tidy(sig.name)}({', '.join(_tidy(p) for p in params)})"
    text = _tidy(demangled)
    return text if text.startswith("void ") else f"void {text}"


@dataclass(frozen=True)
class KernelRow:
    """One kernel of the name map.

    Attributes
    ----------
    python_name, name_expression, symbol : str
    demangled : str
        The demangler's text, as it gave it.
    resolved_by : str
        ``nvrtc``, ``stored``, ``stored-unverified``, ``demangled`` or ``extern-c``.
    attributes : dict or None
        Registers and memory per kernel, where they were read (a GPU).
    placeholders : bool
        Whether ``demangled`` names template parameters ``T1``... (cu++filt).
    param_sizes : tuple of int or None
        The CUBIN's parameter sizes, for kernels whose symbol carries no types (``extern "C"``).
    """

    python_name: str
    name_expression: str
    symbol: str
    demangled: str
    resolved_by: str
    attributes: dict[str, int] | None = None
    placeholders: bool = False
    param_sizes: tuple[int, ...] | None = None

    @functools.cached_property
    def signature(self) -> str:
        """The signature column: concrete parameter types, ``void`` return (worked out once).

        Where the demangler named template parameters ``T1``... (cu++filt), libstdc++'s
        demangling of the symbol, in process, gives the concrete types (about 10 us a kernel;
        reading them off cu++filt's text took 130 us)."""
        if self.placeholders and self.symbol.startswith("_Z"):
            from ..toolchain.demangle import concrete_demangler

            concrete = concrete_demangler()
            text = concrete.demangle([self.symbol])[0] if concrete is not None else self.symbol
            if text != self.symbol:
                return display_signature(text, False, self.param_sizes)
        return display_signature(self.demangled, self.placeholders, self.param_sizes)


@dataclass(frozen=True)
class Badge:
    """The status badge: its label and the CSS class that colours it."""

    label: str
    css_class: str


@dataclass(frozen=True)
class Phase:
    """One part of the time a build took, as shown."""

    label: str
    seconds: float
    text: str


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    if ms >= 1000:
        return f"{seconds:.2f} s"
    return f"{ms:.1f} ms" if ms >= 1 else f"{ms:.2f} ms"


_STATUS = {"cache": Badge("cache hit", "cudamagic-hit"),
           "compiled": Badge("cache miss", "cudamagic-miss"),
           "cubin": Badge("loaded CUBIN", "cudamagic-cubin")}

# timings keys -> what the phases list calls them, in the order a cell goes through them
_PHASES = (
    ("imports", "imports"), ("parse", "magic line"), ("driver", "CUDA driver start"),
    ("key", "options and cache key"), ("lookup", "cache lookup"), ("headers", "header check"),
    ("nvrtc", "NVRTC start"), ("compile", "compile (NVRTC)"), ("manifest", "list of headers read"),
    ("demangle", "demangle"), ("resolve", "resolve names"), ("store", "cache store"),
    ("history", "cell history"), ("push", "names into the notebook"),
    ("resources", "registers and memory (read off the CUBIN)"), ("display", "display (render)"),
)
_COLUMNS = ("Python name", "name expression", "symbol", "signature", "resolved by")
_GPU_COLUMNS = ("registers", "shared (static)", "local")


@dataclass(frozen=True)
class BuildReport:
    """What a build did and found, with every word its views show.

    Attributes
    ----------
    key : str
        The cache key (sha256 hex).
    hit : bool
        Served from the cache without compiling.
    origin : str
        ``"cache"``, ``"compiled"`` or ``"cubin"`` (:func:`cudamagic.load_cubin`).
    miss_reason : str or None
        What the pipeline said when the cache did not serve (``"no cache entry"``, a header that
        changed, a damaged entry, ``"--force"``).
    timings : dict of str to float
        Seconds per phase (``lookup``, ``headers``, ``compile``, ``demangle``, ``resolve``,
        ``total``; the magic adds ``imports``, ``parse``, ``push``, ``load``, ``display``).
    demangler, enumerated_by, arch, nvrtc_version, cache_dir : str
    log : str
        Compile warnings.
    rows : tuple of KernelRow
    warnings : tuple of str
        Said once, here (the magic adds its own: a name that hides a variable or a builtin).
    explanation : Explanation or None
        Why a miss happened, compared with the last build of the same cell.
    cell_seconds : float or None
        The time the user waited: from the start of the ``%%cuda`` call to this report
        (None for :func:`cudamagic.build`, whose time is ``timings["total"]``).
    module_name : str
        The Python name the module was pushed under (for hints), or ``""``.
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
    explanation: Explanation | None = None
    cell_seconds: float | None = None
    module_name: str = ""

    # --- words -----------------------------------------------------------------------------

    @property
    def short_key(self) -> str:
        """The first 12 hex digits of the key."""
        return self.key[:12]

    @property
    def badge(self) -> Badge:
        """``cache hit`` / ``cache miss`` / ``loaded CUBIN`` and its colour class."""
        return _STATUS[self.origin]

    @property
    def status(self) -> str:
        """``"cache hit"``, ``"cache miss"`` or ``"loaded CUBIN"``."""
        return self.badge.label

    @property
    def seconds(self) -> float:
        """The time shown in the headline: the cell's where the magic measured it, else the
        build's."""
        return self.cell_seconds if self.cell_seconds is not None \
            else self.timings.get("total", 0.0)

    @functools.cached_property
    def why(self) -> str:
        """Why the cache did not serve, in one line (empty on a hit)."""
        if self.hit or self.origin == "cubin":
            return ""
        if self.explanation is not None:
            return self.explanation.summary
        return self.miss_reason or ""

    @functools.cached_property
    def summary(self) -> str:
        """Time, kernel count and arch in one line (``7.6 ms · 3 kernels · sm_90``)."""
        return f"{_ms(self.seconds)} · {counted(len(self.rows), 'kernel')} · {self.arch}"

    @functools.cached_property
    def headline(self) -> str:
        """The status, the summary and why a miss happened, in one line (``cudamagic: cache miss
        · 153 ms · 3 kernels · sm_90 — the source changed (line 5)``)."""
        return f"cudamagic: {self.status} · {self.summary}" + (f" — {self.why}" if self.why
                                                              else "")

    @functools.cached_property
    def facts(self) -> tuple[tuple[str, str], ...]:
        """What the build used: NVRTC, demangler, where the kernels were listed from, the
        cache folder, the key."""
        # a cache that fell back to memory says why once, as a warning; here only where
        cache = "in memory, this session only" if self.cache_dir.startswith("memory (") \
            else self.cache_dir
        return (("NVRTC", self.nvrtc_version), ("demangler", self.demangler),
                ("kernels listed from", self.enumerated_by), ("cache", cache),
                ("key", self.short_key))

    @functools.cached_property
    def phases(self) -> tuple[Phase, ...]:
        """Where the time went, in the order of the pipeline, then the total. Time in no phase
        (Python between them) is ``other``; the total is what the headline says."""
        out = [Phase(label, self.timings[k], _ms(self.timings[k]))
               for k, label in _PHASES if k in self.timings]
        rest = self.seconds - sum(p.seconds for p in out)
        if rest >= 5e-5:
            out.append(Phase("other", rest, _ms(rest)))
        what = "the cell" if self.cell_seconds is not None else "the build"
        out.append(Phase(what, self.seconds, _ms(self.seconds)))
        return tuple(out)

    @functools.cached_property
    def columns(self) -> tuple[str, ...]:
        """The name map's columns; the per-kernel resources where a GPU reported them."""
        gpu = any(r.attributes for r in self.rows)
        return _COLUMNS + (_GPU_COLUMNS if gpu else ())

    def table(self, start: int = 0, stop: int | None = None) -> list[tuple[str, ...]]:
        """Rows ``start:stop`` as display cells, in :attr:`columns` order (each row's signature
        is worked out once, on its first showing: a table cut at 50 rows reads 50)."""
        gpu = len(self.columns) > len(_COLUMNS)
        out = []
        for r in self.rows[start:stop]:
            cells = (r.python_name, r.name_expression, r.symbol, r.signature, r.resolved_by)
            if gpu:
                a = r.attributes or {}
                cells += (str(a.get("registers", "")), f"{a.get('static_shared_bytes', '')} B",
                          f"{a.get('local_bytes', '')} B")
            out.append(cells)
        return out

    def more_rows(self, shown: int | None) -> str:
        """What a view says under a table cut at ``shown`` rows (empty when nothing is cut)."""
        if shown is None or len(self.rows) <= shown:
            return ""
        where = f"print({self.module_name}.report)" if self.module_name else "print(report)"
        return f"{counted(len(self.rows) - shown, 'more kernel')}; {where} lists them all"

    # --- copies ------------------------------------------------------------------------------

    def with_timings(self, cell_seconds: float | None = None, **seconds: float) -> "BuildReport":
        """A copy with more phases (and the cell's time, where given)."""
        return dataclasses.replace(
            self, timings={**self.timings, **seconds},
            cell_seconds=self.cell_seconds if cell_seconds is None else cell_seconds)

    def with_warnings(self, more: tuple[str, ...]) -> "BuildReport":
        """A copy with more warnings (each said once)."""
        if not more:
            return self
        return dataclasses.replace(self, warnings=tuple(dict.fromkeys((*self.warnings, *more))))

    # --- views -------------------------------------------------------------------------------

    def text(self, max_rows: int | None = None) -> str:
        """The report as plain text (terminal IPython, logs); every row unless ``max_rows``."""
        return render_text(self, max_rows)

    def html(self, max_rows: int | None = SHOWN_ROWS) -> str:
        """The report as an HTML fragment (exports where widgets do not render)."""
        return render_html(self, max_rows)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return (f"<cudamagic BuildReport: {self.status}, {len(self.rows)} kernels, "
                f"key {self.short_key}>")

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(self.text(SHOWN_ROWS))

    def _repr_html_(self) -> str:
        return self.html()


# ---------------------------------------------------------------------------------------------
# Views: they lay out the record's words and compute none
# ---------------------------------------------------------------------------------------------

def _table_text(columns: tuple[str, ...], rows) -> list[str]:
    widths = [len(c) for c in columns]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
            for r in (columns, *rows)]


def text_head(report: BuildReport) -> list[str]:
    """The headline and, for a changed source, its diff."""
    diff = report.explanation.diff if report.explanation is not None and report.why else ()
    return [report.headline, *(f"    {d}" for d in diff)]


#: Where a text line of the report folds (the phases' line would run past 400 characters).
TEXT_WIDTH = 100


def _fold(prefix: str, items) -> str:
    """``items`` joined by `` · `` after ``prefix``, folded between items at
    :data:`TEXT_WIDTH` (continuation lines indented under the first item)."""
    first, *rest = items
    lines, indent = [prefix + first], " " * len(prefix)
    for item in rest:
        if len(lines[-1]) + len(" · ") + len(item) + len(" ·") > TEXT_WIDTH:
            lines[-1] += " ·"
            lines.append(indent + item)
        else:
            lines[-1] += " · " + item
    return "\n".join(lines)


def text_phases(report: BuildReport) -> str:
    """Where the time went, folded between phases."""
    return _fold("  time: ", [f"{p.label} {p.text}" for p in report.phases])


def text_body(report: BuildReport, max_rows: int | None = None) -> list[str]:
    """The name map, the warnings, what the build used, the compile log."""
    lines = _table_text(report.columns, report.table(0, max_rows))
    more = report.more_rows(max_rows)
    if more:
        lines.append(f"  ... {more}")
    lines += [f"  warning: {w}" for w in report.warnings]
    lines.append(_fold("  ", [f"{k} {v}" for k, v in report.facts]))
    if report.log:
        lines += ["  compile log:"] + [f"    {ln}" for ln in report.log.splitlines()]
    return lines


def render_text(report: BuildReport, max_rows: int | None = None) -> str:
    """The whole report as text."""
    return "\n".join([*text_head(report), *text_body(report, max_rows), text_phases(report)])


_BADGE_STYLE = {"cudamagic-hit": "#1a7f37", "cudamagic-miss": "#9a6700",
                "cudamagic-cubin": "#0969da"}
_CELL = "text-align:left;padding:1px 10px 1px 0;vertical-align:top"


def html_rows(report: BuildReport, start: int = 0, stop: int | None = None) -> str:
    """Table rows ``start:stop`` of the name map as ``<tr>`` elements."""
    esc = html.escape
    return "".join("<tr>" + "".join(f"<td style='{_CELL}'><code>{esc(c)}</code></td>" for c in r)
                   + "</tr>" for r in report.table(start, stop))


def html_table(report: BuildReport, rows_html: str, cls: str = "cudamagic-names") -> str:
    head = "".join(f"<th style='{_CELL};white-space:nowrap'>{html.escape(c)}</th>"
                   for c in report.columns)
    return (f'<table class="{cls}" style="border-collapse:collapse"><thead><tr>{head}</tr>'
            f"</thead><tbody>{rows_html}</tbody></table>")


def html_body(report: BuildReport, max_rows: int | None = SHOWN_ROWS) -> str:
    """The name map (cut at ``max_rows``), the warnings, the compile log, what the build used."""
    esc = html.escape
    parts = [html_table(report, html_rows(report, 0, max_rows))]
    more = report.more_rows(max_rows)
    if more:
        parts.append(f'<div class="cudamagic-more"><i>&hellip; {esc(more)}</i></div>')
    if report.warnings:
        parts.append('<ul class="cudamagic-warnings" style="margin:4px 0;padding-left:18px">'
                     + "".join(f'<li class="cudamagic-warning">&#9888; {esc(w)}</li>'
                               for w in report.warnings) + "</ul>")
    if report.log:
        parts.append(f'<details class="cudamagic-log"><summary>compile log</summary>'
                     f"<pre>{esc(report.log)}</pre></details>")
    parts.append('<div class="cudamagic-facts" style="opacity:.75;font-size:90%">'
                 + " &middot; ".join(f"{esc(k)} <code>{esc(v)}</code>" for k, v in report.facts)
                 + "</div>")
    return "".join(parts)


def html_head(report: BuildReport) -> str:
    """The badge, the time, why a miss happened (with its diff), and the phases behind a click."""
    esc = html.escape
    b = report.badge
    head = (f'<div class="cudamagic-head"><span class="cudamagic-badge {b.css_class}" '
            f'style="background:{_BADGE_STYLE[b.css_class]};color:white;padding:1px 6px;'
            f'border-radius:4px">{esc(b.label)}</span> '
            f'<span class="cudamagic-summary">{esc(report.summary)}</span></div>')
    why = ""
    if report.why:
        diff = report.explanation.diff if report.explanation else ()
        pre = (f'<pre class="cudamagic-diff" style="margin:2px 0">{esc(chr(10).join(diff))}</pre>'
               if diff else "")
        why = f'<div class="cudamagic-why">why: {esc(report.why)}{pre}</div>'
    rows = "".join(f"<tr><td style='{_CELL}'>{esc(p.label)}</td>"
                   f"<td style='{_CELL};text-align:right'>{esc(p.text)}</td></tr>"
                   for p in report.phases)
    phases = (f'<details class="cudamagic-phases"><summary>where the {esc(_ms(report.seconds))} '
              f'went</summary><table style="border-collapse:collapse">{rows}</table></details>')
    return head + why + phases


def render_html(report: BuildReport, max_rows: int | None = SHOWN_ROWS) -> str:
    """The whole report as one HTML fragment."""
    return wrap_html(html_head(report) + html_body(report, max_rows))


def wrap_html(inner: str) -> str:
    return f'<div class="cudamagic-report">{inner}</div>'


# ---------------------------------------------------------------------------------------------
# The line magics' records
# ---------------------------------------------------------------------------------------------

def _table_html(columns: tuple[str, ...], rows: list[tuple[str, ...]], cls: str) -> str:
    esc = html.escape
    head = "".join(f"<th style='{_CELL}'>{esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td style='{_CELL}'>{esc(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


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
            lines += _table_text(self.columns, rows) if rows else ["  (none)"]
        return "\n".join(lines)

    def html(self) -> str:
        esc = html.escape
        dl = "".join(f"<tr><th style='{_CELL}'>{esc(k)}</th><td style='{_CELL}'>{esc(v)}</td></tr>"
                     for k, v in self.pairs())
        tab = _table_html(self.columns, self.table(), "cudamagic-list") if self.columns else ""
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
    title = "cudamagic cache"

    @classmethod
    def of(cls, cache, note: str = "") -> "CacheStats":
        """Read the numbers off a :class:`~cudamagic.cache.KernelCache` (``note``: what a
        command just did, shown first)."""
        hits, misses = cache.stats()
        return cls(location=cache.location, entries=len(cache), volume=cache.volume(),
                   size_limit=cache.size_limit, hits=hits, misses=misses, note=note)

    def pairs(self) -> list[tuple[str, str]]:
        return [*([("done", self.note)] if self.note else []),
                ("location", self.location), ("entries", str(self.entries)),
                ("size", f"{size_text(self.volume)} of {size_text(self.size_limit)}"),
                ("lookups", f"{self.hits} hits, {self.misses} misses")]


@dataclass(frozen=True, repr=False)
class CacheListing(_Record):
    """``%cuda_cache list``: entries, newest first."""

    entries: tuple
    title = "cudamagic cache entries (newest first)"
    columns = ("key", "size", "created", "last used", "name expressions")

    def table(self) -> list[tuple[str, ...]]:
        return [(e.key[:12], f"{e.size / 1024:.1f} KiB", _when(e.created), _when(e.last_used),
                 ", ".join(e.name_expressions) if e.readable else "(unreadable: rebuilt on use)")
                for e in self.entries]


@dataclass(frozen=True, repr=False)
class EnvironmentInfo(_Record):
    """``%cuda_info``: what a build would use here."""

    fields: tuple[tuple[str, str], ...]
    title = "cudamagic environment"

    def pairs(self) -> list[tuple[str, str]]:
        return list(self.fields)
