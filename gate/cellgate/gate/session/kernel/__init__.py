"""The kernel's owner: its sandbox, the host's control socket, its output ledger and how it ends."""
