"""``[agent]`` of cellgate.toml: defaults for ``cellgate run``.

Registered as a config section through the ``cellgate.config_sections`` entry
point; read with ``settings.section("agent", AgentSettings)``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cellgate.gate.ext import StrictModel


class AgentSettings(StrictModel):
    """``[agent]``: defaults for ``cellgate run`` (its flags override them)."""

    model: str = "claude-sonnet-4-5"
    mode: Literal["code", "direct", "hybrid"] = "code"
    max_turns: int = Field(default=20, ge=1, le=1000)
    max_tokens: int = Field(default=4096, ge=16, le=128_000)
    output_budget: int = Field(default=20_000, ge=200, description="characters of a cell's output the model sees")
    image_limit_kb: int = Field(default=512, ge=0, description="larger images go back to the model as a note")
    search_threshold: int = Field(default=30, ge=0, description="above this many tools, the prompt points at tools.search()")
    writes: Literal["run", "plan"] = Field(default="run", description="plan: each cell is planned first "
                                           "(Session.plan); when its writes need approval, they are asked once, as "
                                           "one plan, then applied")
