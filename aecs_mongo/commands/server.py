"""``server status | stop | start``: the data directory's shared embedded server, kept running
between commands (:mod:`aecs_mongo.embedded.background`). It runs without a store."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..embedded import background
from ..embedded.server import INSTALL_HINT, embedded_available
from ..errors import AecsMongoError
from .base import EXIT_USAGE, CliError, Output, data_dir_of

__all__ = ["server"]


def server(args: argparse.Namespace, companion: Callable[[Path], None] | None = None) -> Output:
    """``companion``: what ``server start`` starts beside the server (``background.use``)."""
    if args.uri:
        raise CliError("'server' manages the embedded server of --data-dir; leave out --uri", EXIT_USAGE)
    if not embedded_available():
        raise CliError(f"the embedded server is not installed; install it with: {INSTALL_HINT}", EXIT_USAGE)
    data_dir = data_dir_of(args)
    try:
        if args.action == "stop":
            was = background.stop(data_dir)
            data: dict[str, Any] = {
                "dataDir": str(data_dir),
                "stopped": was is not None,
                "pid": was.pid if was else None,
            }
            text = f"stopped the server of {data_dir} (pid {was.pid})" if was else f"no server running for {data_dir}"
        else:
            if args.action == "start":
                if args.keep_server <= 0:
                    raise CliError("'server start' needs --keep-server above 0", EXIT_USAGE)
                state = background.start(data_dir, args.keep_server, companion=companion)
            else:
                state = background.status(data_dir)
            data = state.as_dict()
            text = _status_text(data)
    except AecsMongoError as exc:
        raise CliError(str(exc)) from None
    return Output(data, [text])


def _seconds(value: float) -> str:
    """``45 s``, ``5 min``, ``2 h 30 min``."""
    value = round(value)
    if value < 120:
        return f"{value} s"
    minutes = value // 60
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min"


def _status_text(data: dict[str, Any]) -> str:
    if not data["running"]:
        return f"no server running for {data['dataDir']}"
    if data["inUse"]:
        stops = "in use by a running command now"
    else:
        stops = f"no command is using it: it stops in {_seconds(data['stopsInSeconds'])} unless one starts"
    return (
        f"server of {data['dataDir']}: pid {data['pid']}, port {data['port']}, up {_seconds(data['uptimeSeconds'])};"
        f" it stops by itself once no command has used it for {_seconds(data['idleSeconds'])} (--keep-server);"
        f" {stops}"
    )
