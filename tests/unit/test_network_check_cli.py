"""``cellgate network check URL`` (issue 45, item 9) through the installed command, as a person runs it: the rule
that decides with its file:line, approval, refusal with the TOML that would allow it (exit 1), and an injected
header named without its value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

COMMAND = Path(sys.executable).parent / "cellgate"  # the console script of this environment (.venv/bin/cellgate)
SECRET = "sk-live-do-not-print-4c1d"

CONFIG = """\
[policy]
approver = "queue"

[[network.allow]]
url = "https://api.example.com/v1/*"

[[network.allow]]
url = "https://*.example.org/upload/*"
methods = ["POST", "PUT"]
decision = "approve"

[[network.allow]]
url = "https://billing.example.net/*"
methods = ["*"]
inject = { header = "Authorization", value = "Bearer ${BILLING_TOKEN}" }

[[network.allow]]
url = "http://127.0.0.1:8765/"

[[network.allow]]
url = "http://*/public/*"
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "cellgate.toml"
    path.write_text(CONFIG)
    return path


def check(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("BILLING_TOKEN", "CELLGATE_CONFIG")}
    return subprocess.run([str(COMMAND), "network", "check", *args], capture_output=True, text=True, cwd=cwd,
                          env={**environ, **(env or {})}, timeout=60, check=False)


def test_an_allowed_url_names_its_rule_file_and_line(config: Path) -> None:
    done = check("https://API.example.com/v1/items?page=2", cwd=config.parent)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "allow by network.allow[0] (cellgate.toml:4): https://api.example.com/v1/*, methods GET, HEAD"
    assert "injects" not in done.stdout


def test_an_approve_rule_says_a_person_is_asked(config: Path) -> None:
    done = check("https://files.example.org/upload/a.csv", "--method", "put", "--config", str(config),
                 cwd=config.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("approve by network.allow[1] (cellgate.toml:7): https://*.example.org/upload/*, "
                                  "methods POST, PUT\n")
    assert "waits for a person's answer ([policy] approver = 'queue')" in done.stdout


def test_a_refusal_exits_1_with_the_reason_and_the_rule_that_would_allow_it(config: Path) -> None:
    done = check("https://api.example.com/v1/items", "--method", "DELETE", cwd=config.parent)
    assert done.returncode == 1
    assert done.stdout.startswith("refused: network.allow[0] matches https://api.example.com/v1/items but allows "
                                  "only GET, HEAD, not DELETE\n")
    assert '[[network.allow]]\nurl = "https://api.example.com/v1/items*"\nmethods = ["DELETE"]' in done.stdout
    climbing = check("https://api.example.com/v1/%2e%2e/admin", cwd=config.parent)
    assert climbing.returncode == 1
    assert "refused: no [[network.allow]] rule matches https://api.example.com/admin" in climbing.stdout


def test_user_info_is_refused_naming_the_host_it_would_reach(config: Path) -> None:
    done = check("https://api.example.com@evil.com/v1/x", cwd=config.parent)
    assert done.returncode == 1
    assert "its host is 'evil.com'" in done.stdout


def test_an_injected_header_is_named_never_its_value(config: Path) -> None:
    done = check("https://billing.example.net/charges", "--method", "POST", cwd=config.parent,
                 env={"BILLING_TOKEN": SECRET})
    assert done.returncode == 0, done.stderr
    assert "injects header Authorization on the host, its value from $BILLING_TOKEN (set)" in done.stdout
    assert SECRET not in done.stdout + done.stderr
    unset = check("https://billing.example.net/charges", cwd=config.parent)
    assert "$BILLING_TOKEN (NOT SET here" in unset.stdout


def test_a_private_address_is_reached_only_by_a_rule_naming_it(config: Path) -> None:
    named = check("http://127.0.0.1:8765/", cwd=config.parent)
    assert named.returncode == 0, named.stderr
    assert "the gate connects there only because network.allow[3] names it literally" in named.stdout
    wildcard = check("http://10.1.2.3/public/x", cwd=config.parent)
    assert wildcard.returncode == 1
    assert wildcard.stdout.startswith("allow by network.allow[4]")
    assert "refused when connecting: 10.1.2.3 is a private or reserved address" in wildcard.stdout


def test_a_bad_config_is_an_error_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "cellgate.toml"
    path.write_text('[[network.allow]]\nurl = "http://api.example.com/"\ninject = { header = "X-Key", '
                    'value = "${KEY}" }\n')
    done = check("http://api.example.com/", cwd=tmp_path)
    assert done.returncode == 2
    assert f"{path}:3: network.allow.0.inject" in done.stderr and "clear text" in done.stderr
