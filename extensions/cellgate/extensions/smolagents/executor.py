"""``CellgateExecutor``: smolagents' ``CodeAgent`` runs its code in cellgate's gVisor kernel.

The agent's tools never enter the sandbox as source (smolagents' other remote executors send each tool's code
there): each becomes a host tool of the session, gated and recorded, and the sandbox gets top-level names bound to
the generated stubs (``list_orders = tools.list_orders``), so the code the model writes calls them as smolagents'
prompt says. ``final_answer`` is a host tool too: the answer is the value the host received through the gate,
never text the sandbox printed, and the sandbox-side name raises ``FinalAnswerException`` after the call to end
the code, as smolagents' executors do.
"""

from __future__ import annotations

import keyword
import threading
from collections.abc import Mapping
from typing import Any

from smolagents.local_python_executor import CodeOutput
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.remote_executors import RemotePythonExecutor
from smolagents.utils import AgentError

from cellgate.gate import CellResult, ConfigError, SyncSession, Tool

FINAL_ANSWER = "final_answer"

# smolagents' input types (smolagents.tools.AUTHORIZED_TYPES) as JSON Schema; "any" is no constraint.
_JSON_TYPES = {"string": "string", "boolean": "boolean", "integer": "integer", "number": "number",
               "array": "array", "object": "object", "null": "null"}

INSTALL_INSTEAD = (
    "cellgate's sandbox has no network, so packages cannot be installed into it from a cell. Instead: install the "
    "package into cellgate's own Python environment before the session starts (the sandbox's kernel can import "
    "what is installed there), or, for code that needs the host (the network, credentials, a database), make it a "
    "tool of the agent: it runs on the host, gated by the policy and recorded in the audit notebook"
)


class PackagesUnavailable(ConfigError):
    """``install_packages`` was asked for packages: cellgate installs nothing into the sandbox (``packages``)."""

    def __init__(self, packages: list[str]) -> None:
        super().__init__(f"cannot install {packages!r} into the sandbox: {INSTALL_INSTEAD}")
        self.packages = packages


class CellgateExecutor(RemotePythonExecutor):
    """A smolagents remote executor on a cellgate session: ``CodeAgent(..., executor=CellgateExecutor(...))``.

    Given ``session_options`` (``SyncSession``'s keywords: ``config``, ``notebook``, ...), the executor starts its
    own session when the agent first runs, with the agent's tools, and ``cleanup()`` (``agent.cleanup()``) closes
    it. Given a started ``session``, it adds the agent's tools to it (``add_tools``) and leaves it open: its owner
    closes it.
    """

    def __init__(self, session: SyncSession | None = None, *, logger: AgentLogger | None = None,
                 additional_imports: list[str] | None = None, **session_options: Any) -> None:
        if session is not None and session_options:
            raise TypeError(f"CellgateExecutor: pass either a session or session options, not both "
                            f"(got a session and {sorted(session_options)})")
        super().__init__(list(additional_imports or []), logger or AgentLogger(level=LogLevel.INFO))
        if self.additional_imports:
            self.install_packages(self.additional_imports)
        self._session = session
        self._options = session_options
        self._owned = session is None
        self._waiting: dict[str, Any] = {}  # variables sent before the owned session started
        self._tools: dict[str, Any] = {}  # name -> the smolagents Tool (or managed agent) its host tool calls
        self._lock = threading.Lock()
        self._answers: list[Any] = []  # final_answer values received during the running cell
        self._unbound = False  # the kernel was restarted after a cell: its names are bound again before the next

    @property
    def session(self) -> SyncSession:
        """The session the code runs in (an owned one exists once the agent has run)."""
        if self._session is None:
            raise RuntimeError("CellgateExecutor: the session starts when the agent first runs (agent.run)")
        return self._session

    # ------------------------------------------------------------------ tools
    def send_tools(self, tools: dict[str, Any]) -> None:
        """Called by ``agent.run()`` with the agent's tools and managed agents: each becomes a gated host tool
        (given to the session the first time it is seen), and the sandbox gets a top-level name for it."""
        fresh = []
        for name, tool in tools.items():
            _check_name(name)
            known = name in self._tools
            self._tools[name] = tool  # a later run's object with the same name replaces it: calls look it up
            if not known:
                fresh.append(self._host_tool(name, tool))
        if self._session is None:
            self._session = SyncSession(tools=fresh, **self._options).start()
            if self._waiting:
                super().send_variables(self._waiting)
        elif fresh:
            self._session.add_tools(*fresh)
        self._bind(sorted(tools))

    def send_variables(self, variables: dict[str, Any]) -> None:
        """smolagents' own (JSON into the kernel's namespace); before an owned session starts, kept until it does."""
        if self._session is None:
            self._waiting = dict(variables)
        else:
            super().send_variables(variables)

    def _host_tool(self, name: str, tool: Any) -> Tool:
        def call(**args: Any) -> Any:
            target = self._tools[name]
            if name == FINAL_ANSWER:
                value = target(**args)
                with self._lock:
                    self._answers.append(value)
                return None
            return target(**args)

        return Tool(name=name, description=str(getattr(tool, "description", "") or ""),
                    parameters=input_schema(name, getattr(tool, "inputs", {})), function=call,
                    source=f"smolagents:{type(tool).__name__}")

    def _bind(self, names: list[str]) -> None:
        lines = ["class FinalAnswerException(BaseException):",
                 "    'The host recorded final_answer(): the code ends here (smolagents executors do so).'"]
        for name in names:
            if name == FINAL_ANSWER:
                lines += ["def final_answer(*args, **kwargs):",
                          "    tools.final_answer(*args, **kwargs)",
                          "    raise FinalAnswerException('final_answer was recorded by the host')"]
            else:
                lines.append(f"{name} = tools.{name}")
        result = self.session.execute("\n".join(lines))
        self._unbound = not result.ok
        if not result.ok:
            raise AgentError(f"binding the tools' names in the sandbox failed: {_problem(result)}", self.logger)

    # ------------------------------------------------------------------ running
    def run_code_raise_errors(self, code: str) -> CodeOutput:
        """One cell in the sandbox: its printed text is the logs, its last value (as text) the output; the value
        ``final_answer`` received on the host makes it the final answer; any other error is an ``AgentError``,
        which the agent shows the model."""
        if self._unbound:
            self._bind(sorted(self._tools))
        with self._lock:
            self._answers.clear()
        result = self.session.execute(code)
        # The session restarts the kernel after the sandbox's memory or a message over the size bound: the
        # variables are gone, the bound names among them (docs: the sandbox's bounds).
        self._unbound = result.status == "memory" or "message-size" in result.limits_hit
        with self._lock:
            answers = list(self._answers)
        logs = "".join(o.get("text", "") for o in result.outputs if o.get("output_type") == "stream")
        if answers:
            return CodeOutput(output=answers[0], logs=logs, is_final_answer=True)
        writes = writes_text(result)
        if not result.ok:
            raise AgentError(f"{logs}\nExecuting code yielded an error:\n{_problem(result)}"
                             + (f"\n\n{writes}" if writes else ""), self.logger)
        return CodeOutput(output=_last_value(result), logs=logs + (f"\n{writes}\n" if writes else ""),
                          is_final_answer=False)

    def install_packages(self, additional_imports: list[str]) -> list[str]:
        """cellgate installs nothing into the sandbox: raises ``PackagesUnavailable`` saying what to do instead."""
        if additional_imports:
            raise PackagesUnavailable(list(additional_imports))
        return []

    def cleanup(self) -> None:
        """Close the session if this executor started it (``agent.cleanup()`` calls this)."""
        if self._owned and self._session is not None:
            self._session.close()


def input_schema(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON Schema of a smolagents tool's ``inputs``; a nullable input is optional (smolagents' rule)."""
    properties: dict[str, Any] = {}
    for arg, spec in inputs.items():
        kinds = spec.get("type", "any")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if spec.get("nullable"):
            kinds = [*kinds, "null"]
        unknown = [k for k in kinds if k != "any" and k not in _JSON_TYPES]
        if unknown:
            raise ConfigError(f"tool {name!r}: input {arg!r} has type {unknown[0]!r}, which cannot pass the gate "
                              "(tool arguments are JSON); take a file path or a URL as a string instead")
        prop: dict[str, Any] = {} if "any" in kinds else {"type": [_JSON_TYPES[k] for k in dict.fromkeys(kinds)]}
        if "type" in prop and len(prop["type"]) == 1:
            prop["type"] = prop["type"][0]
        if isinstance(spec.get("enum"), list):
            prop["enum"] = list(spec["enum"])
        if spec.get("description"):
            prop["description"] = str(spec["description"])
        properties[arg] = prop
    required = [arg for arg, spec in inputs.items() if not spec.get("nullable")]
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _check_name(name: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name) or name == "tools":
        raise ConfigError(f"tool name {name!r} cannot be a top-level name in the sandbox; rename the tool "
                          "(letters, digits and _, not a keyword, not 'tools')")


def _problem(result: CellResult) -> str:
    error = result.error or {}
    if error:
        return f"{error.get('ename', 'Error')}: {error.get('evalue', '')}"
    hit = f" (limits hit: {', '.join(result.limits_hit)})" if result.limits_hit else ""
    return f"the cell ended {result.status}{hit}"


# A CodeAgent's code cannot be sent as a retry (smolagents has no such input): what a failed cell's writes mean.
NO_RETRY = ("The next code runs every write again: make only the writes not listed as done above (committed), "
            "and check one of unknown outcome before making it.")


def writes_text(result: CellResult) -> str:
    """What the cell's writes did (``Writes.summary``): for a cell that did not end ok, or one with writes of
    unknown outcome; empty otherwise (the logs say what an ok cell did)."""
    writes = result.writes
    if result.ok and not (writes.answered or writes.unknown):
        return ""
    summary = writes.summary(failed_cell=False)
    return f"{summary}\n{NO_RETRY}" if not result.ok and (writes.done or writes.unknown) else summary


def _last_value(result: CellResult) -> str | None:
    for output in reversed(result.outputs):
        if output.get("output_type") == "execute_result":
            plain = output.get("data", {}).get("text/plain")
            return str(plain) if plain is not None else None
    return None
