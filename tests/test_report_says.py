"""What the report says (issue 31 item 5): -q is quiet for a slow compile too."""

from __future__ import annotations

import pytest

from cudamagic import magic

CELL = 'extern "C" __global__ void k{n}(float* x) {{ x[0] = {n}.0f; }}\n'


@pytest.fixture
def shell(tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(magic, "NOTICE_AFTER_S", 0.0)  # every compile is a slow one
    ip = InteractiveShell.instance()
    if "cudamagic" not in ip.extension_manager.loaded:
        ip.run_line_magic("load_ext", "cudamagic")
    return ip


@pytest.mark.parametrize("quiet", [True, False])
def test_q_shows_nothing_even_for_a_slow_compile(shell, capfd, quiet, tmp_path):
    result = shell.run_cell(f"%%cuda {'-q ' if quiet else ''}--module m{int(quiet)}\n"
                            + CELL.format(n=int(quiet) + 7))
    assert result.success, result.error_in_exec
    shown = capfd.readouterr()
    text = shown.out + shown.err
    if quiet:
        assert text.strip() == "", text
    else:  # the notice a slow compile gets, and the report
        assert "compil" in shown.err and "cudamagic: cache miss" in shown.out, text


def test_the_occupancy_plot_reads_in_a_dark_theme_and_draws_alike_curves_apart():
    """Its words take the page's text colour (black on JupyterLab's dark theme otherwise); a
    kernel on the same curve as an earlier one is dashed, and its legend says whose curve it
    is; the fold's last line says what %cuda_bench does with several launches."""
    import re

    from cudamagic.view import bench

    curve = [(32, 0.5), (64, 1.0)]
    page = bench.svg_lines([("a", curve), ("b", list(curve)), ("c", [(32, 0.25), (64, 0.5)]),
                            ("d", curve)], x_label="threads per block", y_label="occupancy",
                           y_max=1.0)
    root = re.match(r"<svg [^>]*>", page).group(0)
    assert 'fill="currentColor"' in root
    lines = re.findall(r"<polyline ([^>]*)>", page)
    dashes = [re.search(r'stroke-dasharray="([^"]*)"', x) for x in lines]
    assert [d is None for d in dashes] == [True, False, True, False]
    assert dashes[1].group(1) != dashes[3].group(1)  # the third on a curve differs again
    legends = re.findall(r'<text [^>]*fill="#[0-9a-f]+">([^<]*)</text>', page)
    assert legends == ["a", "b (same curve as a)", "c", "d (same curve as a)"]
    texts = re.findall(r"<text ([^>]*)>", page)
    assert all('fill="#000' not in t for t in texts)


def test_a_ptx_loads_badge_and_footer_say_ptx_and_the_cache(tmp_path):
    """A PTX file is compiled by nvJitLink and its CUBIN cached: the report says PTX (not
    "loaded CUBIN"), names the cache it went into (not "(not cached)"), and the second load
    says it came from there."""
    import cudamagic

    from .conftest import FIXTURES

    ptx = FIXTURES / "nvcc_kernels.ptx"
    cache = cudamagic.KernelCache(tmp_path / "cache")
    first = cudamagic.load_cubin(ptx, cache=cache).report
    second = cudamagic.load_cubin(ptx, cache=cache).report
    assert first.badge.label == "loaded PTX", first.badge
    assert second.badge.label == "loaded PTX (compiled before: cached)", second.badge
    for report in (first, second):
        assert report.cache_dir == str(cache.location) and "(not cached)" not in report.text()
    cubin = cudamagic.load_cubin(FIXTURES / "fixture.cubin", ["fill<float>"]).report
    assert cubin.badge.label == "loaded CUBIN" and cubin.cache_dir == "(not cached)"
