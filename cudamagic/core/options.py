"""The magic line and build arguments as one frozen record, and the NVRTC options it implies.

NVRTC options are kept in the user's order, in the compile and in the key: ``-UFOO -DFOO`` is
not ``-DFOO -UFOO``. Every string that reaches NVRTC is checked here first (no NUL byte, no line
break, valid UTF-8), and options that would not produce a CUBIN, or that set what this record
sets itself, are refused. Pure: no CUDA, no IPython.
"""

from __future__ import annotations

import argparse
import keyword
import os
import re
import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .process import cached, InTest
from ..errors import OptionError, SourceError

__all__ = [
    "BuildOptions",
    "arch_sm",
    "check_source",
    "DEFAULT_ARCH",
    "DEFAULT_STD",
    "DEFAULT_MODULE",
    "PROGRAM_NAME",
    "magic_parser", "magic_help", "module_name_free",
    "parse_magic_line",
    "split_line",
    "options_from_args",
    "normalize_arch",
    "nvrtc_options",
    "check_text",
    "include_folders",
    "object_macros",
    "standard",
    "working_folder",
    "shown_path",
    "is_folder",
    "STDS",
]

#: The architecture a build targets where no GPU is there to ask (Hopper: H100, H200).
DEFAULT_ARCH = "sm_90"
DEFAULT_STD = "c++17"
DEFAULT_MODULE = "cuda_module"
#: The file name NVRTC gives the cell (``__FILE__``, and its log): the same for every build,
#: so that it never has to be part of the key.
PROGRAM_NAME = "cell.cu"
STDS = ("c++03", "c++11", "c++14", "c++17", "c++20")

# Options this record sets itself, and what to use instead.
_OWN = {"-arch": "--arch", "--gpu-architecture": "--arch", "-std": "--std", "--std": "--std"}
# Options after which NVRTC makes no CUBIN (only PTX, LTO IR or a syntax check), or which
# read or write files that the key cannot see (precompiled headers; our own time trace).
# (-dlto makes LTO IR too, but nvJitLink links that into the CUBIN: toolchain/compile/link.py.)
_NO_CUBIN = {
    "-fdevice-syntax-only", "--fdevice-syntax-only",
    "-gen-opt-lto", "--gen-opt-lto", "-optix-ir", "--optix-ir", "-ptx", "-lto", "-ltoir",
    "-M", "--generate-dependencies",
}
_FILES_UNSEEN = {
    "-pch", "--pch", "-create-pch", "--create-pch", "-use-pch", "--use-pch", "-pch-dir",
    "--pch-dir", "-fdevice-time-trace", "--fdevice-time-trace",
}
# Options that write a file of NVRTC's on every compile (a hit would write none), relative
# to the working folder: the notebook's folder, or one NVRTC cannot write to.
_WRITES = {"-time": "NVRTC's phase timings", "--time": "NVRTC's phase timings"}
# Options whose value goes to ptxas, and ptxas's spellings of an options file (a file the key
# cannot see: editing it would serve the CUBIN built with its old contents).
_TO_PTXAS = {"-Xptxas", "--ptxas-options"}
_PTXAS_FILE = re.compile(r"(?:^|[\s,=])--?(?:optf|options-file)(?:[\s,=]|$)")
# The long and two-token spellings NVRTC takes for -I, -D and -U, and the short form kept.
_PATH_LIKE = {"-I": "-I", "--include-path": "-I", "-D": "-D", "--define-macro": "-D",
              "-U": "-U", "--undefine-macro": "-U"}
_MACRO = re.compile(r"[A-Za-z_]\w*(\([^)]*\))?(=.*)?", re.S)


def check_text(what: str, text: object) -> str:
    """A string NVRTC can take: str, no NUL, no line break, valid UTF-8.

    :raises OptionError: anything else, naming ``what``.
    """
    if not isinstance(text, str):
        raise OptionError(f"{what}: expected a string, got {type(text).__name__} {text!r:.60}")
    if "\0" in text:
        raise OptionError(f"{what} {text!r:.80} holds a NUL byte, which would cut it short "
                          "where NVRTC reads it; remove it")
    if "\n" in text or "\r" in text:
        raise OptionError(f"{what} {text!r:.80} holds a line break; remove it")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise OptionError(f"{what} {text!r:.80} is not valid UTF-8 text (it holds a lone "
                          "surrogate, as a file name that is not UTF-8 does); re-type it, or "
                          "rename the file") from None
    return text


def _all_clean(texts: Sequence[object]) -> bool:
    """Whether every one passes :func:`check_text` and is not blank, seen in a few passes over
    them all (a line of 1000 ``-n``); False says only that one of them must be looked at."""
    if not all(type(t) is str for t in texts):
        return False
    joined = "\n".join(texts)  # type: ignore[arg-type]
    if "\0" in joined or "\r" in joined or joined.count("\n") != max(len(texts) - 1, 0) \
            or "" in map(str.strip, texts):  # type: ignore[arg-type]
        return False
    try:
        joined.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_option(opt: str) -> str:
    """One NVRTC option as kept in the record (``-I``/``-D``/``-U`` in their short form).

    :raises OptionError: not an option, one this record sets itself, one that makes no CUBIN.
    """
    check_text("NVRTC option", opt)
    if not opt.startswith("-"):
        raise OptionError(f"-o {opt!r}: an NVRTC option starts with '-'")
    flag, *value = re.split(r"[=\s]+", opt, maxsplit=1)
    if flag in _OWN:
        raise OptionError(f"-o {opt!r} sets what this magic's own {_OWN[flag]} option sets: "
                          f"use {own_option(flag, value[0] if value else '')} instead")
    if flag in _NO_CUBIN:
        raise OptionError(f"-o {opt!r}: with that option NVRTC makes no CUBIN, which is what "
                          "cudamagic compiles, caches and loads")
    if flag in _FILES_UNSEEN or (flag in _TO_PTXAS and _PTXAS_FILE.search(opt[len(flag):])):
        raise OptionError(f"-o {opt!r}: that option reads or writes files the cache key cannot "
                          "see, so a cached kernel could be stale; leave it out")
    if flag in _WRITES:
        raise OptionError(f"-o {opt!r} writes {_WRITES[flag]} to a file on every compile (in "
                          "the working folder, for a relative name), which a cache hit would "
                          "not write; leave it out: the build's report shows the time of each "
                          "phase")
    _check_one_token(opt)
    for long, short in _PATH_LIKE.items():
        if opt.startswith(long + "=") and long.startswith("--"):
            opt = short + opt[len(long) + 1:]
            break
    if opt[:2] in ("-D", "-U") and not opt.startswith("--"):
        if not _MACRO.fullmatch(opt[2:]) or (opt[:2] == "-U" and "=" in opt):
            raise OptionError(f"{opt[:2]} {opt[2:]!r} is not "
                              + ("NAME or NAME=VALUE" if opt[:2] == "-D" else "a macro NAME"))
    if opt in ("-I", "-D", "-U"):
        raise OptionError(f"{opt} needs a value")
    return opt


# a flag, then white space: two words given as one option ("-I inc", "-arch sm_80")
# (-I, -D and -U take their value attached: "-Imy dir" is the folder "my dir")
_TWO_WORDS = re.compile(r"(-[IDU](?=\s)|--?(?![IDU]\S)[A-Za-z][\w-]*)\s+(\S.*)?", re.S)


def _check_one_token(opt: str) -> None:
    """NVRTC takes each option as one word: ``"-I inc"`` would search the folder ``" inc"``.

    A value may hold white space (``-DMSG=a b``, ``-I/my dir``); a flag followed by white space
    is two words given as one.

    :raises OptionError: a flag and its value in one option, saying how to give them.
    """
    m = _TWO_WORDS.match(opt)
    if m is None:
        return
    flag, value = m.group(1), (m.group(2) or "").strip()
    if not value:
        raise OptionError(f"the NVRTC option {opt!r} ends in white space, which NVRTC would "
                          f"take as part of it: give {flag!r}")
    if flag in ("-I", "-D", "-U"):
        how = f"{flag + value!r} (in build() also two list items, [{flag!r}, {value!r}])"
    else:
        how = repr(f"{flag}={value}")
    raise OptionError(f"the NVRTC option {opt!r} is two words in one: NVRTC would take "
                      f"{opt[len(flag):]!r} as part of it. Give one word: {how}")


@dataclass(frozen=True)
class BuildOptions:
    """Everything a ``%%cuda`` line or a :func:`cudamagic.build` call can set.

    Attributes
    ----------
    name_expressions : tuple of str
        The user's exact strings, duplicates removed, order kept.
    arch : str or None
        ``sm_XX``; None means the current device's, or :data:`DEFAULT_ARCH` without a GPU.
    std : str
        C++ dialect (``c++17``).
    options : tuple of str
        Every other NVRTC option in the user's order: ``-Idir``, ``-DNAME=VAL``, ``-UNAME``
        and options passed as they are (``-lineinfo``).
    module : str
        The Python name the module is pushed under.
    force, no_cache, quiet : bool
    annotate : bool
        ``-a``: show the cell's machine code beside each line after the build (no part of
        the key: the ``-lineinfo`` build is annotated, :meth:`cudamagic.Module.annotate`).
    std_headers : bool
        cudamagic's small C++ standard headers for device code (``<cstdint>``, ``<cmath>``...
        onto libcu++) are searched after every other folder; False leaves them out
        (``--no-std-headers``). In the NVRTC options, so in the key.
    pch : bool
        A miss may read the cell's headers from NVRTC's precompiled header kept in the cache
        folder (docs/cache.md); False compiles them (``--no-pch``, ``$CUDAMAGIC_PCH=0``). It
        changes no code, so it is not in the key.
    """

    name_expressions: tuple[str, ...] = ()
    arch: str | None = None
    std: str = DEFAULT_STD
    options: tuple[str, ...] = ()
    module: str = DEFAULT_MODULE
    force: bool = False
    no_cache: bool = False
    quiet: bool = False
    std_headers: bool = True
    pch: bool = True
    annotate: bool = False
    duplicates: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.name_expressions, str) or isinstance(self.options, str):
            raise OptionError("name expressions and options are lists of strings, not one "
                              "string: write ['saxpy<float>'], ['-lineinfo']")
        if not _all_clean(self.name_expressions):  # else: the one that is not, said
            for expr in self.name_expressions:
                check_text("name expression", expr)
                if not expr.strip():
                    raise OptionError("a name expression is empty")
        if self.arch is not None:
            object.__setattr__(self, "arch", normalize_arch(self.arch))
        std = self.std if str(self.std).startswith("c++") else f"c++{self.std}"
        if std not in STDS:
            raise OptionError(f"--std {self.std!r} is not one of {', '.join(STDS)}")
        object.__setattr__(self, "std", std)
        if not (isinstance(self.module, str) and self.module.isidentifier()) \
                or keyword.iskeyword(self.module) or keyword.issoftkeyword(self.module):
            raise OptionError(f"--module {self.module!r} is not a name Python can assign to "
                              "(an identifier, not a keyword)")
        for before, opt in zip(("", *self.options), self.options):
            if isinstance(opt, str) and isinstance(before, str) and before.startswith("-") \
                    and not opt.startswith("-") and "=" not in before:
                # a value as a word of its own after its flag: NVRTC takes each option whole
                raise OptionError(f"the NVRTC option {before!r} and its value {opt!r} are two "
                                  f"words: NVRTC takes each option as one. Give "
                                  f"{before + '=' + opt!r}")
        object.__setattr__(self, "options", tuple(_check_option(o) for o in self.options))
        deduped = tuple(dict.fromkeys(self.name_expressions))
        if len(deduped) != len(self.name_expressions):
            # said once, in the build's warnings (the report, or a Python warning from build())
            # counted once: list.count per expression is quadratic in the number of -n
            counts = Counter(self.name_expressions)
            object.__setattr__(self, "duplicates",
                               tuple(sorted(e for e, n in counts.items() if n > 1)))
        object.__setattr__(self, "name_expressions", deduped)

    @property
    def include_dirs(self) -> tuple[str, ...]:
        """The ``-I`` folders, in order, as given."""
        return include_folders(self.options)


def normalize_arch(arch: str | int) -> str:
    """``"sm_90"``, ``"90"``, ``90``, ``"sm_90a"`` -> ``"sm_90"``/``"sm_90a"``.

    :raises OptionError: anything else (``compute_XX`` makes PTX, not a CUBIN).
    """
    if isinstance(arch, bool) or not isinstance(arch, (str, int)):
        raise OptionError(f"--arch: expected sm_XX or a number such as 90, got "
                          f"{type(arch).__name__}")
    if isinstance(arch, int) and not 0 <= arch < 1000:
        # str() of an integer past 4300 digits raises; no architecture number is that long
        what = "a negative number" if arch < 0 else f"a number of {arch.bit_length()} bits"
        raise OptionError(f"--arch: {what} is not a GPU architecture such as 90")
    text = arch.strip().lower() if isinstance(arch, str) else str(arch)
    m = re.fullmatch(r"(?:sm_)?(\d{2,3})([af]?)", text)
    if not m:
        raise OptionError(f"--arch {arch!r:.40} is not a real GPU architecture such as sm_90 "
                          "(a CUBIN is built for one; compute_XX would give PTX)")
    return f"sm_{m.group(1)}{m.group(2)}"


def arch_sm(arch: str | int, *, virtual: bool = False) -> int:
    """The SM number of an architecture: ``sm_90``, ``sm_90a``, ``90`` -> 90; where
    ``virtual``, ``compute_90`` (a PTX target, which names its architecture too) as well. The
    one reading of an architecture's number (a build's ``--arch``, a fatbin's pick,
    ``occupancy(sm=...)``).

    :raises OptionError: not an architecture (:func:`normalize_arch`).
    """
    if virtual and isinstance(arch, str) and arch.strip().lower().startswith("compute_"):
        arch = arch.strip()[len("compute_"):]
    return int(normalize_arch(arch)[3:].rstrip("af"))


#: the width of ``%%cuda``'s help (argparse's own where no terminal is there to ask)
HELP_WIDTH = 78


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print and exit the kernel
        raise OptionError(f"%%cuda: {message}")


def own_option(flag: str, value: str) -> str:
    """The magic's own option for NVRTC's ``-std``/``-arch`` and its value, as a line takes it
    (``--std c++20``, ``--arch sm_90``; a compute_XX as its sm_XX, which makes a CUBIN)."""
    own = _OWN[flag]
    if own == "--arch":
        value = value.replace("compute_", "sm_", 1) if value else DEFAULT_ARCH
    return f"{own} {value or DEFAULT_STD}"


def _unrecognized(extra: Sequence[str], tokens: Sequence[str]) -> OptionError:
    """What to write instead of words the line's parser does not take: ``-std``/``-arch`` as
    the magic's own ``--std``/``--arch``; NVRTC's other options (``-dlto``, ``--fmad=false``)
    after ``-o``, a flag and the word after it in the line as one (``-maxrregcount=32``); other
    words are most often a name expression's pieces, split at a space or a comma."""
    fixes, words = [], 0
    for word, value in _with_values(extra, tokens):
        flag = word.split("=", 1)[0]
        if flag in _OWN:
            fixes.append(own_option(flag, value or word.partition("=")[2]))
        elif word.startswith("-"):
            fixes.append(f"-o {word}={value}" if value else f"-o {word}")
        else:
            words += 1
    hints = []
    own = [f for f in fixes if not f.startswith("-o ")]
    if own:
        hints.append("this magic's own option: " + " ".join(own))
    if len(own) < len(fixes):
        hints.append("an NVRTC option is passed with -o, one each: "
                     + " ".join(f for f in fixes if f.startswith("-o ")))
    if words:
        hints.append('a name expression with spaces or commas must be quoted: '
                     '-n "ns::scale<float, 3>"')
    return OptionError(f"%%cuda: unrecognized arguments: {' '.join(extra)}; "
                       + "; ".join(hints))


def _with_values(extra: Sequence[str], tokens: Sequence[str]) -> list[tuple[str, str]]:
    """The unrecognized words, each flag with the word that follows it in the line (its value,
    as in ``-arch sm_90``), or ``""``."""
    at, where = 0, []
    for word in extra:  # extra is in the line's order
        while at < len(tokens) and tokens[at] != word:
            at += 1
        where.append(at)
        at += 1
    out: list[tuple[str, str]] = []
    taken = False
    for n, word in enumerate(extra):
        if taken:
            taken = False
            continue
        follows = n + 1 < len(extra) and where[n + 1] == where[n] + 1
        if word.startswith("-") and "=" not in word and follows \
                and not extra[n + 1].startswith("-"):
            out.append((word, extra[n + 1]))
            taken = True
        else:
            out.append((word, ""))
    return out


class _InOrder(argparse.Action):
    """-I, -D, -U and -o all append to one list, so that their order is kept."""

    def __call__(self, parser, namespace, value, option_string=None):
        ordered = getattr(namespace, "options", None) or []
        ordered.append(value if self.const == "" else f"{self.const}{value}")
        namespace.options = ordered


@cached(1, test=InTest.KEPT)
def magic_parser() -> argparse.ArgumentParser:
    """The ``%%cuda`` line's parser; its help is the magic's help."""
    p = _Parser(prog="%%cuda", add_help=False, formatter_class=_formatter, description=(
        "Compile the cell's CUDA C++ with NVRTC (cached on disk) and put each kernel into the "
        "notebook as a Python callable."))
    p.add_argument("-n", "--name-expression", action="append", default=[], metavar="EXPR",
                   help='a kernel to instantiate and export, e.g. -n "saxpy<float>" '
                        "(repeatable; quote expressions with spaces or commas)")
    p.add_argument("--arch", default=None, metavar="sm_XX",
                   help=f"target GPU (default: the current device's; {DEFAULT_ARCH} without a GPU)")
    p.add_argument("--std", default=DEFAULT_STD, metavar="c++NN",
                   help=f"C++ dialect (default {DEFAULT_STD})")
    p.add_argument("-I", action=_InOrder, const="-I", metavar="DIR", dest="options",
                   help="add a header folder (repeatable; relative to the kernel's current "
                        "folder, which %%cd moves)")
    p.add_argument("-D", action=_InOrder, const="-D", metavar="NAME[=VAL]", dest="options",
                   help="define a macro (repeatable)")
    p.add_argument("-U", action=_InOrder, const="-U", metavar="NAME", dest="options",
                   help="undefine a macro (repeatable; -D and -U apply in the order given)")
    p.add_argument("-o", "--option", action=_InOrder, const="", metavar="OPT", dest="options",
                   help="pass an option to NVRTC as is, e.g. -o -lineinfo (repeatable)")
    p.add_argument("--module", default=DEFAULT_MODULE, metavar="NAME",
                   help=f"Python name of the module object (default {DEFAULT_MODULE})")
    p.add_argument("--no-std-headers", action="store_true",
                   help="leave out cudamagic's C++ standard headers for device code (<cstdint>, "
                        "<cmath>, <limits>... mapped onto libcu++)")
    p.add_argument("--force", action="store_true", help="recompile and overwrite the cache entry")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    p.add_argument("--no-pch", action="store_true",
                   help="compile the cell's headers, not reading them from a precompiled header")
    p.add_argument("-q", "--quiet", action="store_true", help="show no report after the cell")
    p.add_argument("-a", "--annotate", action="store_true",
                   help="show the machine code beside each line of the cell (nvdisasm reads "
                        "the -lineinfo build; module.annotate() does the same)")
    p.add_argument("-h", "--help", action="store_true", help="show this help and compile nothing")
    return p


def _formatter(prog: str) -> argparse.HelpFormatter:
    """The line parser's formatter, ``HELP_WIDTH`` columns wide: a width given keeps argparse
    from asking the terminal for one (an import of shutil, and through it of bz2 and lzma, in
    ``%load_ext`` and in the first cell's parse)."""
    return argparse.HelpFormatter(prog, width=HELP_WIDTH)


def module_name_free(module: str, reserved: Sequence[str]) -> None:
    """Refuse a ``--module`` name IPython keeps in the notebook and relies on (``reserved``:
    ``In``, ``Out``, ``get_ipython``, ``exit``...): the module would replace it and break the
    notebook. (A kernel's name that is one is given a suffix instead; a module's name is the
    user's own choice, so it is refused, as a keyword is.)

    :raises OptionError: ``module`` is one of ``reserved``.
    """
    if module in reserved:
        raise OptionError(f"--module {module!r} is a name IPython keeps in the notebook and "
                          f"relies on (the module would replace {module}): give the module "
                          "another name")


def magic_help() -> str:
    """``%%cuda``'s help text (the magic's docstring, made when the magic is defined)."""
    return magic_parser().format_help()


# a word: unquoted characters and quoted runs, side by side ("-n" 'a<int, 2>' ab"c d"e)
_WORD = re.compile(r"""(?:[^\s'"]+|'[^']*'|"[^"]*")+""")
_PART = re.compile(r"""'([^']*)'|"([^"]*)"|([^'"]+)""")


def split_line(line: str) -> list[str]:
    """The words of a magic line, as ``shlex.split`` gives them.

    Without a backslash in the line (nearly always) a regular expression does it: shlex reads
    one character at a time (docs/performance.md: a line of 1 000 ``-n`` options).

    :raises ValueError: an unbalanced quote.
    """
    if "\\" in line:
        return shlex.split(line)
    if _WORD.sub(" ", line).strip():
        return shlex.split(line)  # an unbalanced quote is left over: shlex says where
    words = _WORD.findall(line)
    return [w if "'" not in w and '"' not in w else _unquoted(w) for w in words]


def _unquoted(word: str) -> str:
    """A word of quoted and unquoted runs, as the shell joins them."""
    q = word[0]
    if q in "'\"" and word.count(q) == 2 and word[-1] == q:  # one quoted run: 'k<1>'
        return word[1:-1]
    return "".join(a or b or c for a, b, c in _PART.findall(word))


@cached(1, test=InTest.KEPT)  # read off the parser, which never changes
def _flag_bundle() -> re.Pattern[str]:
    """A word that is only this magic's value-less short flags (``-a``, ``-q``, ``-aq``)."""
    flags = "".join(sorted(k[1] for k, a in magic_parser()._option_string_actions.items()
                           if len(k) == 2 and k[0] == "-" and a.nargs == 0))
    return re.compile(f"-[{re.escape(flags)}]+")


def _misread_as_flags(word: str, bundles: re.Pattern[str]) -> bool:
    """Whether argparse would read ``word`` as a value-less short flag and the rest of it as
    more (``-arch=sm_80`` as ``-a`` then ``rch=sm_80``; ``-quiet``): a single-dash word of more
    than two characters that starts with such a flag but is not a bundle of them."""
    return (len(word) > 2 and word[0] == "-" and word[1] != "-"
            and bundles.fullmatch(word[:2]) is not None and bundles.fullmatch(word) is None)


def parse_magic_line(line: str) -> BuildOptions | None:
    """Parse a ``%%cuda`` line into :class:`BuildOptions` (None for ``-h``/``--help``).

    :raises OptionError: an unknown flag, a missing value, a bad value, or a conflict.
    """
    check_text("the %%cuda line", line)
    try:
        tokens = split_line(line)
    except ValueError as exc:
        raise OptionError(f"%%cuda: cannot split the line ({exc}): check its quotes") from None
    # "-o -lineinfo": argparse would take "-lineinfo" for a flag of its own; and -n is taken
    # out here, because argparse's parsing grows with the square of the number of options
    joined: list[str] = []
    exprs: list[str] = []
    stray: list[str] = []  # words argparse would misread as this magic's short flags
    bundles = _flag_bundle()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if _misread_as_flags(tok, bundles):
            stray.append(tok)  # "-arch=sm_80" is not -a with "rch=sm_80"
            i += 1
        elif tok in ("-o", "--option", "-n", "--name-expression") and i + 1 < len(tokens):
            if tok in ("-o", "--option"):
                joined.append(f"--option={tokens[i + 1]}")
            else:
                exprs.append(tokens[i + 1])
            i += 2
        elif tok.startswith("--name-expression="):
            exprs.append(tok.split("=", 1)[1])
            i += 1
        else:
            joined.append(tok)
            i += 1
    ns, extra = magic_parser().parse_known_args(joined)
    if extra or stray:
        raise _unrecognized(sorted(extra + stray, key=tokens.index), tokens)
    if ns.help:
        return None
    return BuildOptions(
        name_expressions=tuple(exprs) + tuple(ns.name_expression), arch=ns.arch, std=ns.std,
        options=tuple(ns.options or ()), module=ns.module, force=ns.force,
        no_cache=ns.no_cache, quiet=ns.quiet, std_headers=not ns.no_std_headers,
        pch=not ns.no_pch, annotate=ns.annotate)


def options_from_args(options: Sequence[str], name_expressions: Sequence[str] = (),
                      arch: str | None = None, **fields: Any) -> BuildOptions:
    """A :class:`BuildOptions` from :func:`cudamagic.build`'s arguments (an option list in
    NVRTC's spellings; nothing here asks NVRTC).

    ``-arch``/``--gpu-architecture`` and ``-std`` become the record's own fields (an ``-arch``
    that disagrees with ``arch`` is an error); two-token forms (``"-I", "dir"``) are joined;
    the rest keep their order.

    :raises OptionError: a bad option, or a string where a list belongs.
    """
    options = _string_list("options", options)
    name_expressions = _string_list("name_expressions", name_expressions)
    kept, arch, std = _fold(options, arch)
    kwargs: dict[str, Any] = dict(name_expressions=tuple(name_expressions), arch=arch,
                                  options=tuple(kept))
    if std:
        kwargs["std"] = std
    return BuildOptions(**kwargs, **fields)


def _string_list(which: str, value: object) -> Sequence[str]:
    """An argument that must be a list of strings (None: an empty one).

    :raises OptionError: one string, or something that is not a list.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        raise OptionError(f"{which} must be a list of strings, not one string "
                          f"(got {value!r:.60}); write [\"...\"]")
    if not hasattr(value, "__iter__"):
        raise OptionError(f"{which} must be a list of strings, got "
                          f"{type(value).__name__} {value!r:.60}")
    return value  # type: ignore[return-value]


def _fold(options: Sequence[str], arch: str | None
          ) -> tuple[list[str], str | None, str | None]:
    """NVRTC's spellings (``=value``, two tokens, long forms) read in order: the options kept,
    the arch and the ``-std`` they set.

    :raises OptionError: a flag without its value, or an ``-arch`` that disagrees with ``arch``.
    """
    std: str | None = None
    kept: list[str] = []
    it = iter(options)

    def value_of(opt: str) -> str:
        value = next(it, None)
        if value is None:
            raise OptionError(f"NVRTC option {opt} needs a value after it")
        return check_text(f"the value of {opt}", value)

    for opt in it:
        check_text("NVRTC option", opt)
        flag, eq, value = opt.partition("=")
        if flag in ("-arch", "--gpu-architecture", "-std", "--std"):
            value = value if eq else value_of(opt)
            if "std" in flag:
                std = value
            elif arch is not None and normalize_arch(value) != normalize_arch(arch):
                raise OptionError(f"options say {flag} {value} but arch={arch!r}: give one")
            else:
                arch = value
        elif opt in _PATH_LIKE:
            kept.append(_PATH_LIKE[opt] + value_of(opt))
        else:
            kept.append(opt)
    return kept, arch, std


def nvrtc_options(opts: BuildOptions, arch: str, include_dirs: Sequence[str],
                  base_dir: str | os.PathLike, cwd: str | None = None,
                  added: Sequence[str] = ()) -> tuple[str, ...]:
    """The NVRTC option list of a build (it is part of the cache key, in this order).

    Relative ``-I`` folders are taken from ``base_dir`` (the notebook's folder). The search
    order is: the user's ``-I`` folders, then ``include_dirs`` (the toolkit's), then
    cudamagic's standard headers (:func:`std_header_dirs`: last, so that a project's own
    ``<cstdint>`` wins; its one fix of a CCCL header goes before the toolkit's). The current
    folder ``cwd`` is not an ``-I`` folder: NVRTC looks up the cell's quoted includes there
    already, and as an ``-I`` folder it would be searched for angle includes too, where the
    toolkit's headers look for each other (``<version>``, which libcu++ includes where it
    exists): a file of that name beside the notebook broke every cooperative-groups or
    ``cuda/std`` cell. A ``base_dir`` other than ``cwd`` is searched last. What a library the
    cell includes needs (``added``: :func:`cudamagic.core.libraries.library_options`) comes right
    after the user's own.
    """
    base = Path(base_dir)
    out = [f"-arch={arch}", f"-std={opts.std}"]
    for o in opts.options:
        if o.startswith("-I") and not os.path.isabs(o[2:]):
            o = f"-I{(base / o[2:]).resolve()}"
        out.append(o)
    out += added
    from .toolkit import std_header_dirs

    before, after = std_header_dirs() if opts.std_headers else ((), ())
    out += [f"-I{d}" for d in (*before, *include_dirs)]
    if cwd is None or base.resolve() != Path(cwd).resolve():
        out.append(f"-I{base.resolve()}")
    out += [f"-I{d}" for d in after]
    return tuple(out)


def _line_of(source: str, index: int, line_offset: int) -> int:
    return source.count("\n", 0, index) + 1 + line_offset


def check_source(source: str, line_offset: int) -> None:
    """Refuse what NVRTC cannot take, saying where.

    :raises SourceError: an empty source, a NUL byte, text that is not valid UTF-8.
    """
    if not isinstance(source, str):
        raise SourceError(f"the source must be a str, got {type(source).__name__}")
    if not source.strip():
        raise SourceError("the cell is empty: there is no CUDA C++ to compile")
    if "\0" in source:
        raise SourceError(f"line {_line_of(source, source.index(chr(0)), line_offset)}: the "
                          "source holds a NUL byte, which NVRTC cannot take; remove it")
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SourceError(f"line {_line_of(source, exc.start, line_offset)}: the source holds "
                          f"text that is not valid UTF-8 ({source[exc.start]!r}); re-type or "
                          "remove it") from None


# NVRTC's spellings of relocatable device code (NVRTC's own option list)
_RDC = ("-rdc=true", "--relocatable-device-code=true", "-dc", "--device-c")
_LTO = ("-dlto", "--dlink-time-opt")
_RDC_OFF = ("-rdc=false", "--relocatable-device-code=false")


def relocatable(options: Sequence[str]) -> bool:
    """The NVRTC options ask for relocatable device code (or LTO IR): the output needs a link.
    Of ``-rdc=true`` and ``-rdc=false`` the last given counts, as for NVRTC."""
    rdc = False
    for o in options:
        if o in _RDC or o in _RDC_OFF:
            rdc = o in _RDC
    return rdc or lto(options)


def lto(options: Sequence[str]) -> bool:
    """The NVRTC options ask for LTO IR (``-dlto``)."""
    return any(o in _LTO for o in options)


def include_folders(options: Sequence[str]) -> tuple[str, ...]:
    """The ``-I`` folders of an option list, in order (every option is kept in its short
    form: :func:`nvrtc_options`' output, :attr:`BuildOptions.options`)."""
    return tuple(o[2:] for o in options if o.startswith("-I"))


def object_macros(options: Sequence[str]) -> dict[str, str]:
    """The object-like macros an option list defines (``-DN=4``; ``-DF``: 1), in order; a
    later ``-U`` undefines."""
    out: dict[str, str] = {}
    for o in options:
        if o.startswith("-D") and len(o) > 2:
            name, _, value = o[2:].partition("=")
            if "(" not in name:
                out[name] = value if "=" in o else "1"
        elif o.startswith("-U"):
            out.pop(o[2:], None)
    return out


def standard(options: Sequence[str]) -> str | None:
    """The C++ standard an NVRTC option list asks for (its last ``-std=``); None: NVRTC's
    default."""
    std = [o.split("=", 1)[1] for o in options if o.startswith(("-std=", "--std="))]
    return std[-1] if std else None


def shift_lines(log: str, delta: int) -> str:
    """A rewritten log with its ``line N:`` numbers moved by ``delta`` (a stored log counts the
    source's lines; a cell's start one below its magic line)."""
    if not delta or not log:
        return log
    return re.sub(r"^line (\d+)(?=: )", lambda m: f"line {int(m.group(1)) + delta}", log,
                  flags=re.M)


def working_folder() -> str:
    """The process's current folder, which NVRTC searches first for quoted includes.

    :raises OptionError: it was deleted, or its name is not UTF-8 (NVRTC takes text).
    """
    try:
        cwd = os.getcwd()
    except FileNotFoundError:
        raise OptionError("the working folder no longer exists (it was deleted while this "
                          "process was in it), and NVRTC searches it for the cell's quoted "
                          "includes: change to a folder that exists (os.chdir, or %cd in "
                          "IPython)") from None
    try:
        cwd.encode("utf-8")
    except UnicodeEncodeError:
        raise OptionError(f"the working folder's name {os.fsencode(cwd)!r} is not UTF-8 text, "
                          "which NVRTC cannot take as a folder: change to a folder whose name "
                          "is (os.chdir, or %cd in IPython)") from None
    return cwd


def shown_path(path: str, limit: int = 160) -> str:
    """``path`` for a message: its two ends, where it is longer than ``limit``."""
    if len(path) <= limit:
        return path
    return f"{path[:limit // 2]}...({len(path) - limit} characters)...{path[-limit // 2:]}"


def is_folder(path: Path) -> bool:
    """Whether ``path`` is a folder; a name the system refuses (too long) is not."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False
