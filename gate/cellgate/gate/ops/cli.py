"""The ``cellgate`` command line: exec, doctor, install."""

from __future__ import annotations

import argparse
import functools
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cellgate.gate._errors import CellgateError, ConfigError, SandboxUnavailable
from cellgate.gate._startup import defer_slow_imports
from cellgate.gate._terminal import clean, reveal
from cellgate.gate.ops.image_cli import add_image
from cellgate.gate.ops.network_cli import add_network
from cellgate.gate.ops.review_cli import add_report, add_show

if TYPE_CHECKING:  # imported where a command needs them: `cellgate --help` must not pay for any of these
    from rich.console import Console

    from cellgate.gate.session.session import CellResult

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class _Stderr:
    """rich's console on stderr, made at first use: importing rich costs more than `cellgate --help` itself."""

    @functools.cached_property
    def console(self) -> Console:
        from rich.console import Console

        return Console(stderr=True, highlight=False)

    def print(self, *objects: Any, **options: Any) -> None:
        self.console.print(*objects, **options)


err = _Stderr()


def _read_program(name: str) -> str:
    if name == "-":
        return sys.stdin.read()
    try:
        return Path(name).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read program {name!r}: {exc.strerror}; check the path") from None


def _to(stream: Any, text: str) -> None:
    """The program's text to our stdout or stderr: neutralized for a terminal, byte-faithful when piped."""
    stream.write(clean(text) if stream.isatty() else text)


def print_output(output: dict[str, Any]) -> None:
    """One recorded output, as it comes: streams to stdout or stderr, a result's text, an error's traceback."""
    kind = output.get("output_type")
    if kind == "stream":
        _to(sys.stdout if output.get("name") == "stdout" else sys.stderr, output.get("text", ""))
    elif kind in ("execute_result", "display_data"):
        plain = output.get("data", {}).get("text/plain")
        if plain:
            _to(sys.stdout, plain + "\n")
    elif kind == "error":
        text = "\n".join(output.get("traceback") or [f"{output.get('ename')}: {output.get('evalue')}"])
        _to(sys.stderr, ANSI.sub("", text) + "\n")  # IPython's colour codes are dropped, piped or not
    sys.stdout.flush()
    sys.stderr.flush()


def why_it_ended(result: CellResult) -> str:
    """What stopped a failed cell, when none of its outputs says (a memory limit, a kill): '' otherwise."""
    error = result.error
    if not error or any(o.get("output_type") == "error" for o in result.outputs):
        return ""
    return f": {error.get('ename')}: {error.get('evalue')}"


def say(console: Console | _Stderr, *parts: str | tuple[str, str]) -> None:
    """Print host text (plain strings or (text, style) pairs) and recorded text, never as markup."""
    from rich.text import Text

    console.print(Text.assemble(*((clean(p) if isinstance(p, str) else (clean(p[0]), p[1])) for p in parts)),
                  soft_wrap=True)


EXEC_RETRY_HINT = "send it as a retry (in a Session, execute(code, retry=True); over MCP, retry: true)"


async def _exec(args: argparse.Namespace) -> int:
    from cellgate.gate.ops import exec_files
    from cellgate.gate.ops.waiting import waiting_notices
    from cellgate.gate.session.launch import where_it_records
    from cellgate.gate.session.session import Session

    programs = [(name, _read_program(name)) for name in args.programs]
    inputs, outputs = exec_files.moves(args.input, "--input"), exec_files.moves(args.output, "--output")
    exec_files.check_inputs(inputs)  # before a sandbox starts
    exec_files.check_outputs(outputs, args.checkpoint)
    overrides: dict[str, Any] = {}
    if args.timeout:
        overrides["cell_timeout"] = args.timeout
    if args.resume and args.notebook:
        raise ConfigError("--resume goes on in the paused session's own notebook; leave out --notebook")
    options: dict[str, Any] = {"config": args.config, "tools": args.tools, "isolation": args.isolation, **overrides}
    opened = Session.resume(args.resume, **options) if args.resume else Session(notebook=args.notebook, **options)
    async with opened as session, waiting_notices(session):
        if session.sandbox_info.get("isolation") == "none":
            err.print("[bold yellow]warning:[/] --isolation=none: the code runs WITHOUT gVisor (development only)")
        for line in where_it_records(session.recorder):
            say(err, (line, "dim"))
        for line in await exec_files.upload_inputs(session, inputs):
            say(err, (line, "dim"))
        failed = 0
        for name, code in programs:
            if args.trial:  # in a fork: kept if it succeeds, else the session stays as it was
                trial = await session.trial(code)
                for output in trial.result.outputs:
                    print_output(output)
                result = trial.result
                await (trial.keep() if result.ok else trial.discard())
                say(err, (f"trial {name}: {'kept' if result.ok else 'discarded'}", "dim"))
            else:
                result = await session.execute(code, on_output=print_output)  # printed as they come
            if not result.ok:
                say(err, (f"{'trial' if args.trial else 'cell'} {name} ended with status {result.status}", "red"),
                    f" (limits hit: {', '.join(result.limits_hit)})" if result.limits_hit else "",
                    why_it_ended(result))
                # What the failure left done in the world (``calls.writes``), for the person who runs it again.
                told = result.writes.summary(failed_cell=not args.trial, retry_hint=EXEC_RETRY_HINT)
                for line in told.splitlines():
                    say(err, (line, "yellow"))
                failed += 1
                if not args.trial:  # the next program would run on a kernel this one left half-done
                    break  # a discarded trial left the session as it was: the next program is tried from there
        if outputs and failed:
            say(err, (f"no --output fetched: {'a trial was discarded' if args.trial else 'a cell failed'} (the files "
                      "stay in the sandbox until it ends)", "red"))
        elif outputs:
            for line in await exec_files.download_outputs(session, outputs):
                say(err, (line, "dim"))
        say(err, (f"audit notebook: {session.notebook_path}", "dim"))
        if args.checkpoint:  # paused, not ended: `cellgate exec --resume` goes on from here
            say(err, (f"paused: {await session.checkpoint(args.checkpoint)} (cellgate exec --resume it)", "dim"))
    return 1 if failed else 0


def _add_exec(sub: Any) -> None:
    p = sub.add_parser("exec", help="run program files as cells of one sandboxed session (stops at the first that "
                       "fails)",
                       description="Run each PROGRAM as a cell of one gVisor-sandboxed session, in order, recording "
                       "every cell and tool call in an audit notebook. exec stops at the first program that fails "
                       "(an exception, a timeout, a limit): the programs after it do not run, and the exit status "
                       "is 1. With --trial each program is tried in a fork instead: a failed one is discarded and "
                       "exec goes on with the next program from the session as it was; the exit status is 1 if any "
                       "trial was discarded. Every path exec writes (--output's folders, --checkpoint's new folder) "
                       "is checked before the sandbox starts.")
    p.add_argument("programs", nargs="+", metavar="PROGRAM", help="a Python file per cell, or - for stdin")
    p.add_argument("--config", help="cellgate.toml (default: $CELLGATE_CONFIG, then ./cellgate.toml)")
    p.add_argument("--tools", nargs="+", default=[], metavar="MODULE.py", help="Python files whose functions are tools")
    p.add_argument("--notebook", help="where to write the audit notebook (a new file; default: a new one in "
                   "[audit] dir)")
    p.add_argument("--isolation", choices=["gvisor", "none"],
                   help="none runs WITHOUT a sandbox: development only, recorded in the notebook")
    p.add_argument("--timeout", type=float, help="wall-clock limit per cell, in seconds")
    p.add_argument("--input", action="append", default=[], metavar="FILE[:DEST]",
                   help="upload a file before the first cell (DEST: where in the sandbox; default its name in the "
                        "working folder; the first ':' starts DEST); recorded by sha256 and put back by replay; "
                        "repeat for more")
    p.add_argument("--output", action="append", default=[], metavar="PATH[:DEST]",
                   help="download a file from the sandbox after the last cell, if every cell succeeded (DEST: where "
                        "on this host; default its name here); recorded by sha256; repeat for more")

    p.add_argument("--checkpoint", metavar="DIR", help="at the end, pause the session into the new folder DIR "
                   "(its kernel saved with its variables) instead of ending it; DIR must not exist and its folder "
                   "must be writable (checked before the sandbox starts)")
    p.add_argument("--resume", metavar="DIR", help="go on from a session paused with --checkpoint (or "
                   "Session.checkpoint): its notebook continues, its variables are there; give the same --config "
                   "and --tools")
    p.add_argument("--trial", action="store_true", help="run each program in a fork of the session: kept if it "
                   "succeeds, discarded (the session as it was) if not, and exec goes on with the next program; "
                   "the record says which; exit status 1 if any trial was discarded (and no --output is fetched)")

    def run(a: argparse.Namespace) -> int:
        import asyncio

        return asyncio.run(_exec(a))

    p.set_defaults(run=run)


def _add_install(sub: Any) -> None:
    p = sub.add_parser("install", help="install the cellgate kernelspec for Jupyter frontends",
                       description="Install the 'cellgate' kernelspec, so that Jupyter frontends (JupyterLab, "
                       "notebook, VS Code) start cellgate's sandboxed kernel; it also makes this host's key, which "
                       "signs audit records, if there is none yet.")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="for this user only")
    where.add_argument("--sys-prefix", action="store_true", help="into this Python environment (the default)")
    where.add_argument("--prefix", help="under this prefix")

    def run(a: argparse.Namespace) -> int:
        from cellgate.gate import _hostkey as hostkey
        from cellgate.gate.sandbox.kernelspec import LAUNCHER_MODULE, install

        prefix = a.prefix if a.prefix else (None if a.user else sys.prefix)
        path = install(user=a.user, prefix=prefix)
        print(f"installed kernelspec 'cellgate' in {path}")
        print(f"  it runs {sys.executable} -m {LAUNCHER_MODULE}: a frontend in any environment launches it "
              f"(JUPYTER_PATH={Path(path).parent.parent} finds it)")
        key = hostkey.load()
        print(f"host key {key.key_id} at {key.path} (signs audit records; keep it out of run folders)")
        return 0

    p.set_defaults(run=run)


def _add_doctor(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check (and with --fix, install) what cellgate needs",
                       description="Check what cellgate needs (runsc and its platform, cgroups or user namespaces, "
                       "the limits enforced, the default sandbox image) and run one cell in a real sandbox that "
                       "calls a gated tool.")
    p.add_argument("--fix", action="store_true", help="as root: install gVisor's runsc (Debian's package through "
                   "apt, plus the newer static build), and build the default sandbox image if it is missing or "
                   "was built for another cellgate; then check as without --fix")
    p.add_argument("--clean", action="store_true", help="remove sandboxes left behind by crashed sessions, the "
                   "local backend's snapshot images, and approval requests of sessions that are gone")
    p.add_argument("--backend", default="local", metavar="NAME",
                   help="with --clean: the sandbox backend whose leftovers to remove: local (this host's runsc, "
                   "the default) or kubernetes, or a backend a package registers (entry point group "
                   "cellgate.sandbox_backends)")

    def run(a: argparse.Namespace) -> int:
        from cellgate.gate.ops.doctor import doctor

        return doctor(fix=a.fix, clean=a.clean, backend=a.backend)

    p.set_defaults(run=run)


def _add_policy(sub: Any) -> None:
    p = sub.add_parser("policy", help="check a policy", description="Check a cellgate.toml's policy against the "
                       "tools it configures.")
    actions = p.add_subparsers(dest="action", required=True)
    check = actions.add_parser("check", help="validate cellgate.toml and print the effective decision table")
    check.add_argument("config", help="the cellgate.toml to check")

    def run(a: argparse.Namespace) -> int:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        from cellgate.gate.calls.policy import decision_table
        from cellgate.gate.calls.registry import ToolRegistry
        from cellgate.gate.calls.sources import close_sources, open_sources
        from cellgate.gate.config import find_config, load_settings

        settings = load_settings(find_config(a.config))
        registry = ToolRegistry.from_paths(settings.tool_paths())
        close_sources(open_sources(settings, registry))  # MCP servers are asked for their tools, then closed
        source_defaults = {name: tool.default_decision for name in registry.names()
                           if (tool := registry.get(name)) is not None and tool.default_decision}
        policy = settings.policy
        said = {name: "{} ({})".format(*tool.effective_effect(policy.effect(name)))
                for name in registry.names() if (tool := registry.get(name)) is not None}
        table = Table(title=f"effective policy of {a.config} (default: {policy.default})")
        columns = ("tool", "decision", "effect", "rules", "rate", "expose", "secrets", "known")
        for column in columns:
            table.add_column(column)
        for row in decision_table(policy, registry.names(), source_defaults, said):
            table.add_row(*(Text(clean(row[c])) for c in columns))
        Console(highlight=False).print(table)
        budgets = {k: getattr(policy, k) for k in ("max_calls_per_cell", "max_calls_per_session", "max_arg_bytes",
                                                    "max_result_bytes", "approver", "approval_timeout")}
        print("budgets: " + ", ".join(f"{k}={v}" for k, v in budgets.items()))
        from cellgate.gate.calls.policy import unrequired_constraints

        schemas = {name: tool.parameters for name in registry.names() if (tool := registry.get(name)) is not None}
        for warning in unrequired_constraints(policy, schemas):
            say(err, ("warning:", "yellow"), f" {warning}")
        unknown = sorted(set(policy.tools) - set(registry.names()))
        if unknown:
            err.print(f"[red]error:[/] [policy.tools] names tools that are not configured: {', '.join(unknown)}; "
                      "fix the name or add the module to [tools] modules")
            return 2
        return 0

    check.set_defaults(run=run)


def _add_approvals(sub: Any) -> None:
    p = sub.add_parser("approvals", help="list and answer queued approval requests (approver = queue)",
                       description="List, show and answer the approval requests of sessions whose policy's "
                       "approver is the queue.")
    actions = p.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="pending requests")
    show = actions.add_parser("show", help="one pending request with its complete arguments and their digest")
    show.add_argument("id", help="the request's id, as `cellgate approvals list` prints it")
    for verb in ("approve", "deny"):
        answer = actions.add_parser(verb, help=f"{verb} one pending request")
        answer.add_argument("id", help="the request's id, as `cellgate approvals list` prints it")
        answer.add_argument("--reason", default="", help="why, recorded with the answer in the audit notebook")

    def run(a: argparse.Namespace) -> int:
        from rich.console import Console

        from cellgate.gate.calls.approval import describe_full, describe_request
        from cellgate.gate.calls.approval_queue import answer, pending_request, pending_requests, request_from

        console = Console(highlight=False)
        if a.action == "list":
            requests = pending_requests()
            if not requests:
                console.print("no pending approvals")
            for data in requests:
                request = request_from(data)
                say(console, (reveal(request.id), "bold"), f" (session {reveal(request.session[:12])}, "
                    f"call {request.seq})")
                say(console, describe_request(request) + "\n")
            return 0
        if a.action == "show":
            text, matches = describe_full(pending_request(a.id))
            say(console, text)
            return 0 if matches else 1
        answered = answer(a.id, "allow" if a.action == "approve" else "deny", a.reason)
        say(console, f"{'approved' if a.action == 'approve' else 'denied'} {reveal(a.id)}: "
                     f"{reveal(str(answered['tool']))} (sha256 {reveal(str(answered['args_sha256'])[:16])}…)")
        return 0

    p.set_defaults(run=run)


def _add_audit(sub: Any) -> None:
    recover = sub.add_parser("recover", help="rebuild the audit notebook from its journal after a crash",
                             description="Rebuild the audit notebook from its journal (the durable record) after "
                             "a crash: a cell that never ended is marked killed, a call whose outcome was never "
                             "recorded needs reconciliation; approval requests of the crashed session are "
                             "withdrawn.")
    recover.add_argument("journal", help="the <name>.journal.jsonl file")
    recover.add_argument("-o", "--output", help="where to write the notebook (default: beside the journal)")

    def run_recover(a: argparse.Namespace) -> int:
        from cellgate.gate.audit.recorder import rebuild

        journal = Path(a.journal)
        if not journal.exists() and not journal.is_symlink():  # anything else: refused with its kind when read
            raise ConfigError(f"journal {a.journal!r} does not exist; pass the .journal.jsonl file of the run")
        target, nb, notes = rebuild(journal, Path(a.output) if a.output else None)
        from cellgate.gate.calls.approval_queue import withdraw_orphans

        for request_id in withdraw_orphans():  # a crashed session's requests must not be approvable later
            say(err, ("note:", "yellow"), f" withdrew approval request {request_id}: the session that asked is gone")
        for note in notes:
            say(err, ("note:", "yellow"), f" {note}")
        statuses = [c.metadata.cellgate.status for c in nb.cells]
        print(clean(f"rebuilt {target} from {journal.name}: {len(nb.cells)} cells ({', '.join(statuses) or 'none'})"))
        return 0

    recover.set_defaults(run=run_recover)

    verify = sub.add_parser("verify", help="check an audit notebook against its journal and hash chain",
                            description="Check that an audit notebook is what its journal records (rebuilt from "
                            "it and compared), that the journal's hash chain is whole and each record signed with "
                            "this host's key, and that each result blob matches its sha256; exit status 1 if not.")
    verify.add_argument("notebook", help="the audit notebook (.ipynb); its journal is the .journal.jsonl beside it")

    def run_verify(a: argparse.Namespace) -> int:
        from cellgate.gate.audit.verify import check_run

        result = check_run(Path(a.notebook))
        if result.problems:
            for problem in result.problems:
                say(err, ("FAILED:", "bold red"), f" {problem}")
            return 1
        print(clean(f"verified: {a.notebook} matches its journal and the hash chain is intact; all {result.records} "
                    f"records are signed with this host's key {result.key_id}; {result.blobs} result blob(s) match "
                    "their sha256"))
        return 0

    verify.set_defaults(run=run_verify)

    add_show(sub)
    add_report(sub)


def _add_replay(sub: Any) -> None:
    p = sub.add_parser("replay", help="rerun a recorded run with its recorded tool results",
                       description="Rerun a recorded run's cells in a new sandbox, each tool call answered with "
                       "its recorded result (unless --live), and say whether each cell did what it did then.")
    p.add_argument("notebook", help="the audit notebook of the run")
    p.add_argument("--live", nargs="+", default=[], metavar="TOOL",
                   help="send these tools to the real gate (policy and approvals apply)")
    p.add_argument("--interactive", action="store_true",
                   help="leave the kernel running where replay stops, for a person to attach to")
    p.add_argument("--notebook", dest="output", help="where to write the replay's own notebook")
    p.add_argument("--config", help="cellgate.toml for the sandbox, the policy and the --live tools (default: "
                   "$CELLGATE_CONFIG, then ./cellgate.toml unless it is in the notebook's folder)")
    p.add_argument("--tools", nargs="+", default=[], metavar="MODULE.py",
                   help="modules that define the --live tools (paths in the recording are never imported)")
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="allow isolation = \"none\" from your config: the recording's cells then run on this "
                        "host WITHOUT gVisor")
    p.add_argument("--allow-other-image", action="store_true",
                   help="replay even if the sandbox image differs from the one the run was recorded in (what "
                        "differs is printed)")

    def run(a: argparse.Namespace) -> int:
        import asyncio
        import signal

        from cellgate.gate.ops.replay import replay

        source = Path(a.notebook)
        from cellgate.gate.audit.record_paths import free_path

        # A name of our own is numbered on past an earlier replay's record; the one a user gives is refused.
        output = Path(a.output) if a.output else free_path(source.with_name(source.stem + ".replay.ipynb"))

        async def go() -> int:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop.set)
            outcome = await replay(source, set(a.live), output, a.config, a.interactive, stop,
                                   say=lambda line: print(clean(line), flush=True), tools=a.tools,
                                   unsafe_no_sandbox=a.unsafe_no_sandbox, allow_other_image=a.allow_other_image,
                                   note=lambda line: say(err, ("note:", "yellow"), f" {line}"))
            return 0 if outcome.failed_cell is None or outcome.reproduced else 1

        return asyncio.run(go())

    p.set_defaults(run=run)


class _Version(argparse.Action):
    """``--version``, looked up only when asked (the package metadata costs every other command time)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("cellgate")
        except PackageNotFoundError:
            found = "unknown (not installed as a package)"
        print(f"cellgate {found}")  # on stdout, as argparse's own version action prints
        parser.exit()


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so the interpreter's own flush at exit meets no closed pipe (Python docs,
    "Note on SIGPIPE")."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subcommands whose ``--help`` opens with a description: their own, or their one-line help as a sentence."""

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        said = kwargs.get("help")
        if not kwargs.get("description") and isinstance(said, str) and said != argparse.SUPPRESS:
            kwargs["description"] = said[:1].upper() + said[1:] + ("" if said.endswith(".") else ".")
        return super().add_parser(name, **kwargs)


class _Parser(argparse.ArgumentParser):
    """The command line's parsers (a subcommand's too). On the top one an error's usage line lists every command,
    the extensions' too (``cellgate mcp``, ``run``), which are loaded only then (or for --help): a built-in command
    does not pay for finding them."""

    commands: Any = None  # the subparsers action of the top parser, set by ``_build``
    extended = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Commands)

    def add_extensions(self) -> None:
        if self.extended or self.commands is None:
            return
        self.extended = True
        from importlib.metadata import entry_points  # ~60 ms: not for the built-in commands

        for entry in entry_points(group="cellgate.commands"):  # e.g. `cellgate run`, from cellgate.extensions
            if entry.name not in self.commands.choices:
                entry.load()(self.commands)

    def error(self, message: str) -> Any:
        try:
            self.add_extensions()
        except Exception:  # noqa: BLE001 - a broken extension does not hide the user's own mistake
            pass
        super().error(message)


def parser() -> argparse.ArgumentParser:
    """The whole command line, built-in commands and the extensions' (for tests and documentation)."""
    top = _build()
    top.add_extensions()
    return top


def _build() -> _Parser:
    parser = _Parser(prog="cellgate", description="A Jupyter kernel for AI agents: "
                     "gVisor-sandboxed, every tool call gated, every cell recorded.")
    parser.add_argument("--version", action=_Version, help="print cellgate's version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_exec(sub)
    _add_install(sub)
    _add_doctor(sub)
    _add_policy(sub)
    _add_approvals(sub)
    _add_audit(sub)
    _add_replay(sub)
    add_image(sub)
    add_network(sub)
    parser.commands = sub
    return parser


def main(argv: list[str] | None = None) -> int:
    defer_slow_imports()
    parser = _build()
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in parser.commands.choices:  # --help, an extension's command or a typo: all of them
        parser.add_extensions()
    args = parser.parse_args(argv)
    try:
        code = int(args.run(args))
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return code
    except BrokenPipeError:  # `cellgate show --json | head`: the reader has what it wanted
        _stdout_to_devnull()
        return 141  # 128 + SIGPIPE, as a program killed by it exits
    except SandboxUnavailable as exc:
        say(err, ("error:", "bold red"), f" {exc}")
        return 3
    except CellgateError as exc:  # may quote a notebook, a journal, a file name or "[sandbox]": never markup
        say(err, ("error:", "bold red"), f" {exc}")
        return 2
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]")
        return 130


if __name__ == "__main__":
    sys.exit(main())
