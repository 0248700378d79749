"""The docs split by reader (issue 51, snag 10): the user's guide (what to type, what it shows,
what to do when it goes wrong) in short pages, and the maintainer's part (design, measurements)
apart and linked. Every page is one or the other; a user's page stays under 8 KiB, names no
test file or package module, and links its design page where it has one; every ``python`` and
``%%cuda`` example of a user's page runs, in order, in a fresh IPython shell (without a GPU a
block may stop at the missing device, as the page says it does, and nothing else)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from .conftest import REPO
from .test_readme import LINK

DOCS = REPO / "docs"

#: the user's guide, as the README's *The user's guide* lists it
USER_PAGES = ("magics", "calling", "api", "cache", "headers", "report", "resolution", "timing",
              "debugging", "annotate", "parity", "dask")
#: the maintainer's part: the design pages (each a user page's how and why), and the rest
MAINTAINER_PAGES = ("architecture", "performance", "testing", "magics-design", "calling-design",
                    "cache-design", "report-design", "timing-design", "debugging-design",
                    "parity-design")
MAX_USER_PAGE = 8 * 1024

#: what a user's page does not name: the tests' files and the package's modules (the
#: maintainer's pages do); scripts/ and benchmarks/ a user runs are fine
_INTERNAL = re.compile(r"(?<![\w/.])(tests/[\w./-]+|cudamagic/[\w/]+\.py|"
                       r"(?:toolchain|store|launch|view|cxx)/\w+\.py)")


def _page(name: str):
    return DOCS / f"{name}.md"


def test_every_docs_page_is_the_users_or_the_maintainers():
    pages = {p.stem for p in DOCS.glob("*.md")}
    assert not set(USER_PAGES) & set(MAINTAINER_PAGES)
    assert pages == set(USER_PAGES) | set(MAINTAINER_PAGES), (
        f"classify each page in tests/test_guide.py: new {sorted(pages - set(USER_PAGES) - set(MAINTAINER_PAGES))}, "
        f"gone {sorted(set(USER_PAGES) | set(MAINTAINER_PAGES) - pages)}")


@pytest.mark.parametrize("name", USER_PAGES)
def test_a_users_page_is_short_names_no_internals_and_links_its_design(name):
    text = _page(name).read_text()
    assert len(text.encode()) < MAX_USER_PAGE, (
        f"docs/{name}.md is {len(text.encode())} bytes: split it by meaning, moving the how and "
        f"why to docs/{name}-design.md")
    internals = sorted(set(_INTERNAL.findall(text)))
    assert not internals, f"docs/{name}.md names internals a user cannot act on: {internals}"
    assert "(for maintainers)" not in text
    if _page(f"{name}-design").is_file():
        assert f"({name}-design.md" in text, f"docs/{name}.md does not link its design page"


@pytest.mark.parametrize("name", [n for n in MAINTAINER_PAGES if n.endswith("-design")])
def test_a_design_page_says_whom_it_is_for_and_links_the_users_page(name):
    text = _page(name).read_text()
    assert text.splitlines()[0].endswith("(for maintainers)"), text.splitlines()[0]
    assert f"({name.removesuffix('-design')}.md)" in text


def test_the_readme_lists_the_users_guide_and_every_page_is_reached_from_it():
    readme = (REPO / "README.md").read_text()
    guide = readme[readme.index("## The user's guide"):readme.index("\n## ", readme.index(
        "## The user's guide") + 3)]
    listed = {link.removeprefix("docs/").removesuffix(".md") for link in LINK.findall(guide)
              if link.startswith("docs/")}
    assert set(USER_PAGES) <= listed, sorted(set(USER_PAGES) - listed)
    reached, todo = set(), [REPO / "README.md"]
    while todo:
        page = todo.pop()
        for link in LINK.findall(re.sub(r"```.*?```", "", page.read_text(), flags=re.S)):
            target = (page.parent / link.partition("#")[0]).resolve()
            if target.suffix == ".md" and target.is_file() and target not in reached:
                reached.add(target)
                todo.append(target)
    missing = sorted(p.name for p in DOCS.glob("*.md") if p.resolve() not in reached)
    assert not missing, f"no link from the README reaches {missing}"


# ---- every example of a user's page runs -----------------------------------------------------

def examples(text: str) -> list[str]:
    """A page's ``python`` and ``cuda`` blocks in order; a ``cuda`` block is a ``%%cuda`` cell."""
    blocks = []
    for kind, body in re.findall(r"^```(python|cuda)\n(.*?)^```", text, flags=re.S | re.M):
        assert kind == "python" or body.startswith("%%cuda"), f"a cuda block that is no cell: {body[:60]!r}"
        blocks.append(body)
    return blocks


_RUN = r'''
import ast, json, sys
from IPython.core.interactiveshell import InteractiveShell
import cudamagic

blocks, told_to_install = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "cudamagic")
gpu = cudamagic.gpu_available()

def assigned(block):
    """The names a block binds (none it may have left unbound is used as bound later)."""
    tree = ast.parse(ip.transform_cell(block))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    names |= {a.asname or a.name.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    return names | {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}

def no_device(err):
    text = f"{type(err).__name__}: {err}"
    return isinstance(err, cudamagic.NoDeviceError) or any(w in text for w in (
        "cudaErrorInsufficientDriver", "cudaErrorNoDevice", "CUDA_ERROR_NO_DEVICE"))

unbound, said = set(), []
for block in blocks:
    result = ip.run_cell(block)
    err = result.error_before_exec or result.error_in_exec
    if err is None:
        said.append("ran")
    elif not gpu and (no_device(err) or isinstance(err, NameError) and err.name in unbound):
        unbound |= assigned(block)
        said.append("stopped at the missing GPU")
    elif isinstance(err, ModuleNotFoundError) and err.name in told_to_install:
        said.append(f"needs {err.name}, which the page says to install")
    else:
        said.append(f"failed: {type(err).__name__}: {err}")
print(json.dumps(said))
'''


def run_examples(text: str, tmp_path) -> list[str]:
    """What became of each example block of a page's ``text``, run in order in one shell."""
    install = sorted({p.replace("-", "_") for p in re.findall(r"pip install ([\w-]+)", text)})
    env = {**os.environ, "CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", _RUN, json.dumps(examples(text)),
                           json.dumps(install)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", [n for n in USER_PAGES if examples(_page(n).read_text())])
def test_every_example_of_a_users_page_runs(name, tmp_path):
    said = run_examples(_page(name).read_text(), tmp_path)
    failed = [f"block {i + 1}: {s}" for i, s in enumerate(said) if s.startswith("failed")]
    assert not failed, f"docs/{name}.md:\n" + "\n".join(failed)
    assert said and said[0] == "ran", said  # each page's first example needs no GPU


def test_each_users_page_has_an_example():
    bare = [n for n in USER_PAGES if not examples(_page(n).read_text())]
    assert not bare, f"user's pages without an example that runs: {bare}"


def test_a_failing_example_is_caught(tmp_path):
    """The runner reports a block that fails for any reason but the missing GPU."""
    said = run_examples("```python\nx = 1\n```\n\n```python\nprint(undefined_name)\n```\n"
                        "```cuda\n%%cuda\n__global__ void k( {}\n```\n", tmp_path)
    assert said[0] == "ran" and said[1].startswith("failed: NameError")
    assert said[2].startswith("failed: CompileError"), said


# ---- the cache page's shell set-up, run as written ------------------------------------------

_TEAM_CELL = r'''
import json, sys
import cudamagic
from cudamagic.store import default_cache
mod = cudamagic.build("template <typename T> __global__ void k(T* x) {}", ["k<float>"])
assert default_cache().remote is not None and default_cache().remote.flush()
print(json.dumps(mod.report.status))
'''


def test_the_team_cache_set_up_as_the_cache_page_writes_it_serves_a_second_machine(tmp_path):
    """docs/cache.md's shell block (a team key made by openssl, the URL and the password file
    exported), run as written with $HOME a scratch folder and the URL a real redis-server's:
    a build on one machine is a remote hit on a second (another cache folder)."""
    from .redis_server import start_server

    text = _page("cache").read_text()
    (block,) = re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)
    url = re.search(r"CUDAMAGIC_REMOTE_CACHE=(\S+)", block).group(1)
    server = start_server(tmp_path / "redis", "--requirepass", "team-pw")
    try:
        home = tmp_path / "home"
        home.mkdir()
        password_file = re.search(r"CUDAMAGIC_REMOTE_PASSWORD_FILE=(\S+)", block).group(1)
        assert "password file must be yours and readable by you only (`chmod 600`)" in " ".join(
            text.split())
        written = home / password_file.removeprefix("~/")
        written.write_text("team-pw\n")
        written.chmod(0o600)  # as the page says
        script = block.replace(url, f"redis://127.0.0.1:{server.port}/0") + "\nenv -0\n"
        run = subprocess.run(["bash", "-e", "-c", script], capture_output=True, timeout=60,
                             env={"HOME": str(home), "PATH": os.environ["PATH"]})
        assert run.returncode == 0, run.stderr.decode()
        exported = dict(v.split("=", 1) for v in run.stdout.decode().split("\0")
                        if v.startswith("CUDAMAGIC_"))
        assert set(exported) == {"CUDAMAGIC_REMOTE_KEY_FILE", "CUDAMAGIC_REMOTE_CACHE",
                                 "CUDAMAGIC_REMOTE_PASSWORD_FILE"}
        assert (home / ".cudamagic-team.key").stat().st_mode & 0o777 == 0o600
        said = []
        for machine in ("alice", "bob"):
            env = {**os.environ, **exported, "HOME": str(home),
                   "CUDAMAGIC_CACHE_DIR": str(tmp_path / machine),
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get(
                       "PYTHONPATH")]))}
            proc = subprocess.run([sys.executable, "-c", _TEAM_CELL], capture_output=True,
                                  text=True, timeout=300, env=env, cwd=tmp_path)
            assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
            said.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        assert said == ["cache miss", "cache hit (remote)"], said
    finally:
        server.stop()


# ---- every magic a user's page names is one, with options it takes --------------------------

_SPAN = re.compile(r"`(%%?[a-z_]+)((?: [^`]*)?)`")


def test_every_magic_a_users_page_names_exists_and_takes_the_options_it_is_shown_with(
        tmp_path, monkeypatch):
    """An inline ``%%cuda --no-pch`` or ``%cuda_cache limit 2GiB`` of a user's page is a magic
    IPython has, and a line written out whole (no ``[...]`` usage, no call) parses with that
    magic's own parser."""
    import shlex

    from IPython.core.interactiveshell import InteractiveShell

    from cudamagic.core.options import parse_magic_line

    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "cache"))
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    faults = []
    for name in USER_PAGES:
        for magic, line in _SPAN.findall(_page(name).read_text()):
            cell = magic.startswith("%%")
            found = (ip.find_cell_magic if cell else ip.find_line_magic)(magic.lstrip("%").rstrip("?"))
            if found is None:
                faults.append(f"docs/{name}.md: {magic} is no magic")
                continue
            line = line.strip()
            if not line or any(c in line for c in "[](.") or re.search(r"\b[A-Z]{2,}\b", line):
                continue  # a usage line or a call: its words are placeholders
            parser = getattr(found, "parser", None)
            try:
                if cell:  # %%cuda's own line parser, as the magic reads its line
                    parse_magic_line(line)
                elif parser is not None:
                    parser.parse_args(shlex.split(line))
            except (SystemExit, Exception) as exc:  # noqa: BLE001 - argparse's own errors
                faults.append(f"docs/{name}.md: {magic} {line}: {exc!r}")
    assert not faults, "\n".join(faults)
