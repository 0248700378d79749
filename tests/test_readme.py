"""The README a user reads: under 8 KB, every link (README and docs/) resolves to a file and a
heading there (tests/test_guide.py: every docs page is reached from it), and every shell command in it is known here: run where that is safe
(``ipykernel install`` into a scratch prefix), checked for its shape where it is not (a command
that makes a venv or installs is checked against pyproject: the extras it names exist, the wheel
it names is this version's). CI runs the README's test command itself (.ci/run)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

import cudamagic

from .conftest import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, flags=re.S)


def _commands(text: str) -> list[str]:
    """Every command of the README's shell blocks: comments dropped, ``&&`` chains split."""
    out = []
    for block in _shell_blocks(text):
        for line in block.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()  # a comment (not inside a word)
            out += [c.strip() for c in line.split("&&") if c.strip()]
    return out


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_the_readme_stays_under_8_kb():
    assert len(README.read_bytes()) < 8 * 1024


def test_the_set_up_commands_open_the_readme_and_ci_runs_the_test_command():
    text = README.read_text()
    first = _shell_blocks(text)[0].splitlines()
    main_job, tests = first[1], first[3]
    assert text.index("```bash") < text.index("\n## ")  # before anything else
    assert main_job.endswith("scripts/run_notebook.py notebooks/quickstart.ipynb")
    assert tests.endswith(".venv/bin/python -m pytest")
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert tests in ci  # CI runs the README's own test command


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_links_resolve_to_a_file_and_a_heading(path):
    links = LINK.findall(re.sub(r"```.*?```", "", path.read_text(), flags=re.S))
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue  # the web: not checked offline
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        assert file.is_file(), f"{path.name}: {link} names no file"
        if anchor:
            assert anchor in _anchors(file), f"{path.name}: {link}: no such heading"


def _extras() -> set[str]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
               ["optional-dependencies"])


def _check_install(args: list[str]) -> None:
    targets = [a for a in args if not a.startswith("-")]
    assert targets, args
    for target in targets:
        where, _, extras = target.partition("[")
        for extra in filter(None, extras.rstrip("]").split(",")):
            assert extra in _extras(), f"pip install {target}: no extra {extra!r}"
        if where.endswith(".whl"):
            assert where == f"dist/cudamagic-{cudamagic.__version__}-py3-none-any.whl", where
        else:
            assert where == ".", target


def _run_ipykernel_install(args: list[str], tmp_path) -> None:
    """The command as written, with ``--user`` pointed at a scratch prefix."""
    args = [f"--prefix={tmp_path}" if a == "--user" else a for a in args]
    run = subprocess.run([sys.executable, "-m", "ipykernel", *args], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    name = args[args.index("--name") + 1]
    assert (tmp_path / "share" / "jupyter" / "kernels" / name / "kernel.json").is_file()


def test_every_readme_command_is_run_or_checked(tmp_path):
    seen = set()
    for command in _commands(README.read_text()):
        argv = shlex.split(command)
        prog, rest = argv[0].rsplit("/", 1)[-1], argv[1:]
        if prog in ("python", "python3") and rest[:2] == ["-m", "venv"]:
            assert rest[2:] == [".venv"], command
        elif prog == "pip" and rest[0] == "install":
            _check_install(rest[1:])
        elif prog in ("python", "python3") and rest[:2] == ["-m", "ipykernel"]:
            # the kernel runs the python that registered it: the README names that one
            assert argv[0].endswith("/bin/python"), command
            _run_ipykernel_install(rest[2:], tmp_path)
        elif prog == "python" and rest == ["-m", "build"]:
            assert (REPO / "pyproject.toml").read_text().count("[build-system]") == 1
        elif prog == "python" and rest == ["-m", "pytest"]:
            pass  # CI runs it
        elif prog == "python" and rest and rest[0].endswith(".py"):
            assert all((REPO / a).is_file() for a in rest), command  # tests run it for real
        else:
            pytest.fail(f"a README command no test knows: {command!r}")
        seen.add(prog)
    assert {"pip", "python"} <= seen


def _first_cell_blocks() -> list[str]:
    """The README's *A first cell*: its python and cuda blocks, in order."""
    text = README.read_text()
    section = text[text.index("## A first cell"):]
    section = section[:section.index("\n## ", 3)]
    return re.findall(r"```(?:python|cuda)\n(.*?)```", section, flags=re.S)


_FIRST_CELL = r'''
import json, sys
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
blocks = json.loads(sys.argv[1])
for block in blocks[:{upto}]:
    result = ip.run_cell(block)
    if not result.success:
        raise SystemExit(f"README block failed: {{block!r}}: {{result.error_in_exec!r}}")
ns = ip.user_ns
raised = None
if len(sys.argv) > 2:  # code that should raise: the name of what it raised
    try:
        exec(sys.argv[2], ns)
    except Exception as exc:
        raised = type(exc).__name__
print(json.dumps({{"raised": raised, "names": sorted(k for k in ("saxpy_float", "saxpy_double", "fill")
                                 if callable(ns.get(k))),
                  "double": ns["cuda_module"]["saxpy<double>"].symbol,
                  "y": [float(v) for v in ns["y"][:4].get()] if "y" in ns else None}}))
'''


def _run_first_cell(tmp_path, upto: int, then: str | None = None) -> dict:
    import json

    code = _FIRST_CELL.format(upto=upto)
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(_first_cell_blocks()),
                           *([then] if then else [])],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                   filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                               "CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_readmes_first_cell_compiles_and_pushes_what_it_says(tmp_path):
    blocks = _first_cell_blocks()
    assert blocks[0].strip() == "%load_ext cudamagic" and blocks[1].startswith("%%cuda")
    out = _run_first_cell(tmp_path, upto=2)  # the launch needs a GPU: test_..._launches
    assert out["names"] == ["fill", "saxpy_double", "saxpy_float"]
    assert out["double"] == "_Z5saxpyIdEvT_PKS0_PS0_i"
    text = README.read_text()
    assert "`saxpy_float`, `saxpy_double` and `fill` are callables" in text


def _without_a_gpu_launch() -> str:
    """The launch the README's *Without a GPU* names."""
    text = README.read_text()
    section = text[text.index("## Without a GPU"):]
    section = section[:section.index("\n## ", 3)]
    (launch,) = re.findall(r"`(saxpy_float\(.*?\))`", section)
    return launch


def test_the_readmes_first_cell_runs_without_a_gpu_and_a_launch_says_no_device(tmp_path):
    """Every block of *A first cell* runs here, without a GPU (CuPy's arrays wait for one), and
    the launch *Without a GPU* gives raises NoDeviceError, as that section says."""
    if cudamagic.gpu_available():
        pytest.skip("this machine has a GPU: test_the_readmes_first_cell_launches runs it")
    blocks = _first_cell_blocks()
    out = _run_first_cell(tmp_path, upto=len(blocks), then=_without_a_gpu_launch())
    assert out["y"] is None and out["raised"] == "NoDeviceError", out


@pytest.mark.gpu
def test_the_readmes_first_cell_launches(tmp_path):
    out = _run_first_cell(tmp_path, upto=3)
    assert out["y"] == [1.0, 3.0, 5.0, 7.0]  # 2 * arange + 1


def _section(text: str, start: str) -> str:
    """The README from ``start`` to the end of the first shell block after it."""
    part = text[text.index(start):]
    return part[:part.index("```", part.index("```bash") + 3) + 3]


def test_jupyterlab_in_another_environment_is_told_how_to_get_the_highlighting(tmp_path):
    """The README's set-up for a JupyterLab of another environment says the %%cuda highlighting
    goes where JupyterLab runs and how (issue 51, snag 8: the kernel was found, the highlighting
    not, and nothing said why); its link command, run as written by that environment's python,
    puts the extension where that JupyterLab finds it. An editable install is told to link it."""
    text = README.read_text()
    other = _section(text, "**JupyterLab in another environment**")
    assert "highlighting" in other and "restart JupyterLab" in other
    commands = [c for c in _commands(other) if "lab-env" in c]
    pip = next((c for c in commands if "/bin/pip install" in c), None)
    assert pip and "--no-deps" in shlex.split(pip), commands  # no CUDA stack where only the front end runs
    link = next((c for c in commands if c.endswith("scripts/link_labextension.py")), None)
    assert link, f"the README names no link command for JupyterLab's environment: {commands}"
    editable = _section(text, "**To change it**")
    assert "pip install -e" in editable and "scripts/link_labextension.py" in editable

    lab = tmp_path / "lab-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(lab)], check=True,
                   timeout=120)
    argv = shlex.split(link.replace("/path/to/lab-env", str(lab)))
    run = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    placed = lab / "share" / "jupyter" / "labextensions" / "cudamagic-jupyterlab"
    assert placed.resolve() == (REPO / "labextension" / "prebuilt").resolve()
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed here (the test extra "
                                             "has it)")
    listed = subprocess.run([sys.executable, "-m", "jupyterlab.labextensions", "list"],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "JUPYTER_PATH": str(lab / "share" / "jupyter")})
    assert "cudamagic-jupyterlab" in listed.stdout + listed.stderr
