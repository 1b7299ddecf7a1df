"""Step outputs for ``runner launch``: appended to ``$GITHUB_OUTPUT`` in Actions, printed otherwise.

Kept here (small, self-contained) so the runner commands do not depend on the GitHub package. Values use
the heredoc form with a random delimiter, so a value can never end the block early or inject another output.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path

from precisionbot.errors import ConfigError


def format_outputs(values: Mapping[str, str], delimiter: str | None = None) -> str:
    """``name<<DELIM\\nvalue\\nDELIM\\n`` for each output (GitHub's multiline syntax, safe for any value)."""
    chunks = []
    for name, value in values.items():
        delim = delimiter or f"precisionbot_{secrets.token_hex(8)}"
        if delim in value or delim in name:
            raise ValueError(f"output delimiter {delim!r} occurs in output {name!r}")
        chunks.append(f"{name}<<{delim}\n{value}\n{delim}\n")
    return "".join(chunks)


def write_outputs(values: Mapping[str, str], github_output: str | None) -> str | None:
    """Append to the ``GITHUB_OUTPUT`` file if given and return ``None``; else return ``key=value`` lines."""
    if not github_output:
        return "".join(f"{name}={value}\n" for name, value in values.items())
    try:
        with Path(github_output).open("a", encoding="utf-8") as fh:
            fh.write(format_outputs(values))
    except OSError as exc:
        raise ConfigError(f"cannot append to GITHUB_OUTPUT={github_output}: {exc.strerror or exc}") from exc
    return None
