"""A real browser: JupyterLab on localhost, Debian's Chromium driven by Playwright, runs the
quickstart's ``%%cuda`` cell and reads the widget's name map back.

Needs ``chromium`` (Debian), ``jupyterlab`` and ``playwright`` (PyPI). Skipped with a reason
where they are missing, except where ``CUDAMAGIC_REQUIRE_BROWSER=1`` (CI sets it), where their
absence is a failure. The screenshot lands in ``artifacts/browser/``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import REPO

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = REPO / "artifacts" / "browser"


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is not installed (Debian package chromium)"
    for mod in ("playwright", "jupyterlab"):
        try:
            __import__(mod)
        except ImportError:
            return f"the Python package {mod} is not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    why = _missing()
    if why:
        if os.environ.get("CUDAMAGIC_REQUIRE_BROWSER") == "1":
            pytest.fail(f"the browser test must run here: {why}")
        pytest.skip(why)
    root = tmp_path / "lab"
    root.mkdir()
    shutil.copy(REPO / "notebooks" / "quickstart.ipynb", root)
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "lab-settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "lab-workspaces"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    log = open(tmp_path / "jupyter.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
         f"--ServerApp.token={token}", "--ServerApp.ip=127.0.0.1", "--allow-root",
         f"--ServerApp.root_dir={root}"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                log.close()
                pytest.fail("JupyterLab did not start:\n" + (tmp_path / "jupyter.log").read_text())
            time.sleep(0.5)
    yield base, token, tmp_path
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


def test_widget_lists_the_kernels_in_jupyterlab(lab):
    from playwright.sync_api import sync_playwright

    base, token, tmp_path = lab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"], viewport={"width": 1600, "height": 1000})
        page = browser.new_page()
        try:
            page.goto(f"{base}/lab/tree/quickstart.ipynb?token={token}")
            page.wait_for_selector(".jp-Notebook", timeout=120_000)
            # a fresh JupyterLab may ask which kernel to start; take the default
            try:
                page.wait_for_selector(".jp-Dialog .jp-mod-accept", timeout=10_000).click()
            except Exception:
                pass
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle'], "
                                   ".jp-Toolbar-kernelStatus", timeout=120_000)
            page.locator(".jp-CodeCell .jp-InputArea-editor").first.click()
            for _ in range(3):  # %load_ext, the markdown cell, the %%cuda cell
                page.keyboard.press("Shift+Enter")
                time.sleep(0.5)
            table = page.wait_for_selector(".cudamagic-report .cudamagic-names", timeout=180_000)
            text = table.inner_text()
            report = page.locator(".cudamagic-report").first
            report.scroll_into_view_if_needed()
            report.screenshot(path=str(ARTIFACTS / "widget.png"))
            page.screenshot(path=str(ARTIFACTS / "quickstart.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "quickstart-failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    for expected in ("saxpy_float", "saxpy<float>", "_Z5saxpyIfEvT_PKS0_PS0_i",
                     "ns_scale_float_3", "_ZN2ns5scaleIfLi3EEEvPT_i", "fill", "nvrtc"):
        assert expected in text, (expected, text)
