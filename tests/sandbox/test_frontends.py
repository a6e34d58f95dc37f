"""Any Jupyter client that launches the `cellgate` kernelspec gets the sandbox, gate and record."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from conftest import SAMPLE_TOOLS, cellgate
from jupyter_client import KernelManager
from nbclient import NotebookClient

from cellgate.gate.audit.calls_view import is_host_output


@pytest.fixture()
def kernelspec_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runsc: object) -> Path:
    """The kernelspec installed as `cellgate install --prefix` does, and a cellgate.toml."""
    done = cellgate("install", "--prefix", str(tmp_path / "prefix"), check=True)
    assert "installed kernelspec 'cellgate'" in done.stdout
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "prefix" / "share" / "jupyter"))
    config = tmp_path / "cellgate.toml"
    config.write_text(f'[tools]\nmodules = ["{SAMPLE_TOOLS}"]\n\n[audit]\ndir = "audit"\n\n'
                      '[policy.tools.echo]\ndecision = "allow"\n\n[policy.tools.add]\ndecision = "allow"\n')
    monkeypatch.setenv("CELLGATE_CONFIG", str(config))
    return tmp_path / "audit"


def audit_notebook(folder: Path) -> nbformat.NotebookNode:
    notebooks = sorted(folder.glob("*.ipynb"))
    assert len(notebooks) == 1, sorted(folder.iterdir())
    (path,) = notebooks
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    return nb


def test_jupyter_client_kernel_manager(kernelspec_env: Path) -> None:
    km = KernelManager(kernel_name="cellgate")
    km.start_kernel()
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        outputs: list[str] = []
        reply = kc.execute_interactive(
            "import os\nprint(tools.echo('via jupyter_client'), os.getuid())", timeout=60,
            output_hook=lambda m: outputs.append(m["content"].get("text", "")) if m["msg_type"] == "stream" else None)
        assert reply["content"]["status"] == "ok"
        assert "".join(outputs) == "via jupyter_client 1000\n"
        # input() reaches a frontend that allows stdin, through the relay.
        prompts: list[str] = []

        def answer(msg: dict) -> None:
            prompts.append(msg["content"]["prompt"])
            kc.input("Ada")

        reply = kc.execute_interactive("name = input('name? ')", timeout=60, allow_stdin=True, stdin_hook=answer)
        assert reply["content"]["status"] == "ok" and prompts == ["name? "]
        kc.stop_channels()
    finally:
        km.shutdown_kernel(now=False)
    nb = audit_notebook(kernelspec_env)
    assert nb.metadata.cellgate.sandbox.runtime == "gvisor"
    cell, asked = nb.cells
    assert asked.source == "name = input('name? ')" and asked.metadata.cellgate.status == "ok"
    assert cell.source.startswith("import os")
    assert [c["tool"] for c in cell.metadata.cellgate.calls] == ["echo"]


def test_nbclient_executes_a_notebook(kernelspec_env: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("total = tools.add(40, 2)"),
                nbformat.v4.new_code_cell("print(total, open('/proc/version').read().split()[0])")]
    nb.metadata["kernelspec"] = {"name": "cellgate", "display_name": "cellgate", "language": "python"}
    NotebookClient(nb, kernel_name="cellgate", timeout=120, startup_timeout=60).execute()
    assert nb.cells[1].outputs[0]["text"] == "42 Linux\n"
    recorded = audit_notebook(kernelspec_env)
    sources = [c.source for c in recorded.cells]
    assert sources == ["total = tools.add(40, 2)", "print(total, open('/proc/version').read().split()[0])"]
    assert recorded.cells[0].metadata.cellgate.calls[0]["result"] == 42


def test_cells_a_client_sends_back_to_back_are_each_recorded_with_their_own_output(kernelspec_env: Path) -> None:
    """As JupyterLab's "Run all" does: ten execute_requests queued on shell before any reply. Replies (shell) and
    outputs (IOPub) reach the host on two sockets, either ahead of the other; every cell is recorded all the same.
    Ten cells that only print (quick: the host reads far ahead), then four whose tool calls must be their own."""
    cells = [f"print({n})" for n in range(10)] + [f"print(tools.echo('{n}'))" for n in range(10, 14)]
    km = KernelManager(kernel_name="cellgate")
    km.start_kernel()
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        sent = [kc.execute(code) for code in cells]
        replies: dict[str, str] = {}
        while len(replies) < len(sent):
            msg = kc.get_shell_msg(timeout=60)
            if msg["msg_type"] == "execute_reply":
                replies[msg["parent_header"]["msg_id"]] = msg["content"]["status"]
        assert [replies.get(msg_id) for msg_id in sent] == ["ok"] * len(cells)
        kc.stop_channels()
    finally:
        km.shutdown_kernel(now=False)
    nb = audit_notebook(kernelspec_env)
    kernels = [[o for o in c.outputs if not is_host_output(o)] for c in nb.cells]  # without the host's calls view
    recorded = [(c.source, c.metadata.cellgate.status, "".join(o.get("text", "") for o in outputs),
                 {(o.output_type, o.get("name")) for o in outputs},
                 [(call["tool"], call["result"]) for call in c.metadata.cellgate.get("calls", [])])
                for c, outputs in zip(nb.cells, kernels, strict=True)]
    assert recorded == [(code, "ok", f"{n}\n", {("stream", "stdout")}, [("echo", str(n))] if n >= 10 else [])
                        for n, code in enumerate(cells)]
    (path,) = kernelspec_env.glob("*.ipynb")
    done = cellgate("verify", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
