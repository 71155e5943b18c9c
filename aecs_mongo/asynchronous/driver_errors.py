"""The driver's exceptions as the package's own (``aecs_mongo/errors.py``), for the code above
the store, which imports no driver: ``database_errors()`` around a block, ``translated(exc)``
for one exception caught whole."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pymongo.errors import ConfigurationError, OperationFailure, PyMongoError, ServerSelectionTimeoutError

from ..errors import DatabaseError, DatabaseUriError, ServerUnavailableError
from .statements import errmsg

__all__ = ["database_errors", "translated"]


def translated(exc: BaseException) -> BaseException:
    """The package's exception for a driver exception, its ``__cause__`` set to it: a server
    that did not answer in time is ``ServerUnavailableError``, an unusable URI
    ``DatabaseUriError``, a refused statement ``DatabaseError`` with the server's message and
    code, any other driver failure ``DatabaseError``. Anything else is returned as it is."""
    found: DatabaseError
    if isinstance(exc, ServerSelectionTimeoutError):
        found = ServerUnavailableError(str(exc))
    elif isinstance(exc, ConfigurationError):
        found = DatabaseUriError(str(exc))
    elif isinstance(exc, OperationFailure):
        found = DatabaseError(errmsg(exc), code=exc.code)
    elif isinstance(exc, PyMongoError):
        found = DatabaseError(str(exc))
    else:
        return exc
    found.__cause__ = exc
    return found


@contextlib.contextmanager
def database_errors() -> Iterator[None]:
    """Raise a driver exception from the block as the package's (``translated``)."""
    try:
        yield
    except PyMongoError as exc:
        raise translated(exc) from exc
