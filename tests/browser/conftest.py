"""Fixtures for the browser tests: one JupyterLab server for all of them, a fresh Chromium per test."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import cellgate
from selenium.webdriver.remote.webdriver import WebDriver

from browser.lab import Lab, chromium, jupyter_lab


def install_kernelspecs(prefix: Path) -> Path:
    """The ``cellgate`` kernelspec as ``cellgate install --prefix`` does, and ipykernel's ``python3`` beside it."""
    done = cellgate("install", "--prefix", str(prefix), timeout=120)
    assert done.returncode == 0 and "installed kernelspec 'cellgate'" in done.stdout, done.stdout + done.stderr
    done = subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(prefix)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    kernels = prefix / "share" / "jupyter"
    assert {p.name for p in (kernels / "kernels").iterdir()} >= {"cellgate", "python3"}
    return kernels


@pytest.fixture(scope="session")
def lab(runsc: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One real JupyterLab for every browser test: the cellgate and python3 kernels, terminals on,
    the audit notebooks of kernels started in its root outside it. Tests shut down the kernels they start.

    Teardown shuts every kernel down through the API before stopping the server,
    so no gVisor sandbox outlives the run (tests/conftest.py fails a run that leaks one).
    """
    base = tmp_path_factory.mktemp("lab")
    jupyter_path = install_kernelspecs(base / "prefix")
    # The server's root holds the config (no CELLGATE_CONFIG), as a user's folder would: a kernel started in a
    # subfolder reads that folder's own cellgate.toml.
    (base / "root").mkdir()
    (base / "root" / "cellgate.toml").write_text(f'[audit]\ndir = "{base / "audit"}"\n')
    env = {"JUPYTER_PATH": str(jupyter_path)}
    with jupyter_lab(base, env) as server:
        yield server


@pytest.fixture()
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver
