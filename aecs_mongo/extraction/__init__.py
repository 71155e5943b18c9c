"""Text out of attachments: the built-in extractors (``formats.py``), run in worker processes
under limits of memory, CPU time, wall-clock time and output (``sandbox.py``, ``child.py``), and
``Extractor``, which applies the caller's processors and then the built-ins to one message's
attachments and says what each gave or why it could not.
"""

from __future__ import annotations

from .extractor import AttachmentText, Extractor

__all__ = ["AttachmentText", "Extractor"]
