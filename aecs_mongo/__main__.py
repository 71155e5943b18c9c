"""``python -m aecs_mongo``: the ``aecs-mongo`` command line (see ``aecs_mongo.cli``)."""

from __future__ import annotations

from .cli import run

if __name__ == "__main__":
    run()
