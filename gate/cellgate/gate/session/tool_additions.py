"""``Session.add_tools``: tools joining a running session, and how the audit notebook shows that.

Nothing changes until the new tools are described (``calls.program``: the owning program's choice, allowed unless
``[policy.tools.<name>]`` or the tool's own decision says otherwise) and checked with the session's own (names
unique, not reserved, stubs generated). Then the gate knows them (``Dispatcher.tool_added``, the registry), every
later sandbox of the session gets the new ``tools`` package (``Started.tools_files``), the change is journalled
(``tools-added``: the new tools' manifest entries and the manifest's sha256 after it) and shown as a markdown
cell, and a cell replaces the running kernel's ``tools`` package in place (``cellgate.kernel.tool_update``): that
cell is in the notebook as it ran.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cellgate.gate._errors import SessionError
from cellgate.gate.audit.sanitize import untrusted_markdown
from cellgate.gate.calls import program, stubgen
from cellgate.gate.calls.registry import Tool, ToolRegistry, load_module, tools_from_module

if TYPE_CHECKING:
    from cellgate.gate.audit.cells import CellRecord
    from cellgate.gate.audit.events import Run
    from cellgate.gate.session.provisioner import Started

class Ran(Protocol):
    """What ``add`` reads of the install cell's ``CellResult`` (session imports this module, not the reverse)."""

    @property
    def ok(self) -> bool: ...

    @property
    def status(self) -> str: ...

    @property
    def text(self) -> str: ...


EVENT = "tools-added"
WHERE = "add_tools(...)"


def described(items: Iterable[Any]) -> list[Tool]:
    """The tools of ``add_tools``' arguments: paths of tool modules, modules, functions, Tools, registries."""
    paths, tools = program.split(items, WHERE)
    for path in paths:
        found = tools_from_module(load_module(path), source=str(Path(path).resolve()))
        tools += program.program_tools(found, WHERE)
    return tools


def install_cell(files: dict[str, str], names: list[str]) -> str:
    """The cell that puts the new ``tools`` package into the running kernel (every source only through repr)."""
    return (f"# cellgate: tools added to this session ({', '.join(names)}); the `tools` package is replaced in "
            "place\n"
            f"__import__('cellgate.kernel.tool_update', fromlist=['install']).install({files!r});\n")


async def add(started: Started, execute: Callable[[str], Awaitable[Ran]], items: Iterable[Any]) -> None:
    tools = described(items)
    if not tools:
        return
    if started.settings.sandbox.restricted:
        raise SessionError("add_tools is not available in restricted mode ([sandbox] restricted = true): its cells "
                           "may not import the kernel's tools runtime; pass the tools to Session(tools=...) instead")
    registry = started.registry
    current = [tool for name in registry.names() if (tool := registry.get(name)) is not None]
    together = ToolRegistry([*current, *tools])  # a name twice or a reserved one: ConfigError, nothing changed
    together.with_policy_effects(started.settings.policy.effect)
    tools = [tool for tool in (together.get(t.name) for t in tools) if tool is not None]
    files = stubgen.generate(together.manifest(), started.settings.tools.call_style)
    gate = started.service.dispatcher
    for tool in tools:
        gate.tool_added(tool)
        registry.add(tool)
    started.tools_files.clear()
    started.tools_files.update(files)
    recorder = started.recorder
    recorder.event(EVENT, sync=True, tools=[tool.manifest_entry() for tool in tools],
                   sources=sorted({tool.source for tool in tools}), manifest_sha256=registry.manifest_sha256())
    recorder.write_notebook()
    names = [tool.name for tool in tools]
    result = await execute(install_cell(files, names))
    if not result.ok:
        raise SessionError(f"the tools {names} were added to the gate, but the kernel could not load their stubs "
                           f"({result.status}: {result.text.strip()[-300:]}); restart() gives a kernel with them")


# -- how the audit notebook shows it (registered in cellgate.journal_events, as extensions' events are)
def render(run: Run, record: dict[str, Any]) -> CellRecord | None:
    """A markdown cell naming the tools added; ``metadata.cellgate.tools_added`` lists each addition."""
    entries = record.get("tools")
    tools = [entry for entry in entries if isinstance(entry, dict)][:500] if isinstance(entries, list) else []
    names = [str(entry.get("name"))[:200] for entry in tools]
    sha = str(record.get("manifest_sha256"))[:64]
    lines = ["**Tools added to this session** (`add_tools`), each gated like the others:", ""]
    for name, entry in zip(names, tools, strict=True):
        summary = str(entry.get("description") or "").strip().split("\n")[0][:300]
        lines.append(f"- `{name}`" + (f": {summary}" if summary else ""))
    lines += ["", f"The tool manifest's sha256 is now `{sha}`."]
    source, removed = untrusted_markdown("\n".join(lines))
    additions = run.sections.setdefault("tools_added", [])
    if isinstance(additions, list):
        additions.append({"tools": names, "manifest_sha256": sha, "seq": record.get("seq")})
    extra: dict[str, Any] = {"kind": EVENT, "tools": names, "manifest_sha256": sha}
    if removed:
        extra["sanitized"] = removed
    return run.markdown_cell(f"tools-added-{record.get('seq')}", source, str(record.get("time")), extra)
