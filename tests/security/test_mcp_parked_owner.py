"""A paused session of `cellgate mcp serve` stays its owner's (issue 42, finding 6).

`parked.json` maps each paused session's handle to its checkpoint and its owner. Whoever can write the state
folder but does not hold the host key tries to hand alice's session to bob: by editing the owner (or any other
field), by swapping two checkpoint folders, by planting a link, a FIFO, a folder, a hard link or an oversize file
at `parked.json` or `parked.lock`. Each is refused with an error naming the file and what to do, nothing hangs,
and a resume over MCP records the principal that resumed it. The first tests drive `Parking` (the file's one
reader and writer) directly; the last drives the real server, restarted, with the real sandbox.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import secrets
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import CELLGATE, free_port, serve_on_a_free_port
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from cellgate.extensions.mcp.auth import Principal
from cellgate.extensions.mcp.parked import MAX_BYTES, Owner, Parked, Parking
from cellgate.gate import ConfigError
from cellgate.gate.audit.journal import read_journal

ALICE = Principal("alice", "static-token")
BOB = Principal("bob", "static-token")


def entry(owner: Principal | None = ALICE) -> Parked:
    return Parked(checkpoint=secrets.token_hex(16), manifest=secrets.token_hex(32), used=1.5e9, calls=2,
                  owner=None if owner is None else Owner(name=owner.name, issuer=owner.issuer))


def handle() -> str:
    return secrets.token_urlsafe(16)


def parked_with_alices(folder: Path) -> tuple[Parking, str]:
    parking = Parking(folder)
    mine = handle()
    parking.park(mine, entry())
    parking.park(handle(), entry(BOB))
    return parking, mine


def refused(what: Callable[[], object], *says: str) -> str:
    with pytest.raises(ConfigError) as caught:
        what()
    message = str(caught.value)
    for text in ("remove it", *says):
        assert text in message, message
    return message


def edit(file: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(file.read_text())
    change(data)
    file.write_text(json.dumps(data))


def test_an_edited_owner_hands_no_session_to_another_principal(tmp_path: Path) -> None:
    parking, alices = parked_with_alices(tmp_path / "state")
    edit(parking.file, lambda d: d["sessions"][alices].update(owner={"name": "bob", "issuer": "static-token"}))
    refused(lambda: parking.take(alices, BOB), str(parking.file), "not signed by this host's key")
    refused(lambda: parking.take(alices, ALICE), str(parking.file))
    refused(lambda: Parking(tmp_path / "state"), str(parking.file))  # a server started on it refuses to start


EDITS: dict[str, Callable[[dict[str, Any], str], None]] = {
    "owner's issuer": lambda d, h: d["sessions"][h]["owner"].update(issuer="https://elsewhere"),
    "no owner": lambda d, h: d["sessions"][h].update(owner=None),
    "checkpoint": lambda d, h: d["sessions"][h].update(checkpoint=secrets.token_hex(16)),
    "manifest": lambda d, h: d["sessions"][h].update(manifest=secrets.token_hex(32)),
    "used": lambda d, h: d["sessions"][h].update(used=d["sessions"][h]["used"] + 3600),
    "calls": lambda d, h: d["sessions"][h].update(calls=0),
    "handle": lambda d, h: d["sessions"].update({handle(): d["sessions"].pop(h)}),
    "an entry dropped": lambda d, h: d["sessions"].pop(next(k for k in d["sessions"] if k != h)),
    "an entry copied": lambda d, h: d["sessions"].update({handle(): d["sessions"][h]}),
    "no mac": lambda d, h: d.pop("mac"),
    "format 1": lambda d, h: d.update(format=1),
}


@pytest.mark.parametrize("change", EDITS, ids=list(EDITS))
def test_every_field_of_every_entry_is_under_the_mac(tmp_path: Path, change: str) -> None:
    parking, alices = parked_with_alices(tmp_path / "state")
    edit(parking.file, lambda d: EDITS[change](d, alices))
    refused(lambda: parking.count(ALICE), str(parking.file))


def test_a_file_signed_with_another_hosts_key_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = tmp_path / "other-host"
    theirs.mkdir(mode=0o700)
    with monkeypatch.context() as patch:
        patch.setenv("CELLGATE_HOST_KEY", str(theirs / "host.key"))
        parking, _ = parked_with_alices(tmp_path / "state")
    refused(lambda: parking.count(ALICE), "not signed by this host's key")


def test_an_untouched_file_is_read_back(tmp_path: Path) -> None:
    parking, alices = parked_with_alices(tmp_path / "state")
    assert parking.take(alices, BOB) is None  # bob is told what an unknown handle gets
    assert Parking(tmp_path / "state").take(alices, ALICE) is not None
    assert parking.count(ALICE) == 0 and parking.count(BOB) == 1


def bounded(what: Callable[[], object], release: Callable[[], None]) -> object:
    """``what()`` in a thread, given 30 s; a hang fails the test (``release`` then frees the thread)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(what)
        try:
            return future.exception(timeout=30)
        except concurrent.futures.TimeoutError:
            release()
            pytest.fail("the server's read of its state folder hung on what was planted there")


def plant_fifo(path: Path) -> Callable[[], None]:
    os.mkfifo(path, 0o600)

    def release() -> None:  # a writer lets a blocked open go on
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"{}")
        os.close(fd)
    return release


PLANTED = [(name, planted) for name in ("parked.json", "parked.lock")
           for planted in ("symlink", "fifo", "folder", "hard link", "oversize")
           if (name, planted) != ("parked.lock", "oversize")]  # the lock's content is never read: any size will do


@pytest.mark.parametrize(("name", "planted"), PLANTED, ids=[f"{n}-{p}" for n, p in PLANTED])
def test_what_is_planted_in_the_state_folder_is_refused_and_nothing_outside_changes(
        tmp_path: Path, name: str, planted: str) -> None:
    state = tmp_path / "state"
    Parking(state)
    valid, _ = parked_with_alices(tmp_path / "elsewhere")  # a file that verifies: only the guard refuses it
    target = valid.folder / name
    if name == "parked.lock" and planted != "fifo":
        target = tmp_path / "host-file"
        target.write_text("the host's own\n")
        target.chmod(0o600)
    before = target.read_bytes(), os.stat(target).st_mode if target.exists() else None
    place = state / name
    place.unlink(missing_ok=True)
    release: Callable[[], None] = lambda: None  # noqa: E731
    if planted == "symlink":
        place.symlink_to(target)
    elif planted == "fifo":
        release = plant_fifo(place)
    elif planted == "folder":
        place.mkdir()
    elif planted == "hard link":
        os.link(target, place)
    else:  # a file that verifies, padded (JSON's whitespace) past what the server reads
        place.write_bytes(target.read_bytes() + b" " * MAX_BYTES)
    failure = bounded(lambda: Parking(state), release)
    assert isinstance(failure, ConfigError), failure
    assert str(place) in str(failure) and "remove it" in str(failure), failure
    assert (target.read_bytes(), os.stat(target).st_mode) == before


# ------------------------------------------------------------------------------------- the real server, restarted
class Server:
    """`cellgate mcp serve --transport http` with static tokens for alice and bob."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.tokens = {name: secrets.token_urlsafe(32) for name in ("alice", "bob")}
        (folder / "tokens").write_text("".join(f"{n} {t}\n" for n, t in self.tokens.items()))
        (folder / "cellgate.toml").write_text('[audit]\ndir = "runs"\n[mcp.auth]\ntokens_file = "tokens"\n')
        self.state = folder / "runs" / "mcp-serve"
        self.log = folder / "serve.log"
        self.process: subprocess.Popen[str] | None = None
        self.url = ""

    def argv(self, port: int) -> list[str]:
        return [*CELLGATE, "mcp", "serve", "--transport", "http", "--port", str(port)]

    def start(self) -> None:
        with self.log.open("a") as log:
            port, self.process = serve_on_a_free_port(
                lambda p: subprocess.Popen(self.argv(p), stdout=log, stderr=subprocess.STDOUT, cwd=self.folder,
                                           text=True), self.log, "cellgate mcp serve --transport http")
        self.url = f"http://127.0.0.1:{port}/mcp"

    def refused(self) -> str:
        """A start that must fail: its exit code and output."""
        done = subprocess.run(self.argv(free_port()), capture_output=True, text=True, cwd=self.folder, timeout=120)
        assert done.returncode != 0, done.stdout[-2000:]
        return done.stdout + done.stderr

    def stop(self) -> None:
        assert self.process is not None
        self.process.terminate()  # SIGTERM: its sessions are paused
        assert self.process.wait(120) in (0, -15), self.log.read_text()[-3000:]
        self.process = None

    @asynccontextmanager
    async def client(self, who: str) -> AsyncIterator[Client]:
        headers = {"authorization": f"Bearer {self.tokens[who]}"}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http, \
                Client(streamable_http_client(self.url, http_client=http)) as client:
            yield client

    async def run(self, who: str, code: str, session: str | None = None) -> tuple[str, Any]:
        async with self.client(who) as client:
            args = {"code": code} if session is None else {"code": code, "session": session}
            result = await client.call_tool("execute_python", args)
            return "".join(b.text for b in result.content if b.type == "text"), result

    def parked(self) -> dict[str, Any]:
        return dict(json.loads((self.state / "parked.json").read_text())["sessions"])


def test_an_edited_parked_json_or_swapped_checkpoints_refuse_and_a_resume_records_its_principal(
        tmp_path: Path, runsc: object) -> None:
    server = Server(tmp_path)
    server.start()
    try:
        async def before() -> tuple[str, str, str]:
            _, a = await server.run("alice", "x = 41")
            _, b = await server.run("bob", "secret = 'bob only'")
            _, c = await server.run("alice", "y = 7")
            return tuple(str(r.structured_content["session"]) for r in (a, b, c))  # type: ignore[return-value]

        alices, bobs, alices_other = asyncio.run(asyncio.wait_for(before(), 300))
        server.stop()
        assert set(server.parked()) == {alices, bobs, alices_other}

        # 1. alice's session handed to bob in the file: the server refuses to start, naming the file.
        good = (server.state / "parked.json").read_bytes()
        edit(server.state / "parked.json",
             lambda d: d["sessions"][alices].update(owner={"name": "bob", "issuer": "static-token"}))
        said = server.refused()
        assert str(server.state / "parked.json") in said and "not signed by this host's key" in said, said
        assert "remove it" in said and "Traceback" not in said  # refused before it serves, as a config error

        # 2. the file as the server wrote it, but alice's and bob's checkpoint folders swapped.
        (server.state / "parked.json").write_bytes(good)
        folders = server.state / "checkpoints"
        mine, theirs = (folders / server.parked()[h]["checkpoint"] for h in (alices, bobs))
        mine.rename(folders / "swap")
        theirs.rename(mine)
        (folders / "swap").rename(theirs)
        server.start()

        async def after() -> None:
            out, result = await server.run("alice", "print(secret)", alices)
            assert result.is_error and "is not the one it was paused into" in out, out
            out, result = await server.run("bob", "print(x)", bobs)
            assert result.is_error and "is not the one it was paused into" in out, out
            out, result = await server.run("bob", "print(y)", alices_other)  # another's handle: unknown
            assert result.is_error and f"no session {alices_other!r} on this server" in out, out
            out, result = await server.run("alice", "print(y * 6)", alices_other)
            assert (out, result.is_error) == ("42\n", False), out
            async with server.client("alice") as alice:
                resource = await alice.read_resource(f"cellgate://sessions/{alices_other}/notebook")
            notebook = json.loads(resource.contents[0].text)
            journal = tmp_path / "runs" / notebook["metadata"]["cellgate"]["journal"]["file"]
            records = read_journal(journal).records
            resumed = next(r for r in records if r["event"] == "session-resumed")
            who = [r for r in records if r["event"] == "mcp-principal" and "resumed" in r]
            assert [(r["principal"], r["resumed"]) for r in who] == [
                ({"name": "alice", "issuer": "static-token"}, resumed["checkpoint"])]
            assert records.index(resumed) < records.index(who[0])

        asyncio.run(asyncio.wait_for(after(), 300))
    finally:
        if server.process is not None:
            server.stop()
