"""Engine clients behind one small protocol (``precisionbot.engines.base.Engine``)."""

from __future__ import annotations

from precisionbot.engines.base import Engine, GenerateRequest, Generation, ServerInfo

__all__ = ["Engine", "GenerateRequest", "Generation", "ServerInfo"]
