"""A live kernel's checkpoint as a backend makes and restores it (``SandboxBackend.checkpoint``,
``SandboxRequest.restore``; ``session.live`` is the session's side).

Plain data, importing nothing but the standard library, like ``limits``: the local backend's lowest parts build
on it and run where only the standard library is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Restore:
    """A checkpoint a sandbox starts from instead of a fresh kernel (``SandboxBackend.checkpoint`` made it): its
    image folder, and the key of the sandbox configuration it was made by (``Checkpointed.key``)."""

    image: str
    key: str
    # The id of the checkpoint whose key sealed ``image`` (``session.sealed_image``): the session unseals it into a
    # private folder for the start, so a backend is only ever handed plaintext (None).
    sealed_as: str | None = None


@dataclass(frozen=True)
class Checkpointed:
    """What ``SandboxBackend.checkpoint`` made: the backend's name and the key of the configuration a sandbox must
    have to restore it (limits, image, environment, runtime, the kernel's code): a resume under other settings is
    refused before anything runs."""

    backend: str
    key: str
