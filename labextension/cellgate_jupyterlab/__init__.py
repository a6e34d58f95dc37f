"""cellgate's JupyterLab extension: the prebuilt labextension (the calls renderer, cell status badges, the run
and approvals panels) and the jupyter_server extension they talk to (``handlers``)."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "cellgate-jupyterlab"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "cellgate_jupyterlab"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    from cellgate_jupyterlab.handlers import setup_handlers

    setup_handlers(server_app.web_app)
    server_app.log.info("cellgate_jupyterlab: /cellgate/{verify,blob,kernel,approvals} registered")
