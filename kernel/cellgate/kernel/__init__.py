"""The sandbox side of cellgate.

Everything in this package runs inside the gVisor sandbox, is mounted into it
read-only, and must be assumed readable (and, at runtime, patchable) by agent
code. It therefore holds no secret and no policy, and imports nothing from
``cellgate.gate`` or ``cellgate.extensions``: only ipykernel and the stdlib.

Modules:

- ``wire``: the contract shared with the host: the tool-call protocol and the kernel's
  environment (names and shapes only).
- ``errors``: the exceptions a tool call raises inside a cell.
- ``runtime``: the comm client the generated ``tools`` stubs call.
- ``ptc``: what ``tools.ptc``'s functions call (one dict in, JSON text out).
- ``tool_update``: replaces the ``tools`` package in place when tools are added to a running session.
- ``stubgen``: generates the ``tools`` package source from a tool manifest.
- ``kernel``: ``CellgateKernel``, the ipykernel subclass.
- ``snapshot``: waits to be checkpointed when started for a snapshot image.
"""

__all__: list[str] = []
