"""One client per engine kind: the config's kinds, the ``--engine-kind`` choices and ``CLIENTS`` are one set."""

from __future__ import annotations

import pytest

from precisionbot.commands.options.engine import URL_KINDS
from precisionbot.config import ENGINE_KINDS
from precisionbot.engines.clients import CLIENTS, client


def test_every_engine_kind_has_a_client() -> None:
    assert set(CLIENTS) == set(ENGINE_KINDS) == set(URL_KINDS)
    assert len(URL_KINDS) == len(set(URL_KINDS))


@pytest.mark.parametrize("kind", sorted(ENGINE_KINDS))
def test_the_client_reports_its_kind(kind: str) -> None:
    engine = client(kind, "http://127.0.0.1:9", batch_size=2, concurrency=1, request_timeout_s=1.0)
    try:
        assert engine.kind == kind
        assert engine.url == "http://127.0.0.1:9"
    finally:
        engine.close()


def test_an_unknown_kind_is_named() -> None:
    with pytest.raises(ValueError, match="unknown engine kind 'tgi'; one of sglang"):
        client("tgi", "http://127.0.0.1:9")
