"""Jupyter's kernel conformance suite (``jupyter_kernel_test``) against the installed `cellgate` kernelspec.

The samples are the ones the suite's own ``test_ipykernel.py`` uses for the plain ``python3`` kernel: every
one passes through the sandbox and the relay unchanged in meaning (the relay's sanitizer keeps ``<b>`` in
text/html and defuses nothing in ``\\frac{1}{2}``). One kernel serves the whole class (``setUpClass``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jupyter_kernel_test
import pytest
from conftest import SAMPLE_TOOLS, cellgate

IOPUB_WAIT = 60.0


@pytest.fixture(scope="module", autouse=True)
def cellgate_kernelspec(tmp_path_factory: pytest.TempPathFactory, runsc: object) -> Iterator[None]:
    """The kernelspec installed as `cellgate install --prefix` does, found through JUPYTER_PATH, and a config."""
    folder = tmp_path_factory.mktemp("conformance")
    done = cellgate("install", "--prefix", str(folder / "prefix"), check=True)
    assert "installed kernelspec 'cellgate'" in done.stdout
    config = folder / "cellgate.toml"
    config.write_text(f'[tools]\nmodules = ["{SAMPLE_TOOLS}"]\n\n[audit]\ndir = "{folder / "audit"}"\n')
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(folder / "prefix" / "share" / "jupyter"))
        patch.setenv("CELLGATE_CONFIG", str(config))
        yield


class TestCellgateKernelConformance(jupyter_kernel_test.KernelTests):
    kernel_name = "cellgate"
    language_name = "python"
    file_extension = ".py"

    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('test', file=sys.stderr)"
    completion_samples = [{"text": "zi", "matches": {"zip"}}]
    complete_code_samples = ["1", "print('hello, world')", "def f(x):\n  return x*2\n\n\n"]
    incomplete_code_samples = ["print('''hello", "def f(x):\n  x*2"]
    invalid_code_samples = ["import = 7q"]
    code_page_something = "zip?"
    code_generate_error = "raise"
    code_execute_result = [
        {"code": "1+2+3", "result": "6"},
        {"code": "[n*n for n in range(1, 4)]", "result": "[1, 4, 9]"},
    ]
    code_display_data = [
        {"code": "from IPython.display import HTML, display; display(HTML('<b>test</b>'))", "mime": "text/html"},
        {"code": "from IPython.display import Math, display; display(Math('\\frac{1}{2}'))", "mime": "text/latex"},
    ]
    code_history_pattern = "1?2*"
    supported_history_operations = ("tail", "search")  # as for the plain kernel: IPython answers a range of the current session as session 0
    code_inspect_sample = "zip"
    code_clear_output = "from IPython.display import clear_output; clear_output()"

    def execute_helper(self, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The suite's own, with patience for IOPub: it allows 0.1 s between a cell's IOPub messages, and the
        relay forwards a cell's idle status only once the cell is recorded (journal fsync'd, notebook
        rewritten), which on a loaded machine takes longer. Every message it waits for here does come."""
        channel = self.kc.iopub_channel
        get_msg = channel.get_msg
        channel.get_msg = lambda timeout=None: get_msg(timeout=None if timeout is None else max(timeout, IOPUB_WAIT))
        try:
            return super().execute_helper(*args, **kwargs)
        finally:
            channel.get_msg = get_msg

    def test_cellgate_history_magic_lists_this_sessions_cells(self) -> None:
        self.flush_channels()
        self.execute_helper("marker = 'history-marker'")
        reply, outputs = self.execute_helper("%history -l 2")
        assert reply["content"]["status"] == "ok"
        text = "".join(m["content"]["text"] for m in outputs if m["msg_type"] == "stream")
        assert "marker = 'history-marker'" in text

    def test_cellgate_completes_the_tools_module(self) -> None:
        self.flush_channels()
        msg_id = self.kc.complete("tools.ec")
        reply = self.get_non_kernel_info_reply(timeout=jupyter_kernel_test.TIMEOUT)
        assert reply is not None and reply["parent_header"]["msg_id"] == msg_id
        assert "echo" in {m.rsplit(".", 1)[-1] for m in reply["content"]["matches"]}


    def test_cellgate_a_completion_that_does_not_end_is_stopped_and_the_next_cell_runs(self) -> None:
        self.flush_channels()
        reply, _ = self.execute_helper(
            "class Endless:\n    dir_calls = 0\n    def __dir__(self):\n        Endless.dir_calls += 1\n"
            "        while Endless.dir_calls == 1:\n            pass\n        return ['attribute']\n\nendless = Endless()")
        assert reply["content"]["status"] == "ok"
        msg_id = self.kc.complete("endless.")
        # Without the kernel's completion deadline this reply never comes (jedi's first dir() never returns).
        reply = self.get_non_kernel_info_reply(timeout=IOPUB_WAIT)
        assert reply is not None and reply["parent_header"]["msg_id"] == msg_id
        # jedi was stopped at the deadline; IPython's own matchers answered (their dir() call returns).
        assert reply["content"]["status"] == "ok"
        assert "attribute" in {match.rsplit(".", 1)[-1] for match in reply["content"]["matches"]}
        self.flush_channels()
        reply, outputs = self.execute_helper("del endless\nprint('after', Endless.dir_calls)")
        assert reply["content"]["status"] == "ok"
        assert [m["content"]["text"] for m in outputs if m["msg_type"] == "stream"] == ["after 2\n"]
