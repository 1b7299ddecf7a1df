"""The suite options every suite-running command shares: ``--checks`` and the sizes, read once into
:class:`SuiteFlags` and applied over the config's suite.

``check``, ``baseline record``, ``bisect``, ``calibrate`` and ``demo`` run a suite from the config with the
command line's overrides. The flags win over the config; a size that cannot run (a non-positive count, samples
that do not fill the suite's branches, an unknown check) is a setup error naming the flag.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Any

from precisionbot.config import DEFAULT_SUITES, SuiteConfig
from precisionbot.config.fields import did_you_mean, parse_int_range
from precisionbot.errors import ConfigError
from precisionbot.results import CHECK_NAMES

SIZE_FLAGS = ("samples", "max_new_tokens", "prompt_tokens", "golden_depths")
"""The size flags a recorded baseline must share with the PR's check (``record_hint`` repeats them)."""


def add_size_flags(parser: Any, *, golden_help: str | None = None) -> None:
    """``--samples``, ``--max-new-tokens``, ``--prompt-tokens`` and ``--golden-depths`` (no default: the
    suite's own sizes apply unless one is given); the help says what the built-in suites use."""
    parser.add_argument(
        "--samples", type=int, metavar="N", help=f"prompts (conversations) per check ({builtin_defaults('samples')})"
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        metavar="N",
        help=f"tokens generated per prompt ({builtin_defaults('max_new_tokens')})",
    )
    parser.add_argument(
        "--prompt-tokens",
        metavar="N|LO..HI",
        help=f"prompt length in tokens, or a range ({builtin_defaults('prompt_tokens')})",
    )
    parser.add_argument(
        "--golden-depths",
        metavar="N,N,...",
        help=golden_help or "context depths (tokens) golden is teacher-forced at (the suite's)",
    )


def builtin_defaults(size: str) -> str:
    """``default: the suite's; 32 for consistency, pr, baseline, 9 for sglang-unified``: one size of the built-in
    suites (``DEFAULT_SUITES``), grouped by value, for a flag's help."""
    by_value: dict[str, list[str]] = {}
    for name, suite in DEFAULT_SUITES.items():
        value = getattr(suite, size)
        text = f"{value[0]}..{value[1]}" if isinstance(value, tuple) else str(value)
        by_value.setdefault(text, []).append(name)
    if len(by_value) == 1:
        return f"default: the suite's; {next(iter(by_value))} in every built-in suite"
    return "default: the suite's; " + ", ".join(f"{v} for {', '.join(names)}" for v, names in by_value.items())


@dataclass(frozen=True)
class SuiteFlags:
    """The command line's overrides of a suite, as given (``None``: the config's value stands)."""

    checks: str | None = None
    samples: int | None = None
    max_new_tokens: int | None = None
    prompt_tokens: str | None = None
    golden_depths: str | None = None
    layers_dump: str | None = None
    layers_baseline: str | None = None
    exact_sizes: bool | None = None
    """``check --exact-sizes``: keep the sizes below the engine's cache granularity (the suite's ``exact_sizes``)."""

    def apply(self, suite: SuiteConfig) -> SuiteConfig:
        """``suite`` with these overrides."""
        changes: dict[str, Any] = {}
        if self.checks:
            changes["checks"] = parse_checks(self.checks)
        if _positive(self.samples, "--samples") is not None:
            changes["samples"] = self.samples
        if _positive(self.max_new_tokens, "--max-new-tokens") is not None:
            changes["max_new_tokens"] = self.max_new_tokens
        if self.prompt_tokens is not None:
            try:
                changes["prompt_tokens"] = parse_int_range(self.prompt_tokens)
            except ValueError as exc:
                raise ConfigError(f"--prompt-tokens {self.prompt_tokens!r}: {exc}; write N or LO..HI") from exc
        if self.exact_sizes:
            changes["exact_sizes"] = True
        if self.golden_depths:
            changes["golden"] = dataclasses.replace(suite.golden, context_depths=parse_depths(self.golden_depths))
        if self.layers_dump or self.layers_baseline:
            changes["layers"] = dataclasses.replace(
                suite.layers,
                dump_dir=self.layers_dump or suite.layers.dump_dir,
                baseline_dir=self.layers_baseline or suite.layers.baseline_dir,
            )
        out = dataclasses.replace(suite, **changes)
        if out.samples % out.branches:
            raise ConfigError(
                f"--samples {out.samples}: suite {suite.name!r} has {out.branches} branches per group, so samples "
                f"must be a multiple of {out.branches}"
            )
        return out

    def sizes(self) -> tuple[str, ...]:
        """The size flags as given, to repeat on another command line (``--samples 8 --prompt-tokens 64..128``)."""
        return tuple(
            f"--{name.replace('_', '-')} {getattr(self, name)}"
            for name in SIZE_FLAGS
            if getattr(self, name) is not None
        )


def suite_flags(args: argparse.Namespace) -> SuiteFlags:
    """The overrides a command's parser took (a command without a flag leaves it ``None``)."""
    return SuiteFlags(**{f.name: getattr(args, f.name, None) for f in dataclasses.fields(SuiteFlags)})


def parse_checks(text: str) -> tuple[str, ...]:
    """``--checks match,golden``: known check names, at least one."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in CHECK_NAMES]
    if bad or not names:
        hint = did_you_mean(bad[0], CHECK_NAMES) if len(bad) == 1 else None
        fix = f"{hint} (checks: {', '.join(CHECK_NAMES)})" if hint else f"use {', '.join(CHECK_NAMES)}"
        raise ConfigError(f"--checks: unknown check(s) {', '.join(bad) or '(none)'}; {fix}")
    return names


def parse_depths(text: str) -> tuple[int, ...]:
    """``--golden-depths 256,512``: sorted, distinct token counts of at least 16."""
    try:
        depths = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        depths = ()
    if not depths or depths[0] < 16:
        raise ConfigError(f"--golden-depths {text!r}: write token counts of at least 16, e.g. 256,512")
    return depths


def _positive(value: int | None, flag: str) -> int | None:
    if value is not None and value < 1:
        raise ConfigError(f"{flag} must be a positive integer (got {value})")
    return value


def refuse_misfits(engine: Any, *parts: tuple[SuiteConfig, tuple[str, ...]]) -> None:
    """A setup error (before anything runs) naming every part of the suites whose sizes cannot fit the engine's
    context: each ``(suite, checks)`` pair is judged for those checks."""
    from precisionbot.checks.fit import context_length, misfits

    found = context_length(engine.server_info().raw)
    if found is None:
        return  # the engine does not say; a request that is too long fails with the engine's own error
    problems = [p for suite, checks in parts for p in misfits(suite, checks, *found)]
    if problems:
        names = list(dict.fromkeys(repr(suite.name) for suite, _ in parts))
        which = f"suite {names[0]} does" if len(names) == 1 else f"suites {' and '.join(names)} do"
        raise ConfigError(f"{which} not fit this engine: {'; '.join(problems)}")
