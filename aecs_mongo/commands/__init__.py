"""The handlers of the ``aecs-mongo`` commands, one module per concern.

:mod:`.table` declares each command (its options, its handler, whether the warm command host
runs it) and the global options; :mod:`aecs_mongo.cli` builds the parser from it, prints and
runs, importing the module of the command being run, and only that one. A handler takes a
:class:`~aecs_mongo.commands.base.Context` (the parsed arguments and an open store) and returns
an :class:`~aecs_mongo.commands.base.Output`: the JSON-ready data, its text lines and the exit
code. It prints nothing on stdout itself (``watch`` streams through ``Context.emit``).

- ``table``: the commands and the global options, as data (the warm client imports it)
- ``options``: each command's options (the parser imports it, so it imports nothing heavy)
- ``base``: the context, the output record, errors and exit codes, text columns, stderr lines
- ``interrupts``: signals as Ctrl-C, finishing the messages in hand on the first one
- ``reading``: inbox, threads, thread, show, with, replies, find, search
- ``ingest``: ingest; ``lifecycle``: delete, export, expire, erase
- ``maintenance``: reindex, indexes, stats; ``mail``: pop3, migrate-gdbm, imap
- ``watch``: watch; ``server``: the shared embedded server (status, stop, start)
- ``agents``: mcp (the mailbox over the Model Context Protocol)
"""
