"""The package's layering, enforced: pyproject.toml's import-linter contracts (docs/architecture.md
draws the graph) hold on the package, and each kind of break is caught — an upward import at
module level, inside a function or for type checking only, IPython or comm below the shell, a
circle inside a package, a module given no layer — by planting it in a copy of the package."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

# ``lint-imports`` run by this interpreter, so that it works wherever import-linter is importable
# (a venv's bin/, or a --target folder on PYTHONPATH, as on the GPU machine, which has no script)
LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def _lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` over the package under ``root`` with ``root``'s pyproject.toml."""
    import importlinter

    where = Path(importlinter.__file__).resolve().parents[1]  # import-linter's and grimp's folder
    return subprocess.run([sys.executable, "-c", LINT, "--no-cache", "--no-logo",
                           str(root / "pyproject.toml")],
                          cwd=root, env={"PATH": "/usr/bin:/bin",
                                         "PYTHONPATH": os.pathsep.join([str(root), str(where)])},
                          capture_output=True, text=True, timeout=300)


def test_the_package_keeps_every_contract():
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout and "7 kept" in done.stdout, done.stdout


# (file, text appended to it, the contract it breaks, a line of the report that says where)
PLANTS = [
    ("toolchain/device/occupancy.py", "\n\ndef _words(t):\n    from ...view.bench import occupancy_text\n"
     "    return occupancy_text(t)\n", "Each layer imports only the layers below it",
     "cudamagic.toolchain.device.occupancy -> cudamagic.view.bench"),
    ("store/disk.py", "\nfrom ..launch import kernel as _kernel  # noqa\n",
     "Each layer imports only the layers below it", "cudamagic.store.disk -> cudamagic.launch"),
    ("launch/kernel.py", "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
     "    from ..pipeline.module import Module  # noqa\n", "Each layer imports only the layers below it",
     "cudamagic.launch.kernel -> cudamagic.pipeline.module"),
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
    names = ["shell", "pipeline", "view", "launch", "compiler", "store", "toolchain", "cxx", "core",
             "errors"]
    for name, members in zip(names, layers):
        for member in members.replace(":", " ").replace("|", " ").split():
            wanted = {p for p, lay in listed.items()
                      if p.split("/")[0].removesuffix(".py") == member}
            assert wanted and all(listed[p] == name for p in wanted), (member, name)


# ---- what the package's words cite: a module or a name that moved is a stale citation -----

_ROLE = re.compile(r":(?:mod|func|class|meth|data|attr|exc|obj):`~?(?:[^`<]*<)?(\.?[A-Za-z_][\w.]*)>?`")
_ABSOLUTE = re.compile(r"(?<![<\w.])cudamagic(?:\.[A-Za-z_]\w*)+")


def _cited(ref: str) -> str | None:
    """Why the dotted ``ref`` names nothing where it says (None where it does): no such module
    or attribute, or a class or function cited through a module that only imports it."""
    parts = ref.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        home = obj
        for name in parts[i:]:
            if not hasattr(obj, name):
                # an instance's attribute: a dataclass field, or set in the class's own code
                held = inspect.isclass(obj) and name == parts[-1] and (
                    name in getattr(obj, "__dataclass_fields__", {})
                    or f"self.{name} " in inspect.getsource(obj))
                return None if held else f"{'.'.join(parts[:i])} has no {'.'.join(parts[i:])}"
            obj = getattr(obj, name)
        defined = getattr(obj, "__module__", None)
        if len(parts) > i and (inspect.isclass(obj) or inspect.isfunction(obj)) and \
                not hasattr(home, "__path__") and defined != home.__name__:
            return f"{'.'.join(parts[i:])} is {defined}'s (cited through {home.__name__})"
        return None
    return "no such module"


def citation_faults(source: str, module: str) -> list[str]:
    """The references in one module's text (``cudamagic.x.y``, Sphinx roles, relative ones
    from ``module``'s package) that name nothing, or name it where it is not."""
    package = module if module.endswith("__init__") else module.rsplit(".", 1)[0]
    package = package.removesuffix(".__init__")
    faults = []
    for n, line in enumerate(source.splitlines(), 1):
        refs = dict.fromkeys([m.group(1) for m in _ROLE.finditer(line)]
                             + [m.group(0).rstrip(".") for m in _ABSOLUTE.finditer(line)])
        for ref in refs:
            if ref.startswith("."):
                up = len(ref) - len(ref.lstrip("."))
                base = package.split(".")
                ref = ".".join(base[:len(base) - up + 1]) + "." + ref.lstrip(".")
            elif not ref.startswith("cudamagic."):
                continue  # a name of this module or class: read in its context
            why = _cited(ref)
            if why:
                faults.append(f"{n}: {ref}: {why}")
    return faults


def test_every_citation_in_the_package_names_what_is_there():
    """A comment or docstring that cites a module, class or function by its dotted name cites
    one that exists, in the module that defines it: a moved module leaves no stale word."""
    package = REPO / "cudamagic"
    faults = []
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        faults += [f"{path.relative_to(REPO)}:{f}"
                   for f in citation_faults(path.read_text(encoding="utf-8"), module)]
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        faults += [f"{path.relative_to(REPO)}:{f}"
                   for f in citation_faults(path.read_text(encoding="utf-8"), "cudamagic.x")]
    assert not faults, "\n".join(faults)


#: A file of this repository named by its path (``toolchain/binary/image.py``, ``tests/test_x.py``);
#: CuPy's own test paths (``tests/cupy_tests/...``, docs/parity.md) are not ours
_PATH = re.compile(r"(?<![\w/.])((?:cudamagic/)?(?:toolchain/(?:compile|binary|device|tools)|"
                   r"toolchain|store|launch|view|cxx|shell|pipeline|core|compiler)/\w+\.py"
                   r"|cudamagic/\w+\.py|(?:tests|benchmarks|scripts|docs)/(?!cupy_tests/)"
                   r"[\w./-]+\.(?:py|md|sh))")


def path_faults(text: str) -> list[str]:
    """The repository paths ``text`` names that no file has."""
    return [f"{n}: {m.group(1)}" for n, line in enumerate(text.splitlines(), 1)
            for m in _PATH.finditer(line)
            if not (REPO / m.group(1)).exists() and not (REPO / "cudamagic" / m.group(1)).exists()]


def test_every_path_the_package_and_its_docs_cite_is_there():
    """A comment, docstring or doc page that names a file by its path names one that exists
    (a moved module, a renamed test or benchmark leaves no stale path)."""
    paths = [*sorted((REPO / "cudamagic").rglob("*.py")), REPO / "README.md",
             *sorted((REPO / "docs").glob("*.md"))]
    faults = [f"{p.relative_to(REPO)}:{f}" for p in paths
              for f in path_faults(p.read_text(encoding="utf-8"))]
    assert not faults, "\n".join(faults)


@pytest.mark.parametrize("text, stale", [
    ("(toolchain/binary/image.py reads it)", False), ("see cudamagic/toolchain/binary/elf.py", False),
    ("tests/test_store_upgrade.py reads", False), ("docs/performance.md, section 7", False),
    ("the old toolchain/elfs.py", True), ("tests/test_attack_lazy_hit.py", True),
    ("CuPy's tests/cupy_tests/core_tests/test_raw.py", False),
])
def test_a_stale_path_is_caught(text, stale):
    assert bool(path_faults(text)) == stale


@pytest.mark.parametrize("text, module, stale", [
    (":func:`cudamagic.toolchain.device.driver.fast_launch`", "cudamagic.launch.launcher", False),
    (":func:`cudamagic.driver.fast_launch`", "cudamagic.launch.launcher", True),   # moved
    ("# see cudamagic.cache.KernelCache", "cudamagic.view.records", True),
    (":class:`~.image.GlobalImage`", "cudamagic.toolchain.binary.variables", False),
    (":class:`~.images.GlobalImage`", "cudamagic.toolchain.binary.variables", True),
    (":mod:`~cudamagic.toolchain.compile.probe`", "cudamagic.toolchain.binary.variables", False),
    (":meth:`~cudamagic.toolchain.binary.variables.VarType.to_json`", "cudamagic.store.entry", False),
    (":meth:`~cudamagic.toolchain.compile.probe.VarType.to_json`", "cudamagic.store.entry", True),
    (":attr:`cudamagic.store.state.ProcessState.sqlite`", "cudamagic.store.x", False),
    (":class:`cudamagic.Kernel`", "cudamagic.view.x", False),   # the package's public face
    ("f'<cudamagic.KernelTable {n}>'", "cudamagic.pipeline.module", False),  # a repr's words
    (":data:`SEARCH`", "cudamagic.toolchain.tools.tools", False),  # this module's: not read here
])
def test_a_stale_citation_is_caught(text, module, stale):
    assert bool(citation_faults(text, module)) == stale


# ---- one home per fact: what only one module may spell --------------------------------------

#: (what it is, how code spells it, the one module that may)
ONE_HOME = [
    ("the ELF magic", re.compile(r"x7fELF"), "toolchain/binary/elf.py"),
    ("an ELF section header's layout", re.compile(r"IIQQQQIIQQ"), "toolchain/binary/elf.py"),
    ("ELF header offsets (e_machine, e_type, e_shoff)",
     re.compile(r"unpack_from\([^)]*,\s*(?:16|18|40|48|58|60)\)"), "toolchain/binary/elf.py"),
    ("NVRTC's relocatable-code spellings", re.compile(r'"-rdc=|"--relocatable-device-code|"-dc"'),
     "core/options.py"),
    ("NVRTC's LTO spellings", re.compile(r'"-dlto"|"--dlink-time-opt"'), "core/options.py"),
    ("an option list's -I folders", re.compile(r'startswith\("-I"\)'), "core/options.py"),
    ("an option list's macros", re.compile(r'startswith\("-[DU]"\)'), "core/options.py"),
    ("an option list's C++ standard", re.compile(r'startswith\(\(?"-std='), "core/options.py"),
]


@pytest.mark.parametrize("fact, spelling, home", ONE_HOME, ids=[f[0] for f in ONE_HOME])
def test_a_fact_is_spelt_in_its_one_module(fact, spelling, home):
    package = REPO / "cudamagic"
    found = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                   if spelling.search(p.read_text(encoding="utf-8")))
    assert found == [home], f"{fact} is spelt in {found}: ask {home} instead"


def word_compare_faults(source: str) -> list[int]:
    """The lines where code compares an enum member's ``.value`` with a word (``s.state.value
    == "on"``): a kind is told by its member, the word is the views' (mypy's strict_equality
    catches a member compared with a word, not its value)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "value" for s in sides) and any(
                    isinstance(s, ast.Constant) and isinstance(s.value, str) or isinstance(
                        s, (ast.Tuple, ast.Set, ast.List)) and any(
                        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in s.elts)
                    for s in sides):
                lines.append(node.lineno)
    return lines


def test_no_enum_is_told_apart_by_its_word():
    package = REPO / "cudamagic"
    faults = [f"{p.relative_to(REPO)}:{n}" for p in sorted(package.rglob("*.py"))
              for n in word_compare_faults(p.read_text(encoding="utf-8"))]
    assert not faults, "compare the member itself (is State.ON): " + ", ".join(faults)


@pytest.mark.parametrize("source, faulty", [
    ('x = s.state.value == "on"\n', True),
    ('x = s.kind.value in ("a", "b")\n', True),
    ("x = s.state is State.ON\n", False),
    ("x = count.value == 0\n", False),          # a ctypes value
    ('x = access.value in words\n', False),     # a tool's words read into members
])
def test_the_word_compare_rule_catches_an_enum_told_by_its_value(source, faulty):
    assert bool(word_compare_faults(source)) == faulty


def _package_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of every ``from cudamagic... import name`` in a file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "cudamagic":
            out += [(node.lineno, node.module, a.name) for a in node.names if a.name != "*"]
    return sorted(out)


def _missing_imports(files: list[Path], root: Path = REPO) -> list[str]:
    missing = []
    for path in files:
        for line, module, name in _package_imports(path):
            try:
                found = importlib.import_module(module)
            except ImportError as exc:
                missing.append(f"{path.relative_to(root)}:{line}: {module} ({exc})")
                continue
            if not hasattr(found, name):
                try:  # a submodule imported by name
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    missing.append(f"{path.relative_to(root)}:{line}: {module}.{name}")
    return missing


def test_the_benchmarks_and_scripts_import_what_the_package_has():
    """A module moved or a name renamed leaves no benchmark or script importing it from where it
    was (benchmarks/type_probe.py imported KernelCache from cudamagic.store.disk, which no longer
    had it, and failed at its start)."""
    files = sorted([*(REPO / "benchmarks").glob("*.py"), *(REPO / "scripts").glob("*.py")])
    assert files
    assert _missing_imports(files) == []


def test_a_stale_import_in_a_benchmark_is_caught(tmp_path):
    stale = tmp_path / "stale.py"
    stale.write_text("def f():\n    from cudamagic.store.disk import KernelCache\n"
                     "from cudamagic.store import KernelCache\nfrom cudamagic.nowhere import x\n")
    assert _missing_imports([stale], tmp_path) == [
        "stale.py:2: cudamagic.store.disk.KernelCache",
        "stale.py:4: cudamagic.nowhere (No module named 'cudamagic.nowhere')"]
