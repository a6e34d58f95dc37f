"""What a person or a model reads of the `tools` package: an unknown tool's error, return types, describe(), and
the one word every view uses for a call refused before any rule.

The kernel tier (``isolation = "none"``): the stubs and the gate are the same whatever isolates the kernel."""

from __future__ import annotations

import nbformat

from cellgate.gate.audit import call_summary


def test_an_unknown_tool_raises_tool_not_found_which_is_also_an_attribute_error(box) -> None:
    result = box.execute(
        "try:\n    tools.no_such_tool\nexcept tools.ToolNotFound as e:\n    print(type(e).__name__, e.kind, e.tool)\n"
        "    print(e)\n"
        "print(hasattr(tools, 'no_such_tool'), hasattr(tools.aio, 'no_such_tool'), getattr(tools, '_x', 'none'))")
    assert result.ok, result.text
    found, message, probes = result.stdout.splitlines()
    assert found == "ToolNotFound not_found no_such_tool"
    assert message.startswith("no tool named 'no_such_tool' in this session; tools has: add, big, echo, "), message
    assert probes == "False False none"


def test_help_shows_the_return_type_and_describe_the_args(box) -> None:
    result = box.execute(
        "import pydoc\nprint(pydoc.render_doc(tools.fetch_invoice, renderer=pydoc.plaintext).splitlines()[2])\n"
        "print(tools.describe('add'))")
    assert result.ok, result.text
    lines = result.stdout.splitlines()
    assert lines[0].strip() == "fetch_invoice(invoice_id: str, api_key: str) -> dict[str, typing.Any]", lines[0]
    assert lines[1:] == ["add(a: int, b: int = 1)", "", "Add two integers.", "", "Args:", "    a (int): The first.",
                         "    b (int): The second.", "",
                         "Effect: write (changes the world; a retry answers it from the record and never repeats it)."]


def test_a_call_with_invalid_arguments_is_recorded_as_invalid_not_deny(box) -> None:
    result = box.execute("try:\n    tools.add('two')\nexcept tools.ToolValidationError:\n    print('refused')")
    assert result.stdout == "refused\n"
    (call,) = nbformat.read(box.session.notebook_path, as_version=4).cells[-1].metadata.cellgate.calls
    # The record itself says it (JupyterLab's panel shows the recorded decision), as `cellgate show` words it.
    assert call["decision"] == "invalid" == call_summary.decision(call)
