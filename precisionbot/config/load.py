"""Reading the configuration: a YAML file (size-capped, depth-checked) or an already-parsed mapping.

The only part of ``precisionbot.config`` that touches the file system. Every error names the file, the key and
the fix; unknown keys are errors (``precisionbot.config.parse``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml

from precisionbot.config.parse import parse_config
from precisionbot.config.settings import CONFIG_MAX_BYTES, DEFAULT_CONFIG_PATH, Config
from precisionbot.errors import ConfigError
from precisionbot.untrusted import TooLarge, read_capped


def from_mapping(data: Any, source: str = "<config>") -> Config:
    """Validate an already-parsed mapping (the YAML document) into a ``Config``; ``source`` names it in errors."""
    return parse_config(data, source)


def load_config(path: str | Path) -> Config:
    """Read and validate a YAML config file. A missing file or bad YAML is a ``ConfigError``."""
    p = Path(path)
    try:
        raw = read_capped(p, CONFIG_MAX_BYTES)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror or exc}; check the --config path") from exc
    except TooLarge:
        raise ConfigError(f"{p}: larger than {CONFIG_MAX_BYTES // 1024} KiB; is --config the right file?") from None
    try:
        text = raw.decode("utf-8")
        if flow_depth(text) > MAX_FLOW_DEPTH:
            raise RecursionError
        data = yaml.safe_load(text)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from exc
    except RecursionError:
        raise ConfigError(f"{p}: nested too deeply; a config needs a few levels") from None
    except ValueError as exc:  # e.g. an integer of thousands of digits
        raise ConfigError(f"{p}: a value cannot be read: {str(exc)[:120]}; fix the value") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{p}: YAML syntax error{where}: {problem}; fix the file's syntax") from exc
    return from_mapping({} if data is None else data, source=str(p))


MAX_FLOW_DEPTH = 64
"""PyYAML's scanner is quadratic in the nesting of ``[``/``{`` (20,000 levels take seconds, a megabyte of
them hours): deeper text is refused before it is parsed. Brackets inside strings count too (harmless)."""


def flow_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in ``text``, a closing bracket never going below 0 (vectorised: no
    parsing, a megabyte in milliseconds)."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    step = np.isin(codes, (ord("["), ord("{"))).astype(np.int64) - np.isin(codes, (ord("]"), ord("}")))
    if not step.size:
        return 0
    level = np.cumsum(step)
    # Clamped at 0 (as a reader counts): subtract the lowest level reached so far when it is negative.
    return int(np.max(level - np.minimum(np.minimum.accumulate(level), 0)))


def load_config_or_default(path: str | Path | None) -> Config:
    """``--config FILE`` when given, else ``.github/precision.yml`` when the repository has one, else the default."""
    if path:
        return load_config(path)
    if Path(DEFAULT_CONFIG_PATH).is_file():
        return load_config(DEFAULT_CONFIG_PATH)
    return Config.default()
