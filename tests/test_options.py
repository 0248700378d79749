"""The magic line: parsing, validation, NVRTC option lists."""

from __future__ import annotations

import re

import pytest

from cudamagic.errors import OptionError
from cudamagic.core.options import (BuildOptions, arch_sm, normalize_arch, nvrtc_options,
                                    options_from_args, parse_magic_line)
from cudamagic.core.toolkit import std_header_dirs


def test_quoted_expressions_with_spaces_and_commas():
    o = parse_magic_line('-n "saxpy<float>" --name-expression "ns::scale<float, 3>" -n \'cast<int,float>\'')
    assert o.name_expressions == ("saxpy<float>", "ns::scale<float, 3>", "cast<int,float>")


def test_every_flag():
    o = parse_magic_line("-n k --arch 80 --std 20 -I inc -D N=4 -D FAST -o -lineinfo "
                         "--option=--use_fast_math -U FAST --module m --force --no-cache -q")
    assert (o.arch, o.std, o.include_dirs) == ("sm_80", "c++20", ("inc",))
    assert o.options == ("-Iinc", "-DN=4", "-DFAST", "-lineinfo", "--use_fast_math", "-UFAST")
    assert o.module == "m" and o.force and o.no_cache and o.quiet


def test_options_keep_the_users_order():
    # -UFOO -DFOO defines FOO, -DFOO -UFOO does not: the order reaches NVRTC as written
    assert parse_magic_line("-U FOO -D FOO").options == ("-UFOO", "-DFOO")
    assert parse_magic_line("-D FOO -U FOO").options == ("-DFOO", "-UFOO")
    assert parse_magic_line("-o -UFOO -D FOO").options == ("-UFOO", "-DFOO")
    assert options_from_args(["-UFOO", "-D", "FOO"]).options == ("-UFOO", "-DFOO")


def test_help_is_not_an_error():
    assert parse_magic_line("-h") is None and parse_magic_line("--help") is None


@pytest.mark.parametrize("line, message", [
    ("--bogus", "unrecognized arguments"),
    ("-n", "expected one argument"),
    ('-n "k<int>', "quotes"),
    ("--arch compute_90", "real GPU architecture"),
    ("--std c++98", "is not one of"),
    ("--module 3x", "identifier"),
    ("-o -arch=sm_80", "this magic's own --arch"),
    ('-o "-arch sm_80"', "this magic's own --arch"),
    ("-o --gpu-architecture=sm_80", "this magic's own --arch"),
    ("-o -ptx", "no CUBIN"),
    ("-o -fdevice-syntax-only", "no CUBIN"),
    ("-o --use-pch", "files the cache key cannot see"),
    ("--module class", "not a name Python can assign to"),
    ('-o "-DA=1\0-DB=2"', "NUL byte"),
    ('-n "k<int>\0"', "NUL byte"),
    ('-I "a\udce9"', "not valid UTF-8"),
    ("-U A=1", "a macro NAME"),
    ("-n ns::scale<float, 3>", "must be quoted"),
    # NVRTC's options written on the line as the README lists them: -o before each
    ("-dlto --fmad=false", "passed with -o, one each: -o -dlto -o --fmad=false"),
    ("-rdc=true", "-o -rdc=true"),
    ("-o lineinfo", "starts with '-'"),
    ("-D 1X", "NAME or NAME=VALUE"),
])
def test_bad_lines_say_what(line, message):
    with pytest.raises(OptionError, match=message):
        parse_magic_line(line)


def test_duplicate_expressions_are_dropped_in_order():
    o = BuildOptions(name_expressions=("a", "b", "a"))
    assert o.name_expressions == ("a", "b") and o.duplicates == ("a",)


def test_nvrtc_option_list(tmp_path):
    o = parse_magic_line("-I inc -D N=4 -o -lineinfo -U N")
    opts = nvrtc_options(o, "sm_90", ["/toolkit/include"], tmp_path)
    (fix,), (std,) = std_header_dirs()
    # the user's folders first, cudamagic's standard headers last (a project's own win)
    assert opts == ("-arch=sm_90", "-std=c++17", f"-I{tmp_path / 'inc'}", "-DN=4", "-lineinfo",
                    "-UN", f"-I{fix}", "-I/toolkit/include", f"-I{tmp_path}", f"-I{std}")
    # the current folder itself is no -I folder (NVRTC finds quoted includes there anyway)
    assert nvrtc_options(o, "sm_90", ["/toolkit/include"], tmp_path, str(tmp_path))[-2:] == \
        ("-I/toolkit/include", f"-I{std}")
    off = parse_magic_line("-I inc --no-std-headers")
    assert nvrtc_options(off, "sm_90", ["/toolkit/include"], tmp_path, str(tmp_path)) == \
        ("-arch=sm_90", "-std=c++17", f"-I{tmp_path / 'inc'}", "-I/toolkit/include")


def test_options_from_args_splits_known_flags():
    o = options_from_args(["-std=c++20", "-I", "a", "-Ib", "-DX=1", "-arch=sm_80", "-lineinfo",
                            "--include-path=c", "--define-macro=Y"], ["k"])
    assert (o.std, o.arch) == ("c++20", "sm_80")
    assert o.options == ("-Ia", "-Ib", "-DX=1", "-lineinfo", "-Ic", "-DY")


@pytest.mark.parametrize("args, message", [
    (dict(options="-lineinfo"), "list of strings, not one string"),
    (dict(name_expressions="t<int>"), "list of strings, not one string"),
    (dict(options=["-arch=sm_80"], arch="sm_90"), "give one"),
    (dict(options=[5]), "expected a string"),
    (dict(options=["-D"]), "needs a value"),
])
def test_build_arguments_say_what(args, message):
    with pytest.raises(OptionError, match=message):
        options_from_args(**{"options": (), **args})


def test_arch_spellings():
    assert [normalize_arch(a) for a in ("sm_90", "90", 90, "SM_90a")] == ["sm_90"] * 3 + ["sm_90a"]


def test_the_line_splits_as_a_shell_splits_it():
    """The fast splitter of the %%cuda line (a regular expression; shlex reads one character
    at a time) gives shlex's words, or its error, for lines of quotes, spaces and C++."""
    import shlex

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from cudamagic.core.options import split_line

    @settings(max_examples=2000, deadline=None, database=None)
    @given(st.text(alphabet=" \t'\"<>,:-nak_1", max_size=40))
    def same(line):
        try:
            want = shlex.split(line)
        except ValueError:
            with pytest.raises(ValueError):
                split_line(line)
            return
        assert split_line(line) == want

    same()
    many = " ".join(f'-n "k<{i}, float>"' for i in range(1000))
    assert split_line(many) == shlex.split(many)


# --- one token each, the same in build() and the magic ------------------------------------------

TWO_WORDS = ["-I inc", "-I  inc", "-D X", "-D X=1", "-U X", "--include-path inc",
             "--define-macro X", "-maxrregcount 32", "--maxrregcount 32", "-default-device x",
             "-lineinfo ", "-I\tinc", "--use_fast_math yes"]
ONE_WORD = ["-Iinc", "-I/my dir/inc", "-Imy dir", "-DMSG=a b", "-DX", "-UX", "-lineinfo",
            "--maxrregcount=32", "-maxrregcount=32", "--include-path=inc", "-default-device"]


def _refusal(call):
    with pytest.raises(OptionError) as info:
        call()
    return str(info.value)


@pytest.mark.parametrize("opt", TWO_WORDS)
def test_a_flag_and_its_value_in_one_option_is_refused_alike_everywhere(opt):
    """["-I inc"] would have NVRTC search the folder " inc": refused, with the one-word form,
    whether it comes from build(), -o in the magic, or the magic's own -I/-D/-U."""
    said = _refusal(lambda: options_from_args([opt]))
    assert repr(opt) in said and ("one word" in said or "white space" in said)
    assert _refusal(lambda: parse_magic_line(f'-o "{opt}"')) == said
    flag, _, value = opt.partition(" ")
    if flag in ("-I", "-D", "-U"):  # the magic's own flag with a value that starts with a space
        assert _refusal(lambda: parse_magic_line(f'{flag} " {value.strip()}"')) == \
            _refusal(lambda: options_from_args([f"{flag} {value.strip()}"]))


@pytest.mark.parametrize("opt", ONE_WORD)
def test_one_word_options_pass_as_they_are(opt):
    kept = options_from_args([opt]).options
    assert len(kept) == 1 and kept[0].replace("--include-path=", "-I") == \
        opt.replace("--include-path=", "-I")
    assert parse_magic_line(f'-o "{opt}"').options == kept


@pytest.mark.parametrize("arch, sm", [("sm_90", 90), ("sm_90a", 90), ("SM_100f", 100), (" 75 ", 75),
                                      (120, 120), ("sm_103a", 103)])
def test_an_arch_is_one_sm_number_for_the_nvrtc_check_and_the_fatbin_pick(arch, sm):
    from cudamagic.core.options import arch_sm

    assert arch_sm(arch) == sm


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a", "SM_100f", " 75 ", 120, "90", "compute_90",
                                  "COMPUTE_103a", "7", "sm_9", 1000, -90, "sm90x", "", "90.0",
                                  True, 90.0, "compute_", "sm_compute_90"])
def test_an_arch_has_one_sm_number_for_a_build_and_for_occupancy(arch):
    """``occupancy(sm=...)`` reads an architecture as a build does (``compute_XX`` aside,
    which names an architecture there but makes no CUBIN): one function, one answer."""
    import numpy as np

    from cudamagic.errors import OccupancyError
    from cudamagic.toolchain.device.occupancy import sm_number

    def read(f):
        try:
            return f(arch)
        except (OptionError, OccupancyError):
            return "refused"

    build = read(lambda a: arch_sm(a, virtual=True))
    assert read(sm_number) == build
    if isinstance(arch, int) and not isinstance(arch, bool):
        assert read(lambda a: sm_number(np.int64(a))) == build  # a NumPy int as its value
    if not (isinstance(arch, str) and "compute_" in arch.lower()):
        assert read(arch_sm) == build  # only a PTX target's spelling differs


@pytest.mark.parametrize("arch", ["compute_90", "sm90x", "", "sm_9", 1000])
def test_what_is_no_arch_has_no_sm_number(arch):
    from cudamagic.core.options import arch_sm

    with pytest.raises(OptionError):
        arch_sm(arch)


@pytest.mark.parametrize("options, folders, macros, std", [
    ([], (), {}, None),
    (["-Ia", "-DN=4", "-Ib", "-DF", "-std=c++14"], ("a", "b"), {"N": "4", "F": "1"}, "c++14"),
    (["-DN=4", "-UN", "-DG(x)=x", "-DM="], (), {"M": ""}, None),  # undefined; function-like
    (["-std=c++14", "--std=c++20"], (), {}, "c++20"),              # the last one counts
])
def test_an_option_list_is_read_in_one_place(options, folders, macros, std):
    from cudamagic.core.options import include_folders, object_macros, standard

    assert (include_folders(options), object_macros(options), standard(options)) == \
        (folders, macros, std)


# a refused line -> each command its message hints at (or the words it hints with and the
# command they are), each of which must be taken: run below
HINTED = [
    ("-std=c++20", ["--std c++20"]),
    ("-std c++20", ["--std c++20"]),
    ("-o -std=c++20", ["--std c++20"]),
    ("-o --std=c++14", ["--std c++14"]),
    ('-o "-std c++20"', ["--std c++20"]),
    ("-o -std", ["--std c++17"]),
    ("-arch=sm_80", ["--arch sm_80"]),
    ("-arch sm_80", ["--arch sm_80"]),
    ("-o -arch=sm_80", ["--arch sm_80"]),
    ('-o "-arch sm_80"', ["--arch sm_80"]),
    ("--gpu-architecture=sm_80", ["--arch sm_80"]),
    ("-o --gpu-architecture=sm_80", ["--arch sm_80"]),
    ("-arch=compute_80", ["--arch sm_80"]),
    # words that start with one of the line's value-less short flags (-a, -q, -h): argparse
    # read "-arch=sm_80" as -a and "rch=sm_80" once %%cuda had -a
    ("-a -arch=sm_80", ["--arch sm_80"]),
    ("-q -std=c++20", ["--std c++20"]),
    ("-aq -Xptxas -v", ["-o -Xptxas -o -v"]),
    ("-o -arch", ["--arch sm_90"]),
    ("-dlto --fmad=false", ["-o -dlto -o --fmad=false"]),
    ("-rdc=true", ["-o -rdc=true"]),
    ("-maxrregcount 32", ["-o -maxrregcount=32"]),
    ("-Xptxas -v", ["-o -Xptxas -o -v"]),
    ("-std=c++20 -lineinfo", ["--std c++20", "-o -lineinfo"]),
    ("-lineinfo -n ns::scale<float, 3>", ["-o -lineinfo", '-n "ns::scale<float, 3>"']),
    # an option's one-word form, said alike to build() (["-Iinc"]) and the line (-o -Iinc)
    ('-o "-I inc"', [("'-Iinc'", "-o -Iinc")]),
    ('-o "-maxrregcount 32"', [("'-maxrregcount=32'", "-o -maxrregcount=32")]),
    ('-o "-lineinfo "', [("'-lineinfo'", "-o -lineinfo")]),
]
HINT_CELL = "namespace ns { template <class T, int N> __global__ void scale(T* x) { x[0] *= N; } }"


@pytest.mark.parametrize("line, hints", HINTED, ids=[h[0] for h in HINTED])
def test_every_hint_is_a_line_that_builds(line, hints):
    """A refused line's message names commands, and each is taken: by the parser, and by
    NVRTC in a build (no hint leads to another refusal, as -o -std=c++20 once did)."""
    from dataclasses import replace

    from cudamagic.pipeline.steps import build_module

    said = _refusal(lambda: parse_magic_line(line))
    for hint in hints:
        words, command = hint if isinstance(hint, tuple) else (hint, hint)
        assert words in (said if isinstance(hint, tuple) else said.replace("'", "")), said
        opts = parse_magic_line(command)
        module = build_module(HINT_CELL, replace(opts, no_cache=True))
        assert module is not None


@pytest.mark.parametrize("options, said", [
    (["-include", "f.h"], "Give '-include=f.h'"),
    (["--pre-include", "f.h"], "Give '--pre-include=f.h'"),
    (["-maxrregcount", "32"], "Give '-maxrregcount=32'"),
])
def test_a_flag_and_its_value_as_two_list_items_say_how_to_give_them(options, said):
    """An adversary's finding: build(options=["-include", "f.h"]) was refused as
    "-o 'f.h': an NVRTC option starts with '-'", naming the magic's flag and not the pair.
    (-I, -D and -U as two items are joined, as NVRTC's own list of them is.)"""
    with pytest.raises(OptionError, match=re.escape(said)):
        options_from_args(options)
