"""The configuration's model: frozen dataclasses for every section of ``.github/precision.yml``, with defaults.

Pure data: validating a parsed mapping is ``precisionbot.config.parse``, reading the file is
``precisionbot.config.load``. Every section has defaults, so the builtin engine needs no file at all
(``Config.default()``).

Sections: ``engine``, ``models``, ``suites``, ``thresholds``, ``baselines``, ``github``, ``runner``
(docs/config.md has a commented example). Command-line flags override the file: the CLI applies them with
``dataclasses.replace`` on the parsed, frozen objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import overload

from precisionbot.errors import ConfigError
from precisionbot.results.run import CONSISTENCY_CHECKS

DEFAULT_CONFIG_PATH = ".github/precision.yml"
CONFIG_MAX_BYTES = 1024 * 1024
"""A config is a few KiB; a bigger file is a mistake (or hostile)."""
ENGINE_KINDS = ("sglang", "openai", "builtin", "llamacpp", "vllm")
RUNNER_KINDS = ("ec2", "pool", "host", "slurm")
PROFILES = ("default", "deterministic")
PERMISSION_LEVELS = ("read", "triage", "write", "maintain", "admin")
LAUNCH_PLACEHOLDERS = ("model", "tp", "port", "args", "nnodes", "node_rank", "dist_init_addr")
BASELINE_MODES = ("stored", "merge-base")
SEPARATORS = ("strip-bos", "upstream")


@dataclass(frozen=True)
class EngineConfig:
    """How to reach (or start) the engine under test."""

    kind: str = "builtin"
    """``sglang`` (native API, primary), ``vllm`` (vLLM's ``/v1/completions`` with its prefix cache),
    ``openai`` (any ``/v1/completions``), ``builtin`` or ``llamacpp`` (llama.cpp's ``llama-server``, native API)."""
    url: str | None = None
    """Base URL of an engine that is already running; None = start one (``launch``, or the builtin engine)."""
    spec_url: str | None = None
    """Base URL of the same build started with speculative decoding (vLLM ``--speculative-config``, SGLang
    ``--speculative-algorithm``): the ``spec_decode`` check's spec arm, ``url`` its plain arm. Engines fix
    speculation at launch, so the check needs the two servers; the builtin engine starts its own arms."""
    launch: str | None = None
    """Command template with ``{model}``, ``{tp}``, ``{port}``, ``{args}``, e.g.
    ``python -m sglang.launch_server --model-path {model} --tp {tp} --port {port} {args}``; a multi-node engine
    adds ``--nnodes {nnodes} --node-rank {node_rank} --dist-init-addr {dist_init_addr}`` (one process per node of
    a Slurm allocation)."""
    install: str | None = None
    """Shell command that builds/installs the engine from the checked-out PR (run by the workflow); ``bisect``
    and the merge-base A/B run it in each other commit's checkout (a failure there skips that commit)."""
    checkout: str = "."
    """The engine's git clone, for ``bisect`` and ``baselines.mode: merge-base`` (its commits are built in
    worktrees of it; ``engine.launch`` runs in the commit's worktree)."""
    args: str = ""
    """Extra launch arguments for every model (``{args}`` gets these, then the model's own)."""
    health_timeout_s: float = 1200.0
    """How long the launcher waits for ``/health_generate`` (big models load slowly)."""
    request_timeout_s: float = 180.0
    """Per-HTTP-request timeout. A request is one batch (``batch_size`` prompts of a few thousand tokens), which
    a GPU engine answers in seconds and the CPU builtin engine in well under a minute; an engine that has not
    answered in 3 minutes is stalled (a wedged collective, a server stuck after SIGTERM), and the run stops
    asking it and says so with its log's last lines, instead of a CI log that stays silent for 10 minutes."""
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
    """Where the GPU job runs: an ephemeral EC2 instance with a JIT runner, a preexisting pool, a fresh container
    on the team's own GPU hosts (``host``), or a Slurm job (``slurm``)."""

    kind: str = "ec2"
    labels: tuple[str, ...] = ("self-hosted", "gpu")
    """Pool runner labels (``kind: pool``)."""
    region: str | None = None
    """None = boto3's own chain (``AWS_DEFAULT_REGION``...)."""
    instance_type: str = "g6e.xlarge"
    price_per_hour: float | None = None
    """USD per hour of ``instance_type``, for the comment's price estimate; None = the package's on-demand list
    price (``results.cost.PRICES``), which is no price for a type not in that table."""
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
    runner_sha256: str | None = None
    """sha256 of that version's runner tarball, verified on the instance before it runs (x64 tarball)."""
    runner_user: str | None = None
    """The instance account the job runs as; None = ``precisionbot-runner``, created without sudo."""
    queue: str | None = None
    """``kind: host``: the store URI of the job queue the hosts' agents read (``s3://bucket/host-queue``)."""
    gpus: int = 1
    """``kind: host``: GPUs the job's container gets; ``kind: slurm``: GPUs per node (``--gres=gpu:N``; 0 = none)."""
    partition: str | None = None
    """``kind: slurm``: the partition ``sbatch`` submits to; None = the cluster's default partition."""
    account: str | None = None
    """``kind: slurm``: the account the job is charged to; None = the submitting user's default."""
    nodes: int = 1
    """``kind: slurm``: nodes in the allocation; above 1, the engine launches on every node (``{node_rank}``)."""
    runner_dir: str | None = None
    """``kind: slurm``: the unpacked actions/runner folder on the cluster's shared filesystem; each job runs a
    private copy of it."""


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
class CacheConsistencyOptions:
    """The ``cache_consistency`` check (after SGLang's ``cache_consistency_jitter.py``)."""

    prefixes: int = 4
    """Independent prefixes (corpus prompts), each continued greedily once (the baseline)."""
    cuts: int = 4
    """Requests per prefix that restart from a random cut of its continuation (shuffled, batched together)."""
    new_tokens: int | None = None
    """Baseline continuation length; None = the suite's ``max_new_tokens``."""
    top_k: int = 8
    """Top-k logprobs compared at every re-scored position."""


@dataclass(frozen=True)
class SuiteConfig:
    name: str
    checks: tuple[str, ...] = CONSISTENCY_CHECKS
    samples: int = 32
    max_new_tokens: int = 512
    prompt_tokens: tuple[int, int] = (1536, 4608)
    """Inclusive range of prompt lengths in tokens; each sample draws one deterministically."""
    exact_sizes: bool = False
    """Keep ``prompt_tokens`` and ``max_new_tokens`` as given; False: ``check`` rounds them up to the engine's
    cache granularity so every single-turn cache helper can hit (``checks.cache_sizes``)."""
    corpus: str | None = None
    """JSONL of ``{"text"}`` or ``{"input_ids"}`` rows; None = the builtin corpus (no download)."""
    seed: int = 0
    golden: GoldenOptions = GoldenOptions()
    batch_invariance: BatchInvarianceOptions = BatchInvarianceOptions()
    layers: LayersOptions = LayersOptions()
    # --- SGLang's multi-turn helpers (kl_multiturn_utils.py); the defaults are the single-turn helpers ---
    turns: int = 1
    """Generated turns per conversation; each later turn appends the previous output and a corpus suffix.
    ``decode_cache_hit`` always runs at least 2. 1 (with ``branches: 1``) = kl_test_utils' single-turn helpers."""
    branches: int = 1
    """Conversations per group sharing one prefix (``samples`` = groups x branches; ``groups`` in YAML)."""
    interleave: bool = True
    """With branches: submit later turns interleaved across groups (g0b0, g1b0, ..., g0b1, ...), as upstream."""
    suffix_tokens: tuple[int, int] = (64, 256)
    """Length range of the corpus suffix of each branch and each later turn (multi-turn shape only)."""
    request_batch_size: int | None = None
    """Send each turn's requests in sequential batches of this many (None = all at once, engine batching)."""
    request_delay_s: float = 0.0
    """Pause between those batches (upstream ``inter_batch_delay_s``)."""
    replay_batch_size: int | None = None
    """Replay in batches of this many, flushing before each (upstream multi-turn: 1); None = one flush."""
    temperature: float = 0.0
    """Decode temperature of every helper and its replay: 0 = kl_test_utils (greedy), 1 = kl_multiturn_utils
    (sampled: mean k3 is then an unbiased estimate of KL(decode || replay))."""
    sampling_seed: int | None = 0
    """Base of the per-request ``sampling_seed`` when temperature > 0 (None = unseeded, as upstream)."""
    separator: str = "upstream"
    """decode_cache_hit's turn-2 suffix: ``upstream`` (the default) = the tokenizer's own encoding of ``","``
    (BOS included when it adds one, as kl_test_utils, so numbers port 1:1); ``strip-bos`` = without that BOS
    (what precisionbot produced before it matched upstream here)."""
    cache_asserts: bool = True
    """Multi-turn shape: check every turn's ``cached_tokens`` with SGLang's rules (a violation FAILS)."""
    mamba_checkpoint_lag: int = 0
    """``make_mamba_decode_assert``'s ``max_checkpoint_lag`` when the server reports a mamba cache."""
    kl_div: float | None = None
    """This suite's own ``kl_div`` under the default profile (a kit's ``kl_threshold``); None = the profile's."""
    cache_consistency: CacheConsistencyOptions = CacheConsistencyOptions()

    @property
    def multi_turn(self) -> bool:
        """The kl_multiturn_utils shape (several turns or branches): exact cache assertions, no hit filter."""
        return self.turns > 1 or self.branches > 1

    @property
    def groups(self) -> int:
        return max(1, self.samples // self.branches)

    def conversation_params(self) -> dict[str, object]:
        """The options that change what the helpers compute, when not the defaults (for the signature)."""
        d = SuiteConfig(name=self.name)
        keys: tuple[str, ...] = ("turns", "branches", "interleave", "suffix_tokens", "temperature", "sampling_seed")
        keys = (*keys, "separator", "request_batch_size", "replay_batch_size")
        return {k: getattr(self, k) for k in keys if getattr(self, k) != getattr(d, k)}


LOGIT_KL_STATS = ("p999", "max")
"""What ``golden.logit_kl`` bounds: the per-position KL's 99.9th percentile, or its max."""


@dataclass(frozen=True)
class GoldenThresholds:
    band_factor: float = 2.0
    """A band statistic (flip rate, KL p50/p99) fails when above ``band_factor ×`` the band's value."""
    logit_kl: float = 0.01
    """KL (nats) per position allowed when there is no band (one producer), as in kern's ``--logit-kl``."""
    logit_kl_stat: str = "p999"
    """Which per-position KL statistic ``logit_kl`` bounds: ``p999`` (the 99.9th percentile, lower: at most 0.1 %
    of positions may exceed it, llama.cpp's 99.9 % KLD column) or ``max`` (every position, kern's rule). Production
    noise has outliers (llama.cpp: max KLD 0.012 between BF16 and FP16 LLaMA-3-8B), so a max rule false-alarms
    on a large corpus while a bug moves hundreds of positions."""
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
    kl_div_prefill: float | None = None
    """``prefill_cache_hit``'s own ``kl_div`` (SGLang kit's ``kl_div_thres_prefill``); None = ``kl_div``."""
    kl_div_decode: float | None = None
    """``decode_cache_hit``'s own ``kl_div`` (``kl_div_thres_decode``); None = ``kl_div``."""
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
    kl_div_key: str = dataclasses.field(default="kl_div", compare=False)
    """The config key ``kl_div`` came from (``kl_div_prefill`` after ``for_check``), so a reason names the key a
    user sets to change it; not itself a config key."""

    def for_check(self, name: str) -> ThresholdSet:
        """The set a helper is judged by: its per-phase ``kl_div_prefill``/``kl_div_decode`` when set."""
        key = {"prefill_cache_hit": "kl_div_prefill", "decode_cache_hit": "kl_div_decode"}.get(name)
        phase = getattr(self, key) if key is not None else None
        return self if phase is None else dataclasses.replace(self, kl_div=phase, kl_div_key=str(key))


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
            band_factor=1.0,
            logit_kl=1e-9,
            logit_kl_stat="max",
            confident_flip_margin=0.0,
            max_abs_delta=1e-5,
            max_nll_increase=1e-9,
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
class LocalizeConfig:
    """``localize:``: after a check fails, name the first diverging op on the failing sample with the engine's
    SGLang tensor dumper (docs/localize.md). The engine must run with the dumper settings: the builtin engine gets
    them from ``check``; a launched or running engine needs them in its launch command. With it on, ``baseline
    record`` also stores the baseline build's module tensors, which a golden failure is localized against."""

    enabled: bool = False
    prompt_tokens: int = 96
    max_new_tokens: int = 8
    """A prompt of the built-in text and its decode steps: what is localized when a failing check has no
    sample to re-run (its samples' tokens are not known, e.g. a multi-turn helper)."""
    disk_floor_gib: float = 5.0
    """Dumping stops when free disk on the result directory falls below this."""
    stored_samples: int = 2
    """Golden prefill samples whose module tensors ``baseline record`` stores (0: none)."""
    stored_tokens: int = 1024
    """Tokens of each stored sample prefilled (past the usual chunk and page boundaries)."""
    stored_stride: int = 128
    """Rows kept: the first 16 positions and 4 from every multiple of this (localize/stored.py says why)."""
    stored_max_mib: float = 32.0
    """The stored tensors' bound: samples that would pass it are left out, and the record says so."""


DEFAULT_STORE_URI = ".precisionbot/baselines"
"""Where baselines live when no ``--store`` / ``baselines.store`` is given (relative to the working dir)."""


@dataclass(frozen=True)
class BaselinesConfig:
    store: str = DEFAULT_STORE_URI
    """``s3://bucket/prefix``, ``file://dir`` or a directory path."""
    helper_reruns: int = 8
    """``baseline record`` also runs the consistency helpers this many times (0 = golden only): main's noise."""
    vs_main: bool = True
    """Judge each helper against main's reruns when the baseline has them (a regression beyond noise fails)."""
    vs_main_alpha: float = 0.01
    """Significance of that rule, per helper: the false-alarm rate on a clean PR."""
    vs_main_min_ratio: float = 1.5
    """... and the smallest ratio to main it calls a regression (a tight main makes 1.05x significant)."""
    mode: str = "stored"
    """``stored``: golden is judged against the store's baseline of the signature. ``merge-base``: the same
    runner first builds and runs the PR's merge base as the producer, then the PR (an A/B on one machine)."""
    base_ref: str = "origin/main"
    """What the PR merges into, for ``mode: merge-base`` (``check --base-ref`` overrides it)."""


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


@dataclass(frozen=True)
class BuildkiteConfig:
    """Where ``/precision rerun`` starts a Buildkite build and which queue the generated pipeline targets
    (docs/buildkite.md). Empty ``organization``/``pipeline``: Buildkite is not used."""

    organization: str | None = None
    """The organization slug (``BUILDKITE_ORGANIZATION_SLUG``), as in ``buildkite.com/<organization>``."""
    pipeline: str | None = None
    """The pipeline slug (``BUILDKITE_PIPELINE_SLUG``) that ``/precision rerun`` starts a build of."""
    api_url: str = "https://api.buildkite.com/v2"
    queue: str | None = None
    """The GPU agents' queue the check steps target (``agents: {queue: ...}``); ``--queue`` overrides it."""


DEFAULT_SUITES: Mapping[str, SuiteConfig] = {
    "consistency": SuiteConfig(name="consistency"),
    "pr": SuiteConfig(name="pr", checks=(*CONSISTENCY_CHECKS, "golden")),
    "baseline": SuiteConfig(name="baseline", checks=("golden",)),
    # SGLang's kits/unified_radix_cache_kit.py: 3 groups x 3 branches x 3 turns, sampled decode, kl 0.003.
    "sglang-unified": SuiteConfig(
        name="sglang-unified",
        samples=9,
        branches=3,
        turns=3,
        prompt_tokens=(512, 512),
        suffix_tokens=(256, 512),
        replay_batch_size=1,
        temperature=1.0,
        kl_div=0.003,
    ),
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
    localize: LocalizeConfig = LocalizeConfig()
    buildkite: BuildkiteConfig = BuildkiteConfig()
    source: str = "<defaults>"
    """Where this came from (a file path), for error messages."""

    @classmethod
    def default(cls) -> Config:
        return cls()

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

    def thresholds_for_model(self, model: ModelConfig | None, profile: str | None = None) -> ThresholdSet:
        """``thresholds_for`` of a configured model (its name and tp); no model = the profile's own."""
        if model is None:
            return self.thresholds_for(None, None, profile)
        return self.thresholds_for(model.name, model.tp, profile)

    @overload
    def launch_args(self, model: ModelConfig) -> str: ...

    @overload
    def launch_args(self, model: None) -> None: ...

    def launch_args(self, model: ModelConfig | None) -> str | None:
        """The engine's launch arguments for ``model``: ``engine.args``, then the model's own. None without a
        model (the arguments are then unknown: whoever needs them falls back on what the engine reports)."""
        return None if model is None else f"{self.engine.args} {model.args}".strip()
