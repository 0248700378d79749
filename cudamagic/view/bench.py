"""Views of occupancy tables and timing results: text for a terminal, HTML with an SVG plot for a
notebook; the report's two folds (timing and occupancy, sanitize and profile), which a hit's
report shows, so they import none of the debugging tools' records (view/debug.py words those).

The plots are SVG written here (no plotting library is imported: ``%load_ext`` stays light, and
the HTML is the same in JupyterLab, a static notebook viewer and a browser).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from ..core.units import size_text

__all__ = ["occupancy_text", "occupancy_html", "timing_text", "timing_html", "svg_lines",
           "svg_strips", "timing_fold", "debug_fold"]

#: kernels the report's folds read: the timing fold draws their occupancy (a module of more says
#: how to see the rest), the debugging fold asks whether each prints
FOLD_KERNELS = 8

#: block sizes the text view lists (the table has every multiple of 32)
_TEXT_BLOCKS = (32, 64, 128, 192, 256, 384, 512, 640, 768, 896, 1024)
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
            "#17becf")


def _bytes(n: int) -> str:
    """``48 KiB``, ``1000 B``: sizes as a person reads them (past 1 MiB, as
    :func:`~cudamagic.core.units.size_text` writes them)."""
    if n >= 1 << 20:
        return size_text(n)
    if n and n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} B"


def _usage_line(table: Any) -> str:
    u = table.usage
    parts = [f"{u.registers} registers a thread", f"{_bytes(u.static_shared_bytes)} static shared"]
    if u.max_threads is not None:
        parts.append(f"__launch_bounds__ {u.max_threads}")
    if u.barriers > 1:
        parts.append(f"{u.barriers} barriers")
    return ", ".join(parts)


def _source_text(table: Any) -> str:
    from ..toolchain.device.occupancy import Source

    return ("the driver's answer" if table.source is Source.DRIVER
            else "computed from the CUBIN's records and sm_%d's limits" % table.sm)


def _occupancy_row(r: Any) -> str:
    if not r.launches:
        return f"{r.block_size:>6}  {'-':>9}  {'-':>5}  {'-':>9}  does not launch: {r.reason}"
    note = "" if r.computed_blocks == r.active_blocks else \
        f"  (the arithmetic says {r.computed_blocks})"
    return (f"{r.block_size:>6}  {r.active_blocks:>9}  {r.active_warps:>5}  "
            f"{r.occupancy:>9.0%}  {', '.join(r.limited_by)}{note}")


def occupancy_text(table: Any) -> str:
    """An :class:`~cudamagic.toolchain.device.occupancy.OccupancyTable` as terminal text."""
    lines = [f"{table.kernel}: occupancy on sm_{table.sm} ({_source_text(table)})",
             f"  {_usage_line(table)}"]
    sizes = {r.block_size for r in table.rows}
    for dyn in table.dynamic_sizes:
        best = table.best.get(dyn, 0)
        if best:
            b = table.at(best, dyn)
            grid = table.min_grid.get(dyn)
            lines.append(f"dynamic shared {_bytes(dyn)}: best block size {best} "
                         f"({b.active_warps} of {b.max_warps} warps an SM"
                         + (f", {grid} blocks fill the GPU" if grid else "") + ")")
        else:
            lines.append(f"dynamic shared {_bytes(dyn)}: no block size launches")
        lines.append(f"{'block':>6}  {'blocks/SM':>9}  {'warps':>5}  {'occupancy':>9}  limited by")
        # the sizes asked, where a few were (a default sweep: the usual ones and the best)
        shown = sorted(sizes if len(sizes) <= len(_TEXT_BLOCKS) else
                       (set(_TEXT_BLOCKS) & sizes) | ({best} if best else set()))
        lines += [_occupancy_row(table.at(b, dyn)) for b in shown]
    if len(sizes) > len(_TEXT_BLOCKS):
        lines.append(f"(every block size in .rows: {len(table.rows)} rows)")
    return "\n".join(lines)


#: Dash patterns of the second, third... kernel drawn on one curve
_DASHES = ("6,4", "2,3", "9,3,2,3", "1,5")


def svg_lines(series: Sequence[tuple[str, Sequence[tuple[float, float]]]], *, x_label: str,
              y_label: str, y_max: float, marks: Sequence[tuple[float, float]] = (),
              width: int = 460, height: int = 200, y_format: str = "{:.0%}") -> str:
    """A small line plot: one polyline per series, ``marks`` as rings, a legend."""
    left, right, top, bottom = 46, 12, 10, 34
    xs = [x for _, pts in series for x, _ in pts] or [0.0, 1.0]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y_max = y_max or 1.0

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def py(y: float) -> float:
        return top + (1 - y / y_max) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10" '
           f'fill="currentColor" role="img">'  # its words in the page's text colour (a dark theme)
           f'<title>{html.escape(y_label)} against {html.escape(x_label)}</title>']
    for frac in (0, 0.25, 0.5, 0.75, 1):
        y = py(frac * y_max)
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="#ddd"/><text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end">'
                   f'{html.escape(y_format.format(frac * y_max))}</text>')
    for x in _ticks(x0, x1):
        out.append(f'<text x="{px(x):.1f}" y="{height - bottom + 12}" text-anchor="middle">'
                   f'{x:g}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 4}" '
               f'text-anchor="middle">{html.escape(x_label)}</text>')
    # kernels that ask alike share a curve: its points written once; each later kernel of the
    # same curve dashed (the lines would hide each other) and its legend says whose it is
    paths: dict[tuple, tuple[str, str, int]] = {}
    for i, (label, pts) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        key = tuple(pts)
        path, first, alike = paths.get(key) or (
            " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts), label, 0)
        paths[key] = (path, first, alike + 1)
        dash = f' stroke-dasharray="{_DASHES[(alike - 1) % len(_DASHES)]}"' if alike else ""
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} '
                   f'points="{path}"><title>{html.escape(label)}</title></polyline>')
        legend = f"{label} (same curve as {first})" if alike else label
        out.append(f'<text x="{width - right - 4}" y="{top + 12 + 12 * i}" text-anchor="end" '
                   f'fill="{colour}">{html.escape(legend)}</text>')
    for x, y in marks:
        out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="none" '
                   f'stroke="currentColor"/>')
    out.append("</svg>")
    return "".join(out)


def _ticks(x0: float, x1: float) -> list[float]:
    """About five round values across ``[x0, x1]`` (multiples of 1, 2, 2.5 or 5 times a power
    of ten), ``x0`` first."""
    raw = max((x1 - x0) / 4, 1e-12)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    ticks = [x0] + [step * i for i in range(math.ceil(x0 / step), math.floor(x1 / step) + 1)]
    return [t for i, t in enumerate(ticks) if i == 0 or t - ticks[0] >= step / 2]


def occupancy_html(table: Any) -> str:
    """An occupancy table as HTML: the plot (occupancy against block size, one line for each
    dynamic shared size, the best block ringed) and every row in a fold."""
    series, marks = [], []
    for dyn in table.dynamic_sizes:
        rows = [r for r in table.rows if r.dynamic_shared_bytes == dyn]
        series.append((f"dynamic {_bytes(dyn)}", [(r.block_size, r.occupancy if r.launches
                                                   else 0.0) for r in rows]))
        best = table.best.get(dyn)
        if best:
            marks.append((best, table.at(best, dyn).occupancy))
    head = (f"<b>{html.escape(table.kernel)}</b>: occupancy on sm_{table.sm} "
            f"({html.escape(_source_text(table))})<br><small>{html.escape(_usage_line(table))}"
            "</small>")
    cells = "".join(
        f"<tr><td>{_bytes(r.dynamic_shared_bytes)}</td><td>{r.block_size}</td>"
        f"<td>{r.active_blocks}</td><td>{r.active_warps}</td><td>{r.occupancy:.0%}</td>"
        f"<td>{html.escape(', '.join(r.limited_by) if r.launches else r.reason)}</td></tr>"
        for r in table.rows)
    best = "; ".join(f"dynamic {_bytes(d)}: best block size {b}" for d, b in table.best.items())
    return (f'<div class="cudamagic-occupancy">{head}<br>'
            + svg_lines(series, x_label="threads per block", y_label="occupancy", y_max=1.0,
                        marks=marks)
            + f"<br>{html.escape(best)}<details><summary>every block size</summary>"
            "<table><tr><th>dynamic shared</th><th>block</th><th>blocks/SM</th><th>warps</th>"
            f"<th>occupancy</th><th>limited by</th></tr>{cells}</table></details></div>")


# --- timing ------------------------------------------------------------------------------------

def _ms(x: float) -> str:
    """A time in the unit that reads best (seconds, ms or us)."""
    if x >= 1000:
        return f"{x / 1000:.3g} s"
    if x >= 1:
        return f"{x:.3g} ms"
    return f"{x * 1000:.3g} us"


def _rate(t: Any) -> str:
    parts = []
    if t.gbps is not None:
        parts.append(f"{t.gbps:.4g} GB/s" + (f" ({t.bandwidth_fraction:.0%} of peak)"
                                             if t.bandwidth_fraction is not None else ""))
    if t.tflops is not None:
        parts.append(f"{t.tflops:.4g} TFLOP/s" + (f" ({t.flops_fraction:.0%} of FP32 peak)"
                                                  if t.flops_fraction is not None else ""))
    return "; ".join(parts)


def timing_text(result: Any) -> str:
    """A :class:`~cudamagic.launch.bench.BenchResult` as terminal text: one row per variant,
    fastest first (variants whose output differs last, unranked)."""
    s = result.settings
    how = (f"{s.warmup} warm-up, {len(result.timings[0].samples_ms) if result.timings else 0} "
           f"timed launches each" + (", L2 flushed before each" if s.flush_l2 else "")
           + (", round-robin" if len(result.timings) > 1 else ""))
    lines = [f"{result.device}: {how}"]
    width = max([len(t.label) for t in result.timings] + [7])
    lines.append(f"{'variant':<{width}}  {'median':>9}  {'min':>9}  {'p10':>9}  {'p90':>9}  "
                 f"{'std':>8}  {'host':>8}  {'ratio':>6}")
    for t in result.ranked():
        ratio = "differs" if t.matches is False else (f"{t.ratio:.2f}x" if t.ratio else "")
        lines.append(f"{t.label:<{width}}  {_ms(t.median):>9}  {_ms(t.min):>9}  "
                     f"{_ms(t.p10):>9}  {_ms(t.p90):>9}  {_ms(t.std):>8}  "
                     f"{_ms(t.host_median_ms):>8}  {ratio:>6}")
        rate = _rate(t)
        if rate:
            lines.append(f"{'':<{width}}  {rate}")
        if t.matches is False:
            lines.append(f"{'':<{width}}  output differs: {t.mismatch}")
    lines.append("device times from CUDA events around each launch; host: the launch call alone")
    if len(result.timings) > 1:
        lines.append(f"ratio: median time over the median of {result.baseline} "
                     "(below 1 is faster)")
    return "\n".join(lines)


def svg_strips(rows: Sequence[tuple[str, Sequence[float], bool]], *, width: int = 460,
               row_height: int = 26) -> str:
    """Each variant's samples as dots on one axis, the p10-p90 span as a bar and the median as
    a tick; a variant flagged (its output differs) in grey."""
    left, right, top = 130, 16, 8
    height = top + row_height * len(rows) + 28
    values = [v for _, vs, _ in rows for v in vs] or [0.0, 1.0]
    lo, hi = min(values), max(values)
    hi = hi if hi > lo else lo + max(abs(lo), 1e-9)

    def px(v: float) -> float:
        return left + (v - lo) / (hi - lo) * (width - left - right)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10" '
           'fill="currentColor" role="img"><title>time per launch, every sample</title>']
    for i, (label, vs, flagged) in enumerate(rows):
        y = top + row_height * i + row_height / 2
        colour = "#999" if flagged else COLOURS[i % len(COLOURS)]
        ordered = sorted(vs)
        if ordered:
            p10, med, p90 = (_quantile(ordered, q) for q in (0.1, 0.5, 0.9))
            out.append(f'<rect x="{px(p10):.1f}" y="{y - 5:.1f}" width="'
                       f'{max(px(p90) - px(p10), 1):.1f}" height="10" fill="{colour}" '
                       f'opacity="0.25"/><line x1="{px(med):.1f}" x2="{px(med):.1f}" '
                       f'y1="{y - 8:.1f}" y2="{y + 8:.1f}" stroke="{colour}" stroke-width="2"/>')
            out += [f'<circle cx="{px(v):.1f}" cy="{y:.1f}" r="1.6" fill="{colour}" '
                    'opacity="0.6"/>' for v in ordered]
        out.append(f'<text x="{left - 6}" y="{y + 3:.1f}" text-anchor="end">'
                   f'{html.escape(label[:22])}</text>')
    base = top + row_height * len(rows) + 12
    for v in (lo, (lo + hi) / 2, hi):
        out.append(f'<text x="{px(v):.1f}" y="{base}" text-anchor="middle">'
                   f'{html.escape(_ms(v))}</text>')
    out.append("</svg>")
    return "".join(out)


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between the closest ranks (NumPy's default)."""
    if not ordered:
        return float("nan")
    pos = q * (len(ordered) - 1)
    i = int(pos)
    j = min(i + 1, len(ordered) - 1)
    return ordered[i] + (ordered[j] - ordered[i]) * (pos - i)


def timing_html(result: Any) -> str:
    """A timing result as HTML: the distribution plot and the table."""
    ranked = result.ranked()
    head = "".join(f"<th>{h}</th>" for h in ("variant", "median", "min", "p10", "p90", "mean",
                                              "std", "host", "ratio", "rate"))
    body = []
    for t in ranked:
        ratio = "differs" if t.matches is False else (f"{t.ratio:.2f}x" if t.ratio else "")
        cells = (t.label, _ms(t.median), _ms(t.min), _ms(t.p10), _ms(t.p90), _ms(t.mean),
                 _ms(t.std), _ms(t.host_median_ms), ratio, _rate(t))
        style = ' style="color:#999"' if t.matches is False else ""
        body.append(f"<tr{style}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells)
                    + "</tr>")
    title = html.escape(timing_text(result).splitlines()[0])
    return (f'<div class="cudamagic-timing"><small>{title}</small><br>'
            + svg_strips([(t.label, t.samples_ms, t.matches is False) for t in ranked])
            + f"<table><tr>{head}</tr>{''.join(body)}</table></div>")


def _fold_line(module_kernel: Any, tables: dict) -> tuple[list | None, str]:
    """One kernel's occupancy curve (None where it has none) and its note in the fold; kernels
    that ask an SM for the same (their usage and architecture alike) share one table."""
    from ..errors import CudaMagicError
    from ..toolchain.device.occupancy import cubin_sm, table, usage_of

    k = module_kernel
    try:
        usage, sm = usage_of(k), cubin_sm(k)
        key = (usage, sm)
        if key not in tables:
            t = table(usage, sm=sm)
            tables[key] = t, [(r.block_size, r.occupancy if r.launches else 0.0) for r in t.rows]
        t, curve = tables[key]
    except CudaMagicError as exc:
        return None, f"{k.python_name}: {exc}"
    except Exception as exc:  # noqa: BLE001 - the fold never takes the report down with it
        return None, (f"{k.python_name}: occupancy could not be worked out "
                      f"({type(exc).__name__}: {exc})")
    best = t.best.get(0, 0)
    if not best:
        return curve, f"{k.python_name}: no block size launches"
    at = t.at(best)
    return curve, (f"{k.python_name}: best block size {best} ({at.occupancy:.0%} occupancy, "
               f"limited by {', '.join(at.limited_by)})")


def _first_kernels(module: Any) -> tuple[list[Any], int]:
    """The fold's kernels: the first :data:`FOLD_KERNELS` of distinct symbols, in the module's
    order, and how many distinct symbols it has (a module's kernel table makes no other
    Kernel for it: its entries name the symbols)."""
    table = module.kernels
    pairs = ((e[0], e[1]) for e in table.entries()) if hasattr(table, "entries") else \
        ((label, k.symbol) for label, k in table.items())
    first: dict[str, str] = {}
    for label, symbol in pairs:
        first.setdefault(symbol, label)
    labels = list(first.values())
    return [table[label] for label in labels[:FOLD_KERNELS]], len(labels)


def timing_fold(module: Any) -> str:
    """The report's "timing and occupancy" fold (a ``<details>`` one click away): the kernels'
    occupancy against block size in one plot, computed from the CUBIN (nothing is loaded on the
    GPU, nothing launched), each one's best block size, and how to time them."""
    kernels, distinct = _first_kernels(module)
    series: list[tuple[str, list]] = []
    notes: list[str] = []
    tables: dict = {}
    for k in kernels:
        curve, note = _fold_line(k, tables)
        notes.append(note)
        if curve is not None:
            series.append((k.python_name, curve))
    if distinct > FOLD_KERNELS:
        notes.append(f"{distinct - FOLD_KERNELS} more kernels: kernel.occupancy() for each")
    name = kernels[0].python_name if kernels else "kernel"
    plot = svg_lines(series, x_label="threads per block", y_label="occupancy",
                     y_max=1.0) if series else ""
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    how = (f"{name}.occupancy() for the table (the driver's numbers on a GPU); "
           f"{name}.bench(grid, block, args) times a launch, "
           f"and %cuda_bench {name}(grid, block, args); other(grid, block, args) times "
           "several side by side")
    return ('<details class="cudamagic-fold"><summary>timing and occupancy</summary>'
            f"{plot}<ul>{items}</ul><p><small>{html.escape(how)}</small></p></details>")


def debug_fold(module: Any) -> str:
    """The report's "sanitize and profile" fold: the calls that rerun the module's first kernel
    under compute-sanitizer and Nsight Compute, and which of its first kernels print (their
    output lands in the launching cell). Nothing is run, and no tool is looked for (the first
    look runs the tool: ``%cuda_info`` does it)."""
    esc = html.escape
    names = [e[2] for e in _entries(module)]
    if not names:
        return ""
    name = names[0]
    printing = []
    for label, _, python_name, _ in _entries(module)[:FOLD_KERNELS]:
        try:
            if module.kernels[label].prints:
                printing.append(python_name)
        except Exception:  # noqa: BLE001 - a kernel the CUBIN cannot describe: the launch says
            pass
    calls = [f"{name}.sanitize(grid, block, args)  # memcheck; tool='racecheck', "
             "'initcheck', 'synccheck'",
             f"%cuda_sanitize --tool racecheck {name}(grid, block, args)",
             f"{name}.profile(grid, block, args)  # or %cuda_profile a(...); b(...)",
             "%%cuda -a  # or module.annotate(profile=p): the machine code beside each line"]
    said = ("<p>printf (and a failed assert's message) of "
            + ", ".join(esc(n) for n in printing)
            + " lands in the cell that launched it.</p>") if printing else ""
    return ('<details class="cudamagic-fold cudamagic-debug"><summary>sanitize and profile'
            f"</summary><pre>{esc(chr(10).join(calls))}</pre>{said}<p><small>Each reruns "
            "the launch in a child process (the arrays copied); %cuda_info shows which "
            "compute-sanitizer and ncu are installed. docs/debugging.md</small></p></details>")


def _entries(module: Any) -> list:
    kernels = module.kernels
    return list(kernels.entries()) if hasattr(kernels, "entries") else \
        [(k.name_expression, k.symbol, k.python_name, k.resolved_by) for k in kernels.values()]
