"""``python -m aecs_mongo``: the ``aecs-mongo`` command line (see ``aecs_mongo.cli``)."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
