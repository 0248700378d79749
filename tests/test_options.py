"""The magic line: parsing, validation, NVRTC option lists."""

from __future__ import annotations

import pytest

from cudamagic.errors import InputWarning, OptionError
from cudamagic.options import BuildOptions, normalize_arch, nvrtc_options, parse_magic_line
from cudamagic.session import options_from_nvrtc


def test_quoted_expressions_with_spaces_and_commas():
    o = parse_magic_line('-n "saxpy<float>" --name-expression "ns::scale<float, 3>" -n \'cast<int,float>\'')
    assert o.name_expressions == ("saxpy<float>", "ns::scale<float, 3>", "cast<int,float>")


def test_every_flag():
    o = parse_magic_line("-n k --arch 80 --std 20 -I inc -D N=4 -D FAST -o -lineinfo "
                         "--option=--use_fast_math --module m --force --no-cache -q")
    assert (o.arch, o.std, o.include_dirs, o.defines) == ("sm_80", "c++20", ("inc",), ("N=4", "FAST"))
    assert o.extra == ("-lineinfo", "--use_fast_math") and o.module == "m"
    assert o.force and o.no_cache and o.quiet


@pytest.mark.parametrize("line, message", [
    ("--bogus", "unrecognized arguments"),
    ("-n", "expected one argument"),
    ('-n "k<int>', "quotes"),
    ("--arch compute_90", "real GPU architecture"),
    ("--std c++98", "is not one of"),
    ("--module 3x", "identifier"),
    ("-o -arch=sm_80", "conflicts with this magic's own --arch"),
    ("-o -DX", "conflicts"),
    ("-o -ptx", "no CUBIN"),
    ("-o lineinfo", "starts with '-'"),
    ("-D 1X", "NAME or NAME=VALUE"),
])
def test_bad_lines_say_what(line, message):
    with pytest.raises(OptionError, match=message):
        parse_magic_line(line)


def test_duplicate_expressions_are_dropped_in_order():
    with pytest.warns(InputWarning, match="more than once for 'a'"):
        assert BuildOptions(name_expressions=("a", "b", "a")).name_expressions == ("a", "b")


def test_nvrtc_option_list(tmp_path):
    o = parse_magic_line("-I inc -D N=4 -o -lineinfo")
    opts = nvrtc_options(o, "sm_90", tmp_path)
    assert opts[:2] == ("-arch=sm_90", "-std=c++17")
    assert f"-I{tmp_path / 'inc'}" in opts and f"-I{tmp_path}" in opts
    assert any(x.endswith("cupy/_core/include") for x in opts)
    assert opts[-2:] == ("-DN=4", "-lineinfo")


def test_options_from_nvrtc_splits_known_flags():
    o = options_from_nvrtc(["-std=c++20", "-I", "a", "-Ib", "-DX=1", "-arch=sm_80", "-lineinfo"], ["k"])
    assert (o.std, o.include_dirs, o.defines, o.arch, o.extra) == \
        ("c++20", ("a", "b"), ("X=1",), "sm_80", ("-lineinfo",))


def test_arch_spellings():
    assert [normalize_arch(a) for a in ("sm_90", "90", 90, "SM_90a")] == ["sm_90"] * 3 + ["sm_90a"]
