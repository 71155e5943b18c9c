"""``watch``: follow the mailbox, one line per newly stored message, until interrupted."""

from __future__ import annotations

import datetime as dt

from .base import Context, Handlers, Output, column
from .interrupts import signals_as_interrupt

__all__ = ["HANDLERS"]


def watch(ctx: Context) -> Output:
    """One line per message stored in the mailbox (a JSON line with ``--json``), each printed as
    it comes. A line is acknowledged once it is written (the consumer's checkpoint), so the next
    run continues after it."""
    with signals_as_interrupt(), ctx.store.watch(ctx.args.consumer, since=ctx.args.since) as feed:
        for item in feed:
            when = dt.datetime.fromtimestamp(item.ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            line = f"{when:20}  {column(item.sender or '?', 36)}  {column(item.subject, 50)}  <{item.message_id}>"
            ctx.emit(Output(item.as_dict(), [line]))
    return Output()


HANDLERS: Handlers = {"watch": watch}
