"""The report of one build: a plain record that holds every word and number a view shows.

The record decides the words: the badge's label and colour class, the headline, why a miss
happened (:class:`Explanation`), each row's display cells, the phases of the time. The views
(its text and HTML, at the end of this module, and :mod:`.widget` for the notebook) only lay
them out. Each word is worked out once per record, on first use (a ``%%cuda -q`` cell or a
:func:`cudamagic.build` caller that never looks pays nothing).

Pure: no CUDA, no IPython, no widgets.
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from ..core.process import cached, InTest
from ..cxx.display import plain_signature, tidy_name as _tidy, with_void
from ..cxx.resolve import ResolvedBy
from ..core.miss import BuildOrigin, BuildPhase
from ..core.forksafe import once
from ..core.miss import HitKind
from ..core.units import counted, duration_text
from .render import CELL_STYLE, TEXT_WIDTH, table_text, wrap_html

if TYPE_CHECKING:  # pragma: no cover
    from ..toolchain.binary.image import GlobalImage, KernelImage
    from ..toolchain.compile.link import CodeKind
    from ..toolchain.compile.listing import HeaderListing
    from ..toolchain.compile.pch import PchKind

__all__ = ["Explanation", "KernelRow", "KernelRows", "BuildReport", "Badge", "Phase",
           "SHOWN_ROWS", "display_signature", "too_long_text", "render_text", "render_html", "text_head",
           "text_body", "text_phases", "listing_text", "html_head", "html_body", "html_rows", "html_table"]

#: Variables a report names; the rest are counted.
SHOWN_VARIABLES = 10

# namespaces of the headers a cell includes (libcu++, cooperative groups, CUB, Thrust, mma.h):
# their globals are the library's, not the cell's; a namespace or plain name opening with
# ``_`` is an internal one (``_INTERNAL_...``, ``__nv_...``); a ``$`` is in no C++ name (the
# device runtime's strings, ``$str$1``), nor is the CUDA runtime's ``cudart`` prefix (its error
# tables)
_LIBRARY_NAMESPACES = ("cuda", "cooperative_groups", "cub", "thrust", "nvcuda")
_LIBRARY_SYMBOL = re.compile(r"_ZN[LKV]*(?:" + "|".join(f"{len(n)}{n}" for n in _LIBRARY_NAMESPACES)
                             + r"|\d+_)")

#: Rows a displayed report lists up front; the rest are one click away (``str(report)`` and
#: ``report.text()`` list them all).
SHOWN_ROWS = 50


def _library_global(symbol: str) -> bool:
    """A variable of an included library (its outermost namespace is one of theirs, or an
    internal one), not the cell's own."""
    if not symbol.startswith("_Z"):
        return symbol.startswith(("_", "cudart")) or "$" in symbol
    return _LIBRARY_SYMBOL.match(symbol) is not None


def _variable_names(symbols: list[str]) -> list[str]:
    """The C++ names of variables (mangled inside a namespace) as ``module.globals`` has them,
    demangled in process (a report starts no demangler)."""
    from ..toolchain.binary.demangle import variable_texts

    texts = variable_texts(symbols, may_start=False)
    return [too_long_text(s) if s in texts and texts[s] is None else texts.get(s) or s
            for s in symbols]


def too_long_text(symbol: str) -> str:
    """What a view shows in place of a demangled name that was too long to keep (the
    demangler gave none: :mod:`cudamagic.toolchain.binary.demangle`)."""
    from ..toolchain.binary.demangle import TEXT_LIMIT

    return (f"too long to show (the demangled name of a {len(symbol)}-character symbol is over "
            f"{TEXT_LIMIT >> 10} KiB)")


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


_PLACEHOLDER = re.compile(r"\bT\d+\b")


@cached(4096, test=InTest.KEPT)
def display_signature(demangled: str, placeholders: bool = False,
                      param_sizes: tuple[int, ...] | None = None) -> str:
    """A kernel's signature as a person reads it: ``void saxpy<float>(float, float const*,
    float*, int)``.

    Template placeholders (cu++filt's ``T1``) become the template arguments, library-internal
    namespaces go, the ``void`` return is shown. An ``extern "C"`` kernel's symbol carries no
    types: where the type probe did not give them, its parameters are the sizes the CUBIN
    records (``void fill(8 bytes, 4 bytes)``).
    """
    if "(" not in demangled:  # a plain symbol: extern "C"
        return plain_signature(demangled, param_sizes)
    if not placeholders:  # libstdc++ prints concrete types already: no parse needed
        text = _tidy(demangled)
        return with_void(text)
    from ..cxx.parse import parse_demangled  # cu++filt's placeholders: a rare demangler's

    try:
        sig = parse_demangled(demangled, placeholders)
        params = sig.params if sig.exact else None
    except Exception:  # a name the model cannot read is shown as the demangler gave it
        params = None
    if params is not None and not any(_PLACEHOLDER.search(p) for p in params):
        return with_void(f"{_tidy(sig.name)}({', '.join(_tidy(p) for p in params)})")
    text = _tidy(demangled)
    return with_void(text)


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
    too_long : bool
        Whether the demangled name was too long to keep (``demangled`` is then the symbol, and
        the signature column says so in words).
    """

    python_name: str
    name_expression: str
    symbol: str
    demangled: str
    resolved_by: ResolvedBy
    attributes: dict[str, int] | None = None
    placeholders: bool = False
    param_sizes: tuple[int, ...] | None = None
    image: "KernelImage | None" = field(default=None, repr=False, compare=False)
    too_long: bool = False

    @once
    def launch_note(self) -> str:
        """How the CUBIN says the kernel is launched (``launched cooperatively (grid sync)``,
        ``cluster 2x1x1``), or ``""``; read from its records on first showing."""
        from ..errors import ImageError

        if self.image is None:
            return ""
        try:
            needs = self.image.launch
        except ImageError:  # the launch says so
            return ""
        notes = []
        if needs.grid_sync:
            notes.append("launched cooperatively (grid sync)")
        if needs.cluster_dims is not None:
            notes.append("cluster " + "x".join(str(d) for d in needs.cluster_dims))
        elif needs.requires_cluster:
            notes.append("launched with a cluster (its size given at launch)")
        return ", ".join(notes)

    @once
    def signature(self) -> str:
        """The signature column: concrete parameter types, ``void`` return (worked out once).

        Where the demangler named template parameters ``T1``... (cu++filt), libstdc++'s
        demangling of the symbol, in process, gives the concrete types (cheaper than reading
        them off cu++filt's text: docs/performance.md)."""
        if self.too_long:
            return too_long_text(self.symbol)
        if self.placeholders:
            from ..toolchain.binary.demangle import concrete_text

            text = concrete_text(self.symbol)
            if text is not None:
                return display_signature(text, False, self.param_sizes)
        return display_signature(self.demangled, self.placeholders, self.param_sizes)


class KernelRows(Sequence[KernelRow]):
    """A report's rows, each made from its kernel on first use: a module of 1000 kernels whose
    report shows 50 makes 50 (``len`` makes none). Equal to any sequence of the same rows.

    Its maker gives rows without resources (``attributes``); ``head`` holds the resources of
    its first rows (:meth:`with_head`, what :func:`cudamagic.view.widget.report_with_attributes` reads
    for the rows a table shows), so the table's columns are known without making a row.
    """

    __slots__ = ("_items", "_make", "_made", "_head")

    def __init__(self, items: Sequence[Any], make: Callable[[Any], KernelRow],
                 head: Sequence[dict[str, int] | None] = ()) -> None:
        self._items = tuple(items)
        self._make = make
        self._made: list[KernelRow | None] = [None] * len(self._items)
        self._head = tuple(head)

    def with_head(self, head: Sequence[dict[str, int] | None]) -> "KernelRows":
        """These rows with ``head[i]`` as the resources of row ``i`` (rows made are kept)."""
        out = KernelRows(self._items, self._make, head)
        out._made = [None if r is None else self._attach(r, i, out._head)
                     for i, r in enumerate(self._made)]
        return out

    @property
    def has_resources(self) -> bool:
        """Whether any of the first rows carries resources."""
        return any(self._head)

    @staticmethod
    def _attach(row: KernelRow, i: int, head: tuple[dict[str, int] | None, ...]) -> KernelRow:
        return dataclasses.replace(row, attributes=head[i]) if i < len(head) else row

    def __len__(self) -> int:
        return len(self._items)

    def _row(self, i: int) -> KernelRow:
        row = self._made[i]
        if row is None:  # two threads may both make it: the rows are equal, either is kept
            row = self._make(self._items[i])
            if row.attributes is not None:
                raise ValueError("lazily made report rows carry no resources: give a tuple")
            row = self._attach(row, i, self._head)
            self._made[i] = row
        return row

    @overload
    def __getitem__(self, index: int) -> KernelRow: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[KernelRow, ...]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self._row(i) for i in range(*index.indices(len(self._items))))
        if index < 0:
            index += len(self._items)
        if not 0 <= index < len(self._items):
            raise IndexError("report row index out of range")
        return self._row(index)

    def __iter__(self) -> Iterator[KernelRow]:
        return (self._row(i) for i in range(len(self._items)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(other) == len(self) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # equal to tuples, so not hashable like them

    def __repr__(self) -> str:
        return f"<KernelRows: {len(self)} rows>"

    def __reduce__(self):
        # a report that travels (a pickled module) carries its rows made (the maker is local)
        # and without their kernel's image, which holds the whole CUBIN: the module travels
        # with its CUBIN once, in its entry record, and its arrival gives the rows their
        # images again (module.arrive)
        return tuple, (tuple(dataclasses.replace(row, image=None) for row in self),)


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


_REMOTE_HIT = Badge("cache hit (remote)", "cudamagic-hit")
_STATUS = {BuildOrigin.CACHE: Badge("cache hit", "cudamagic-hit"),
           BuildOrigin.COMPILED: Badge("cache miss", "cudamagic-miss"),
           BuildOrigin.CUBIN: Badge("loaded CUBIN", "cudamagic-cubin")}

#: What the phases list calls each phase, in the order a cell goes through them
_PHASES = {
    BuildPhase.IMPORTS: "imports", BuildPhase.PARSE: "magic line",
    BuildPhase.DRIVER: "CUDA driver start", BuildPhase.KEY: "options and cache key",
    BuildPhase.LOOKUP: "cache lookup", BuildPhase.REMOTE: "remote cache lookup",
    BuildPhase.HEADERS: "header check", BuildPhase.NVRTC: "NVRTC start",
    BuildPhase.COMPILE: "compile (NVRTC)", BuildPhase.LISTING: "header listing",
    BuildPhase.LINK: "link (nvJitLink)",
    BuildPhase.MANIFEST: "list of headers read", BuildPhase.DEMANGLE: "demangle",
    BuildPhase.RESOLVE: "resolve names", BuildPhase.STORE: "cache store",
    BuildPhase.HISTORY: "cell history", BuildPhase.PUSH: "names into the notebook",
    BuildPhase.RESOURCES: "registers and memory (read off the CUBIN)",
    BuildPhase.ANNOTATE: "annotated source (-lineinfo build, nvdisasm)",
    BuildPhase.DISPLAY: "display (render)",
}
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
    origin : BuildOrigin
        A hit (``"cache"``), a compile (``"compiled"``) or a CUBIN from elsewhere (``"cubin"``,
        :func:`cudamagic.load_cubin`).
    miss_reason : str or None
        What the pipeline said when the cache did not serve (``"no cache entry"``, a header that
        changed, a damaged entry, ``"--force"``).
    timings : dict of BuildPhase to float
        Seconds per phase (``lookup``, ``headers``, ``compile``, ``demangle``, ``resolve``,
        ``total``; the magic adds ``imports``, ``parse``, ``push``, ``resources``,
        ``display``). A str enum: ``timings["compile"]`` reads it too.
    demangler, arch, nvrtc_version, cache_dir : str
    cache_in_memory : bool
        The build's cache fell back to memory (``cache_dir`` then says why); the facts line
        says "in memory, this session only".
    log : str
        Compile warnings.
    rows : sequence of KernelRow
        A tuple, or :class:`KernelRows` (each row made on first use).
    warnings : tuple of str
        Said once, here (the magic adds its own: a name that hides a variable or a builtin).
    explanation : Explanation or None
        Why a miss happened, compared with the last build of the same cell.
    cell_seconds : float or None
        The time the user waited: from the start of the ``%%cuda`` call to this report
        (None for :func:`cudamagic.build`, whose time is ``timings["total"]``).
    module_name : str
        The Python name the module was pushed under (for hints), or ``""``.
    hit_kind : HitKind or None
        Which tier served a hit (the remote's time is the ``remote`` phase, on a miss too).
    loaded : CodeKind or None
        For a module loaded from a file (``origin`` CUBIN): what the file held (a CUBIN, PTX
        or a fatbin); None for a build.
    loaded_cached : bool
        nvJitLink's CUBIN of a loaded PTX (or fatbin PTX) came from the cache: no link ran.
    pch : (PchKind, float, float) or None
        What became of a miss's precompiled header: its kind, the compile's seconds, the
        seconds of the compile that made it; None where the compile was given none.
    added : (str, tuple of str) or None
        A library the cell includes and the options added for it, as said
        (``("CUTLASS", ("-I site-packages/...", "-default-device"))``); None: none added.
    """

    key: str
    hit: bool
    origin: BuildOrigin
    miss_reason: str | None
    timings: Mapping[BuildPhase, float]
    demangler: str
    arch: str
    nvrtc_version: str
    cache_dir: str
    log: str = ""
    cache_in_memory: bool = False
    rows: Sequence[KernelRow] = ()
    warnings: tuple[str, ...] = field(default=())
    explanation: Explanation | None = None
    cell_seconds: float | None = None
    module_name: str = ""
    globals: "tuple[GlobalImage, ...]" = ()
    #: The symbols of the variables the cell's own text declares, as the compiler typed them
    #: (None: not asked, a CUBIN from elsewhere: told apart by their namespaces).
    own_globals: frozenset[str] | None = None
    linked: bool = False
    device_runtime: bool = False
    hit_kind: HitKind | None = None
    loaded: "CodeKind | None" = None
    loaded_cached: bool = False
    pch: "tuple[PchKind, float, float] | None" = None
    #: How a miss's list of headers was had (None: a hit, a CUBIN from elsewhere)
    listing: "HeaderListing | None" = None
    added: tuple[str, tuple[str, ...]] | None = None

    # --- words -----------------------------------------------------------------------------

    @property
    def short_key(self) -> str:
        """The first 12 hex digits of the key."""
        return self.key[:12]

    @property
    def badge(self) -> Badge:
        """``cache hit`` (``cache hit (remote)``) / ``cache miss`` / ``loaded CUBIN`` and its
        colour class."""
        if self.hit_kind is HitKind.REMOTE:
            return _REMOTE_HIT
        if self.origin is BuildOrigin.CUBIN and self.loaded is not None:
            what = {"ptx": "PTX", "fatbin": "fatbin"}.get(self.loaded.value, "CUBIN")
            cached = " (compiled before: cached)" if self.loaded_cached else ""
            return Badge(f"loaded {what}{cached}", "cudamagic-cubin")
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
            else self.timings.get(BuildPhase.TOTAL, 0.0)

    @once
    def why(self) -> str:
        """Why the cache did not serve, in one line (empty on a hit)."""
        if self.hit or self.origin is BuildOrigin.CUBIN:
            return ""
        if self.explanation is not None:
            return self.explanation.summary
        return self.miss_reason or ""

    @once
    def summary(self) -> str:
        """Time, kernel count and arch in one line (``7.6 ms · 3 kernels · sm_90``)."""
        kernels = counted(len(self.rows), "kernel")
        return f"{duration_text(self.seconds)} · {kernels} · {self.arch}"

    @once
    def headline(self) -> str:
        """The status, the summary and why a miss happened, in one line (``cudamagic: cache miss
        · 153 ms · 3 kernels · sm_90 — the source changed (line 5)``)."""
        return f"cudamagic: {self.status} · {self.summary}" + (f" — {self.why}" if self.why
                                                              else "")

    @once
    def facts(self) -> tuple[tuple[str, str], ...]:
        """What the build used: NVRTC, demangler, where the kernels were listed from, the
        cache folder, the key."""
        # a cache that fell back to memory says why once, as a warning; here only where
        cache = "in memory, this session only" if self.cache_in_memory else self.cache_dir
        return (("NVRTC", self.nvrtc_version), ("demangler", self.demangler), ("cache", cache),
                ("key", self.short_key)) + self._linked_fact + self._pch_fact \
            + self._added_fact

    @property
    def _added_fact(self) -> tuple[tuple[str, str], ...]:
        if self.added is None:
            return ()
        library, options = self.added
        # the key ends with a colon: "options added for CUTLASS: -I ..., -default-device"
        return ((f"options added for {library}:", ", ".join(options)),)

    @property
    def _pch_fact(self) -> tuple[tuple[str, str], ...]:
        return () if self.pch is None else (("headers", pch_text(*self.pch)),)

    @property
    def _linked_fact(self) -> tuple[tuple[str, str], ...]:
        if not self.linked:
            return ()
        return (("linked with", "nvJitLink" + (" + device runtime" if self.device_runtime
                                                else "")),)

    @once
    def variables(self) -> tuple[str, ...]:
        """The cell's ``__constant__``/``__device__`` variables, one item each (``coeffs (64 B,
        constant)``): at most :data:`SHOWN_VARIABLES`, then how many more, and how many the
        included libraries and the device runtime hold; ``()`` where there are none."""
        if not self.globals:
            return ()
        own = [g for g in self.globals if g.name in self.own_globals] \
            if self.own_globals is not None else \
            [g for g in self.globals if not _library_global(g.name)]
        names = _variable_names([g.name for g in own[:SHOWN_VARIABLES]])
        items = [f"{n} ({g.size} B, {g.space})"
                 for n, g in zip(names, own)]
        if len(own) > SHOWN_VARIABLES:
            items.append(f"and {len(own) - SHOWN_VARIABLES} more")
        internal = len(self.globals) - len(own)
        if internal:
            items.append(f"{counted(internal, 'library global')} not shown")
        return tuple(items)

    def launch_notes(self, stop: int | None = None) -> tuple[tuple[str, str], ...]:
        """(Python name, how it is launched) for the rows ``:stop`` whose CUBIN records say
        more than a plain launch (read on first showing)."""
        return tuple((r.python_name, r.launch_note) for r in self.rows[:stop] if r.launch_note)

    @once
    def phases(self) -> tuple[Phase, ...]:
        """Where the time went, in the order of the pipeline, then the total. Time in no phase
        (Python between them) is ``other``; the total is what the headline says."""
        out = [Phase(label, self.timings[k], duration_text(self.timings[k])
                     + (listing_text(self.listing) if k is BuildPhase.LISTING else ""))
               for k, label in _PHASES.items() if k in self.timings]
        rest = self.seconds - sum(p.seconds for p in out)
        if rest >= 5e-5:
            out.append(Phase("other", rest, duration_text(rest)))
        what = "the cell" if self.cell_seconds is not None else "the build"
        out.append(Phase(what, self.seconds, duration_text(self.seconds)))
        return tuple(out)

    @once
    def columns(self) -> tuple[str, ...]:
        """The name map's columns; the per-kernel resources where a GPU reported them."""
        gpu = (self.rows.has_resources if isinstance(self.rows, KernelRows)
               else any(r.attributes for r in self.rows))
        return _COLUMNS + (_GPU_COLUMNS if gpu else ())

    def table(self, start: int = 0, stop: int | None = None) -> list[tuple[str, ...]]:
        """Rows ``start:stop`` as display cells, in :attr:`columns` order (each row's signature
        is worked out once, on its first showing: a table cut at 50 rows reads 50)."""
        gpu = len(self.columns) > len(_COLUMNS)
        out: list[tuple[str, ...]] = []
        for r in self.rows[start:stop]:
            cells: tuple[str, ...] = (r.python_name, r.name_expression, r.symbol, r.signature, r.resolved_by)
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

    def with_timings(self, phases: Mapping[BuildPhase, float] | None = None,
                     cell_seconds: float | None = None, **seconds: float) -> "BuildReport":
        """A copy with more phases (and the cell's time, where given); ``seconds`` names each
        by its word (``display=0.002``).

        :raises ValueError: a word that names no :class:`~cudamagic.core.miss.BuildPhase`.
        """
        more = {**(phases or {}), **{BuildPhase(k): v for k, v in seconds.items()}}
        return dataclasses.replace(
            self, timings={**self.timings, **more},
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
        """The report as an HTML fragment (the notebook's output of it)."""
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


# --- the report's layout: text (a terminal, logs, ``print(report)``) and HTML (the widget's
# content, and the fallback where widgets do not render); the record's words, laid out ---------

def text_head(report: BuildReport) -> list[str]:
    """The headline and, for a changed source, its diff."""
    diff = report.explanation.diff if report.explanation is not None and report.why else ()
    return [report.headline, *(f"    {d}" for d in diff)]


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


#: Why a compile carried its own trace, as the header listing's phase says it
# (by the enum's words: toolchain.listing.Traced, not imported on a hit's path)
_TRACED = {"nothing-left-out": "no code past the last #include to leave out",
           "pch-not-used": "NVRTC did not take the precompiled header that held its "
                           "headers: compiled again, traced",
           "trigraph": "a ??/ line splice",
           "listing-failed": "the listing failed where the cell compiled: compiled again, "
                             "traced"}


def listing_text(listing: "HeaderListing | None") -> str:
    """What the header listing's phase adds to its time: whether it ran beside the compile,
    or why the compile was traced instead."""
    if listing is None or (not listing.beside and listing.traced is None
                           and not listing.in_pch):
        return ""
    if listing.in_pch:
        return " (none run: the precompiled header's record lists the headers)"
    if listing.beside:
        return f" past the compile (it ran beside it: {duration_text(listing.seconds)})"
    assert listing.traced is not None
    return f" (the compile traced itself: {_TRACED[listing.traced.value]})"


def text_phases(report: BuildReport) -> str:
    """Where the time went, folded between phases."""
    return _fold("  time: ", [f"{p.label} {p.text}" for p in report.phases])


def text_body(report: BuildReport, max_rows: int | None = None) -> list[str]:
    """The name map, the warnings, what the build used, the compile log."""
    lines = table_text(report.columns, report.table(0, max_rows))
    more = report.more_rows(max_rows)
    if more:
        lines.append(f"  ... {more}")
    notes = report.launch_notes(max_rows)
    if notes:
        lines.append(_fold("  launch: ", [f"{name} {note}" for name, note in notes]))
    if report.variables:
        lines.append(_fold("  variables: ", report.variables))
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


#: A name-map cell wraps anywhere once the table would be wider than its output area (long
#: symbols and signatures ran past JupyterLab's: issue 31 item 4; tests/test_browser.py
#: measures it). Wrapping only the symbol and signature still left it 1.2x too wide at 568 px.
_NAME_CELL_STYLE = CELL_STYLE + ";overflow-wrap:anywhere"


def html_rows(report: BuildReport, start: int = 0, stop: int | None = None) -> str:
    """Table rows ``start:stop`` of the name map as ``<tr>`` elements."""
    esc = html.escape
    return "".join("<tr>" + "".join(f"<td style='{_NAME_CELL_STYLE}'><code>{esc(c)}</code></td>"
                                    for c in r)
                   + "</tr>" for r in report.table(start, stop))


def html_table(report: BuildReport, rows_html: str, cls: str = "cudamagic-names") -> str:
    """The name map's table around rows made by :func:`html_rows`."""
    head = "".join(f"<th style='{CELL_STYLE}'>{html.escape(c)}</th>"
                   for c in report.columns)
    return (f'<table class="{cls}" style="border-collapse:collapse;max-width:100%">'
            f"<thead><tr>{head}</tr></thead><tbody>{rows_html}</tbody></table>")


def html_body(report: BuildReport, max_rows: int | None = SHOWN_ROWS) -> str:
    """The name map (cut at ``max_rows``), the warnings, the compile log, what the build used."""
    esc = html.escape
    parts = [html_table(report, html_rows(report, 0, max_rows))]
    more = report.more_rows(max_rows)
    if more:
        parts.append(f'<div class="cudamagic-more"><i>&hellip; {esc(more)}</i></div>')
    notes = report.launch_notes(max_rows)
    if notes:
        parts.append('<div class="cudamagic-launch">launch: ' + " &middot; ".join(
            f"<code>{esc(name)}</code> {esc(note)}" for name, note in notes) + "</div>")
    if report.variables:
        parts.append(f'<div class="cudamagic-variables">variables: '
                     + " &middot; ".join(esc(v) for v in report.variables) + "</div>")
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
    rows = "".join(f"<tr><td style='{CELL_STYLE}'>{esc(p.label)}</td>"
                   f"<td style='{CELL_STYLE};text-align:right'>{esc(p.text)}</td></tr>"
                   for p in report.phases)
    took = esc(duration_text(report.seconds))
    phases = (f'<details class="cudamagic-phases"><summary>where the {took} '
              f'went</summary><table style="border-collapse:collapse">{rows}</table></details>')
    return head + why + phases


def render_html(report: BuildReport, max_rows: int | None = SHOWN_ROWS) -> str:
    """The whole report as one HTML fragment."""
    return wrap_html(html_head(report) + html_body(report, max_rows))


def pch_text(kind: PchKind, seconds: float, made_seconds: float) -> str:
    """What a miss's precompiled header did, in words (the report's ``headers`` fact)."""
    from ..toolchain.compile.pch import PchKind  # a miss's: a hit's report has no PCH fact

    if kind is PchKind.USED:
        spared = (f"; parsing them took NVRTC's front end {duration_text(made_seconds)} "
                  "when it was made, which this compile did not spend" if made_seconds else "")
        return f"from the precompiled header: compiled in {duration_text(seconds)}{spared}"
    return {PchKind.MADE: "parsed, and kept as a precompiled header for the next edit",
            PchKind.HEAP: "parsed; NVRTC's heap was too small for a precompiled header: the "
                          "next compile raises it and makes one",
            PchKind.REFUSED: "parsed: NVRTC refused the precompiled header (the next compile "
                             "makes a new one)",
            PchKind.FAILED: "parsed: NVRTC could not write a precompiled header"}[kind]
