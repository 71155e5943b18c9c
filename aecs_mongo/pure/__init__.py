"""The pure core: document shapes, keys, query plans, paging windows, GridFS chunking, index
specs, lifecycle plans, vector maths, feed and IMAP records.

No I/O and no driver calls here (``bson`` types only): every function takes values and returns
values, so it is tested without a server. ``tests/test_imports.py`` fails when a module of this
folder imports one that does I/O.
"""
