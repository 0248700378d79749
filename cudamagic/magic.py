"""The IPython shell over :mod:`cudamagic.session`: ``%%cuda`` and its help.

Thin on purpose: parse the line, build, push the names, show the report. Everything else lives
in the pipeline modules, which know no IPython.
"""

from __future__ import annotations

import builtins
import os
import warnings

from IPython.core.magic import Magics, cell_magic, magics_class

from .errors import ShadowWarning
from .options import magic_parser, parse_magic_line

__all__ = ["CudaMagics"]


@magics_class
class CudaMagics(Magics):
    """``%%cuda``: compile a cell with NVRTC (cached) and push its kernels into the notebook."""

    @cell_magic
    def cuda(self, line: str, cell: str):
        from .session import build_module  # the pipeline loads on first use, not at %load_ext

        opts = parse_magic_line(line)
        module = build_module(cell, opts, base_dir=os.getcwd(), line_offset=1,
                              program_name=f"{opts.module}.cu")
        names = {opts.module: module}
        for kern in module.kernels.values():
            names[kern.python_name] = kern
        self._warn_shadowing(names)
        self.shell.push(names)
        if not opts.quiet:
            from .widget import show_report

            show_report(module.report)

    cuda.__doc__ = magic_parser().format_help()

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
