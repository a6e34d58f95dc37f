"""Reading an audit notebook someone named: the one loader of ``verify``, ``replay``, ``show`` and ``report``.

The file is hostile: a regular file only, read with a cap (``artifacts``), its JSON parsed without letting
deep nesting or bad bytes escape as anything but a ``ConfigError`` that names the file, and it must carry
cellgate's metadata. ``load_notebook`` gives an nbformat node (verify compares it, report renders it);
``notebook_json`` the plain JSON, for ``cellgate show``, which must not pay for importing nbformat.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cellgate.gate._errors import ConfigError
from cellgate.gate.audit.artifacts import MAX_NOTEBOOK_BYTES, journal_name, open_regular, read_capped


def _text(path: Path) -> str:
    return read_capped(open_regular(path, "the notebook"), MAX_NOTEBOOK_BYTES, f"the notebook {path}").decode("utf-8")


def _unreadable(path: Path, problem: object) -> ConfigError:
    return ConfigError(f"{path}: not a readable notebook: {problem}; is it a cellgate audit notebook?")


def _no_cellgate(path: Path) -> ConfigError:
    return ConfigError(f"{path}: has no cellgate metadata; it is not a cellgate audit notebook")


def load_notebook(path: Path) -> Any:
    """An audit notebook the operator named: a regular file, read with a cap, with cellgate metadata."""
    import nbformat  # here: it imports jsonschema, more than all of `cellgate show` (which reads the JSON)

    try:
        # Not validated against nbformat's schema (nbformat.reads only logs what that finds, and compiling the
        # schema is slow): every field is checked where it is read.
        nb = nbformat.convert(nbformat.reader.reads(_text(path)), 4)
    except RecursionError:
        raise _unreadable(path, "its JSON is nested too deeply") from None
    except (ValueError, KeyError, TypeError, AttributeError, nbformat.ValidationError) as exc:  # not JSON, UTF-8, ...
        raise _unreadable(path, str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__) from None
    if not isinstance(nb.metadata.get("cellgate"), dict):
        raise _no_cellgate(path)
    return nb


def notebook_json(path: Path) -> dict[str, Any]:
    """An audit notebook as ``load_notebook`` checks it, as plain JSON (nbformat 4, as cellgate writes them):
    what ``show`` summarises, without importing nbformat."""
    try:
        nb = json.loads(_text(path))
    except RecursionError:
        raise _unreadable(path, "its JSON is nested too deeply") from None
    except ValueError as exc:  # not JSON, not UTF-8
        raise _unreadable(path, exc) from None
    if not isinstance(nb, dict) or nb.get("nbformat") != 4 or not isinstance(nb.get("cells"), list):
        raise _unreadable(path, "not the JSON of an nbformat 4 notebook")
    metadata = nb.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("cellgate"), dict):
        raise _no_cellgate(path)
    return nb


def journal_of(path: Path, nb: Any) -> str:
    """The journal's file name, checked to be a plain ``<name>.journal.jsonl`` beside the notebook."""
    journal = nb.metadata.cellgate.get("journal")
    return journal_name(journal.get("file") if isinstance(journal, dict) else None, path)


__all__ = ["journal_of", "load_notebook", "notebook_json"]
