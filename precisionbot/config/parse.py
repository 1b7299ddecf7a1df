"""Validation of parsed YAML into ``precisionbot.config`` dataclasses (pure; ``Config.from_mapping``)."""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Callable, Mapping
from typing import Any

from precisionbot.config.aws_names import (
    ami_problem,
    instance_type_problem,
    region_problem,
    schemeless_bucket_problem,
)
from precisionbot.config.fields import Reader, did_you_mean, freeze_mapping, store_uri_problem
from precisionbot.config.settings import (
    BASELINE_MODES,
    DEFAULT_PROFILES,
    DEFAULT_SUITES,
    ENGINE_KINDS,
    LAUNCH_PLACEHOLDERS,
    LOGIT_KL_STATS,
    PERMISSION_LEVELS,
    PROFILES,
    RUNNER_KINDS,
    BaselinesConfig,
    BatchInvarianceOptions,
    BuildkiteConfig,
    Config,
    EngineConfig,
    GitHubConfig,
    GoldenOptions,
    GoldenThresholds,
    LayersOptions,
    LocalizeConfig,
    ModelConfig,
    PermissionsConfig,
    RunnerConfig,
    SuiteConfig,
    ThresholdsConfig,
    ThresholdSet,
)
from precisionbot.config.suite import parse_conversation
from precisionbot.errors import ConfigError
from precisionbot.results import CHECK_NAMES

MAX_TIMEOUT_S = 7 * 24 * 3600.0
"""A week: longer timeouts are typos (and 1e300 s overflows the clocks they are added to)."""


def parse_config(data: Any, source: str) -> Config:
    """Validate a parsed YAML mapping into a ``Config`` (``ConfigError`` naming file, key and fix)."""
    root = Reader(data, source, "")
    root.only({"engine", "models", "suites", "thresholds", "baselines", "github", "runner", "localize", "buildkite"})
    runner = _parse_runner(root.section("runner"), RunnerConfig())
    suites = dict(DEFAULT_SUITES)
    suites_r = root.section("suites")
    for name in suites_r.names():
        suites[name] = _parse_suite(suites_r.section(name), name)
    github = _parse_github(root.section("github"))
    for key, name in (("pr_suite", github.pr_suite), ("baseline_suite", github.baseline_suite)):
        if name not in suites:
            raise ConfigError(
                f"{source}: key 'github.{key}' names suite {name!r}, which is not defined; "
                f"add it under 'suites' or use one of {', '.join(sorted(suites))}"
            )
    if github.pr_suite == github.baseline_suite:
        # A PR rerun would run in baseline mode and record the PR's numbers as the new golden baseline.
        raise ConfigError(
            f"{source}: keys 'github.pr_suite' and 'github.baseline_suite' both name suite {github.pr_suite!r}; "
            "PR runs must not record baselines: give the baseline suite its own name"
        )
    models = _parse_models(root, runner)
    thresholds_r = root.section("thresholds")
    thresholds = _parse_thresholds(thresholds_r)
    _check_override_models(thresholds_r.section("overrides"), thresholds.overrides, models)
    return Config(
        engine=_parse_engine(root.section("engine")),
        models=models,
        suites=suites,
        thresholds=thresholds,
        baselines=_parse_baselines(root.section("baselines")),
        github=github,
        runner=runner,
        localize=_parse_localize(root.section("localize")),
        buildkite=_parse_buildkite(root.section("buildkite")),
        source=source,
    )


def _parse_localize(r: Reader) -> LocalizeConfig:
    d = LocalizeConfig()
    r.only({f.name for f in dataclasses.fields(LocalizeConfig)})
    new_tokens = r.positive_int("max_new_tokens", d.max_new_tokens)
    if new_tokens < 2:
        raise r.error("max_new_tokens", f"must be >= 2 (got {new_tokens})", "the first decode step consumes token 2")
    return LocalizeConfig(
        enabled=r.boolean("enabled", d.enabled),
        prompt_tokens=r.positive_int("prompt_tokens", d.prompt_tokens),
        max_new_tokens=new_tokens,
        disk_floor_gib=r.positive_float("disk_floor_gib", d.disk_floor_gib),
        stored_samples=r.nonneg_int("stored_samples", d.stored_samples),
        stored_tokens=r.positive_int("stored_tokens", d.stored_tokens),
        stored_stride=r.positive_int("stored_stride", d.stored_stride),
        stored_max_mib=r.positive_float("stored_max_mib", d.stored_max_mib),
    )


def _parse_baselines(r: Reader) -> BaselinesConfig:
    d = BaselinesConfig()
    r.only({f.name for f in dataclasses.fields(BaselinesConfig)})
    alpha = r.fraction("vs_main_alpha", d.vs_main_alpha)
    if not 0.0 < alpha <= 0.5:
        raise r.error("vs_main_alpha", f"must be in (0, 0.5] (got {alpha})", "use a significance such as 0.01")
    min_ratio = r.positive_float("vs_main_min_ratio", d.vs_main_min_ratio)
    if min_ratio < 1.0:
        raise r.error("vs_main_min_ratio", f"must be >= 1 (got {min_ratio})", "use e.g. 1.5 (50 % worse than main)")
    reruns = r.nonneg_int("helper_reruns", d.helper_reruns)
    if reruns in (1, 2) or reruns > 1000:
        raise r.error("helper_reruns", f"must be 0 or 3..1000 (got {reruns})", "main's noise needs at least 3 reruns")
    store = r.string("store", d.store)
    problem = store_uri_problem(store) or schemeless_bucket_problem(store)
    if problem is not None:
        raise r.error("store", *problem)
    return BaselinesConfig(
        store=store,
        helper_reruns=reruns,
        vs_main=r.boolean("vs_main", d.vs_main),
        vs_main_alpha=alpha,
        vs_main_min_ratio=min_ratio,
        mode=r.choice("mode", d.mode, BASELINE_MODES),
        base_ref=r.string("base_ref", d.base_ref),
    )


def _parse_engine(r: Reader) -> EngineConfig:
    d = EngineConfig()
    r.only({f.name for f in dataclasses.fields(EngineConfig)})
    kind = r.choice("kind", d.kind, ENGINE_KINDS)
    launch = r.opt_string("launch", d.launch)
    if launch is not None:
        _check_template(r, "launch", launch, needs_model=kind != "builtin")
    faults = r.strings("faults", d.faults)
    if faults and kind != "builtin":
        raise r.error("faults", "is only for the builtin engine", "remove it or set engine.kind: builtin")
    return EngineConfig(
        kind=kind,
        url=r.opt_string("url", d.url),
        spec_url=r.opt_string("spec_url", d.spec_url),
        launch=launch,
        install=r.opt_string("install", d.install),
        checkout=r.string("checkout", d.checkout),
        args=r.string("args", d.args),
        health_timeout_s=r.positive_float("health_timeout_s", d.health_timeout_s, maximum=MAX_TIMEOUT_S),
        request_timeout_s=r.positive_float("request_timeout_s", d.request_timeout_s, maximum=MAX_TIMEOUT_S),
        batch_size=r.positive_int("batch_size", d.batch_size),
        concurrency=r.positive_int("concurrency", d.concurrency),
        tokenizer=r.opt_string("tokenizer", d.tokenizer),
        faults=faults,
    )


def _check_template(r: Reader, key: str, template: str, *, needs_model: bool) -> None:
    """Placeholders known, ``{port}`` present, and ``{model}`` too unless the builtin engine (whose model is
    its preset, not a path): without it every entry under ``models`` would launch the same hard-coded model."""
    try:
        names = [f[1] for f in string.Formatter().parse(template) if f[1] is not None]
    except ValueError as exc:
        raise r.error(key, f"is not a valid command template ({exc})", "write literal braces as {{ and }}") from exc
    for name in names:
        if name not in LAUNCH_PLACEHOLDERS:
            raise r.error(
                key,
                f"uses unknown placeholder {{{name}}}",
                f"use only {', '.join('{' + p + '}' for p in LAUNCH_PLACEHOLDERS)}",
            )
    if "port" not in names:
        raise r.error(key, "has no {port} placeholder", "add --port {port} so the launcher can pick a free port")
    if needs_model and "model" not in names:
        raise r.error(
            key,
            "has no {model} placeholder, so every model would launch the same hard-coded one",
            "write {model} where the model's path goes (e.g. --model-path {model}) and set the path under models",
        )


def _aws_name(r: Reader, key: str, value: str | None, problem: Callable[[str], tuple[str, str] | None]) -> None:
    found = None if value is None else problem(value)
    if found is not None:
        raise r.error(key, *found)


def _parse_runner(r: Reader, base: RunnerConfig) -> RunnerConfig:
    r.only({f.name for f in dataclasses.fields(RunnerConfig)})
    region, ami = r.opt_string("region", base.region), r.opt_string("ami", base.ami)
    instance_type = r.string("instance_type", base.instance_type)
    _aws_name(r, "region", region, region_problem)
    _aws_name(r, "instance_type", instance_type, instance_type_problem)
    _aws_name(r, "ami", ami, ami_problem)
    return RunnerConfig(
        kind=r.choice("kind", base.kind, RUNNER_KINDS),
        labels=r.strings("labels", base.labels),
        region=region,
        instance_type=instance_type,
        price_per_hour=r.opt_positive_float("price_per_hour", base.price_per_hour),
        ami=ami,
        subnet=r.opt_string("subnet", base.subnet),
        security_groups=r.strings("security_groups", base.security_groups),
        instance_profile=r.opt_string("instance_profile", base.instance_profile),
        root_volume_gb=r.positive_int("root_volume_gb", base.root_volume_gb),
        spot=r.boolean("spot", base.spot),
        ttl_minutes=r.positive_int("ttl_minutes", base.ttl_minutes),
        wait_timeout_s=r.positive_float("wait_timeout_s", base.wait_timeout_s, maximum=MAX_TIMEOUT_S),
        runner_group_id=r.positive_int("runner_group_id", base.runner_group_id),
        runner_version=r.opt_string("runner_version", base.runner_version),
        runner_sha256=r.opt_string("runner_sha256", base.runner_sha256),
        runner_user=r.opt_string("runner_user", base.runner_user),
        queue=r.opt_string("queue", base.queue),
        gpus=r.nonneg_int("gpus", base.gpus),
        partition=r.opt_string("partition", base.partition),
        account=r.opt_string("account", base.account),
        nodes=r.positive_int("nodes", base.nodes),
        runner_dir=r.opt_string("runner_dir", base.runner_dir),
    )


def _parse_models(root: Reader, runner: RunnerConfig) -> tuple[ModelConfig, ...]:
    models: list[ModelConfig] = []
    seen: set[str] = set()
    for r in root.list_of_sections("models"):
        r.only({f.name for f in dataclasses.fields(ModelConfig)})
        path = r.required_string("path")
        name = r.string("name", path)
        tp = r.positive_int("tp", 1)
        if f"{name}@tp{tp}" in seen:
            raise r.error("name", f"repeats model {name!r} at tp {tp}", "give each (name, tp) one entry")
        seen.add(f"{name}@tp{tp}")
        runner_r = r.section("runner")
        models.append(
            ModelConfig(
                name=name,
                path=path,
                revision=r.opt_string("revision", None),
                tp=tp,
                dtype=r.string("dtype", "auto"),
                args=r.string("args", ""),
                runner=_parse_runner(runner_r, runner) if runner_r.present else None,
            )
        )
    return tuple(models)


def _parse_suite(r: Reader, name: str) -> SuiteConfig:
    d = DEFAULT_SUITES.get(name, SuiteConfig(name=name))
    r.only(({f.name for f in dataclasses.fields(SuiteConfig)} - {"name"}) | {"groups"})
    checks = r.strings("checks", d.checks)
    for c in checks:
        if c not in CHECK_NAMES:
            fix = did_you_mean(c, CHECK_NAMES) or f"use any of {', '.join(CHECK_NAMES)}"
            raise r.error("checks", f"names unknown check {c!r}", fix)
    if not checks:
        raise r.error("checks", "is empty", f"list at least one of {', '.join(CHECK_NAMES)}")
    g, b, lay = r.section("golden"), r.section("batch_invariance"), r.section("layers")
    g.only({"top_k", "context_depths", "decode_steps"})
    b.only({"batch_sizes"})
    lay.only({"dump_dir", "baseline_dir"})
    conv = parse_conversation(r, d)
    return SuiteConfig(
        name=name,
        checks=checks,
        **conv,
        max_new_tokens=r.positive_int("max_new_tokens", d.max_new_tokens),
        prompt_tokens=r.int_range("prompt_tokens", d.prompt_tokens),
        exact_sizes=r.boolean("exact_sizes", d.exact_sizes),
        corpus=r.opt_string("corpus", d.corpus),
        seed=r.nonneg_int("seed", d.seed),
        golden=GoldenOptions(
            top_k=g.positive_int("top_k", d.golden.top_k),
            context_depths=g.positive_ints("context_depths", d.golden.context_depths),
            decode_steps=g.nonneg_int("decode_steps", d.golden.decode_steps),
        ),
        batch_invariance=BatchInvarianceOptions(
            batch_sizes=b.positive_ints("batch_sizes", d.batch_invariance.batch_sizes)
        ),
        layers=LayersOptions(
            dump_dir=lay.opt_string("dump_dir", d.layers.dump_dir),
            baseline_dir=lay.opt_string("baseline_dir", d.layers.baseline_dir),
        ),
    )


_SET_KEYS = {f.name for f in dataclasses.fields(ThresholdSet)} - {"kl_div_key"}
_GOLDEN_KEYS = {f.name for f in dataclasses.fields(GoldenThresholds)}


def _parse_set(r: Reader, base: ThresholdSet, extra: frozenset[str] = frozenset()) -> ThresholdSet:
    r.only(_SET_KEYS | extra)
    g = r.section("golden")
    g.only(_GOLDEN_KEYS)
    mad = base.golden.max_abs_delta
    return ThresholdSet(
        kl_div=r.positive_float("kl_div", base.kl_div),
        kl_div_prefill=r.opt_positive_float("kl_div_prefill", base.kl_div_prefill),
        kl_div_decode=r.opt_positive_float("kl_div_decode", base.kl_div_decode),
        token_k3=r.positive_float("token_k3", base.token_k3),
        max_frac_over=r.fraction("max_frac_over", base.max_frac_over),
        max_token_k3=r.positive_float("max_token_k3", base.max_token_k3),
        onset_k3=r.positive_float("onset_k3", base.onset_k3),
        cache_vs_match_factor=r.positive_float("cache_vs_match_factor", base.cache_vs_match_factor),
        cache_vs_match_floor_k3=r.positive_float("cache_vs_match_floor_k3", base.cache_vs_match_floor_k3),
        batch_abs_delta=r.positive_float("batch_abs_delta", base.batch_abs_delta),
        layers_rel_diff=r.positive_float("layers_rel_diff", base.layers_rel_diff),
        golden=GoldenThresholds(
            band_factor=g.positive_float("band_factor", base.golden.band_factor),
            logit_kl=g.positive_float("logit_kl", base.golden.logit_kl),
            logit_kl_stat=g.choice("logit_kl_stat", base.golden.logit_kl_stat, LOGIT_KL_STATS),
            confident_flip_margin=g.nonneg_float("confident_flip_margin", base.golden.confident_flip_margin),
            max_abs_delta=g.opt_positive_float("max_abs_delta", mad),
            max_nll_increase=g.opt_positive_float("max_nll_increase", base.golden.max_nll_increase),
        ),
    )


def _parse_thresholds(r: Reader) -> ThresholdsConfig:
    r.only({"profile", "overrides", *PROFILES})
    profiles = {p: _parse_set(r.section(p), DEFAULT_PROFILES[p]) for p in PROFILES}
    overrides: dict[str, Mapping[str, ThresholdSet]] = {}
    o = r.section("overrides")
    for key in o.names():
        if "@" in key and not re.fullmatch(r"tp[0-9]+", key.rsplit("@", 1)[1]):
            raise o.error(key, "is not '<model>@tp<N>' or '<model>'", "write e.g. 'Qwen/Qwen3-8B@tp2'")
        entry = o.section(key)
        # Top-level keys refine the default profile; a nested 'deterministic:' refines that profile.
        per = {"default": _parse_set(entry, profiles["default"], frozenset({"deterministic"}))}
        per["deterministic"] = _parse_set(entry.section("deterministic"), profiles["deterministic"])
        overrides[key] = freeze_mapping(per)
    return ThresholdsConfig(
        profile=r.choice("profile", "default", PROFILES),
        profiles=freeze_mapping(profiles),
        overrides=freeze_mapping(overrides),
    )


def _check_override_models(r: Reader, overrides: Mapping[str, object], models: tuple[ModelConfig, ...]) -> None:
    """Thresholds apply to a configured model only (``check`` judges by the model it launched): an override of
    any other name, or at a tp no entry has, would be silently ignored while the file reads as tightened."""
    names = {m.name for m in models}
    for key in overrides:
        name, at, tp = key.rpartition("@") if "@" in key else (key, "", "")
        if name not in names:
            known = ", ".join(sorted(names)) or "none are configured"
            by_path = [m.name for m in models if m.path == name]
            fix = (
                (f"key it by the model's name {by_path[0]!r}, not its path" if by_path else None)
                or did_you_mean(name, names)
                or f"key it by a name under 'models' ({known}) or add that model there"
            )
            raise r.error(key, f"overrides thresholds of model {name!r}, which is not under 'models'", fix)
        tps = sorted(m.tp for m in models if m.name == name)
        if at and int(tp[2:]) not in tps:
            fix = " or ".join(f"'{name}@tp{t}'" for t in tps) + f", or '{name}' for every tp"
            raise r.error(
                key,
                f"names tp {tp[2:]}, but model {name!r} is configured at tp {', '.join(map(str, tps))}",
                f"write {fix}",
            )


def _parse_github(r: Reader) -> GitHubConfig:
    d = GitHubConfig()
    r.only({f.name for f in dataclasses.fields(GitHubConfig)})
    p = r.section("permissions")
    p.only({"rerun", "baseline"})
    return GitHubConfig(
        paths=r.strings("paths", d.paths, single=False),
        run_label=r.string("run_label", d.run_label),
        fork_label=r.string("fork_label", d.fork_label),
        comment_per_suite=r.boolean("comment_per_suite", d.comment_per_suite),
        pr_suite=r.string("pr_suite", d.pr_suite),
        baseline_suite=r.string("baseline_suite", d.baseline_suite),
        permissions=PermissionsConfig(
            rerun=p.choice("rerun", d.permissions.rerun, PERMISSION_LEVELS),
            baseline=p.choice("baseline", d.permissions.baseline, PERMISSION_LEVELS),
        ),
    )


_SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,99}")
"""A Buildkite organization or pipeline slug: what the web address shows (lower case, digits, dashes)."""


def _parse_buildkite(r: Reader) -> BuildkiteConfig:
    d = BuildkiteConfig()
    r.only({f.name for f in dataclasses.fields(BuildkiteConfig)})
    slugs: dict[str, str | None] = {}
    for key in ("organization", "pipeline"):
        slug = r.opt_string(key, None)
        if slug is not None and not _SLUG.fullmatch(slug):
            raise r.error(key, f"is not a Buildkite slug (got {slug[:60]!r})", "copy it from the pipeline's address")
        slugs[key] = slug
    api_url = r.string("api_url", d.api_url)
    if not api_url.startswith(("https://", "http://")):
        raise r.error("api_url", f"must be an http(s) address (got {api_url[:60]!r})", f"use {d.api_url}")
    return BuildkiteConfig(
        organization=slugs["organization"],
        pipeline=slugs["pipeline"],
        api_url=api_url.rstrip("/"),
        queue=r.opt_string("queue", d.queue),
    )
