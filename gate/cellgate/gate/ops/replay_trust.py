"""What a replay trusts: the operator, never the recording or the folder around it.

A run folder handed to ``cellgate replay`` is hostile input. Its notebook,
journal and blobs are data; a ``cellgate.toml`` beside them is part of the
artifact; paths the notebook names are never imported. So:

- the sandbox settings and policy come from the operator: ``--config``, then
  ``$CELLGATE_CONFIG``, then ``./cellgate.toml`` in the operator's working
  directory, unless that file sits in the replayed notebook's own folder
  (then it is ignored with a note: pass it with ``--config`` to use it);
- ``isolation = "none"`` is refused unless the operator passes
  ``--unsafe-no-sandbox``: the replayed cells are untrusted code;
- ``--live`` tools come from the operator's ``[tools] modules`` and
  ``--tools`` only, and where a live tool's description or schema differs
  from the recorded manifest, replay says how.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from cellgate.gate._errors import ConfigError
from cellgate.gate.calls.registry import Tool, ToolRegistry
from cellgate.gate.config import CONFIG_NAME, Settings, find_config, load_settings

UNSAFE_FLAG = "--unsafe-no-sandbox"
OTHER_IMAGE_FLAG = "--allow-other-image"
SHOWN_PACKAGE_CHANGES = 20


def operator_settings(notebook: Path, config: str | None, unsafe_no_sandbox: bool = False,
                      note: Callable[[str], None] = print) -> tuple[Settings, Path | None]:
    """The operator's settings for replaying ``notebook`` and the file they came from (None: defaults)."""
    cwd = os.getcwd()
    folder = notebook.resolve().parent
    found = find_config(config, cwd)
    if found is not None and not config and not os.environ.get("CELLGATE_CONFIG") and folder in found.parents:
        note(f"ignoring {found}: it sits in the folder of the notebook being replayed, which is part of the "
             f"recording and not trusted; pass --config {found} to use it")
        found = None
    settings = load_settings(found, cwd)
    if settings.sandbox.isolation != "gvisor" and not unsafe_no_sandbox:
        raise ConfigError(f"{found or 'the settings'}: [sandbox] isolation = {settings.sandbox.isolation!r}: replay "
                          "refuses to run a recording's cells outside gVisor (they are untrusted code and would run "
                          f"on this host); use a config with isolation = \"gvisor\", or pass {UNSAFE_FLAG} if you "
                          "really mean to run them unsandboxed")
    if settings.sandbox.isolation != "gvisor":
        note(f"WARNING: {UNSAFE_FLAG}: the recording's cells run on this host WITHOUT gVisor, as you")
    return settings, found


def _packages(image: dict[str, Any]) -> dict[str, str]:
    listed = image.get("python_packages")
    return {str(p.get("name"))[:100]: str(p.get("version"))[:100] for p in listed if isinstance(p, dict)} \
        if isinstance(listed, list) else {}


def _image_name(image: dict[str, Any]) -> str:
    digest = image.get("digest")
    return f"{str(image.get('name', 'host (recorded before images)'))[:100]}" + (
        f" sha256:{str(digest)[:16]}…" if digest else "")


def image_differences(recorded: Any, live: Any) -> list[str]:
    """How the image a run was recorded in (its metadata's ``sandbox.image``: the recording's word, only compared)
    differs from the one its replay runs in; [] when they are the same image."""
    recorded = recorded if isinstance(recorded, dict) else {}
    live = live if isinstance(live, dict) else {}
    if recorded.get("digest") == live.get("digest") and recorded.get("name") == live.get("name"):
        return []
    lines = [f"the run was recorded in the image {_image_name(recorded)}; this replay runs in {_image_name(live)}"]
    was, now = _packages(recorded), _packages(live)
    changes = [f"{name} {was.get(name, '(absent)')} -> {now.get(name, '(absent)')}"
               for name in sorted(set(was) | set(now)) if was.get(name) != now.get(name)]
    if changes:
        shown = changes[:SHOWN_PACKAGE_CHANGES]
        more = f" and {len(changes) - len(shown)} more" if len(changes) > len(shown) else ""
        lines.append(f"Python packages that differ: {'; '.join(shown)}{more}")
    return lines


def check_image(recorded: Any, live: Any, allow_other_image: bool, note: Callable[[str], None]) -> None:
    """Refuse a replay in another image than the recording's (what it imports may differ), unless allowed."""
    differences = image_differences(recorded, live)
    if differences and not allow_other_image:
        name = str(recorded.get("name", "")) if isinstance(recorded, dict) else ""
        hint = f" (`cellgate image build {name}`, [sandbox] image = \"{name}\")" if name and name.isidentifier() else ""
        raise ConfigError(f"{'; '.join(differences)}. Replay in the recorded image{hint}, or pass "
                          f"{OTHER_IMAGE_FLAG} to replay in this one anyway")
    for line in differences:
        note(f"{OTHER_IMAGE_FLAG}: {line}")


def _differences(recorded: dict[str, Any], live: dict[str, Any]) -> list[str]:
    out = []
    if recorded.get("description") != live.get("description"):
        out.append("its description differs")
    want, have = recorded.get("parameters") or {}, live.get("parameters") or {}
    want_props, have_props = want.get("properties") or {}, have.get("properties") or {}
    added = sorted(set(have_props) - set(want_props))
    removed = sorted(set(want_props) - set(have_props))
    changed = sorted(n for n in set(want_props) & set(have_props) if want_props[n] != have_props[n])
    if added:
        out.append(f"parameters added: {', '.join(added)}")
    if removed:
        out.append(f"parameters removed: {', '.join(removed)}")
    for name in changed:
        out.append(f"parameter {name!r}: recorded {want_props[name]}, live {have_props[name]}")
    if sorted(want.get("required") or []) != sorted(have.get("required") or []):
        out.append(f"required: recorded {sorted(want.get('required') or [])}, "
                   f"live {sorted(have.get('required') or [])}")
    rest = {k for k in set(want) | set(have) if k not in ("properties", "required") and want.get(k) != have.get(k)}
    if rest:
        out.append(f"schema keys differ: {', '.join(sorted(rest))}")
    if recorded.get("returns") != live.get("returns"):
        out.append("its result schema differs")
    return out


def live_tools(settings: Settings, tools: Iterable[str | Path], live: set[str],
               recorded_manifest: list[dict[str, Any]], where: Path | None) -> tuple[dict[str, Tool], list[str]]:
    """The operator's real tools named by ``--live``, and how each differs from the recording."""
    if not live:
        return {}, []
    recorded = {e.get("name"): e for e in recorded_manifest if isinstance(e, dict)}
    unknown = sorted(live - set(recorded))
    if unknown:
        raise ConfigError(f"--live {', '.join(unknown)}: the recording has no such tool "
                          f"(recorded tools: {', '.join(sorted(map(str, recorded))) or 'none'})")
    registry = ToolRegistry.from_paths(settings.tool_paths(), granted=list(tools))
    missing = sorted(n for n in live if registry.get(n) is None)
    if missing:
        origin = f"[tools] modules of {where}" if where else "no config file"
        raise ConfigError(f"--live {', '.join(missing)}: not defined by the operator's tools ({origin}; --tools "
                          f"{' '.join(map(str, tools)) or 'none'}); pass the module that defines "
                          f"{'it' if len(missing) == 1 else 'them'} with --tools. Paths the recording names are "
                          "never imported")
    real = {name: tool for name in live if (tool := registry.get(name)) is not None}
    notes = []
    for name in sorted(real):
        diff = _differences(recorded[name], real[name].manifest_entry())
        if diff:
            notes.append(f"live tool {name!r} differs from the recorded one: {'; '.join(diff)}")
    return real, notes


__all__ = ["CONFIG_NAME", "UNSAFE_FLAG", "live_tools", "operator_settings"]
