"""Demanglers: libstdc++ through ctypes (always here), cu++filt (batched, one process)."""

from __future__ import annotations

import os
import stat

from cudamagic.toolchain.demangle import CuFilt, LibStdCxx, find_cufilt

from .conftest import fixture_rows


def test_libstdcxx_gives_the_recorded_outputs(rows):
    d = LibStdCxx()
    assert d.demangle([r.symbol for r in rows]) == [r.libstdcxx for r in rows]


def test_libstdcxx_leaves_plain_and_bad_names():
    assert LibStdCxx().demangle(["c_kernel", "_Znot_a_name!", ""]) == ["c_kernel", "_Znot_a_name!", ""]


def _stand_in_cufilt(tmp_path) -> str:
    """An executable that answers as cu++filt did on the GPU machine (recorded outputs), and
    logs each start, so the test sees how many processes a batch costs."""
    table = {r.symbol: r.cufilt for r in fixture_rows()}
    script = tmp_path / "bin" / "cu++filt"
    script.parent.mkdir()
    script.write_text(
        "#!/usr/bin/env python3\nimport sys\n"
        f"T = {table!r}\n"
        f"open({str(tmp_path / 'starts')!r}, 'a').write('x')\n"
        "for line in sys.stdin:\n    s = line.strip()\n    print(T.get(s, s))\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_cufilt_demangles_a_module_in_one_process(tmp_path, rows):
    path = _stand_in_cufilt(tmp_path)
    out = CuFilt(path).demangle([r.symbol for r in rows])
    assert out == [r.cufilt for r in rows]
    assert (tmp_path / "starts").read_text() == "x"


def test_cufilt_is_found_through_cuda_home(tmp_path, monkeypatch):
    path = _stand_in_cufilt(tmp_path)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert find_cufilt() == path
    monkeypatch.delenv("CUDA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + os.environ["PATH"])
    assert find_cufilt() == path
