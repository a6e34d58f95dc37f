"""What the kernel advertises works in the sandbox, gated and recorded: the Debug Adapter Protocol stops a cell at
a breakpoint, and a cell on a kernel subshell runs beside a main-shell cell, each with its own calls, budget and
approvals. One kernel, from the installed `cellgate` kernelspec, serves the module."""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import SAMPLE_TOOLS, cellgate
from jupyter_client import BlockingKernelClient, KernelManager

from cellgate.gate.audit.calls_view import CALLS_MIME, is_host_output
from cellgate.gate.session.cells.subshells import MAX_SUBSHELLS
from cellgate.gate.session.relay.notices import DISPLAY_PREFIX

WAIT = 120.0


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory: pytest.TempPathFactory, runsc: object, approvals: Path) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("subshell-debug")
    done = cellgate("install", "--prefix", str(folder / "prefix"), check=True)
    assert "installed kernelspec 'cellgate'" in done.stdout
    config = folder / "cellgate.toml"
    config.write_text(f'[tools]\nmodules = ["{SAMPLE_TOOLS}"]\n\n[audit]\ndir = "{folder / "audit"}"\n\n'
                      '[policy]\napprover = "queue"\n\n'
                      '[policy.tools.echo]\ndecision = "allow"\nmax_calls_per_cell = 2\n\n'
                      '[policy.tools.add]\ndecision = "approve"\n')
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(folder / "prefix" / "share" / "jupyter"))
        patch.setenv("CELLGATE_CONFIG", str(config))
        yield folder / "audit"
    notebooks = sorted((folder / "audit").glob("*.ipynb"))
    assert notebooks
    for notebook in notebooks:  # the kernel is shut down: its record is complete
        verified = cellgate("verify", str(notebook), timeout=120)
        assert verified.returncode == 0, verified.stdout + verified.stderr


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


def iopub_until(kc: BlockingKernelClient, wanted: Any) -> dict[str, Any]:
    """Read IOPub until a message ``wanted(msg)`` holds (the others are skipped)."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no such IOPub message within {WAIT:g} s") from None
        if wanted(msg):
            return dict(msg)


def approval_waited(kc: BlockingKernelClient, cell: str) -> str:
    """The id of the approval request a call of ``cell`` waits for, from the host's notice to the cell's
    frontends (the queued request is pending before its notice is sent)."""
    notice = iopub_until(kc, lambda msg: msg["msg_type"] == "display_data"
                         and msg["parent_header"].get("msg_id") == cell
                         and str(msg["content"].get("transient", {}).get("display_id", "")).startswith(DISPLAY_PREFIX))
    return str(notice["content"]["transient"]["display_id"]).removeprefix(DISPLAY_PREFIX)


def test_a_subshell_cell_runs_beside_a_main_cell_each_with_its_own_calls_budget_and_approvals(
        kc: BlockingKernelClient, audit_dir: Path, approvals: Path) -> None:
    kc.kernel_info()
    info = kc.get_shell_msg(timeout=WAIT)
    while info["msg_type"] != "kernel_info_reply":
        info = kc.get_shell_msg(timeout=WAIT)
    assert "kernel subshells" in info["content"]["supported_features"], info["content"]
    created = control(kc, "create_subshell_request", {})["content"]
    assert created["status"] == "ok", created
    subshell = created["subshell_id"]
    assert subshell in control(kc, "list_subshell_request", {})["content"]["subshell_id"]

    # echo may be called twice per cell; add waits for a person. The main cell blocks on its approval while the
    # subshell's cell runs, spends its own echo budget and asks for an approval of its own.
    main_code = ("one = tools.echo('main-1')\ntwo = tools.add(50, 1)\nthree = tools.echo('main-2')\n"
                 "try:\n    tools.echo('main-3')\nexcept tools.ToolError as e:\n    print(type(e).__name__)\n"
                 "print(one, two, three)")
    sub_code = ("print(tools.echo('sub-1'), tools.echo('sub-2'))\n"
                "try:\n    tools.echo('sub-3')\nexcept tools.ToolError as e:\n    print(type(e).__name__)\n"
                "try:\n    tools.add(60, 1)\nexcept tools.ToolDenied:\n    print('add denied')")
    main = execute(kc, main_code)
    main_request = approval_waited(kc, main)
    sub = execute(kc, sub_code, subshell_id=subshell)
    sub_request = approval_waited(kc, sub)
    asked = [json.loads((approvals / f"{r}.request.json").read_text())["args"] for r in (main_request, sub_request)]
    assert asked == [{"a": 50, "b": 1}, {"a": 60, "b": 1}]  # each cell's own request, both pending

    assert cellgate("approvals", "deny", sub_request, "--reason", "not on the subshell").returncode == 0
    reply = kc.get_shell_msg(timeout=WAIT)  # the main cell still waits for its approval: it cannot reply first
    while reply["msg_type"] != "execute_reply":
        reply = kc.get_shell_msg(timeout=WAIT)
    assert reply["parent_header"]["msg_id"] == sub and reply["content"]["status"] == "ok", reply
    recorded_when_idle(kc, sub)
    assert cellgate("approvals", "approve", main_request).returncode == 0
    assert replies(kc, {main})[main]["content"]["status"] == "ok"
    recorded_when_idle(kc, main)
    control(kc, "delete_subshell_request", {"subshell_id": subshell})
    assert subshell not in control(kc, "list_subshell_request", {})["content"]["subshell_id"]

    (path,) = audit_dir.glob("*.ipynb")
    notebook = [cell for cell in nbformat.read(path, as_version=4).cells if cell.source in (main_code, sub_code)]
    assert [(c.cell_type, c.source) for c in notebook] == [("code", main_code), ("code", sub_code)]  # as started
    main_cell, sub_cell = (c.metadata.cellgate for c in notebook)
    assert "subshell" not in main_cell and sub_cell.subshell == subshell
    assert (main_cell.status, sub_cell.status) == ("ok", "ok")
    made = {name: [(c["tool"], c["args"].get("text", c["args"].get("a")), c["decision"], c.get("ok"))
                   for c in cell.calls] for name, cell in (("main", main_cell), ("sub", sub_cell))}
    assert made == {
        "main": [("echo", "main-1", "allow", True), ("add", 50, "approved", True), ("echo", "main-2", "allow", True),
                 ("echo", "main-3", "deny", False)],
        "sub": [("echo", "sub-1", "allow", True), ("echo", "sub-2", "allow", True), ("echo", "sub-3", "deny", False),
                ("add", 60, "approval-denied", False)]}
    assert main_cell.calls[-1]["rule"] == sub_cell.calls[2]["rule"] == "tools.echo.max_calls_per_cell"
    printed = [[o.get("text") for o in cell.outputs if not is_host_output(o)] for cell in notebook]
    assert printed == [["ToolBudgetExceeded\nmain-1 51 main-2\n"], ["sub-1 sub-2\nToolBudgetExceeded\nadd denied\n"]]
    # each cell's own calls in the table the host wrote under it
    assert [[o["data"][CALLS_MIME]["calls"] for o in cell.outputs if is_host_output(o)] for cell in notebook] == [
        [main_cell.calls], [sub_cell.calls]]


def test_a_cell_on_an_unknown_subshell_is_refused_and_subshells_are_bounded(
        kc: BlockingKernelClient, audit_dir: Path) -> None:
    code = "print(tools.echo('nowhere'))"
    refused = execute(kc, code, subshell_id="not-created-here")
    content = replies(kc, {refused})[refused]["content"]
    assert (content["status"], content["ename"]) == ("error", "UnknownSubshell"), content
    made = [control(kc, "create_subshell_request", {})["content"] for _ in range(MAX_SUBSHELLS + 1)]
    assert [m["status"] for m in made] == ["ok"] * MAX_SUBSHELLS + ["error"]
    assert made[-1]["ename"] == "SubshellLimit" and f"the {MAX_SUBSHELLS} subshells" in made[-1]["evalue"]
    for subshell in made[:-1]:
        control(kc, "delete_subshell_request", {"subshell_id": subshell["subshell_id"]})
    after = execute(kc, "print(tools.echo('after'))")
    assert replies(kc, {after})[after]["content"]["status"] == "ok"
    recorded_when_idle(kc, after)
    cells = recorded_cells(audit_dir)
    refused_cell = cells[code].metadata.cellgate
    assert (refused_cell.status, refused_cell.limits_hit, refused_cell.get("calls", [])) == ("rejected", ["subshell"], [])


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
    msg = iopub_until(kc, lambda msg: msg["msg_type"] == "debug_event" and msg["content"].get("event") == event)
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
