"""``watch``: follow the mailbox, one line per newly stored message, until interrupted."""

from __future__ import annotations

import datetime as dt

from .base import Context, Output, column, terminal_width
from .interrupts import signals_as_interrupt

__all__ = ["watch"]


def watch(ctx: Context) -> Output:
    """One line per message stored in the mailbox (a JSON line with ``--json``), each printed as
    it comes. A line is acknowledged once it is written (the consumer's checkpoint), so the next
    run continues after it."""
    width = terminal_width()
    who = max(12, min(30, (width - 20) // 3))
    with signals_as_interrupt(), ctx.store.watch(ctx.args.consumer, since=ctx.args.since) as feed:
        for item in feed:
            when = dt.datetime.fromtimestamp(item.ts, dt.UTC).strftime("%Y-%m-%d %H:%M")
            mid = f"<{item.message_id}>"  # whole: it is what the next command takes
            about = max(10, width - 16 - 2 - who - 2 - len(mid) - 2)
            line = f"{when:16}  {column(item.sender or '?', who)}  {column(item.subject, about)}  {mid}"
            ctx.emit(Output(item.as_dict(), [line]))
    return Output()
