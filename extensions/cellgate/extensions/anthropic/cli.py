"""``cellgate run "TASK"``: an agent on the Anthropic API, its code run by cellgate.

Registered through the ``cellgate.commands`` entry point; the SDK is imported
only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contextlib import ExitStack

    import anthropic

EXIT = {"end_turn": 0, "interrupted": 130}
NO_KEY = ("cellgate run needs an Anthropic API key: set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN, or an "
          "ANTHROPIC_PROFILE); to try it offline without one, give a scripted model: --scripted FILE "
          "(examples/northwind/scripted.toml)")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="run an agent on the Anthropic API whose programs run in a cellgate session",
                       description="The API key and endpoint come from ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL; "
                                   "--scripted FILE tries the loop offline, with a scripted model and no key.")
    p.add_argument("task", help="what the agent should do")
    p.add_argument("--config", help="cellgate.toml (tools, policy, sandbox, [agent] defaults)")
    p.add_argument("--tools", nargs="+", default=[], metavar="FILE", help="Python files whose functions are tools")
    p.add_argument("--model", help="model name (default: [agent] model)")
    p.add_argument("--mode", choices=("code", "direct", "hybrid"), help="how tools are offered (default: code)")
    p.add_argument("--max-turns", type=int, help="stop after this many model turns (default: [agent] max_turns)")
    p.add_argument("--notebook", help="where to write the audit notebook")
    p.add_argument("--isolation", choices=("gvisor", "none"), help=argparse.SUPPRESS)
    p.add_argument("--verbose", "-v", action="store_true", help="print the system prompt's size in tokens")
    p.add_argument("--scripted", metavar="FILE", help="try it offline: no API and no key, the model's turns are the "
                                                     "[[turn]] tables (code, text) of this TOML file "
                                                     "(examples/northwind/scripted.toml)")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    import asyncio  # here, not at the top: `cellgate --help` loads this module

    return asyncio.run(_main(args))


async def _main(args: argparse.Namespace) -> int:
    import asyncio
    import signal
    from contextlib import ExitStack

    from rich.console import Console
    from rich.markup import escape

    from cellgate.gate import ConfigError, Session
    from cellgate.gate.ext import clean_for_terminal as clean
    from cellgate.gate.ext import waiting_notices

    from .config import AgentSettings
    from .loop import AgentLoop

    err = Console(stderr=True, highlight=False)
    overrides = {k: v for k, v in (("model", args.model), ("mode", args.mode), ("max_turns", args.max_turns))
                 if v is not None}
    if args.max_turns is not None and args.max_turns < 1:
        raise ConfigError(f"--max-turns {args.max_turns}: must be at least 1")
    if args.scripted is not None and args.model is None:
        overrides["model"] = "scripted"  # what the record names as the model (the fake answers with the name asked)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    with ExitStack() as stack:
        client = _client(args.scripted, stack)  # before the sandbox: no key, or a bad script, is one line
        async with Session(config=args.config, tools=args.tools, notebook=args.notebook,
                           isolation=args.isolation) as session, waiting_notices(session):
            settings = session.provisioner.settings
            assert settings is not None
            agent_settings = settings.section("agent", AgentSettings).model_copy(update=overrides)
            with err.status("starting", spinner="dots") as status:
                agent = AgentLoop(session, client, agent_settings,
                                  progress=lambda line: status.update(escape(clean(line))))
                if args.verbose:
                    err.print(f"system prompt and tools: {await agent.count_prompt_tokens(args.task):,} tokens "
                              f"(by the API's count_tokens; {len(agent.tools)} tool definitions)")
                run = await agent.run(args.task, stop)
            notebook = session.notebook_path
    if run.final_text:  # the model's text may quote the sandbox: neutralized on a terminal, as `exec` does
        text = run.final_text.rstrip() + "\n"
        sys.stdout.write(clean(text) if sys.stdout.isatty() else text)
    usage = run.usage
    err.print(f"ended: {run.ended} after {run.turns} turn(s)" + (f" ({escape(clean(run.detail))})" if run.detail else "")
              + f"; tokens in {usage.get('input_tokens', 0):,} out {usage.get('output_tokens', 0):,}; "
              f"notebook {escape(str(notebook))}")
    return EXIT.get(run.ended, 1)


def _client(scripted: str | None, stack: ExitStack) -> anthropic.AsyncAnthropic:
    """The API client: the SDK's own, from its environment, or one talking to the scripted model on loopback."""
    import anthropic

    from cellgate.gate import ConfigError

    if scripted is not None:
        from pathlib import Path

        from .scripted import read_script
        from .testing import FakeMessagesAPI

        api = stack.enter_context(FakeMessagesAPI([*read_script(Path(scripted))]))
        return anthropic.AsyncAnthropic(api_key="scripted", base_url=api.url, max_retries=0)
    try:
        client = anthropic.AsyncAnthropic()
    except anthropic.CredentialsError as exc:  # e.g. ANTHROPIC_PROFILE names a profile that is not there
        raise ConfigError(f"{NO_KEY} (the SDK said: {exc})") from None
    if not (client.api_key or client.auth_token or getattr(client, "credentials", None)):  # the SDK found none
        raise ConfigError(NO_KEY)
    return client
