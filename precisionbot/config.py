"""The YAML configuration (ARCHITECTURE §7): one file in the engine repository (``.github/precision.yml``).

Pure: ``Config.from_mapping(data, source=...)`` validates an already-parsed mapping (the parsing lives in
``precisionbot.config_parse``); only ``load_config(path)`` touches the file system. Every section has
defaults, so the builtin engine needs no file at all (``Config.default()``). Unknown keys are errors, and
every error names the file, the key and the fix.

Sections: ``engine``, ``models``, ``suites``, ``thresholds``, ``baselines``, ``github``, ``runner``
(docs/config.md has a commented example). Command-line flags override the file: the CLI applies them with
``dataclasses.replace`` on the parsed, frozen objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precisionbot.errors import ConfigError

DEFAULT_CONFIG_PATH = ".github/precision.yml"
ENGINE_KINDS = ("sglang", "openai", "builtin", "llamacpp")
RUNNER_KINDS = ("ec2", "pool")
PROFILES = ("default", "deterministic")
PERMISSION_LEVELS = ("read", "triage", "write", "maintain", "admin")
LAUNCH_PLACEHOLDERS = ("model", "tp", "port", "args")
CONSISTENCY_CHECKS = ("match", "prefill_cache_hit", "decode_cache_hit")


@dataclass(frozen=True)
class EngineConfig:
    """How to reach (or start) the engine under test."""

    kind: str = "builtin"
    """``sglang`` (native API, primary), ``openai`` (``/v1/completions``, e.g. vLLM), ``builtin`` or
    ``llamacpp`` (llama.cpp's ``llama-server``, native API)."""
    url: str | None = None
    """Base URL of an engine that is already running; None = start one (``launch``, or the builtin engine)."""
    launch: str | None = None
    """Command template with ``{model}``, ``{tp}``, ``{port}``, ``{args}``, e.g.
    ``python -m sglang.launch_server --model-path {model} --tp {tp} --port {port} {args}``."""
    install: str | None = None
    """Shell command that builds/installs the engine from the checked-out PR (run by the workflow)."""
    args: str = ""
    """Extra launch arguments for every model (``{args}`` gets these, then the model's own)."""
    health_timeout_s: float = 1200.0
    """How long the launcher waits for ``/health_generate`` (big models load slowly)."""
    request_timeout_s: float = 600.0
    """Per-HTTP-request timeout."""
    batch_size: int = 8
    """Prompts per ``/generate`` call."""
    concurrency: int = 4
    """Calls in flight at once, so the engine can batch across them."""
    tokenizer: str | None = None
    """Optional tokenizer (a local path or hub name) for corpus text; None = the engine tokenizes."""
    faults: tuple[str, ...] = ()
    """Builtin engine only: faults to switch on (``NAME`` or ``NAME=VALUE``), for demos and calibration."""


@dataclass(frozen=True)
class RunnerConfig:
    """Where the GPU job runs: an ephemeral EC2 instance with a JIT runner, or a preexisting pool."""

    kind: str = "ec2"
    labels: tuple[str, ...] = ("self-hosted", "gpu")
    """Pool runner labels (``kind: pool``)."""
    region: str | None = None
    """None = boto3's own chain (``AWS_DEFAULT_REGION``...)."""
    instance_type: str = "g6e.xlarge"
    ami: str | None = None
    subnet: str | None = None
    security_groups: tuple[str, ...] = ()
    instance_profile: str | None = None
    root_volume_gb: int = 200
    spot: bool = False
    ttl_minutes: int = 120
    """Hard TTL: the instance powers itself off after this long, whatever happens to the job."""
    wait_timeout_s: float = 600.0
    """How long ``runner launch`` waits for the runner to come online."""
    runner_group_id: int = 1
    runner_version: str | None = None
    """GitHub Actions runner version; None = the version pinned by the user-data template."""


@dataclass(frozen=True)
class ModelConfig:
    name: str
    """Short name used in comments, thresholds keys (``<name>@tp<N>``) and the baseline store."""
    path: str
    """What ``{model}`` becomes in the launch template (hub name or local path)."""
    revision: str | None = None
    tp: int = 1
    dtype: str = "auto"
    args: str = ""
    """Launch arguments for this model (appended after ``engine.args``)."""
    runner: RunnerConfig | None = None
    """The effective runner when the model overrides some runner keys (e.g. an 8-GPU instance type)."""

    @property
    def key(self) -> str:
        return f"{self.name}@tp{self.tp}"


@dataclass(frozen=True)
class GoldenOptions:
    top_k: int = 20
    context_depths: tuple[int, ...] = (512, 2048, 4096)
    """Prompt depths (tokens) at which the corpus is teacher-forced."""
    decode_steps: int = 32
    """Positions per sample scored through decode steps (so both paths are covered)."""


@dataclass(frozen=True)
class BatchInvarianceOptions:
    batch_sizes: tuple[int, ...] = (1, 4, 16)


@dataclass(frozen=True)
class LayersOptions:
    dump_dir: str | None = None
    """Hidden-state dumps of the engine under test (``.pt``/``.npy``/``.npz``, e.g. SGLang's dumper output)."""
    baseline_dir: str | None = None
    """The same dumps from the baseline build."""


@dataclass(frozen=True)
class SuiteConfig:
    name: str
    checks: tuple[str, ...] = CONSISTENCY_CHECKS
    samples: int = 32
    max_new_tokens: int = 512
    prompt_tokens: tuple[int, int] = (1536, 4608)
    """Inclusive range of prompt lengths in tokens; each sample draws one deterministically."""
    corpus: str | None = None
    """JSONL of ``{"text"}`` or ``{"input_ids"}`` rows; None = the builtin corpus (no download)."""
    seed: int = 0
    golden: GoldenOptions = GoldenOptions()
    batch_invariance: BatchInvarianceOptions = BatchInvarianceOptions()
    layers: LayersOptions = LayersOptions()


@dataclass(frozen=True)
class GoldenThresholds:
    band_factor: float = 2.0
    """A band statistic (flip rate, KL p50/p99) fails when above ``band_factor ×`` the band's value."""
    logit_kl: float = 0.01
    """KL (nats) per position allowed when there is no band (one producer), as in kern's ``--logit-kl``."""
    confident_flip_margin: float = 1.0
    """With no band, a top-1 flip at a baseline margin above this (nats) is a confident flip."""
    max_abs_delta: float | None = None
    """Max |Δ logprob| over shared top-k ids (test_logprobs.py's 1e-5 rule); None = not enforced."""
    max_nll_increase: float | None = 1e-3
    """Nats per token: fail when the candidate's mean logprob of the corpus tokens is lower than the baseline's by
    more than this *and* by more than 4 standard errors (a systematic drift, like a perplexity increase of
    0.1 %, that no single position shows); None = not enforced."""


@dataclass(frozen=True)
class ThresholdSet:
    """The thresholds a verdict is judged by, for one (model, tp, profile)."""

    kl_div: float = 0.0025
    """SGLang's threshold on ``mean_k3`` (strict ``<``); 0.0025 is Qwen3-Next-80B tp4 in SGLang CI."""
    token_k3: float = 1e-2
    """Per-token k3 above which a position counts as "over"."""
    max_frac_over: float = 0.02
    """Largest allowed fraction of positions with k3 > ``token_k3``."""
    max_token_k3: float = 0.5
    """Largest allowed single-position k3 (0.5 ≈ |δ| of 1.2 nats): a handful of tokens carry the mean."""
    onset_k3: float = 1e-3
    """Per-sample onset: first position whose k3 exceeds this."""
    cache_vs_match_factor: float = 4.0
    """A cache helper also fails when its median per-sample mean k3 exceeds this × ``match``'s (same run):
    the cache-hit path must be as exact as the no-cache path, whatever the engine's own noise level."""
    cache_vs_match_floor_k3: float = 1e-6
    """... and exceeds this floor (below it both are noise)."""
    batch_abs_delta: float = 1e-5
    """batch_invariance: max |Δ logprob| over shared top-k between batch shapes."""
    layers_rel_diff: float = 1e-3
    golden: GoldenThresholds = GoldenThresholds()


DEFAULT_PROFILES: Mapping[str, ThresholdSet] = {
    "default": ThresholdSet(),
    # Once every kernel is batch-invariant SGLang measures 0 and gates at 1e-9.
    "deterministic": ThresholdSet(
        kl_div=1e-9,
        token_k3=1e-9,
        max_frac_over=0.0,
        max_token_k3=1e-9,
        onset_k3=1e-9,
        cache_vs_match_factor=1.0,
        cache_vs_match_floor_k3=1e-9,
        golden=GoldenThresholds(
            band_factor=1.0, logit_kl=1e-9, confident_flip_margin=0.0, max_abs_delta=1e-5, max_nll_increase=1e-9
        ),
    ),
}


@dataclass(frozen=True)
class ThresholdsConfig:
    profile: str = "default"
    profiles: Mapping[str, ThresholdSet] = field(default_factory=lambda: dict(DEFAULT_PROFILES))
    overrides: Mapping[str, Mapping[str, ThresholdSet]] = field(default_factory=dict)
    """``"<model>@tp<N>"`` or ``"<model>"`` → profile → thresholds (already merged over the profile)."""

    def resolve(self, model: str | None, tp: int | None, profile: str | None = None) -> ThresholdSet:
        """Thresholds for ``model`` at ``tp``: ``<model>@tp<N>``, then ``<model>``, then the profile."""
        name = profile or self.profile
        if name not in self.profiles:
            raise ConfigError(f"unknown threshold profile {name!r}; use one of {', '.join(self.profiles)}")
        keys = ([f"{model}@tp{tp}"] if model is not None and tp is not None else []) + (
            [model] if model is not None else []
        )
        for key in keys:
            per_model = self.overrides.get(key)
            if per_model is not None and name in per_model:
                return per_model[name]
        return self.profiles[name]


@dataclass(frozen=True)
class BaselinesConfig:
    store: str = ".precisionbot/baselines"
    """``s3://bucket/prefix``, ``file://dir`` or a directory path."""


@dataclass(frozen=True)
class PermissionsConfig:
    rerun: str = "write"
    baseline: str = "maintain"


@dataclass(frozen=True)
class GitHubConfig:
    paths: tuple[str, ...] = ()
    """Globs of kernel paths that trigger a run on ``pull_request``; empty = every PR."""
    run_label: str = "precision"
    """A label that requests a run on a PR."""
    fork_label: str = "precision-safe-to-test"
    """A maintainer's label that allows a PR from a fork to run (never automatic)."""
    comment_per_suite: bool = False
    pr_suite: str = "pr"
    baseline_suite: str = "baseline"
    permissions: PermissionsConfig = PermissionsConfig()


DEFAULT_SUITES: Mapping[str, SuiteConfig] = {
    "consistency": SuiteConfig(name="consistency"),
    "pr": SuiteConfig(name="pr", checks=(*CONSISTENCY_CHECKS, "golden")),
    "baseline": SuiteConfig(name="baseline", checks=("golden",)),
}


@dataclass(frozen=True)
class Config:
    engine: EngineConfig = EngineConfig()
    models: tuple[ModelConfig, ...] = ()
    suites: Mapping[str, SuiteConfig] = field(default_factory=lambda: dict(DEFAULT_SUITES))
    thresholds: ThresholdsConfig = ThresholdsConfig()
    baselines: BaselinesConfig = BaselinesConfig()
    github: GitHubConfig = GitHubConfig()
    runner: RunnerConfig = RunnerConfig()
    source: str = "<defaults>"
    """Where this came from (a file path), for error messages."""

    @classmethod
    def default(cls) -> Config:
        return cls()

    @classmethod
    def from_mapping(cls, data: Any, source: str = "<config>") -> Config:
        from precisionbot.config_parse import parse_config

        return parse_config(data, source)

    def suite(self, name: str) -> SuiteConfig:
        if name not in self.suites:
            raise ConfigError(
                f"{self.source}: no suite {name!r}; define it under 'suites' or use one of "
                f"{', '.join(sorted(self.suites))}"
            )
        return self.suites[name]

    def model(self, name: str) -> ModelConfig:
        for m in self.models:
            if m.name == name:
                return m
        known = ", ".join(m.name for m in self.models) or "none configured"
        raise ConfigError(f"{self.source}: no model {name!r} under 'models' (known: {known})")

    def runner_for(self, model: ModelConfig | None) -> RunnerConfig:
        return model.runner if model is not None and model.runner is not None else self.runner

    def thresholds_for(self, model: str | None, tp: int | None, profile: str | None = None) -> ThresholdSet:
        return self.thresholds.resolve(model, tp, profile)


def resolve_thresholds(config: Config, model: str | None, tp: int | None, profile: str | None = None) -> ThresholdSet:
    """The thresholds that judge ``model`` at ``tp`` under ``profile`` (None = the config's profile)."""
    return config.thresholds_for(model, tp, profile)


def load_config(path: str | Path) -> Config:
    """Read and validate a YAML config file. A missing file or bad YAML is a ``ConfigError``."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror or exc}; check the --config path") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{p}: YAML syntax error{where}: {problem}; fix the file's syntax") from exc
    return Config.from_mapping({} if data is None else data, source=str(p))


def load_config_or_default(path: str | Path | None) -> Config:
    """``--config FILE`` when given, else ``.github/precision.yml`` when the repository has one, else the default."""
    if path:
        return load_config(path)
    if Path(DEFAULT_CONFIG_PATH).is_file():
        return load_config(DEFAULT_CONFIG_PATH)
    return Config.default()
