"""What the kernel advertises works in the sandbox, gated and recorded: the Debug Adapter Protocol stops a cell at
a breakpoint. Subshells are not advertised: the host records and gates one running cell at a time, so it refuses
a cell sent to a subshell, and the session goes on. One kernel, from the installed `cellgate` kernelspec, serves
the module."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import SAMPLE_TOOLS, cellgate
from jupyter_client import BlockingKernelClient, KernelManager

WAIT = 120.0


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory: pytest.TempPathFactory, runsc: object) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("subshell-debug")
    done = cellgate("install", "--prefix", str(folder / "prefix"), check=True)
    assert "installed kernelspec 'cellgate'" in done.stdout
    config = folder / "cellgate.toml"
    config.write_text(f'[tools]\nmodules = ["{SAMPLE_TOOLS}"]\n\n[audit]\ndir = "{folder / "audit"}"\n\n'
                      '[policy.tools.echo]\ndecision = "allow"\n')
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(folder / "prefix" / "share" / "jupyter"))
        patch.setenv("CELLGATE_CONFIG", str(config))
        yield folder / "audit"


def start_kernel() -> Iterator[BlockingKernelClient]:
    km = KernelManager(kernel_name="cellgate")
    km.start_kernel()
    client = km.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=WAIT)
        yield client
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=False)


@pytest.fixture(scope="module")
def kc(audit_dir: Path) -> Iterator[BlockingKernelClient]:
    yield from start_kernel()


def recorded_cells(audit_dir: Path) -> dict[str, Any]:
    """The cells of the module's audit notebooks (one per kernel), by source."""
    return {cell.source: cell for path in sorted(audit_dir.glob("*.ipynb"))
            for cell in nbformat.read(path, as_version=4).cells}


def control(kc: BlockingKernelClient, msg_type: str, content: dict[str, Any]) -> dict[str, Any]:
    msg = kc.session.msg(msg_type, content)
    kc.control_channel.send(msg)
    while True:
        reply = kc.control_channel.get_msg(timeout=WAIT)
        if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            return reply


def execute(kc: BlockingKernelClient, code: str, subshell_id: str | None = None) -> str:
    msg = kc.session.msg("execute_request", {"code": code, "silent": False, "store_history": True,
                                              "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
    if subshell_id is not None:
        msg["header"]["subshell_id"] = subshell_id
    kc.shell_channel.send(msg)
    return str(msg["header"]["msg_id"])


def replies(kc: BlockingKernelClient, msg_ids: set[str]) -> dict[str, dict[str, Any]]:
    got: dict[str, dict[str, Any]] = {}
    while set(got) != msg_ids:
        reply = kc.get_shell_msg(timeout=WAIT)
        if reply["parent_header"].get("msg_id") in msg_ids:
            got[reply["parent_header"]["msg_id"]] = reply
    return got


def test_subshells_are_not_offered_and_a_cell_sent_to_one_is_refused_and_recorded(
        kc: BlockingKernelClient, audit_dir: Path) -> None:
    # A cell on a subshell would run beside the main shell's, outside the host's one-cell-at-a-time record: until
    # the host tracks a running cell per subshell (issue 19), it refuses them, and says so.
    kc.kernel_info()
    info = kc.get_shell_msg(timeout=WAIT)
    while info["msg_type"] != "kernel_info_reply":
        info = kc.get_shell_msg(timeout=WAIT)
    assert "kernel subshells" not in info["content"].get("supported_features", []), info["content"]
    subshell = control(kc, "create_subshell_request", {})["content"]  # the kernel's own business: harmless
    assert subshell["status"] == "ok", subshell
    sub_code = "print(tools.echo('subshell'))"
    after_code = "print(tools.echo('after'))"
    sub = execute(kc, sub_code, subshell_id=subshell["subshell_id"])
    refused = replies(kc, {sub})[sub]["content"]
    assert (refused["status"], refused["ename"]) == ("error", "SubshellUnsupported"), refused
    control(kc, "delete_subshell_request", {"subshell_id": subshell["subshell_id"]})
    after = execute(kc, after_code)
    assert replies(kc, {after})[after]["content"]["status"] == "ok"
    recorded_when_idle(kc, after)

    cells = recorded_cells(audit_dir)
    assert cells[sub_code].metadata.cellgate.status == "rejected"
    assert cells[sub_code].metadata.cellgate.get("calls", []) == []
    assert [c["args"]["text"] for c in cells[after_code].metadata.cellgate.calls] == ["after"]
    assert cells[after_code].metadata.cellgate.status == "ok"


def recorded_when_idle(kc: BlockingKernelClient, msg_id: str) -> None:
    """The relay forwards a cell's idle status only after it recorded the cell: wait for it."""
    while True:
        msg = kc.get_iopub_msg(timeout=WAIT)
        if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "idle"):
            return


def debug(kc: BlockingKernelClient, command: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    """One Debug Adapter Protocol request over the control channel, as JupyterLab's debugger sends it."""
    debug.seq += 1  # type: ignore[attr-defined]
    reply = control(kc, "debug_request", {"type": "request", "seq": debug.seq,  # type: ignore[attr-defined]
                                          "command": command, "arguments": arguments or {}})
    assert reply["content"].get("success"), reply["content"]
    return dict(reply["content"])


debug.seq = 0  # type: ignore[attr-defined]


def debug_event(kc: BlockingKernelClient, event: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no debug_event {event!r} within {WAIT:g} s") from None
        if msg["msg_type"] == "debug_event" and msg["content"].get("event") == event:
            return dict(msg["content"])


def test_the_debugger_stops_a_cell_at_a_breakpoint_and_the_cell_completes_gated_and_recorded(
        kc: BlockingKernelClient, audit_dir: Path) -> None:
    code = "before = tools.echo('before')\nlater = 2\nprint(before, later, tools.echo('after'))"
    debug(kc, "initialize", {"clientID": "test", "clientName": "cellgate-tests", "adapterID": "python",
                             "pathFormat": "path", "linesStartAt1": True, "columnsStartAt1": True,
                             "supportsVariableType": True, "supportsVariablePaging": True,
                             "supportsRunInTerminalRequest": True, "locale": "en"})
    debug(kc, "attach")
    source = debug(kc, "dumpCell", {"code": code})["body"]["sourcePath"]
    placed = debug(kc, "setBreakpoints", {"source": {"path": source}, "breakpoints": [{"line": 2}],
                                          "sourceModified": False})
    assert [b["verified"] for b in placed["body"]["breakpoints"]] == [True]
    debug(kc, "configurationDone")
    cell = execute(kc, code)

    stopped = debug_event(kc, "stopped")["body"]
    frames = debug(kc, "stackTrace", {"threadId": stopped["threadId"]})["body"]["stackFrames"]
    assert (frames[0]["source"]["path"], frames[0]["line"]) == (source, 2)
    scopes = debug(kc, "scopes", {"frameId": frames[0]["id"]})["body"]["scopes"]
    found = {}
    for scope in scopes:
        for variable in debug(kc, "variables", {"variablesReference": scope["variablesReference"]})["body"]["variables"]:
            found[variable["name"]] = variable["value"]
    assert found["before"] == "'before'" and "later" not in found
    debug(kc, "continue", {"threadId": stopped["threadId"]})

    reply = replies(kc, {cell})[cell]
    assert reply["content"]["status"] == "ok", reply["content"]
    debug(kc, "disconnect", {"restart": False, "terminateDebuggee": False})
    recorded_when_idle(kc, cell)
    recorded = recorded_cells(audit_dir)[code]
    assert recorded.metadata.cellgate.status == "ok"
    assert [c["args"]["text"] for c in recorded.metadata.cellgate.calls] == ["before", "after"]
    assert "".join(o.get("text", "") for o in recorded.outputs) == "before 2 after\n"
