"""Launch options, typed end to end: what Session hands the provisioner becomes the sandbox's parameters."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import MappingProxyType
from typing import get_type_hints

import pytest

from cellgate.gate._errors import ConfigError, SessionError
from cellgate.gate.config import SandboxSettings, Settings
from cellgate.gate.sandbox.backend import SandboxRequest
from cellgate.gate.session.launch import LaunchOptions, SandboxOverrides, settings_for
from cellgate.gate.session.provisioner import GVisorProvisioner
from cellgate.gate.session.session import Session


def test_every_sandbox_setting_can_be_overridden_per_session() -> None:
    # isolation is Session's own keyword; the rest arrive as **sandbox, typed by SandboxOverrides, but for the
    # host-wide sandboxes_cpu_weight ($CELLGATE_SANDBOXES_CPU_WEIGHT, never a session's or a project's).
    assert set(get_type_hints(SandboxOverrides)) == set(SandboxSettings.model_fields) - {"isolation",
                                                                                        "sandboxes_cpu_weight"}


def test_session_builds_frozen_launch_options() -> None:
    session = Session(tools=["a.py", Path("b.py")], notebook="run.ipynb", isolation="none", memory_mb=512,
                      metadata={"origin": "test"})
    options = session.launch_options
    assert isinstance(options, LaunchOptions)
    assert options.tools == ("a.py", "b.py") and options.notebook == Path("run.ipynb")
    assert dict(options.sandbox) == {"isolation": "none", "memory_mb": 512}
    assert isinstance(options.sandbox, MappingProxyType) and isinstance(options.metadata, MappingProxyType)
    with pytest.raises(AttributeError):
        options.tools = ()  # type: ignore[misc]


def test_memory_mb_reaches_the_sandbox_limits() -> None:
    settings = settings_for(LaunchOptions(settings=Settings(), sandbox={"memory_mb": 512, "snapshot": None}), None)
    assert settings.sandbox.memory_mb == 512 and settings.sandbox.snapshot is True  # None keeps the configured value
    request = SandboxRequest.from_settings(settings.sandbox, {}, "k" * 64, "s" * 32)
    assert request.limits.memory_bytes == 512 << 20
    assert request.limits.address_space_bytes == int((512 << 20) * 0.9)


def test_a_bad_sandbox_option_names_the_field_and_value() -> None:
    with pytest.raises(ConfigError, match="sandbox options: .*memory_mb") as caught:
        settings_for(LaunchOptions(settings=Settings(), sandbox={"memory_mb": 3}), None)
    assert "128" in str(caught.value)
    with pytest.raises(ConfigError, match="sandbox options: .*memroy_mb"):
        settings_for(LaunchOptions(settings=Settings(), sandbox={"memroy_mb": 512}), None)


def test_the_provisioner_takes_only_launch_options_and_says_when_it_is_not_started() -> None:
    provisioner = GVisorProvisioner(kernel_id="k", kernel_spec=None)
    assert provisioner.options == LaunchOptions() and provisioner.service is None
    with pytest.raises(SessionError, match="not started; call start"):
        provisioner.started
    with pytest.raises(ConfigError, match="takes a LaunchOptions, not dict"):
        asyncio.run(provisioner.pre_launch(cellgate={"tools": ["a.py"]}))
