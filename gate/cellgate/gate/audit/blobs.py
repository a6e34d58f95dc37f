"""Result blobs: a call's result too large to inline in the journal, stored once by its sha256 beside the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cellgate.gate._json import canonical_json, write_atomically


def blobs_path(notebook: Path) -> Path:
    return notebook.with_name(notebook.stem + ".blobs")


class BlobStore:
    """``<run>.blobs/<sha256>.json``, each the canonical JSON of one result (``cellgate verify`` checks them)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def store(self, digest: str, value: Any) -> str:
        """Write ``value`` under ``digest`` unless it is there; returns its name relative to the run's folder."""
        self.folder.mkdir(exist_ok=True)
        target = self.folder / f"{digest}.json"
        if not target.exists():
            write_atomically(target, canonical_json(value))
        return f"{self.folder.name}/{digest}.json"


__all__ = ["BlobStore", "blobs_path"]
