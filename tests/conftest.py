from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from tests.support.demo_run import DemoRun, demo_once
from tests.support.moto_server import moto_server, reset_and_point_at


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """One moto server (S3 + EC2) on 127.0.0.1 for the whole session."""
    with moto_server() as url:
        yield url


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """moto's server, reset for this test, with AWS_* env (AWS_ENDPOINT_URL ...) pointing at it; yields its URL."""
    return reset_and_point_at(moto_url, monkeypatch)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """One ``precisionbot demo`` run for the session (tests/support/demo_run.py)."""
    return demo_once(tmp_path_factory)


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` need CUDA: skipped (with the reason) on machines without it, as in CI."""
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
        for item in gpu_items:
            item.add_marker(skip)
