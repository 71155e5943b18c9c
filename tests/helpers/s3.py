"""An S3-compatible server for the tests: moto's server mode as a subprocess, and a fresh
bucket with the AWS environment pointing at it (fixtures; import them where they are used)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator

import pytest

from .children import free_port, serving

SECRET = "s3cr3t-never-shown"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """moto's S3-compatible server as a subprocess (``python -m moto.server``): its endpoint."""
    pytest.importorskip("moto", reason="moto[server] is in the test extra (scripts/test.sh installs it)")
    pytest.importorskip("obstore", reason="obstore is in the objects extra (scripts/test.sh installs it)")
    port = free_port()
    server = serving([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], port, "moto's server")
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(timeout=30)


@pytest.fixture
def bucket(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on the server; the AWS environment points obstore at it."""
    import boto3

    for name, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_server,
        "AWS_ALLOW_HTTP": "true",
    }.items():
        monkeypatch.setenv(name, value)
    name = f"b{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket=name)
    return name
