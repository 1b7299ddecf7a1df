"""moto's server on 127.0.0.1 for S3 and EC2 over real HTTP (boto3 points at it via ``AWS_ENDPOINT_URL``).

One server per test session (starting one costs ~0.7 s); moto's backends are process-wide, so every test that
asks for ``aws`` gets them reset first and never sees an earlier test's buckets or instances.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextmanager
def moto_server() -> Iterator[str]:
    """Start ThreadedMotoServer on a free port of 127.0.0.1; yield its URL; stop it afterwards."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def reset_and_point_at(url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Clear moto's state and point boto3's own chain (env) at ``url``."""
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=10).close()
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return url
