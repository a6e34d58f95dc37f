"""Integrations that are not the core: the Anthropic agent loop, MCP, IPython magics.

Each lives in its own subpackage, uses only ``cellgate.gate``'s public API,
and never imports another extension.
"""
