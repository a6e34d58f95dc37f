"""``CellgateSandbox``: a deepagents sandbox backend on a cellgate session, and ``python_tool`` beside it.

deepagents builds its file tools (``ls``, ``read_file``, ``write_file``, ``edit_file``, ``grep``, ``glob``) and
``execute`` on three primitives, which here are the session's: ``execute`` is ``run_command(["sh", "-c", ...])``
(a cell of kind ``command`` in the record, with its exit code), ``upload_files`` and ``download_files`` are
``upload`` and ``download`` (each file recorded by sha256). A shell command cannot reach the gate (the tools'
stubs live in the kernel), so the session's tools are called from Python: ``python_tool(box)`` is a LangChain tool
that runs code as a cell of the kernel, where ``tools.<name>`` is every tool of the session.
"""

from __future__ import annotations

from deepagents.backends.protocol import (
    FILE_NOT_FOUND,
    IS_DIRECTORY,
    PERMISSION_DENIED,
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
)
from deepagents.backends.sandbox import BaseSandbox
from langchain_core.tools import StructuredTool, ToolException
from pydantic import BaseModel, Field, StrictBool

from cellgate.gate import CellResult, SessionError, SyncSession

from .binding import cell_text

PYTHON_TOOL_DESCRIPTION = (
    "Run Python in a stateful, sandboxed IPython kernel (variables persist between calls). The host's tools are "
    "functions of the preloaded `tools` module (help(tools) lists them), each call checked by a policy and "
    "recorded. Print what you need to see: only printed output comes back. When code fails after some of its "
    "writes, the error lists the writes already done: send the fixed code with retry: true so they are answered "
    "from the record instead of made twice."
)


class PythonInput(BaseModel):
    """The python tool's arguments, as the model sees them."""

    code: str = Field(description="The Python code to run.")
    retry: StrictBool = Field(default=False, description=(
        "true: this cell retries the last failed cell: writes it already made are answered from the record, not "
        "repeated; false runs everything again"))


class CellgateSandbox(BaseSandbox):
    """``create_deep_agent(..., backend=CellgateSandbox(box))``: ``box`` a started ``SyncSession``."""

    def __init__(self, session: SyncSession) -> None:
        self.session = session

    @property
    def id(self) -> str:
        return self.session.notebook_path.stem

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        result = self.session.run_command(["sh", "-c", command], timeout=timeout)
        output = result.stdout + result.stderr
        if result.status != "ok":  # timed out, interrupted, ...: the exit code alone would not say so
            output += f"\n[the command ended {result.status}]"
        return ExecuteResponse(output=output, exit_code=result.exit_code)

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        responses = []
        for path, data in files:
            try:
                self.session.upload(path, data)
            except Exception as exc:  # deepagents' contract: each file's failure is data, the batch goes on
                responses.append(FileUploadResponse(path=path, error=_file_error(exc)))
            else:
                responses.append(FileUploadResponse(path=path))
        return responses

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        responses = []
        for path in paths:
            try:
                content = self.session.download(path)
            except Exception as exc:  # as above
                responses.append(FileDownloadResponse(path=path, error=_file_error(exc)))
            else:
                responses.append(FileDownloadResponse(path=path, content=content))
        return responses


def python_tool(session: SyncSession, name: str = "python") -> StructuredTool:
    """A LangChain tool running its ``code`` as one cell of the session's kernel (``retry``: as a retry of the last
    failed cell, ``Session.execute(retry=True)``); a cell that fails is a ``ToolException``, so the agent gets an
    error ``ToolMessage`` (a denied call's ``ToolDenied`` among them) naming the writes it already made."""
    hint = f"call {name} again with retry: true"

    def run(code: str, retry: bool = False) -> str:
        try:
            result = execute(session, code, retry)
        except SessionError as exc:
            if not retry:
                raise
            raise ToolException(f"{name} with retry: true was refused, nothing ran: {exc}") from None
        if not result.ok:
            raise ToolException(cell_text(result, hint))
        return cell_text(result, hint)

    return StructuredTool.from_function(run, name=name, description=PYTHON_TOOL_DESCRIPTION,
                                        args_schema=PythonInput, handle_tool_error=True)


def execute(session: SyncSession, code: str, retry: bool) -> CellResult:
    """``session.execute(code)``, or the cell as a retry of the last failed one."""
    return session.execute(code, retry=retry)


def _file_error(exc: Exception) -> str:
    """deepagents' error words for what the model can fix; any other failure as its message."""
    for kind, word in ((FileNotFoundError, FILE_NOT_FOUND), (IsADirectoryError, IS_DIRECTORY),
                       (PermissionError, PERMISSION_DENIED)):
        if isinstance(exc, kind):
            return word
    return f"{type(exc).__name__}: {exc}"
