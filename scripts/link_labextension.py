"""Put the prebuilt JupyterLab extension (``%%cuda`` cells highlighted as C++) where JupyterLab
finds it, for an editable install: ``pip install -e`` installs the package but none of the
wheel's data files. Links ``<prefix>/share/jupyter/labextensions/cudamagic-jupyterlab`` to this
checkout's ``labextension/prebuilt`` (``--prefix``: this python's environment by default, the
one JupyterLab runs in); restart JupyterLab to load it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME = "cudamagic-jupyterlab"
PREBUILT = Path(__file__).resolve().parent.parent / "labextension" / "prebuilt"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", default=sys.prefix, help="the environment (default: %(default)s)")
    args = parser.parse_args(argv)
    if not (PREBUILT / "package.json").is_file():
        print(f"{PREBUILT} holds no prebuilt extension (scripts/build_labextension.sh makes it)",
              file=sys.stderr)
        return 1
    link = Path(args.prefix) / "share" / "jupyter" / "labextensions" / NAME
    if link.is_symlink() and link.resolve() == PREBUILT:
        print(f"{link} already links {PREBUILT}")
        return 0
    if link.exists() or link.is_symlink():
        print(f"{link} exists (a wheel's install?); remove it first to link this checkout's",
              file=sys.stderr)
        return 1
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(PREBUILT, target_is_directory=True)
    print(f"linked {link} -> {PREBUILT}; restart JupyterLab to load it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
