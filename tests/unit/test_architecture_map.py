"""ARCHITECTURE.md against the tree (issue 30), and the short README's links.

ARCHITECTURE.md maps the host's rooms in a block that starts ``gate/cellgate/gate/`` and the extensions in one
that starts ``extensions/cellgate/extensions/``. In each, an entry is a line indented by two spaces: a room
(``audit/``, a nested one by its path, ``sandbox/local/``) or a top-level module (``config.py``); lines indented
further continue the entry above. Every room named must exist and every room that exists must be named; every
module of a room must be named in its entry, and every top-level module must have an entry of its own.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "ARCHITECTURE.md"
TREES = ("gate/cellgate/gate/", "extensions/cellgate/extensions/")


def entries(text: str, tree: str) -> dict[str, str]:
    """The entries of the map's block for ``tree``: name (``audit/``, ``config.py``) -> its text."""
    block = re.search(rf"^```\n{re.escape(tree)}\n(.*?)^```$", text, re.M | re.S)
    assert block, f"ARCHITECTURE.md has no block starting {tree!r}: add one listing its rooms"
    found: dict[str, str] = {}
    name = None
    for line in block.group(1).splitlines():
        entry = re.match(r"  (\S+)(.*)", line)
        if entry and not line.startswith("   "):
            name = entry.group(1)
            assert name not in found, f"ARCHITECTURE.md names {tree}{name} twice"
            found[name] = entry.group(2).strip()
        elif line.strip():
            assert name, f"ARCHITECTURE.md, block {tree}: a continued line before any entry: {line!r}"
            found[name] += " " + line.strip()
    return found


def rooms_on_disk(tree: str) -> set[str]:
    base = ROOT / tree
    return {
        f"{path.relative_to(base).as_posix()}/"
        for path in base.rglob("*")
        if path.is_dir() and "__pycache__" not in path.parts and any(path.glob("*.py"))
    }


def modules(folder: Path) -> set[str]:
    return {path.stem for path in folder.glob("*.py") if path.stem != "__init__"}


@pytest.mark.parametrize("tree", TREES)
def test_every_room_named_exists_and_every_room_is_named(tree: str) -> None:
    named = {name for name in entries(MAP.read_text(), tree) if name.endswith("/")}
    on_disk = rooms_on_disk(tree)
    assert not named - on_disk, f"ARCHITECTURE.md names rooms of {tree} that do not exist: {sorted(named - on_disk)}"
    assert not on_disk - named, f"rooms of {tree} missing from ARCHITECTURE.md: {sorted(on_disk - named)}"


@pytest.mark.parametrize("tree", TREES)
def test_every_module_of_a_room_is_named_in_its_entry(tree: str) -> None:
    missing = {
        room: unnamed
        for room, text in entries(MAP.read_text(), tree).items()
        if room.endswith("/") and (ROOT / tree / room).is_dir()
        if (unnamed := sorted(name for name in modules(ROOT / tree / room) if not re.search(rf"\b{name}\b", text)))
    }
    assert not missing, f"modules missing from their room's entry in ARCHITECTURE.md ({tree}): {missing}"


def test_every_top_level_module_of_the_gate_has_an_entry() -> None:
    named = {name for name in entries(MAP.read_text(), TREES[0]) if name.endswith(".py")}
    on_disk = {path.name for path in (ROOT / TREES[0]).glob("*.py")}
    assert named == on_disk, (
        f"ARCHITECTURE.md's top-level modules of the gate differ from the tree: named but absent "
        f"{sorted(named - on_disk)}, present but not named {sorted(on_disk - named)}"
    )


def test_the_map_reads_rooms_and_flags_one_missing() -> None:
    """The parser itself: a room left out of a map is found, so the tests above can fail."""
    text = "```\ngate/cellgate/gate/\n  ops/   the command line: cli,\n         doctor\n  config.py  Settings\n```\n"
    found = entries(text, TREES[0])
    assert found == {"ops/": "the command line: cli, doctor", "config.py": "Settings"}
    assert {"audit/", "calls/"} <= rooms_on_disk(TREES[0]) - set(found)


def test_the_map_names_every_entry_point_group_of_pyproject() -> None:
    groups = set(re.findall(r'^\[project\.entry-points\."([^"]+)"\]', (ROOT / "pyproject.toml").read_text(), re.M))
    table = set(re.findall(r"^\| `([a-z_.]+)` \|", MAP.read_text(), re.M))
    assert groups <= table, f"entry-point groups of pyproject.toml not in ARCHITECTURE.md: {sorted(groups - table)}"


@pytest.mark.parametrize("document", ["README.md", "CONTRIBUTING.md", "ARCHITECTURE.md"])
def test_relative_links_of_the_root_documents_exist(document: str) -> None:
    """The site's own links are checked by ``mkdocs build --strict``; these files are outside it."""
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / document).read_text())
    broken = [link for link in links if "://" not in link and not (ROOT / link.split("#")[0]).exists()]
    assert not broken, f"{document} links to files that do not exist: {broken}"
    anchors = [link.partition("#") for link in links if "://" not in link and "#" in link]
    missing = [f"{path}#{anchor}" for path, _, anchor in anchors if anchor not in slugs(ROOT / path)]
    assert not missing, f"{document} links to headings that do not exist: {missing}"


def slugs(page: Path) -> set[str]:
    """The anchors of a page's headings, as Python-Markdown's toc makes them (its default slugify)."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower()) for heading in headings}


def test_links_to_other_sites_are_well_formed() -> None:
    """Only their form: the checks run without internet, so whether such a link answers is not checked."""
    documents = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "ARCHITECTURE.md", *(ROOT / "docs").glob("*.md")]
    bad = [
        (document.name, link)
        for document in documents
        for link in re.findall(r"\]\(([a-z]+://[^)\s]*)\)", document.read_text())
        if not (urlsplit(link).scheme == "https" and urlsplit(link).hostname)
    ]
    assert not bad, f"links to other sites must be https:// URLs with a host: {bad}"


def test_readme_is_short_and_gives_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200, "README.md is over 200 lines: move the detail to a page of docs/"
    assert "```sh\nscripts/setup\n```" in readme and "```sh\nscripts/test\n```" in readme
