"""The I/O: the async store (``AsyncMessageStore``, a facade) and one module per concern.

Hand-written; ``aecs_mongo/synchronous/`` is generated from this folder by
``scripts/unasync.py`` with the same module names. The rules these modules follow live in the
pure modules of ``aecs_mongo/pure/``; what is here is the order of reads and writes.
"""
