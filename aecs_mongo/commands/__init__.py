"""The handlers of the ``aecs-mongo`` commands, one module per concern.

:mod:`aecs_mongo.cli` holds the parser, the command table, the one place that prints and the
run; it imports the module of the command being run, and only that one. A handler takes a
:class:`~aecs_mongo.commands.base.Context` (the parsed arguments and an open store) and returns
an :class:`~aecs_mongo.commands.base.Output`: the JSON-ready data, its text lines and the exit
code. It prints nothing on stdout itself (``watch`` streams through ``Context.emit``).

- ``options``: each command's options (the parser imports it, so it imports nothing heavy)
- ``base``: the context, the output record, errors and exit codes, text columns, stderr lines
- ``interrupts``: signals as Ctrl-C, finishing the messages in hand on the first one
- ``reading``: inbox, threads, thread, show, with, replies, find, search
- ``ingest``: ingest; ``lifecycle``: delete, export, expire, erase
- ``maintenance``: reindex, indexes, stats; ``mail``: pop3, migrate-gdbm, imap
- ``watch``: watch; ``server``: the shared embedded server (status, stop, start)
- ``agents``: mcp (the mailbox over the Model Context Protocol)
"""
