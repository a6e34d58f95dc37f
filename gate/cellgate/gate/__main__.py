"""``python -m cellgate.gate ARGS`` is the ``cellgate`` command."""

from cellgate.gate.ops.cli import main

raise SystemExit(main())
