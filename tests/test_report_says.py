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
