"""The relay's owner: the sockets, the pumps and their handler table, what it reads on the way, tool calls, and the
re-signing of every message between the frontends and the kernel."""
