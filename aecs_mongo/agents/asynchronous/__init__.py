"""The agent tools and the LangChain glue's reads, written once over an ``AsyncMessageStore``;
``agents/synchronous/`` is generated from here by ``scripts/unasync.py``."""
