"""A real JupyterLab server and a real headless Chromium driving it, for browser tests.

The server runs from the test environment as a subprocess on a free loopback
port with a token, its own root, config, data and runtime folders, and a
kernelspec folder holding the ``cellgate`` and plain ``python3`` kernels.
Chromium is Debian's, driven through Debian's chromedriver: nothing is ever
downloaded (no selenium-manager).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from conftest import free_port
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
T = TypeVar("T")


def wait_for(condition: Callable[[], T], seconds: float, what: str, every: float = 0.2,
             show: Callable[[], object] | None = None) -> T:
    """Poll ``condition`` until it returns something truthy; fail naming ``what`` after ``seconds``
    (with ``show()``, or the condition's last value, as what was seen)."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = show() if show else value
            raise AssertionError(f"timed out after {seconds:.0f}s waiting for {what} (last seen: {seen!r})")
        time.sleep(every)


def settled(observe: Callable[[], T], quiet: float, seconds: float, every: float = 0.25) -> T:
    """Poll ``observe`` until its value has not changed for ``quiet`` seconds (within ``seconds``); return it.

    For a negative check ("nothing happens"): it waits no longer than needed to see
    nothing happen for ``quiet`` seconds, and if something does, it reports all of it.
    """
    deadline = time.monotonic() + seconds
    value = observe()
    since = time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() > deadline:
            raise AssertionError(f"still changing after {seconds:.0f}s (last seen: {value!r})")
        time.sleep(every)
        now = observe()
        if now != value:
            value, since = now, time.monotonic()
    return value


@dataclass
class Lab:
    """A running ``jupyter lab`` and the folders it owns."""

    url: str
    token: str
    root: Path
    log: Path
    process: subprocess.Popen[bytes]

    def api(self, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
        """Call the server's REST API with the token (as a test harness, not as the page)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"Authorization": f"token {self.token}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read()
        return json.loads(text) if text else None

    def put_notebook(self, name: str, notebook: dict[str, Any]) -> None:
        self.api("PUT", f"/api/contents/{name}", {"type": "notebook", "format": "json", "content": notebook})

    def kernels(self) -> list[dict[str, Any]]:
        return list(self.api("GET", "/api/kernels"))

    def terminals(self) -> list[str]:
        return [t["name"] for t in self.api("GET", "/api/terminals")]

    def session_kernel(self, notebook: str) -> dict[str, Any] | None:
        """The kernel model of the session the page opened for ``notebook``, once there is one."""
        for session in self.api("GET", "/api/sessions"):
            if session.get("path") == notebook and session.get("kernel"):
                return dict(session["kernel"])
        return None

    def shutdown_kernels(self, seconds: float = 60) -> None:
        """Shut every kernel down through the API (its sandbox with it) and wait until none is left.

        Each look deletes what it finds: a page that opened a notebook just before it was left may have a
        session request still in flight, whose kernel the server lists only after the first look."""
        def none_left() -> bool:
            kernels = self.kernels()
            for kernel in kernels:
                try:
                    self.api("DELETE", f"/api/kernels/{kernel['id']}", timeout=seconds)
                except urllib.error.HTTPError as exc:
                    if exc.code != 404:  # already gone
                        raise
            return not kernels
        wait_for(none_left, seconds, "the server's kernels to shut down", every=0.5)

    def shutdown_terminals(self) -> None:
        for name in self.terminals():
            try:
                self.api("DELETE", f"/api/terminals/{name}")
            except urllib.error.HTTPError as exc:
                if exc.code != 404:  # already gone
                    raise

    def alive(self) -> bool:
        try:
            return self.process.poll() is None and self.api("GET", "/api/status", timeout=2) is not None
        except (OSError, ValueError):
            return False


@contextmanager
def jupyter_lab(base: Path, env: dict[str, str], start_seconds: float = 90) -> Iterator[Lab]:
    """Start ``jupyter lab`` with its folders under ``base``; stop it (kernels first) on exit.

    cellgate's own JupyterLab extension (``labextension/``), when installed, is off in its pages (a test that
    wants it turns it on with ``test_lab_extension.extension_on``): the browser tests see JupyterLab as a
    reviewer without the extension does.
    """
    root = base / "root"
    root.mkdir(exist_ok=True)  # the caller may have put files in it
    token = secrets.token_hex(16)
    log = base / "jupyter-lab.log"
    folders = {name: base / name.lower() for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR",
                                                      "JUPYTER_RUNTIME_DIR", "IPYTHONDIR")}
    for folder in folders.values():
        folder.mkdir()
    command = [
        sys.executable, "-m", "jupyterlab",
        # A port free a moment ago; if another process takes it first, the server tries others (port_retries)
        # and writes the one it listens on to its runtime folder (``server_port``).
        "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={free_port()}",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        "--ServerApp.terminals_enabled=True",
        # Nothing leaves the machine: no news, no update check, no extension index.
        "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ]
    # Terminals run a shell that reads no dotfiles: the user's own may take seconds to start under load.
    (folders["JUPYTER_CONFIG_DIR"] / "jupyter_server_config.json").write_text(json.dumps(
        {"ServerApp": {"terminado_settings": {"shell_command": ["/bin/bash", "--norc", "--noprofile"]}}}))
    (folders["JUPYTER_CONFIG_DIR"] / "labconfig").mkdir()
    (folders["JUPYTER_CONFIG_DIR"] / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"cellgate-jupyterlab": True}}))
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=root, stdout=sink, stderr=subprocess.STDOUT,
                                   env={**os.environ, **{k: str(v) for k, v in folders.items()}, **env},
                                   start_new_session=True)
    try:
        port = wait_for(lambda: server_port(folders["JUPYTER_RUNTIME_DIR"], process.pid) or process.poll() is not None,
                        start_seconds, "jupyter lab to write its server file", show=lambda: log.read_text()[-3000:])
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        raise
    assert process.poll() is None, f"jupyter lab exited with {process.returncode}:\n{log.read_text()[-3000:]}"
    lab = Lab(url=f"http://127.0.0.1:{port}", token=token, root=root, log=log, process=process)
    try:
        wait_for(lambda: lab.alive() or process.poll() is not None, start_seconds, "jupyter lab to answer /api/status")
        assert process.poll() is None, f"jupyter lab exited with {process.returncode}:\n{log.read_text()[-3000:]}"
        yield lab
    finally:
        stop(lab)


def server_port(runtime_dir: Path, pid: int) -> int | None:
    """The port the server with process id ``pid`` listens on, from the file it writes once it listens."""
    try:
        return int(json.loads((runtime_dir / f"jpserver-{pid}.json").read_text())["port"])
    except (OSError, ValueError, KeyError):  # not written yet, or half written
        return None


def stop(lab: Lab, seconds: float = 60) -> None:
    """Kernels and terminals shut down through the API first, so no sandbox outlives the server."""
    try:
        if lab.process.poll() is None:
            lab.shutdown_terminals()
            lab.shutdown_kernels(seconds)
    finally:
        if lab.process.poll() is None:
            lab.process.send_signal(signal.SIGTERM)  # the server's own clean shutdown
            try:
                lab.process.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                os.killpg(lab.process.pid, signal.SIGKILL)
                lab.process.wait(timeout=10)


@contextmanager
def chromium() -> Iterator[WebDriver]:
    """Debian's headless Chromium through Debian's chromedriver, with a throwaway profile."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.is_file():
            raise AssertionError(f"{path} is missing: run scripts/setup (apt-get install chromium chromium-driver)")
    os.environ["SE_OFFLINE"] = "true"  # belt and braces: the explicit driver path already skips selenium-manager
    with tempfile.TemporaryDirectory(prefix="cellgate-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--no-first-run", "--window-size=1400,1000", f"--user-data-dir={profile}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
        driver.set_page_load_timeout(60)
        driver.set_script_timeout(30)
        try:
            yield driver
        finally:
            driver.quit()


def find(driver: WebDriver, css: str) -> list[WebElement]:
    try:
        return driver.find_elements(By.CSS_SELECTOR, css)
    except WebDriverException:
        return []


def open_notebook(driver: WebDriver, lab: Lab, name: str, seconds: float = 120) -> dict[str, Any]:
    """Open ``name`` in JupyterLab as a user would and wait until its kernel is idle; return the kernel model."""
    # ?reset: a fresh workspace, so no tab an earlier test left open is restored (nor its kernel started).
    driver.get(f"{lab.url}/lab/tree/{name}?reset&token={lab.token}")
    wait_for(lambda: find(driver, ".jp-NotebookPanel .jp-Cell"), 60, f"JupyterLab to show the cells of {name}")

    def idle() -> dict[str, Any] | None:
        kernel = lab.session_kernel(name)
        return kernel if kernel and kernel.get("execution_state") == "idle" else None

    return wait_for(idle, seconds, f"the kernel of {name} to be started and idle")


def menu_command(driver: WebDriver, menu: str, command: str) -> None:
    """Click a top menu, then the item of a JupyterLab command, as a user would."""
    item = wait_for(lambda: [e for e in find(driver, ".lm-MenuBar-item") if e.text.strip() == menu], 30,
                    f"the {menu!r} menu")[0]
    item.click()
    entry = wait_for(lambda: find(driver, f'.lm-Menu-item[data-command="{command}"]'), 30,
                     f"the {command!r} menu item")[0]
    entry.click()


def output_texts(driver: WebDriver) -> str:
    return "\n".join(e.text for e in find(driver, ".jp-OutputArea-output"))


def cell_output(driver: WebDriver, index: int) -> str:
    """The text of the outputs of the notebook's cell ``index`` as the page shows them ('' if none yet)."""
    cells = find(driver, ".jp-NotebookPanel .jp-Notebook .jp-Cell")
    if index >= len(cells):
        return ""
    try:
        return "\n".join(e.text for e in cells[index].find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output"))
    except WebDriverException:  # re-rendered under us: the next poll looks again
        return ""


def accept_dialog(driver: WebDriver, title: str) -> None:
    """Wait for JupyterLab's dialog titled ``title`` and press its accept button, as a user would."""
    def dialog() -> list[WebElement]:
        return [d for d in find(driver, ".jp-Dialog") if title in d.text]

    wait_for(dialog, 30, f"the {title!r} dialog", show=lambda: [d.text for d in find(driver, ".jp-Dialog")])
    dialog()[0].find_element(By.CSS_SELECTOR, ".jp-Dialog-button.jp-mod-accept").click()
    wait_for(lambda: not dialog(), 30, f"the {title!r} dialog to close")
