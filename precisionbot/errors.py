"""The exception hierarchy. Every error we raise on purpose derives from ``PrecisionbotError``.

::

    PrecisionbotError            one clear line for the user; exit code 3 at the CLI (our own setup)
     ├── ConfigError             a bad config file, key, value or command-line argument
     ├── EngineError             the engine under test answered badly or not at all
     │    └── EngineStartError   the launcher could not bring an engine up (carries the log tail)
     ├── StoreError             the baseline store is unreachable, refused a call, or holds a corrupt object
     ├── GitHubError             a GitHub call was refused or failed
     ├── CloudError              an AWS (EC2) call was refused or failed
     └── DataError               malformed input data (a result directory, a tensor dump, a corpus file)

A precision regression is never an exception: it is a FAIL verdict. An ``EngineError`` during a check
makes that check INCONCLUSIVE with the message as its reason; elsewhere the CLI prints the message and
exits with 3.
"""

from __future__ import annotations


class PrecisionbotError(Exception):
    """Base class: ``str(exc)`` is one line naming what was wrong and how to fix it."""


class ConfigError(PrecisionbotError):
    """A bad config file, key, value or command-line argument."""


class EngineError(PrecisionbotError):
    """The engine under test answered badly (HTTP error, timeout, malformed or invalid answer)."""


class EngineStalled(EngineError):
    """The engine did not answer a request within ``engine.request_timeout_s``: later requests would wait as
    long again, so a run stops asking it (the remaining checks are INCONCLUSIVE at once)."""


class EngineStartError(EngineError):
    """The launcher could not start an engine; the message ends with the tail of its log."""


class StoreError(PrecisionbotError):
    """The baseline store failed: unreachable, refused, missing or corrupt object."""


class GitHubError(PrecisionbotError):
    """A GitHub API call was refused or failed."""


class CloudError(PrecisionbotError):
    """An AWS call was refused or failed."""


class DataError(PrecisionbotError):
    """Malformed input data: a result directory, a tensor dump, a corpus file."""
