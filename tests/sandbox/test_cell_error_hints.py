"""What a new user's first errors in a cell say (issue 43, new-user items 6 and 8), in a real gVisor sandbox:
``%pip install`` without ``[packages]`` is one line saying what to configure; a failed connection says that the
sandbox has no network and a loopback of its own."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cellgate.kernel.network_hint import HINT

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def error_output(result: Any) -> dict[str, Any]:
    (error,) = [o for o in result.outputs if o.get("output_type") == "error"]
    return error


def traceback_text(result: Any) -> str:
    return ANSI.sub("", "\n".join(error_output(result)["traceback"]))


@pytest.fixture(scope="module")
def bare(session_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A session whose cellgate.toml has no [packages]."""
    config = tmp_path_factory.mktemp("bare") / "cellgate.toml"
    config.write_text('[policy]\ndefault = "allow"\n')
    return session_factory(config=str(config))


@pytest.fixture()
def host_server() -> Iterator[int]:
    """A server listening on the host's 127.0.0.1, as a user's own development server would."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def test_pip_install_without_packages_is_one_line_saying_what_packages_needs(bare: Any) -> None:
    result = bare.execute("%pip install requests")
    assert result.status == "error"
    error = error_output(result)
    assert error["ename"] == "PackagesNotConfigured" and len(error["traceback"]) == 1, error
    said = error["traceback"][0]
    assert '[packages] allow = ["requests"]' in said and "[policy.tools.pip_install]" in said, said
    assert "pip_magic" not in said and "ToolNotFound" not in said and "\n" not in said, said
    assert bare.execute("print('after')").stdout == "after\n"  # the kernel goes on


def test_a_connection_to_the_host_s_loopback_says_the_sandbox_has_its_own(bare: Any, host_server: int) -> None:
    result = bare.execute(f"import socket\nsocket.create_connection(('127.0.0.1', {host_server}), timeout=5)")
    assert result.error is not None and result.error["ename"] == "ConnectionRefusedError", result.error
    shown = traceback_text(result)
    assert "create_connection" in shown and shown.rstrip().endswith(HINT), shown  # the usual traceback, then the line
    assert shown.count(HINT) == 1


@pytest.mark.parametrize("code, ename", [
    # An opener that ignores the proxy settings: no route, no name (the gate's proxy is the one way out).
    ("import urllib.request\nurllib.request.build_opener(urllib.request.ProxyHandler({})).open("
     "'http://example.com/', timeout=5)", "URLError"),
    ("import socket\nsocket.getaddrinfo('example.com', 443)", "gaierror"),
])
def test_a_wrapped_or_a_lookup_error_says_so_too(bare: Any, code: str, ename: str) -> None:
    result = bare.execute(code)
    assert result.error is not None and result.error["ename"] == ename, result.error
    assert HINT in traceback_text(result)


def test_other_os_errors_and_tool_errors_have_no_network_line(bare: Any, tmp_path: Path) -> None:
    missing = bare.execute("open('/no/such/file')")
    assert missing.error is not None and missing.error["ename"] == "FileNotFoundError"
    assert HINT not in traceback_text(missing) and "/no/such/file" in traceback_text(missing)
    caught = bare.execute("import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9), timeout=5)\n"
                          "except OSError as exc:\n    print(type(exc).__name__, getattr(exc, '__notes__', None))")
    assert caught.stdout == "ConnectionRefusedError None\n"  # a program that handles the error sees it unchanged
