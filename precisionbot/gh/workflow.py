"""Talking to the Actions runner: workflow commands, step outputs, the job summary.

:func:`escape` is the one function that escapes text for workflow commands (``::warning::...``), as the
runner's own toolkit does: ``%``, CR and LF in the message; also ``:`` and ``,`` in a property value.
Outputs use the heredoc form with a random delimiter, so a multi-line value (the matrix JSON, a reason
quoting a user) can neither end early nor smuggle in another output.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path

from precisionbot.errors import ConfigError

SUMMARY_LIMIT_BYTES = 1024 * 1024
"""GitHub refuses a step summary of 1 MiB or more."""


def escape(value: str, *, property: bool = False) -> str:
    out = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property:
        out = out.replace(":", "%3A").replace(",", "%2C")
    return out


_COMMAND_STARTS = ("::", "##[")
"""How a log line starts a workflow command (``::error::``, ``::add-mask::``, ``::stop-commands::``) or an old
``##[set-output ...]`` one; the runner looks at each line after leading whitespace."""


def log_text(value: str) -> str:
    """Untrusted text (a path, a ref, a reason quoting a payload) made safe to print in a job log.

    The runner reads workflow commands line by line, so CR and LF are escaped as in :func:`escape` (no new
    line can begin inside the text) and a text that itself starts like a command gets a zero-width space in
    front (shown, never run). Use it for every reason or path printed outside :func:`command`."""
    return _guard(escape(value))


def log_block(text: str) -> str:
    """Multi-line text for the log (a rendered comment): each line guarded as in :func:`log_text`."""
    return "\n".join(_guard(line.replace("\r", "%0D")) for line in text.split("\n"))


def _guard(line: str) -> str:
    return "\u200b" + line if line.lstrip().startswith(_COMMAND_STARTS) else line


def command(name: str, message: str, **properties: str) -> str:
    """``::name key=value,...::message`` with every part escaped."""
    props = ",".join(f"{key}={escape(value, property=True)}" for key, value in properties.items())
    return f"::{name}{' ' + props if props else ''}::{escape(message)}"


def format_outputs(values: Mapping[str, str], delimiter: str | None = None) -> str:
    """``name<<DELIM\\nvalue\\nDELIM\\n`` per output; a fresh random delimiter per value unless given."""
    chunks = []
    for name, value in values.items():
        delim = delimiter or f"ghadelimiter_{secrets.token_hex(16)}"
        if delim in value or "\n" in name or "<<" in name:
            raise ValueError(f"cannot write output {name!r} safely with delimiter {delim!r}")
        chunks.append(f"{name}<<{delim}\n{value}\n{delim}\n")
    return "".join(chunks)


def write_outputs(values: Mapping[str, str], github_output: str | None) -> str:
    """Append to ``$GITHUB_OUTPUT`` when set; always return ``name=value`` lines for the log (single line
    values only, so the log stays readable)."""
    if github_output:
        try:
            with Path(github_output).open("a", encoding="utf-8") as fh:
                fh.write(format_outputs(values))
        except OSError as exc:
            raise ConfigError(f"cannot append to GITHUB_OUTPUT={github_output}: {exc.strerror or exc}") from exc
    return "".join(
        f"{k}={log_text(v) if len(v) < 200 and chr(10) not in v else '<' + str(len(v)) + ' chars>'}\n"
        for k, v in values.items()
    )


def fit_summary(markdown: str, note: str = "\n\n*(truncated: the full report is in the artifact)*\n") -> str:
    """Cut ``markdown`` so that it stays under the step-summary limit (in UTF-8 bytes)."""
    data = markdown.encode("utf-8")
    if len(data) < SUMMARY_LIMIT_BYTES:
        return markdown
    room = SUMMARY_LIMIT_BYTES - len(note.encode("utf-8")) - 1
    return data[:room].decode("utf-8", errors="ignore") + note


def write_summary(markdown: str, step_summary: str | None) -> bool:
    """Append to ``$GITHUB_STEP_SUMMARY``; False when there is none (outside Actions)."""
    if not step_summary:
        return False
    try:
        with Path(step_summary).open("a", encoding="utf-8") as fh:
            fh.write(fit_summary(markdown))
    except OSError as exc:
        raise ConfigError(f"cannot write GITHUB_STEP_SUMMARY={step_summary}: {exc.strerror or exc}") from exc
    return True
