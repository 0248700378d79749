"""The package's names as a user finds them: ``dir(cudamagic)`` and IPython's completion list
the lazy ones (build, gpu_available...) without importing them, and every error a message or a
page names is ``cudamagic.<Name>``."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cudamagic
from cudamagic import errors

ROOT = Path(cudamagic.__file__).parent.parent

COMPLETE = r"""
import json, sys
from IPython.core.completer import provisionalcompleter
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.Completer.use_jedi = sys.argv[1] == "jedi"
ip.run_cell("import cudamagic")
got = {}
for text in sys.argv[2:]:
    with provisionalcompleter():
        got[text] = sorted(c.text.lstrip(".") for c in ip.Completer.completions(text, len(text)))
print(json.dumps([got, sorted(m for m in sys.modules if m.startswith("cudamagic."))]))
"""

# what a user types -> what it must offer (among others)
TYPED = {
    "cudamagic.bu": {"build"},
    "cudamagic.gpu": {"gpu_available"},
    "cudamagic.load_c": {"load_cubin"},
    "cudamagic.Kernel": {"Kernel", "KernelCache"},
    "cudamagic.Source": {"SourceError"},
    "cudamagic.Toolchain": {"ToolchainError"},
    "cudamagic.CacheA": {"CacheArgumentError"},
    "cudamagic.Occ": {"OccupancyError"},
}


def _complete(completer: str) -> tuple[dict[str, list[str]], list[str]]:
    run = subprocess.run([sys.executable, "-c", COMPLETE, completer, *TYPED],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "CUDAMAGIC_EAGER_CONTEXT": "0"})
    assert run.returncode == 0, run.stderr
    got, imported = json.loads(run.stdout.splitlines()[-1])
    return got, imported


@pytest.mark.parametrize("completer", ["dir", "jedi"])
def test_ipython_completes_the_package_s_lazy_names_and_its_errors(completer):
    if completer == "jedi":  # IPython's own dependency; a copy of the test extra may lack it
        pytest.importorskip("jedi", reason="jedi is not installed here (IPython completes "
                                           "without it)")
    got, _ = _complete(completer)
    for typed, wanted in TYPED.items():
        assert wanted <= set(got[typed]), (typed, got[typed])


def test_dir_lists_the_lazy_names_and_imports_none_of_them():
    got, imported = _complete("dir")
    assert imported == ["cudamagic.errors"], imported


def test_dir_is_every_public_name():
    names = dir(cudamagic)
    assert set(cudamagic.__all__) <= set(names) and names == sorted(names)


def _error_classes(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.ClassDef)
            and not n.name.startswith("_") and re.search(r"(Error|Warning|Interrupted)$", n.name)}


def test_every_error_and_warning_is_a_name_of_the_package():
    """errors.py's and the toolchain's own (OccupancyError, ToolMissingError...): messages and
    docs name them, so a user catches them as cudamagic.<Name>."""
    defined = {name: "errors" for name in _error_classes(ROOT / "cudamagic" / "errors.py")}
    for path in sorted((ROOT / "cudamagic").rglob("*.py")):
        for name in _error_classes(path) - set(defined):
            if path.name != "errors.py":
                defined[name] = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    assert "ToolMissingError" in defined and "CompileInterrupted" in defined
    for name in sorted(defined):
        assert name in cudamagic.__all__, name
        assert getattr(cudamagic, name).__name__ == name
    assert cudamagic.SourceError is errors.SourceError
    assert cudamagic.LogError is errors.LogError
