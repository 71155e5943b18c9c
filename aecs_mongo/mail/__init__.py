"""Mail in and out: the protocol and file adapters around a store.

``sources`` reads .eml files, directories, Maildir folders and mbox files; ``sinks`` writes
them back; ``pop3`` the POP3 download and dispatch loop; ``imap`` the incremental
IMAP sync. Each is a thin shell over the store's public API.
"""
