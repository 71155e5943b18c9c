"""Signals while a command runs: SIGTERM and SIGHUP unwind like Ctrl-C (so the embedded server is
stopped), and the commands that store mail finish the messages in hand on the first interrupt."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import NoReturn, TypeVar

from .base import note

__all__ = ["StopRequest", "finish_in_hand_on_interrupt", "signals_as_interrupt", "until"]

T = TypeVar("T")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _raise_interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _handling(signals: Sequence[signal.Signals], handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """``handler`` for ``signals`` while the block runs, then the previous handlers again. A
    signal ignored when we started stays ignored: ``nohup`` ignores SIGHUP so that closing the
    terminal does not stop the command, and a background job ignores SIGINT (main thread only:
    Python delivers signals there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = [sig for sig in signals if signal.getsignal(sig) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, handler) for sig in taken}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def signals_as_interrupt() -> contextlib.AbstractContextManager[None]:
    """SIGTERM and SIGHUP (the terminal closed) unwind like Ctrl-C, so the embedded server is
    stopped."""
    return _handling(_STOP_SIGNALS, _raise_interrupt)


@dataclass
class StopRequest:
    requested: bool = False


@contextlib.contextmanager
def finish_in_hand_on_interrupt() -> Iterator[StopRequest]:
    """The first Ctrl-C (or SIGTERM, SIGHUP) asks the ingest to stop once the messages already
    handed to the store are written; a second one interrupts at once (main thread only)."""
    stop = StopRequest()

    def request(signum: int, frame: FrameType | None) -> None:
        if stop.requested:
            raise KeyboardInterrupt
        stop.requested = True
        note("stopping once the messages in hand are stored (press Ctrl-C again to stop now)")

    with _handling((signal.SIGINT, *_STOP_SIGNALS), request):
        yield stop


def until(items: Iterator[T], stop: StopRequest) -> Iterator[T]:
    """``items`` until a stop is requested; checked before reading the next one, so nothing is
    read (and labelled as handed to the store) that will not be stored."""
    while not stop.requested:
        item = next(items, None)
        if item is None:
            return
        yield item
