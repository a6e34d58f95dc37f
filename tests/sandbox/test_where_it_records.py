"""A session says which config it runs with and where its audit notebook goes: in the kernel's banner, in an
executed notebook's metadata, on `cellgate exec`'s stderr; and a kernel without a config says what to create."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from conftest import SAMPLE_TOOLS, cellgate
from jupyter_client import KernelManager
from nbclient import NotebookClient

CONFIG = (f'[tools]\nmodules = ["{SAMPLE_TOOLS}"]\n\n[audit]\ndir = "runs"\n\n'
          '[policy.tools.echo]\ndecision = "allow"\n')


@pytest.fixture()
def kernelspec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runsc: object) -> None:
    cellgate("install", "--prefix", str(tmp_path / "prefix"), check=True)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "prefix" / "share" / "jupyter"))
    monkeypatch.delenv("CELLGATE_CONFIG", raising=False)


def kernel_info(km: KernelManager) -> dict:
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        msg_id = kc.kernel_info()
        while True:  # wait_for_ready's own kernel_info requests may still be answered first
            reply = kc.get_shell_msg(timeout=30)
            if reply["parent_header"]["msg_id"] == msg_id:
                return reply["content"]
    finally:
        kc.stop_channels()


def recorded(folder: Path) -> Path:
    (notebook,) = folder.glob("*.ipynb")
    return notebook


def test_banner_and_executed_notebook_name_the_config_and_the_audit_notebook(
        kernelspec: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "cellgate.toml"
    config.write_text(CONFIG)
    monkeypatch.setenv("CELLGATE_CONFIG", str(config))
    km = KernelManager(kernel_name="cellgate")
    km.start_kernel(cwd=str(tmp_path))
    try:
        info = kernel_info(km)
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(tools.echo('recorded'))")])
        # nbclient on the kernel it was given; it shuts the kernel down when done (cleanup_kc)
        NotebookClient(nb, km=km, timeout=120).execute(cleanup_kc=True)
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=False)
    audit = recorded(tmp_path / "runs")
    # The kernel's own banner first (IPython's), then the host's lines.
    assert info["banner"].splitlines()[-2:] == [f"cellgate config: {config}", f"cellgate audit notebook: {audit}"]
    assert "IPython" in info["banner"]
    assert info["language_info"]["cellgate"] == {"audit_notebook": str(audit), "config": str(config)}
    assert nb.cells[0].outputs[0]["text"] == "recorded\n"
    assert nb.metadata.language_info.name == "python"
    assert nb.metadata.language_info.cellgate == {"audit_notebook": str(audit), "config": str(config)}
    nbformat.validate(nb)  # the schema allows the extra key
    assert [c.source for c in nbformat.read(audit, as_version=4).cells] == ["print(tools.echo('recorded'))"]


def test_a_kernel_without_config_says_what_to_create(kernelspec: None, tmp_path: Path) -> None:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    km = KernelManager(kernel_name="cellgate")
    km.start_kernel(cwd=str(folder))
    try:
        info = kernel_info(km)
        kc = km.client()
        kc.start_channels()
        reply = kc.execute_interactive("orders = tools.list_orders('2026-10')", timeout=60)
        kc.stop_channels()
    finally:
        km.shutdown_kernel(now=False)
    audit = recorded(folder / "cellgate-runs")  # the default [audit] dir, in the folder the kernel started in
    assert info["banner"].splitlines()[-3:] == [
        f"cellgate config: none (no cellgate.toml in {folder}, and CELLGATE_CONFIG is not set)",
        f"no tools are configured: create {folder / 'cellgate.toml'} with a [tools] modules list "
        "(see README, Configuration), then start a new kernel",
        f"cellgate audit notebook: {audit}"]
    assert info["language_info"]["cellgate"] == {"audit_notebook": str(audit), "config": None}
    error = reply["content"]
    assert error["status"] == "error" and error["ename"] == "ToolNotFound"  # an AttributeError too
    assert error["evalue"].startswith("no tool named 'list_orders': no tools are configured (no "
                                      "cellgate.toml in the folder the kernel started in")
    assert "create one (see README, Configuration)" in error["evalue"]
    assert str(tmp_path) not in error["evalue"]  # host paths stay out of the sandbox


def test_exec_names_the_config_and_the_audit_notebook_on_stderr(tmp_path: Path, runsc: object) -> None:
    (tmp_path / "cellgate.toml").write_text(CONFIG)
    done = cellgate("exec", "-", stdin="print(tools.echo('hi'))", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hi\n"
    audit = recorded(tmp_path / "runs")
    assert done.stderr.splitlines()[:2] == [f"cellgate config: {tmp_path / 'cellgate.toml'}",
                                            f"cellgate audit notebook: {audit}"]
