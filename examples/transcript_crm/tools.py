"""A meeting store and a CRM, run on the host: the transcript-to-CRM task.

The transcript is generated deterministically: a two-hour meeting of about
50,000 tokens, so the task's cost is the same on every run.
"""

from __future__ import annotations

import hashlib
import random
import threading

SPEAKERS = ("Ana (Acme)", "Ben (Acme)", "Chloe (Northwind)", "Dev (Northwind)")
WORDS = ("renewal pricing seats rollout security review onboarding timeline budget quarter contract legal "
         "procurement integration pilot feedback roadmap support escalation dashboard export latency region "
         "compliance invoice discount champion stakeholder workshop migration").split()
MINUTES = 120

_lock = threading.Lock()
_attachments: dict[str, list[dict[str, object]]] = {}


def get_transcript(meeting_id: str) -> str:
    """The full transcript of a recorded meeting, one line per utterance with its timestamp.

    Args:
        meeting_id: The meeting, e.g. m-2026-11-acme.
    """
    rng = random.Random(f"transcript:{meeting_id}")
    lines = []
    for second in range(0, MINUTES * 60, 6):
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 26)))
        lines.append(f"[{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}] {rng.choice(SPEAKERS)}: "
                     f"{sentence.capitalize()}.")
    return "\n".join(lines)


def attach_to_record(record_id: str, title: str, document: str) -> dict[str, object]:
    """Attach a document to a CRM record; returns the attachment's id, size and digest.

    Args:
        record_id: The CRM record, e.g. opp-1234.
        title: The attachment's title.
        document: The document's text.
    """
    attachment = {"attachment_id": f"att-{hashlib.sha256(document.encode()).hexdigest()[:10]}",
                  "record_id": record_id, "title": title, "characters": len(document)}
    with _lock:
        _attachments.setdefault(record_id, []).append(attachment)
    return attachment
