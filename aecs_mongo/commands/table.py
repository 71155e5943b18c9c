"""The command line declared once: each global option and each command, as data.

The parser (:func:`aecs_mongo.cli.build_parser`) is built from it, and with it the manual's
command-line reference; the warm path's thin client (:mod:`aecs_mongo.warm.client`) routes by
it: which commands the warm command host runs, which global options take a value (the word
after one is never the command). The thin client imports this module before it hands a read
over, so it imports nothing (no ``argparse``, ``dataclasses`` or ``typing``): plain classes,
and each command's options builder and handler named, imported only when that command runs.
"""

from __future__ import annotations

__all__ = ["COMMANDS", "FLAGS", "GLOBAL_OPTIONS", "VALUED", "WARM", "Command", "Option"]


class Option:
    """A global option, taken before or after the command.

    ``names``: its spellings (``-v``, ``--verbose``); ``flag``: it takes no value (true when
    given); ``metavar``: its value's name in the help (None: argparse's, from the long name);
    ``env``: the environment variable whose value, when set and not empty, is the default, else
    ``default``; ``type``: the function of :mod:`aecs_mongo.commands.options` that reads the
    value (None: the text as it is); ``dest``: the attribute it is parsed into (None: argparse's,
    from the long name)."""

    __slots__ = ("default", "dest", "env", "flag", "help", "metavar", "names", "type")

    def __init__(
        self,
        *names: str,
        help: str,
        flag: bool = False,
        metavar: str | None = None,
        default: object = None,
        env: str | None = None,
        type: str | None = None,
        dest: str | None = None,
    ) -> None:
        self.names = names
        self.dest = dest
        self.help = help
        self.flag = flag
        self.metavar = metavar
        self.default = default
        self.env = env
        self.type = type


class Command:
    """A sub-command: its name and help, its options and its handler, each named.

    ``options``: the function of :mod:`aecs_mongo.commands.options` that adds its options to its
    parser. ``handler``: ``"module:function"`` in :mod:`aecs_mongo.commands`, imported only when
    the command runs; it takes a ``Context`` on an open store, or with ``store`` false (``server``,
    which manages the embedded server itself) the parsed arguments alone. ``indexes``: the command
    adds mail or tags, so the store's indexes are ensured (quietly, idempotent) before it runs.
    ``warm``: a short read that the warm command host runs (writes and long commands run
    in-process)."""

    __slots__ = ("handler", "help", "indexes", "name", "options", "store", "warm")

    def __init__(
        self,
        name: str,
        help: str,
        *,
        handler: str,
        options: str = "nothing",
        store: bool = True,
        indexes: bool = False,
        warm: bool = False,
    ) -> None:
        self.name = name
        self.help = help
        self.handler = handler
        self.options = options
        self.store = store
        self.indexes = indexes
        self.warm = warm

    def __repr__(self) -> str:
        return f"Command({self.name!r})"


GLOBAL_OPTIONS = (
    Option(
        "--uri",
        env="MONGODB_URI",
        help="MongoDB URI (default: $MONGODB_URI; none: the embedded server of the data directory)",
    ),
    Option("--db", dest="database_name", metavar="DB", default="aecs", help="database name (default: aecs)"),
    Option("--mailbox", default="default", help="mailbox id (default: default; 'aecs-mongo mailboxes' lists them)"),
    Option(
        "--data-dir",
        help="data directory of the embedded server, kept between runs, one per user (default: $AECS_DATA_DIR,"
        " else $XDG_DATA_HOME/aecs-mongo, i.e. ~/.local/share/aecs-mongo)",
    ),
    Option(
        "--keep-server",
        type="duration",
        env="AECS_KEEP_SERVER",
        default="5m",
        metavar="DURATION",
        help="keep the embedded server (with --uri: the URI's warm command host) running in the background"
        " this long after the last command (90s, 5m, 1h; 0: stop it with the command; default:"
        " $AECS_KEEP_SERVER or 5m)",
    ),
    Option(
        "--blobs",
        env="AECS_BLOBS",
        metavar="URL",
        help="where raw mail, HTML and attachment bytes go: gridfs, gridfs://BUCKET, file:///DIR,"
        " s3://BUCKET/PREFIX (credentials and endpoint from the AWS environment), gs://..., az://..."
        " (default: $AECS_BLOBS, else where the database records them, else a directory in --data-dir"
        " for the embedded server and gridfs for --uri; 'aecs-mongo blobs migrate' moves them)",
    ),
    Option(
        "--search-index",
        metavar="PATH",
        help="the local search index file, or 'none' (default: in --data-dir for the embedded server; in"
        " ~/.cache/aecs-mongo for --uri when the server has no text index)",
    ),
    Option(
        "--json",
        flag=True,
        help="JSON instead of text: one object (show, stats, reports) or, for commands that list things,"
        " one object per line and a last line with next_cursor when there is more",
    ),
    Option(
        "-v",
        "--verbose",
        flag=True,
        help="show the normalizer's warnings about odd mail, and the embedded server in use",
    ),
)

#: The spellings of the global options that take a value: the word after one is that value.
VALUED = frozenset(name for option in GLOBAL_OPTIONS if not option.flag for name in option.names)
#: The spellings of the global options that take none.
FLAGS = frozenset(name for option in GLOBAL_OPTIONS if option.flag for name in option.names)


COMMANDS = (
    Command(
        "ingest",
        "store .eml files, directories, Maildir folders, mbox files and standard input",
        options="ingest",
        handler="ingest:ingest",
        indexes=True,
    ),
    Command(
        "mailboxes",
        "the mailboxes of the database, with their message counts",
        handler="reading:mailboxes",
        warm=True,
    ),
    Command("inbox", "a page of messages, newest first", options="inbox", handler="reading:inbox", warm=True),
    Command(
        "threads",
        "a page of conversations, most recent activity first",
        options="threads",
        handler="reading:threads",
        warm=True,
    ),
    Command(
        "thread",
        "a thread as LLM context: newest N, oldest first, with positions",
        options="thread",
        handler="reading:thread",
        warm=True,
    ),
    Command(
        "show",
        "one message (--raw: exact bytes, --html: the HTML body)",
        options="show",
        handler="reading:show",
        warm=True,
    ),
    Command(
        "extract",
        "a message's attachments: list them, --text IDX, --save DIR; --pending reads those left unread",
        options="extract",
        handler="attachments:extract",
    ),
    Command("with", "mail to or from one address, newest first", options="with_", handler="reading:with_", warm=True),
    Command(
        "replies",
        "messages that reply to (or reference) a Message-ID",
        options="message_id",
        handler="reading:replies",
        warm=True,
    ),
    Command(
        "find",
        "message ids by header value (Subject, From, To, Date, List-Id, ...), oldest first",
        options="find",
        handler="reading:find",
        warm=True,
    ),
    Command(
        "search",
        'messages matching a query (words, "phrases", OR, NOT, from:, date:...), newest first',
        options="search",
        handler="reading:search",
        warm=True,
    ),
    Command("count", "how many messages match a query", options="count", handler="reading:count", warm=True),
    Command(
        "tag",
        "add and remove tags on the messages of a query: tag +todo -inbox -- from:boss ($seen marks read)",
        options="tag",
        handler="tagging:tag",
        indexes=True,
    ),
    Command(
        "tags",
        "each tag of the mailbox with its count, and how many are unread",
        handler="tagging:tags",
        warm=True,
    ),
    Command(
        "folder",
        "add and remove folders on the messages of a query: folder +Archive -INBOX -- tag:done",
        options="folder",
        handler="tagging:folder",
        indexes=True,
    ),
    Command("delete", "delete a message from every tier", options="message_id", handler="lifecycle:delete"),
    Command(
        "export",
        "write the mailbox's raw mail, oldest first, as an mbox, a Maildir or .eml files",
        options="export",
        handler="lifecycle:export",
    ),
    Command(
        "expire",
        "retention: remove mail older than a date from every tier",
        options="expire",
        handler="lifecycle:expire",
    ),
    Command(
        "erase",
        "remove every trace of the mailbox (offboarding, erasure requests)",
        options="erase",
        handler="lifecycle:erase",
    ),
    Command(
        "reindex",
        "rebuild thread summaries and lookup fields from the messages; re-date undated mail by its Received header",
        handler="maintenance:reindex",
        indexes=True,
    ),
    Command("indexes", "create the store's indexes (idempotent) and report them", handler="maintenance:indexes"),
    Command(
        "stats",
        "mailbox size, storage sizes, specVersion mix, and the engines serving search and vector search",
        handler="maintenance:stats",
        warm=True,
    ),
    Command(
        "pop3",
        "download new mail from a POP3 server into the mailbox",
        options="pop3",
        handler="mail:pop3_download",
        indexes=True,
    ),
    Command(
        "migrate-gdbm",
        "copy an old UIDL-keyed GDBM message store into the mailbox",
        options="migrate_gdbm",
        handler="mail:migrate_gdbm",
        indexes=True,
    ),
    Command(
        "watch",
        "follow the mailbox: one line per newly stored message, until interrupted",
        options="watch",
        handler="watch:watch",
    ),
    Command(
        "mcp",
        "serve the mailbox to LLM agents over the Model Context Protocol",
        options="mcp",
        handler="agents:mcp",
    ),
    Command(
        "server",
        "the embedded server kept running between commands: status, stop, start",
        options="server",
        handler="server:server",
        store=False,
    ),
    Command(
        "blobs",
        "where the database's blobs are (show), and moving them to another store (migrate --to URL)",
        options="blobs",
        handler="maintenance:blobs",
    ),
    Command(
        "imap",
        "bring new mail of an IMAP account in (incremental: only what is new)",
        options="imap",
        handler="mail:imap_sync",
        indexes=True,
    ),
)

#: The commands the warm command host runs.
WARM = frozenset(command.name for command in COMMANDS if command.warm)
