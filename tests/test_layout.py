"""The folders show the layers (issue 48): no module loose beside ``__init__.py`` and
``errors.py``, toolchain/ in its four rooms, every public error class in errors.py, every module
of the package importable (and ``cudamagic.build`` still callable after), a Module pickled by the
code of before the move loading, and docs/architecture.md's tree drawn by the folders."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import tomllib

import cudamagic

from .conftest import REPO

PACKAGE = REPO / "cudamagic"
ROOMS = {"compile", "binary", "device", "tools"}


def _folders(where):
    return {p.name for p in where.iterdir() if (p / "__init__.py").is_file()}


def test_no_module_is_loose_beside_the_public_face_and_the_errors():
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "errors.py"]
    assert sorted(p.name for p in (PACKAGE / "toolchain").glob("*.py")) == ["__init__.py"]
    assert _folders(PACKAGE / "toolchain") == ROOMS


def test_the_folders_are_the_layers_of_the_contract():
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in contracts["contracts"] if c["id"] == "layers")["layers"]
    assert layers[-1] == "errors"
    assert set(layers[:-1]) == _folders(PACKAGE), "a folder the layers contract does not name"
    rooms = next(c for c in contracts["contracts"] if c["id"] == "toolchain-rooms")["layers"]
    assert {r.strip() for layer in rooms for r in layer.split("|")} == ROOMS


def test_no_folder_is_named_like_a_public_name():
    """A ``cudamagic/build/`` folder would make ``cudamagic.build`` a module once any module of
    it is imported (``TypeError: 'module' object is not callable``)."""
    for init in PACKAGE.rglob("__init__.py"):
        assert init.parent.name not in cudamagic.__all__, init


def test_every_public_error_class_is_defined_in_errors():
    for name in cudamagic.__all__:
        obj = getattr(cudamagic, name)
        if isinstance(obj, type) and issubclass(obj, (BaseException, Warning)):
            assert obj.__module__ == "cudamagic.errors", f"{name} is {obj.__module__}'s"


IMPORT_ALL = textwrap.dedent("""
    import importlib, json, pkgutil, sys
    import cudamagic
    names = [i.name for i in pkgutil.walk_packages(cudamagic.__path__, "cudamagic.")
             if not i.name.startswith("cudamagic.headers")]
    for name in names:
        importlib.import_module(name)
    mod = cudamagic.build("extern \\"C\\" __global__ void fill(float* y) { y[0] = 1.f; }\\n",
                          cache=cudamagic.KernelCache(sys.argv[1]), arch="sm_80")
    print(json.dumps({"modules": names, "kernels": sorted(mod.kernels),
                      "build": type(cudamagic.build).__name__}))
""")


def test_every_module_imports_and_build_still_builds_after(tmp_path):
    """Every module of the package imported in a fresh interpreter, then ``cudamagic.build`` on
    a cell (the real NVRTC): no subpackage shadows the public function."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get(
        "PYTHONPATH", "")]), "CUDAMAGIC_CACHE_DIR": str(tmp_path / "default")}
    env.pop("CUDAMAGIC_REMOTE_CACHE", None)
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL, str(tmp_path / "cache")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["kernels"] == ["fill"] and got["build"] == "function"
    files = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
             for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    assert files - {"cudamagic"} == set(got["modules"])


def test_a_module_pickled_before_the_move_loads():
    """tests/fixtures/premove_module.pickle was written by the code of cb9a779, whose Module
    was ``cudamagic.module.Module``: the old names' finder gives it the module it became."""
    data = (REPO / "tests" / "fixtures" / "premove_module.pickle").read_bytes()
    assert b"cudamagic.module" in data
    mod = pickle.loads(data)
    assert isinstance(mod, cudamagic.Module)
    assert sorted(mod.kernels) == ["fill", "saxpy<float>"]
    assert mod.kernels["fill"].name == "fill"
    assert mod.kernels["saxpy<float>"].name == "saxpy<float>"


def test_the_architecture_page_draws_the_folders_with_their_rules():
    page = (REPO / "docs" / "architecture.md").read_text()
    block = page.split("<!-- modules -->\n```\n", 1)[1].split("```", 1)[0]
    heads = [line.split(None, 1) for line in block.splitlines() if line and line[0] != " "]
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in contracts["contracts"] if c["id"] == "layers")["layers"]
    assert [h[0] for h in heads] == layers
    assert all(len(h) == 2 and h[1].strip() for h in heads), "a folder without its rule"
    for room in ROOMS:
        assert f"  ({room}) " in block, f"toolchain/{room}/ has no rule on the page"


def test_the_documented_walk_of_a_hit_is_the_measured_one(tmp_path):
    """docs/architecture.md's list of the modules a hit cell enters, in order, is what
    scripts/walk.py measures now (a hit path that changes must change the doc with it)."""
    import re

    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    written = re.search(r"<!-- walk:hit -->(.*?)<!-- /walk -->", doc, re.S).group(1)
    documented = [m.strip().strip("`") for m in written.split(",")]
    # measured as the doc's was, without a GPU (on a GPU machine: none visible to the child)
    env = {**os.environ, "CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache"),
           "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join((str(REPO), os.environ.get("PYTHONPATH", "")))}
    env.pop("CUDAMAGIC_REMOTE_CACHE", None)
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "walk.py"), "hit"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    walk = json.loads(done.stdout.strip().splitlines()[-1])
    measured = [m.replace("cudamagic.", "", 1) for m in walk["modules"]]
    assert documented == measured
