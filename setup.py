"""The one field the build computes: the README the package page shows (the wheel's and the
sdist's long description), with every relative link made absolute at the project's repository
(``[project.urls] Source`` in pyproject.toml), since the page holds none of the files a relative
link names. The README in the checkout and the one installed in ``share/doc/cudamagic`` keep
their relative links (they resolve there). Everything else is in pyproject.toml."""

from __future__ import annotations

import re
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).parent
# a link's target in Markdown: [text](target) and ![alt](target)
_LINK = re.compile(r"(!?)(\[[^\]]*\]\()([^)\s]+)(\))")
_ABSOLUTE = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*:")  # https:, mailto:...
BRANCH = "main"


def source_url(pyproject: str) -> str:
    """``Source`` of pyproject.toml's ``[project.urls]`` (read without a TOML parser: Python
    3.10, which the build supports, has none)."""
    table = re.search(r"^\[project\.urls\]\n(.*?)(?=^\[|\Z)", pyproject, flags=re.M | re.S)
    found = table and re.search(r'^Source\s*=\s*"([^"]+)"', table.group(1), flags=re.M)
    if not found:
        raise SystemExit("pyproject.toml's [project.urls] names no Source: the package page's "
                         "README links are made absolute at it")
    return found.group(1).rstrip("/")


def absolute_links(readme: str, source: str) -> str:
    """``readme`` with each relative link made absolute at the repository ``source``: a page or
    an anchor to its file's view on :data:`BRANCH`, a picture to its raw file (the page shows
    it). A link with a scheme is kept."""
    raw = source.replace("://github.com/", "://raw.githubusercontent.com/", 1) + f"/{BRANCH}/"
    view = f"{source}/blob/{BRANCH}/"

    def absolute(m: re.Match[str]) -> str:
        bang, opening, target, closing = m.groups()
        if _ABSOLUTE.match(target):
            return m.group(0)
        if target.startswith("#"):
            target = "README.md" + target
        return f"{bang}{opening}{raw if bang else view}{target.removeprefix('./')}{closing}"
    return _LINK.sub(absolute, readme)


if __name__ == "__main__":
    setup(long_description=absolute_links((HERE / "README.md").read_text(encoding="utf-8"),
                                          source_url((HERE / "pyproject.toml").read_text())),
          long_description_content_type="text/markdown")
