"""The IPython shell over :mod:`cudamagic.session`: ``%%cuda``, ``%cuda_cache``, ``%cuda_load``
and ``%cuda_info``.

Thin on purpose: parse the line, call the pipeline, push the names, show the report. Everything
else lives in the pipeline modules, which know no IPython.
"""

from __future__ import annotations

import argparse
import builtins
import os
import shlex
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from typing import Any

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class, no_var_expand

from .errors import OptionError, ShadowWarning
from .options import PROGRAM_NAME, magic_parser, parse_magic_line

__all__ = ["CudaMagics"]

#: A compile that takes longer than this shows that it is compiling.
NOTICE_AFTER_S = 0.5


class _LineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print and exit the kernel
        raise OptionError(f"%{self.prog}: {message}")


def _load_parser() -> argparse.ArgumentParser:
    p = _LineParser(prog="cuda_load", add_help=False,
                    description="Load a CUBIN built elsewhere (nvcc -cubin) and push its kernels.")
    p.add_argument("path")
    p.add_argument("-n", "--name-expression", action="append", default=[], metavar="EXPR")
    p.add_argument("--module", default="cuda_module", metavar="NAME")
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def _cache_parser() -> argparse.ArgumentParser:
    p = _LineParser(prog="cuda_cache", add_help=False,
                    description="Inspect and manage the CUBIN cache.")
    sub = p.add_subparsers(dest="command")
    sub.add_parser("stats", add_help=False, help="entries, bytes, hits, misses, location, limit")
    sub.add_parser("list", add_help=False, help="entries, newest first")
    clear = sub.add_parser("clear", add_help=False, help="remove all entries, or old ones")
    clear.add_argument("--older-than", metavar="AGE", default=None,
                       help="only entries last used longer ago than AGE (30s, 15m, 12h, 7d)")
    limit = sub.add_parser("limit", add_help=False, help="show or set the size limit")
    limit.add_argument("size", nargs="?", default=None, help="e.g. 512MB, 2GiB")
    return p


def _age_seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    t = text.strip().lower()
    try:
        return float(t[:-1]) * units[t[-1]] if t[-1:] in units else float(t)
    except ValueError:
        raise OptionError(f"%cuda_cache clear --older-than {text!r}: give an age such as 30s, "
                          "15m, 12h or 7d") from None


@contextmanager
def _compile_notice(shell, program: str):
    """Show "compiling..." once a compile has run ``NOTICE_AFTER_S``, then the time it took.

    NVRTC releases the GIL while it compiles, so a timer thread can speak up meanwhile. In a
    Jupyter front end the notice is one output updated in place (by display id); in a terminal
    it is a line on stderr.
    """
    in_kernel = getattr(shell, "kernel", None) is not None
    handle = None
    shown = threading.Event()
    start = time.perf_counter()
    if in_kernel:
        from IPython.display import display

        handle = display({"text/plain": ""}, raw=True, display_id=True)

    def notice() -> None:
        shown.set()
        text = f"compiling {program} with NVRTC..."
        if handle is not None:
            handle.update({"text/plain": text, "text/html": f"<i>&#9203; {text}</i>"}, raw=True)
        else:
            print(text, file=sys.stderr, flush=True)

    timer = threading.Timer(NOTICE_AFTER_S, notice)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        if shown.is_set():
            text = f"compiled {program} in {time.perf_counter() - start:.1f} s"
            if handle is not None:
                handle.update({"text/plain": text, "text/html": f"<i>{text}</i>"}, raw=True)
            else:
                print(text, file=sys.stderr, flush=True)


@magics_class
class CudaMagics(Magics):
    """``%%cuda``: compile a cell with NVRTC (cached) and push its kernels into the notebook."""

    # no $var/{expr} expansion of the line: braces and dollars are C++ there (S{1}, operator$),
    # and IPython's expansion of a line with 1000 -n options takes seconds
    @no_var_expand
    @cell_magic
    def cuda(self, line: str, cell: str):
        from .session import build_module  # the pipeline loads on first use, not at %load_ext

        opts = parse_magic_line(line)
        if opts is None:  # -h, --help
            print(self.cuda.__doc__)
            return
        module = build_module(cell, opts, base_dir=os.getcwd(), line_offset=1,
                              compile_notice=lambda: _compile_notice(self.shell, PROGRAM_NAME))
        self._push(opts.module, module)
        if not opts.quiet:
            self._show(module)

    cuda.__doc__ = magic_parser().format_help()

    @line_magic
    def cuda_load(self, line: str):
        from .session import load_cubin

        ns = _load_parser().parse_args(shlex.split(line))
        if not ns.module.isidentifier():
            raise OptionError(f"%cuda_load: --module {ns.module!r} is not a Python identifier")
        module = load_cubin(os.path.expanduser(ns.path), ns.name_expression, module=ns.module)
        self._push(ns.module, module)
        if not ns.quiet:
            self._show(module)

    cuda_load.__doc__ = _load_parser().format_help()

    @line_magic
    def cuda_cache(self, line: str):
        from .cache import parse_size
        from .cache import default_cache

        ns = _cache_parser().parse_args(shlex.split(line) or ["stats"])
        cache = default_cache()
        if ns.command == "stats":
            from .report import CacheStats

            return CacheStats.of(cache)
        if ns.command == "list":
            from .report import CacheListing

            return CacheListing(tuple(cache.entries()))
        if ns.command == "clear":
            age = None if ns.older_than is None else _age_seconds(ns.older_than)
            removed = cache.clear() if age is None else cache.evict_older_than(age)
            print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} from {cache.location}")
            return None
        if ns.size is not None:
            try:
                cache.set_size_limit(parse_size(ns.size))
            except ValueError as exc:
                raise OptionError(f"%cuda_cache limit: {exc}") from None
        print(f"size limit {cache.size_limit / 2**20:.0f} MiB ({cache.size_limit} bytes), "
              f"{cache.volume() / 2**20:.1f} MiB in use, {cache.location}")
        return None

    cuda_cache.__doc__ = _cache_parser().format_help()

    @line_magic
    def cuda_info(self, line: str = ""):
        """Device, driver, NVRTC, demangler, target arch and cache location."""
        from .info import environment_info

        return environment_info()

    def _push(self, module_name: str, module: Any) -> None:
        names: dict[str, object] = {module_name: module}
        for kern in module.kernels.values():
            names[kern.python_name] = kern
        self._warn_shadowing(names)
        self.shell.push(names)

    def _show(self, module: Any) -> None:
        from .info import report_with_attributes
        from .widget import show_report

        show_report(report_with_attributes(module))

    def _warn_shadowing(self, names: dict[str, object]) -> None:
        from .kernel import Kernel
        from .session import Module

        ns = self.shell.user_ns
        for name in names:
            old = ns.get(name, None)
            if name in ns and not isinstance(old, (Kernel, Module)):
                warnings.warn(f"%%cuda: {name!r} replaces a variable of type "
                              f"{type(old).__name__} in the notebook", ShadowWarning,
                              stacklevel=2)
            elif name not in ns and hasattr(builtins, name):
                warnings.warn(f"%%cuda: the kernel name {name!r} hides Python's builtin "
                              f"{name!r} in this notebook (del {name} brings it back)",
                              ShadowWarning, stacklevel=2)
