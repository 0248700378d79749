"""The package as a user installs it: the wheel built from this tree holds every module and
``py.typed``, its version is ``cudamagic.__version__``, the CUDA stack comes with ``[cu12]`` or
``[cu13]`` (never both, never unasked), and without a stack the first build says which to
install."""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys

import zipfile
from pathlib import Path

import pytest

import cudamagic

from .conftest import REPO


# what a run or a build leaves in a tree that no build ships (.gitignore's folders)
_LEFT_BY_RUNS = {".venv", "__pycache__", ".pytest_cache", "build", "dist", "artifacts", ".whl",
                 ".import_linter_cache", "node_modules", ".git"}


def _tree_files() -> list[str]:
    """The files a wheel is built from here. An unpacked sdist (``PKG-INFO`` at its root) holds
    only what it ships: all of its files but what runs left (:data:`_LEFT_BY_RUNS`, an
    ``.egg-info``). A checkout: the files git would ship (tracked, and new ones not ignored).
    Any other tree cannot say which of its files are the project's: the tests skip."""
    if (REPO / "PKG-INFO").is_file():
        shipped = (p.relative_to(REPO) for p in REPO.rglob("*") if p.is_file())
        return sorted(f.as_posix() for f in shipped if not any(
            part in _LEFT_BY_RUNS or part.endswith(".egg-info") for part in f.parts))
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.strip()
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"{REPO} is neither a git checkout nor an unpacked sdist, so which of its "
                    f"files a build ships is unknown ({exc})")
    # a copy without its .git inside another work tree (the GPU machine's): git answers for
    # that other tree, which does not hold these files
    if Path(top).resolve() != REPO.resolve():
        pytest.skip(f"{REPO} is no git checkout of its own (git's work tree here is {top}) nor "
                    f"an unpacked sdist, so which of its files a build ships is unknown")
    return [f for f in out if (REPO / f).is_file()]


def _isolation(scratch) -> list[str]:
    """pip's build-isolation flag for a build here. The backend pyproject.toml names, where this
    environment has it at that version, builds without isolation (a machine with no package
    index, such as the GPU machine, builds so); else pip fetches it for an isolated build, and
    where it cannot, the tests skip saying so."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    wanted = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    try:
        if all(version(r.name) in r.specifier for r in map(Requirement, wanted)):
            return ["--no-build-isolation"]
    except PackageNotFoundError:
        pass
    fetched = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                              str(scratch), *wanted], capture_output=True, text=True, timeout=300)
    if fetched.returncode != 0:
        pytest.skip(f"the build backend {wanted} is neither installed here nor to be had from "
                    f"a package index: {fetched.stderr.strip()[-300:]}")
    return []


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel pip builds from a copy of this tree (a build writes into the tree it builds)."""
    src = tmp_path_factory.mktemp("src")
    for f in _tree_files():
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, src / f)
    out = src / "dist"
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                          *_isolation(tmp_path_factory.mktemp("backend")), str(src)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    (path,) = out.glob("cudamagic-*.whl")
    return path


def _metadata(wheel) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(z.read(name))


def test_the_wheel_holds_every_module_and_py_typed(wheel):
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist() if n.startswith("cudamagic/")}
    modules = {f for f in _tree_files() if f.startswith("cudamagic/") and f.endswith(".py")}
    assert modules and modules <= shipped, sorted(modules - shipped)
    assert "cudamagic/py.typed" in shipped
    # the standard headers for device code are package data, read from the install
    headers = {f for f in _tree_files() if f.startswith("cudamagic/headers/")}
    assert "cudamagic/headers/std/cstdint" in headers and headers <= shipped, \
        sorted(headers - shipped)
    for sub in ("store", "toolchain", "cxx", "launch", "view"):
        assert f"cudamagic/{sub}/__init__.py" in shipped


LABEXT = "share/jupyter/labextensions/cudamagic-jupyterlab"


def test_the_wheel_ships_the_prebuilt_jupyterlab_extension(wheel):
    """The extension that highlights %%cuda cells as C++ is installed with the wheel where
    JupyterLab looks for prebuilt extensions, byte for byte the tree's prebuilt files, with the
    entry point its package.json names: no build on the user's machine."""
    import json

    built = REPO / "labextension" / "prebuilt"
    with zipfile.ZipFile(wheel) as z:
        data = {n.split(".data/data/", 1)[1]: n for n in z.namelist() if ".data/data/" in n}
        shipped = {k: z.read(v) for k, v in data.items() if k.startswith(LABEXT + "/")}
    expected = {f"{LABEXT}/{p.relative_to(built)}": p.read_bytes()
                for p in built.rglob("*") if p.is_file()}
    assert expected and shipped == expected, sorted(set(shipped) ^ set(expected))
    meta = json.loads(shipped[f"{LABEXT}/package.json"])
    assert meta["name"] == "cudamagic-jupyterlab"
    assert f"{LABEXT}/{meta['jupyterlab']['_build']['load']}" in shipped
    assert json.loads(shipped[f"{LABEXT}/install.json"])["packageName"] == "cudamagic"


def test_the_version_is_written_once(wheel):
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert _metadata(wheel)["Version"] == cudamagic.__version__


def test_the_cuda_stack_is_an_extra_per_major_version(wheel):
    meta = _metadata(wheel)
    requires = meta.get_all("Requires-Dist")
    always = [r for r in requires if "extra ==" not in r]
    for stack in ("cupy", "cuda-bindings", "cuda-python", "nvidia-"):
        assert not any(r.startswith(stack) for r in always), always  # never unasked
    extras = set(meta.get_all("Provides-Extra"))
    assert {"cu12", "cu13", "dask", "test"} <= extras

    def of(extra: str) -> list[str]:
        return [r.split(";")[0].strip() for r in requires if f'extra == "{extra}"' in r]

    for extra, major, cupy in (("cu12", 12, "cupy-cuda12x"), ("cu13", 13, "cupy-cuda13x")):
        reqs = of(extra)
        assert any(r.startswith(cupy) for r in reqs), reqs
        bindings = next(r for r in reqs if r.startswith("cuda-bindings"))
        assert f"<{major + 1}" in bindings and f">={major}" in bindings, bindings
        assert any(r.startswith("nvidia-cuda-nvrtc") for r in reqs), reqs
        assert any(r.startswith("nvidia-cuda-runtime") for r in reqs), reqs
    assert "cudamagic[cu13]" in of("test")  # the README's set-up command gets a stack
    classifiers = meta.get_all("Classifier")
    assert "Environment :: GPU :: NVIDIA CUDA :: 12" in classifiers
    assert "Environment :: GPU :: NVIDIA CUDA :: 13" in classifiers


NO_STACK = ("import sys\n"
            "sys.modules['cuda.bindings'] = sys.modules['cuda.bindings.nvrtc'] = None\n"
            "import cudamagic\n"
            "try:\n"
            "    cudamagic.build('__global__ void k(int* x) { *x = 1; }', cache=sys.argv[1])\n"
            "except cudamagic.ToolchainError as exc:\n"
            "    print(exc)\n")


def _without_a_stack(tmp_path, path: str) -> str:
    """What the first build says where cuda.bindings cannot be imported, cudamagic taken from
    ``path`` (a checkout, or a folder a wheel was installed into)."""
    out = subprocess.run([sys.executable, "-c", NO_STACK, str(tmp_path / "cache")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             filter(None, [path, os.environ.get("PYTHONPATH")]))})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "NVRTC is not installed" in out.stdout, out.stdout
    assert "cu13" in out.stdout and "cu12" in out.stdout
    return out.stdout


def test_without_a_cuda_stack_a_checkout_s_build_says_how_to_install_it_from_there(tmp_path):
    """The toolchain's error, not the cell's: the advice is the checkout's own editable install
    (cudamagic is on no index: pip install 'cudamagic[cu13]' would find nothing)."""
    said = _without_a_stack(tmp_path, str(REPO))
    assert f"pip install -e '{REPO}[cu13]'" in said or f"pip install -e {REPO}[cu13]" in said
    assert "'cudamagic[cu13]'" not in said


def test_without_a_cuda_stack_a_wheel_s_build_says_how_to_install_it_from_the_wheel(
        wheel, tmp_path):
    target = tmp_path / "site"
    run = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                          str(target), str(wheel)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    said = _without_a_stack(tmp_path, str(target))
    assert f"pip install '{wheel}[cu13]'" in said or f"pip install {wheel}[cu13]" in said, said
    wheel.rename(wheel.with_suffix(".moved"))  # the wheel gone: the extra's own packages
    try:
        said = _without_a_stack(tmp_path, str(target))
    finally:
        wheel.with_suffix(".moved").rename(wheel)
    assert "'cuda-bindings<14,>=13'" in said and "cupy-cuda13x" in said, said


INFO_NO_STACK = ("import sys\n"
                 "sys.modules['cuda.bindings'] = sys.modules['cuda.bindings.nvrtc'] = None\n"
                 "from IPython.core.interactiveshell import InteractiveShell\n"
                 "ip = InteractiveShell.instance()\n"
                 "ip.run_line_magic('load_ext', 'cudamagic')\n"
                 "r = ip.run_cell('%cuda_info')\n"
                 "print('ERROR', repr(r.error_in_exec))\n")


def test_without_a_cuda_stack_cuda_info_reports_the_environment_saying_nvrtc_is_missing(
        tmp_path):
    """``pip install -e .`` without the cu13 extra: %cuda_info raised ToolchainError; it shows
    the environment, its NVRTC line saying NVRTC is not installed and how to install it."""
    out = subprocess.run([sys.executable, "-c", INFO_NO_STACK], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache"),
                              "PYTHONPATH": os.pathsep.join(filter(None, [
                                  str(REPO), os.environ.get("PYTHONPATH")]))})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ERROR None" in out.stdout, out.stdout[-3000:]
    assert "NVRTC: missing: NVRTC is not installed" in out.stdout, out.stdout
    assert "cu13" in out.stdout and "cache: " in out.stdout and "demangler: " in out.stdout


def test_the_wheel_ships_its_licence(wheel):
    meta = _metadata(wheel)
    assert meta["License-Expression"] == "MIT" and meta.get_all("License-File") == ["LICENSE"]
    with zipfile.ZipFile(wheel) as z:
        shipped = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/licenses/LICENSE")))
    assert shipped == (REPO / "LICENSE").read_bytes()
    assert shipped.startswith(b"MIT License") and b"Copyright (c)" in shipped


DOC = "share/doc/cudamagic"


def test_a_wheel_s_reader_reaches_the_docs_the_quickstart_and_the_licence(wheel, tmp_path):
    """Installed, the wheel lays the README out with its pages, pictures, the quickstart and the
    licence, so that every link of the installed README resolves to a file there; and the
    README the metadata carries says where they are."""
    from .test_readme import LINK

    prefix = tmp_path / "env"
    # --ignore-installed: with --prefix alone pip uninstalls the cudamagic of the environment
    # running the tests (the editable install), and every later fresh interpreter lacks it
    run = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                          "--ignore-installed", "--prefix", str(prefix), str(wheel)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = prefix / DOC
    readme = (doc / "README.md").read_text()
    assert readme == (REPO / "README.md").read_text()  # relative links: they resolve here
    links = {link.partition("#")[0] for link in LINK.findall(readme)
             if not re.match(r"[a-z]+://", link)} - {""}
    assert {"LICENSE", "notebooks/quickstart.ipynb", "docs/cache.md", "docs/img/occupancy.png"} \
        <= links
    missing = sorted(link for link in links if not (doc / link).is_file())
    assert not missing, missing
    assert all((doc / "docs" / p.name).is_file() for p in (REPO / "docs").glob("*.md"))
    assert DOC in readme and (doc / "LICENSE").read_bytes() == (REPO / "LICENSE").read_bytes()


def test_an_editable_install_gets_the_jupyterlab_extension_linked(tmp_path):
    """pip install -e installs no data files; the README's scripts/link_labextension.py puts the
    prebuilt extension where JupyterLab finds it, as JupyterLab itself then lists it."""
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed here (the test extra "
                                             "has it; the GPU machine's copy does not)")
    prefix = tmp_path / "env"
    env = {**os.environ, "JUPYTER_PATH": str(prefix / "share" / "jupyter")}
    listed = [sys.executable, "-m", "jupyterlab.labextensions", "list"]

    def lists_it() -> bool:
        out = subprocess.run(listed, capture_output=True, text=True, timeout=120, env=env)
        return "cudamagic-jupyterlab" in out.stdout + out.stderr

    assert not lists_it()
    script = [sys.executable, str(REPO / "scripts" / "link_labextension.py"), "--prefix",
              str(prefix)]
    for _ in range(2):  # a second run finds its own link
        run = subprocess.run(script, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
    link = prefix / "share" / "jupyter" / "labextensions" / "cudamagic-jupyterlab"
    assert link.resolve() == (REPO / "labextension" / "prebuilt").resolve()
    assert lists_it()


def _project_links(text: str) -> list[str]:
    from .test_readme import LINK

    return LINK.findall(text)


def _check_package_page_readme(shown: str, source: str) -> None:
    """What a package page shows of the README: the checkout's text, every link absolute, each
    one into the project naming a file of this tree (and a heading there, for an anchor)."""
    from .test_readme import _anchors

    relative = [link for link in _project_links(shown) if not re.match(r"[a-zA-Z][\w+.-]*:", link)]
    assert not relative, f"relative links left on the package page: {relative}"
    readme = (REPO / "README.md").read_text()
    assert len(_project_links(shown)) == len(_project_links(readme)) > 20
    raw = source.replace("://github.com/", "://raw.githubusercontent.com/") + "/main/"
    for link in _project_links(shown):
        path, _, anchor = link.partition("#")
        for base in (f"{source}/blob/main/", raw):
            if path.startswith(base):
                file = REPO / path.removeprefix(base)
                assert file.is_file(), link
                assert not anchor or anchor in _anchors(file), link
                break
        else:
            assert not path.startswith(source), link
    # nothing but the links differs
    assert _LINKS_OUT.sub("()", shown) == _LINKS_OUT.sub("()", readme)


_LINKS_OUT = re.compile(r"(?<=\])\([^)\s]+\)")


def test_the_package_page_s_readme_links_are_absolute(wheel):
    """A wheel's long description (the sdist's PKG-INFO is made by the same setup.py) (what a package page shows) is the README with
    each relative link made absolute at pyproject's [project.urls] Source, which a reader of
    the page can follow (issue 51, snag 9: 25 links named files the page does not hold)."""
    tomllib = pytest.importorskip("tomllib")
    urls = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]
    meta = _metadata(wheel)
    assert meta["Description-Content-Type"] == "text/markdown"
    assert sorted(meta.get_all("Project-URL")) == sorted(f"{k}, {v}" for k, v in urls.items())
    _check_package_page_readme(meta.get_payload(), urls["Source"])
