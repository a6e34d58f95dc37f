"""What `cellgate verify` compares: a notebook's content under a canonical form.

Opening an audit notebook in a frontend and saving it must not break its
verification, so what a frontend does to a notebook it saves is tolerated:

- numbers written another way (``300.0`` saved as ``300``: JSON numbers are
  compared by value, an integral float equals the integer);
- multi-line strings as a list of lines or one string (nbformat's
  ``split_lines``), key order, indentation, a trailing newline at the end of
  a cell's source;
- notebook metadata other than ``metadata.cellgate`` (``kernelspec``,
  ``language_info`` filled in), cell metadata other than
  ``metadata.cellgate`` (``collapsed``, ``scrolled``, ``jupyter``,
  ``execution``), cell ids, and the
  ``nbformat_minor`` version.

What matters is compared exactly: each cell's type, source and outputs (every
field of every output, its data and metadata), its execution count, and every
field of its ``metadata.cellgate`` and of the notebook's ``metadata.cellgate``
(calls, decisions, digests, the journal position).
"""

from __future__ import annotations

from typing import Any


def canonical_value(value: Any) -> Any:
    """JSON data with numbers compared by value (``300.0`` == ``300``) and dict order ignored by callers."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, int):
        return value
    if isinstance(value, dict):
        return {str(k): canonical_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical_value(v) for v in value]
    return value


def _text(value: Any) -> Any:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return value


def _mime(key: str, value: Any) -> Any:
    # nbformat splits text mimetypes into lists of lines on write; JSON mimetypes stay structured.
    if key.endswith("json") or key.endswith("+json"):
        return canonical_value(value)
    return _text(value)


def canonical_output(output: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in dict(output).items():
        if key == "text":
            out[key] = _text(value)
        elif key == "data" and isinstance(value, dict):
            out[key] = {k: _mime(k, v) for k, v in value.items()}
        elif key == "metadata":
            if value:  # an empty metadata dict and a missing one are the same
                out[key] = canonical_value(value)
        else:
            out[key] = canonical_value(value)
    return out


def canonical_source(source: Any) -> Any:
    text = _text(source)
    return text.rstrip("\n") if isinstance(text, str) else text


def canonical_cell(cell: Any) -> dict[str, Any]:
    """The parts of a cell verification compares: type, source, outputs, execution count, metadata.cellgate."""
    metadata = cell.get("metadata") or {}
    return {
        "cell_type": cell.get("cell_type"),
        "source": canonical_source(cell.get("source", "")),
        "outputs": [canonical_output(o) for o in cell.get("outputs") or []],
        "execution_count": canonical_value(cell.get("execution_count")),
        "cellgate": canonical_value(metadata.get("cellgate")),
    }


def canonical_metadata(nb: Any) -> Any:
    return canonical_value((nb.get("metadata") or {}).get("cellgate"))


__all__ = ["canonical_cell", "canonical_metadata", "canonical_output", "canonical_source", "canonical_value"]
