"""The kernel's subshells as the host knows them: created through the relay, bounded, forgotten with the kernel.

A frontend asks the kernel for a subshell on control (``create_subshell_request``) and the kernel's reply names
it. The host counts a subshell only from the kernel's reply to a create request the host itself relayed (the
id in it is the kernel's claim, so its shape is checked), refuses a create past ``MAX_SUBSHELLS`` itself (the
sandbox is hostile: every subshell is a queue of cells the host tracks), and forgets a subshell when the kernel
confirms its deletion or the kernel goes away. A cell sent to a subshell the host does not know is refused
(``taps``); a known one gets its own FIFO of cells beside the main shell's (``cells``).
"""

from __future__ import annotations

from typing import Any, Final

MAX_SUBSHELLS: Final = 8  # subshells of one kernel, created or being created
MAX_SUBSHELL_ID: Final = 64  # characters of a subshell id (ipykernel's are uuid4 strings, 36)


def well_formed(subshell_id: Any) -> bool:
    """Whether ``subshell_id`` (a kernel's or a frontend's claim) has the shape of a subshell id."""
    return isinstance(subshell_id, str) and 0 < len(subshell_id) <= MAX_SUBSHELL_ID and subshell_id.isprintable()


class Subshells:
    def __init__(self) -> None:
        self._known: dict[str, None] = {}  # in the order they were created
        self._creating: set[str] = set()  # msg_ids of create requests relayed and not yet answered
        self._deleting: dict[str, str] = {}  # msg_id of a delete request relayed -> the subshell it names

    def knows(self, subshell_id: Any) -> bool:
        return isinstance(subshell_id, str) and subshell_id in self._known

    def may_create(self, msg_id: str) -> bool:
        """A frontend's create request: False when the kernel has (or is making) ``MAX_SUBSHELLS`` already."""
        if len(self._known) + len(self._creating) >= MAX_SUBSHELLS:
            return False
        self._creating.add(msg_id)
        return True

    def created(self, parent_id: Any, content: dict[str, Any]) -> str | None:
        """The kernel's create reply: the subshell it names, if it answers a request the host relayed."""
        if not isinstance(parent_id, str) or parent_id not in self._creating:
            return None
        self._creating.discard(parent_id)
        subshell_id = content.get("subshell_id")
        if content.get("status") != "ok" or not isinstance(subshell_id, str) or not well_formed(subshell_id):
            return None
        self._known[subshell_id] = None
        return subshell_id

    def deleting(self, msg_id: str, subshell_id: Any) -> None:
        """A frontend's delete request, for a subshell the host knows."""
        if isinstance(subshell_id, str) and self.knows(subshell_id) and len(self._deleting) < MAX_SUBSHELLS:
            self._deleting[msg_id] = subshell_id

    def deleted(self, parent_id: Any, content: dict[str, Any]) -> str | None:
        """The kernel's delete reply: the subshell now gone, if it answers a request the host relayed."""
        subshell_id = self._deleting.pop(parent_id, None) if isinstance(parent_id, str) else None
        if subshell_id is None or content.get("status") != "ok":
            return None
        self._known.pop(subshell_id, None)
        return subshell_id

    def forget_all(self) -> None:
        """The kernel is gone, and its subshells with it."""
        self._known.clear()
        self._creating.clear()
        self._deleting.clear()
