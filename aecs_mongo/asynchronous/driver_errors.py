"""The driver's exceptions as the package's own (``aecs_mongo/errors.py``), for the code above
the store, which imports no driver: ``database_errors()``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pymongo.errors import ConfigurationError, OperationFailure, PyMongoError, ServerSelectionTimeoutError

from ..errors import DatabaseError, DatabaseUriError, ServerUnavailableError
from .statements import errmsg

__all__ = ["database_errors"]


@contextlib.contextmanager
def database_errors() -> Iterator[None]:
    """Raise a driver exception from the block as the package's: a server that did not answer
    in time as ``ServerUnavailableError``, an unusable URI as ``DatabaseUriError``, a refused
    statement as ``DatabaseError`` with the server's message and code, any other driver failure
    as ``DatabaseError``. The driver's exception is the ``__cause__``."""
    try:
        yield
    except ServerSelectionTimeoutError as exc:
        raise ServerUnavailableError(str(exc)) from exc
    except ConfigurationError as exc:
        raise DatabaseUriError(str(exc)) from exc
    except OperationFailure as exc:
        raise DatabaseError(errmsg(exc), code=exc.code) from exc
    except PyMongoError as exc:
        raise DatabaseError(str(exc)) from exc
