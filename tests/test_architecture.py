"""The package's layering, enforced: pyproject.toml's import-linter contracts (docs/architecture.md
draws the graph) hold on the package, and each kind of break is caught — an upward import at
module level, inside a function or for type checking only, IPython or comm below the shell, a
circle inside a package, a module given no layer — by planting it in a copy of the package."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` over the package under ``root`` with ``root``'s pyproject.toml."""
    return subprocess.run([str(LINT), "--no-cache", "--no-logo", str(root / "pyproject.toml")],
                          cwd=root, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
                          capture_output=True, text=True, timeout=300)


def test_the_package_keeps_every_contract():
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout and "3 kept" in done.stdout, done.stdout


# (file, text appended to it, the contract it breaks, a line of the report that says where)
PLANTS = [
    ("toolchain/occupancy.py", "\n\ndef _words(t):\n    from ..view.bench import occupancy_text\n"
     "    return occupancy_text(t)\n", "Each layer imports only the layers below it",
     "cudamagic.toolchain.occupancy -> cudamagic.view.bench"),
    ("store/disk.py", "\nfrom ..launch import kernel as _kernel  # noqa\n",
     "Each layer imports only the layers below it", "cudamagic.store.disk -> cudamagic.launch"),
    ("launch/kernel.py", "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
     "    from ..module import Module  # noqa\n", "Each layer imports only the layers below it",
     "cudamagic.launch.kernel -> cudamagic.module"),
    ("view/widget.py", "\n\ndef _shown():\n    from IPython.display import display\n"
     "    return display\n", "Only the shell imports IPython", "cudamagic.view.widget -> IPython"),
    ("store/cache.py", "\n\ndef _front():\n    import comm\n    return comm\n",
     "Only the shell imports IPython", "cudamagic.store.cache -> comm"),
    ("view/render.py", "\n\ndef _rows():\n    from .report import SHOWN_ROWS\n"
     "    return SHOWN_ROWS\n", "No circle between the modules of a package",
     "No cycles are allowed in cudamagic.view."),
    ("stray.py", '"""a module no layer names"""\n', "Each layer imports only the layers below it",
     "cudamagic.stray"),
]


@pytest.mark.parametrize("path, planted, contract, where", PLANTS,
                         ids=[p[0] for p in PLANTS])
def test_a_planted_break_fails_its_contract(tmp_path, path, planted, contract, where):
    shutil.copytree(REPO / "cudamagic", tmp_path / "cudamagic",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    target = tmp_path / "cudamagic" / path
    target.write_text((target.read_text() if target.exists() else "") + planted)
    done = _lint(tmp_path)
    assert done.returncode != 0, done.stdout
    broken = [line for line in done.stdout.splitlines() if " BROKEN" in line]
    assert any(line.startswith(contract) for line in broken), broken  # an upward edge is
    # often a circle as well
    assert where in done.stdout, done.stdout


def test_the_architecture_page_lists_every_module_in_its_layer():
    """docs/architecture.md's graph names every module of the package (a package's own
    ``__init__.py`` aside), each once, under the layer the contract gives it."""
    import tomllib

    page = (REPO / "docs" / "architecture.md").read_text()
    block = page.split("<!-- modules -->\n```\n", 1)[1].split("```", 1)[0]
    listed: dict[str, str] = {}
    layer = ""
    for line in block.splitlines():
        if line and not line.startswith(" "):
            layer = line.split()[0]
        elif line.startswith("  ") and line.split()[0].endswith(".py"):
            path = line.split()[0]
            assert path not in listed, f"{path} is listed twice"
            listed[path] = layer
    package = REPO / "cudamagic"
    files = {str(p.relative_to(package)) for p in package.rglob("*.py")
             if "__pycache__" not in p.parts and not (p.name == "__init__.py" and p.parent != package)}
    assert set(listed) == files, (
        f"docs/architecture.md's module graph lacks {sorted(files - set(listed))} and lists "
        f"{sorted(set(listed) - files)}, which the package does not have: give each new module "
        f"its line under its layer (and its layer in pyproject.toml's contract)")
    contract = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in contract["contracts"] if c["type"] == "layers")["layers"]
    names = ["shell", "pipeline", "view", "launch", "store", "toolchain", "cxx", "leaf", "process"]
    for name, members in zip(names, layers):
        for member in members.replace(":", " ").replace("|", " ").split():
            wanted = {p for p, lay in listed.items()
                      if p.split("/")[0].removesuffix(".py") == member}
            assert wanted and all(listed[p] == name for p in wanted), (member, name)
