"""``python -m aecs_mongo``: the ``aecs-mongo`` command line (see ``aecs_mongo.cli``), through
the warm path's thin client (``aecs_mongo.warm.client``)."""

from __future__ import annotations

from .warm.client import run

if __name__ == "__main__":
    run()
