"""The warm path of the command line: a thin client and a warm command host.

A short read (``inbox``, ``search``, ``count``, ``thread``...) costs its query, not the start of
an interpreter that imports PyMongo and opens a connection (over half a second). The
``aecs-mongo`` entry point (:mod:`.client`) imports only the standard library's smallest parts;
for a read on the embedded default it hands the command (its arguments, working directory,
environment, terminal size and whether its output is a terminal) over a private Unix socket in
the data directory to the warm command host (:mod:`.host`), which keeps the client, the stores
and the local search index open, runs the command with the command line's own code
(``aecs_mongo.cli.main``) and streams back its stdout, its stderr and its exit code. Without a
host (or with a broken one) the command runs in-process. :mod:`.protocol` is the
framing both sides speak. ``docs/command-line.md`` (the warm path) says why this design.
"""
