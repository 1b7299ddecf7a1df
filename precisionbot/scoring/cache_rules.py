"""SGLang's ``cached_tokens`` expectations (``kl_multiturn_utils.py``), as pure functions, and their choice.

Upstream asserts, after every turn of a multi-turn helper, how many prompt tokens the server must report as
served from its cache:

* radix cache, prefill (``default_prefill_cache_assert``): exactly the warmed prefix;
* radix cache, later turns (``default_decode_cache_assert``): the previous turn's input + output, or one
  less (a turn that stopped by length never computed its last token's KV), or that cut to ``page_size``;
* mamba/hybrid cache (``make_mamba_prefill_assert(chunk)``): within one chunk below the prefix rounded down
  to the chunk; (``make_mamba_decode_assert(interval, lag)``): at least the last track-interval boundary
  before input + output - 1, less the allowed checkpoint lag.

The rules are chosen from ``/server_info`` by SGLang's own field names (``page_size``,
``uses_mamba_radix_cache`` / ``mamba_ssm_dtype``, ``mamba_track_interval``, ``mamba_cache_chunk_size``).
A vLLM server (``prefix_cache_rules: vllm`` in the client's server info) caches whole blocks of
``block_size`` of the tokens it computed: a warmed prefix hits its whole blocks, a later turn the whole blocks
of the previous turn's input + output - 1. With a hybrid model in ``mamba_cache_mode`` ``align`` the recurrent
state is kept every ``mamba_block_size`` tokens (vLLM aligns it to ``block_size``), so a hit lands on a multiple
of both. Which of those states (and of a sliding window's blocks) survive is ``prefix_cache_retention_interval``
(vLLM 0.32's ``reachable_block_mask``): 0, the default, keeps only the state at each prompt's last block (its
"replay boundary", ``(prompt - 1)`` rounded down to the block), so a later turn resumes at its previous turn's
prompt and never reuses decoded tokens (measured: a 600-token prompt + 320 decoded tokens, then the turn-2
prompt hits 512 tokens; with ``--prefix-cache-retention-interval 128``, 896); a positive interval also keeps one
every that many tokens, decode included.

Every size a miss's explanation names comes from :meth:`CacheRules.step` (one number per phase) and
:func:`granularity` (the setting's name with that number), so its numbers cannot disagree with each other.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SGLANG_MAMBA_TRACK_INTERVAL = 256
"""``--mamba-track-interval``'s default in SGLang 0.5.23's server arguments."""
MAMBA_CHUNK = 64
"""``make_mamba_prefill_assert``'s default chunk (and the floor of SGLang's mamba cache chunk)."""


def _int(raw: Mapping[str, Any], key: str, default: int) -> int:
    value = raw.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


@dataclass(frozen=True)
class CacheRules:
    """Which expectation applies, with its parameters; ``prefill``/``decode`` return None or the violation."""

    kind: str
    """``radix``, ``mamba`` (SGLang) or ``vllm`` (vLLM's block-granular prefix cache)."""
    page_size: int = 1
    chunk_size: int = MAMBA_CHUNK
    track_interval: int = SGLANG_MAMBA_TRACK_INTERVAL
    checkpoint_lag: int = 0
    block_size: int = 0
    """vLLM only: the ``block_size`` it reports (0: none); ``page_size`` is what a hit lands on."""
    mamba_block_size: int = 0
    """vLLM only: the ``mamba_block_size`` it reports in ``align`` mode (0: none); ``page_size`` is then the
    least common multiple of both block sizes."""
    retention_tokens: int | None = None
    """vLLM only, with a mamba or sliding-window cache group: ``prefix_cache_retention_interval`` (0: only each
    prompt's last block is kept; > 0: also one every that many tokens); None: every block is kept."""

    @property
    def decode_reuse_blocked(self) -> str | None:
        """Why no later turn can reuse decoded tokens whatever the sizes (None: it can)."""
        if self.kind != "vllm" or self.retention_tokens != 0:
            return None
        what = "a hybrid model's recurrent (mamba) state" if self.mamba_block_size else "a sliding window's blocks"
        return (
            f"vLLM keeps {what} only at each prompt's last block (prefix_cache_retention_interval "
            "0, its default), so a later turn resumes at the previous prompt and never reuses decoded tokens, "
            f"whatever the sizes; start vLLM with --prefix-cache-retention-interval {self.page_size} to keep "
            "every block"
        )

    def _retained(self, tokens: int) -> int:
        """The furthest hit at or before ``tokens`` computed tokens that the retention keeps during decode."""
        step = self.page_size if not self.retention_tokens else math.lcm(self.page_size, self.retention_tokens)
        return tokens // step * step

    def step(self, phase: str) -> int:
        """The granularity a hit lands on: ``prefill`` (a warmed prompt) or ``decode`` (turn 1's tokens).

        SGLang's mamba cache resumes a prefill at a ``mamba_cache_chunk_size`` checkpoint and a later turn at a
        ``mamba_track_interval`` one; a radix or vLLM cache at a whole page or block in both.
        """
        if self.kind == "mamba":
            return self.track_interval if phase == "decode" else self.chunk_size
        if self.kind == "vllm" and phase == "decode" and self.retention_tokens:
            return math.lcm(self.page_size, self.retention_tokens)
        return self.page_size

    def describe(self) -> str:
        if self.kind == "vllm":
            return f"vLLM's prefix-cache rules (whole blocks of {self.page_size} tokens: {_vllm_setting(self)})"
        if self.kind == "mamba":
            return (
                f"SGLang's mamba rules (chunk {self.chunk_size}, track interval {self.track_interval}, "
                f"checkpoint lag {self.checkpoint_lag})"
            )
        return f"SGLang's radix-cache rules (page_size {self.page_size})"

    def prefill(self, actual: int, prefix_len: int) -> str | None:
        """After warming ``prefix_len`` tokens, the first turn's ``cached_tokens``."""
        if self.kind == "vllm":
            # The warm-up computed all prefix_len tokens; only whole blocks are cached.
            expected = prefix_len // self.page_size * self.page_size
            return None if actual == expected else f"expected cached_tokens={expected}, got {actual}"
        if self.kind == "mamba":
            upper = prefix_len // self.chunk_size * self.chunk_size
            lower = max(0, upper - self.chunk_size)
            return None if lower <= actual <= upper else f"expected cached_tokens in [{lower}, {upper}], got {actual}"
        return None if actual == prefix_len else f"expected cached_tokens={prefix_len}, got {actual}"

    def decode(self, actual: int, history_len: int, output_len: int) -> str | None:
        """A later turn's ``cached_tokens``, given the previous turn's input and output lengths."""
        if self.kind == "vllm":
            # A turn stopped by length never computed its last token's KV (a prefill-only turn still samples
            # one token); of what was computed, whole blocks are cached.
            computed = history_len + max(output_len, 1) - 1
            expected = computed // self.page_size * self.page_size
            if self.retention_tokens is not None:
                # Mamba / sliding-window groups keep the previous prompt's last block, and (interval > 0)
                # one block every interval, decode included.
                replay = max(0, history_len - 1) // self.page_size * self.page_size
                expected = max(replay, 0 if self.retention_tokens == 0 else self._retained(computed))
            return None if actual == expected else f"expected cached_tokens={expected}, got {actual}"
        if self.kind == "mamba":
            if output_len <= 0:
                expected = history_len
            else:
                boundary = (history_len + output_len - 1) // self.track_interval * self.track_interval
                expected = max(0, boundary - self.checkpoint_lag)
            return None if actual >= expected else f"expected cached_tokens>={expected}, got {actual}"
        expected = history_len + output_len
        allowed = sorted({expected, expected - 1, (expected - 1) // self.page_size * self.page_size})
        return None if actual in allowed else f"expected cached_tokens in {allowed}, got {actual}"


def uses_mamba_cache(raw: Mapping[str, Any]) -> bool:
    """The server reports a hybrid (mamba / linear-attention) radix cache."""
    flag = raw.get("uses_mamba_radix_cache")
    if isinstance(flag, bool):
        return flag
    # Older builds do not report the derived flag; a mamba state dtype is only set for such models.
    return isinstance(raw.get("mamba_ssm_dtype"), str) and bool(raw.get("mamba_ssm_dtype"))


def rules_for(raw: Mapping[str, Any], checkpoint_lag: int = 0) -> CacheRules:
    """The rules a server's ``/server_info`` calls for (a missing ``page_size`` means 1, as SGLang's default).

    llama.cpp's ``/props`` names no page: it reuses a slot's prompt token by token (radix rules, page 1).
    """
    page = _int(raw, "page_size", 1)
    if raw.get("prefix_cache_rules") == "vllm":
        block = _int(raw, "block_size", page)
        mamba = _int(raw, "mamba_block_size", 0) if str(raw.get("mamba_cache_mode")) == "align" else 0
        # A hit must end on a boundary of the attention blocks and of the recurrent-state checkpoints.
        step = math.lcm(block, mamba) if mamba else block
        retention = None
        if mamba or raw.get("sliding_window") not in (None, "", "None"):
            value = str(raw.get("prefix_cache_retention_interval", ""))
            retention = int(value) if value.isascii() and value.isdigit() else None
        return CacheRules(
            kind="vllm", page_size=step, block_size=block, mamba_block_size=mamba, retention_tokens=retention
        )
    if uses_mamba_cache(raw):
        return CacheRules(
            kind="mamba",
            page_size=page,
            chunk_size=_int(raw, "mamba_cache_chunk_size", max(MAMBA_CHUNK, page)),
            track_interval=_int(raw, "mamba_track_interval", SGLANG_MAMBA_TRACK_INTERVAL),
            checkpoint_lag=checkpoint_lag,
        )
    return CacheRules(kind="radix", page_size=page)


def interleave_order(n: int, branches: int) -> list[int] | None:
    """Submission order g0b0, g1b0, ..., g0b1, g1b1, ... (remainder last); None when nothing to interleave."""
    if branches <= 1 or branches >= n:
        return None
    groups = n // branches
    order = [g * branches + b for b in range(branches) for g in range(groups)]
    return order + list(range(groups * branches, n))


def prefill_reach(rules: CacheRules, prompt_len: int) -> int:
    """The most prompt tokens a warmed prompt can serve from the cache: the last checkpoint (mamba) or whole
    page or block strictly before its last token, which is always computed."""
    step = rules.step("prefill")
    return max(0, prompt_len - 1) // step * step


def decode_reach(rules: CacheRules, prompt_len: int, output_len: int) -> int:
    """The most tokens of turn 1 (prompt + output) a turn 2 can serve from the cache: the last checkpoint or
    whole page at or before turn 1's last computed token (its last output token is never computed); on a vLLM
    server that keeps no decoded state, the prompt's own last block."""
    if rules.decode_reuse_blocked:
        return prefill_reach(rules, prompt_len)
    step = rules.step("decode")
    return max(0, prompt_len + output_len - 1) // step * step


def _vllm_setting(rules: CacheRules) -> str:
    """The settings a vLLM hit's step comes from: ``block_size 256`` or, with a hybrid model in align mode,
    ``block_size 256, mamba_block_size 64`` (a multiple of both)."""
    block = rules.block_size or rules.page_size
    if not rules.mamba_block_size:
        return f"block_size {block}"
    both = f"block_size {block}, mamba_block_size {rules.mamba_block_size}"
    return both if rules.page_size == max(block, rules.mamba_block_size) else f"the least common multiple of {both}"


def granularity(rules: CacheRules, phase: str) -> str:
    """The step :meth:`CacheRules.step` gives, as the server's setting names it: ``the 64-token mamba checkpoint
    interval (mamba_track_interval 64)``, ``vLLM's 256-token block (block_size 256)``."""
    n = rules.step(phase)
    if rules.kind == "vllm":
        return f"vLLM's {n}-token block ({_vllm_setting(rules)})"
    if rules.kind == "mamba":
        what, key = (
            ("checkpoint interval", "mamba_track_interval")
            if phase == "decode"
            else ("chunk", "mamba_cache_chunk_size")
        )
        return f"the {n}-token mamba {what} ({key} {n})"
    return f"the {n}-token page (page_size {n})"


def _unit(rules: CacheRules, phase: str) -> str:
    """What the server keeps, in its own setting's words (the prefill and decode rules read different ones)."""
    n = rules.step(phase)
    if rules.kind == "vllm":
        return f"caches whole blocks of {n} tokens ({_vllm_setting(rules)})"
    if rules.kind == "radix":
        return f"caches whole pages of {n} tokens (page_size {n})"
    key = "mamba_track_interval" if phase == "decode" else "mamba_cache_chunk_size"
    return f"keeps the recurrent state every {n} tokens ({key} {n}), and a hit resumes at such a checkpoint"


def prefill_tokens_needed(rules: CacheRules) -> int:
    """The shortest prompt whose warmed repeat can hit: one token past one step (its last token is computed)."""
    return rules.step("prefill") + 1


def decode_tokens_needed(rules: CacheRules, prompt_len: int) -> int:
    """The fewest new tokens after a ``prompt_len``-token prompt for which a turn 2 reuses decoded tokens
    (``decode_reach`` past ``prompt_len + 1``, the ``decode_cache_hit`` filter): turn 1's last computed token
    reaches the first boundary after ``prompt_len + 1``."""
    step = rules.step("decode")
    boundary = ((prompt_len + 1) // step + 1) * step
    return boundary - prompt_len + 1


def explain_prefill_miss(rules: CacheRules, prompt_lens: Sequence[int]) -> str | None:
    """Why warmed prompts cannot hit, from the server's configuration, and the prompt length that would; None when
    the configuration lets more than half of them hit (then the miss is the cache's own)."""
    n = len(prompt_lens)
    hits = sum(prefill_reach(rules, p) > 0 for p in prompt_lens)
    if not n or hits > n // 2:
        return None
    need = prefill_tokens_needed(rules)
    return (
        f"the server {_unit(rules, 'prefill')}: {hits} of {n} prompts are longer than one such step; "
        f"prompts of {need} tokens or more (--prompt-tokens {need}) would hit"
    )


def explain_decode_miss(rules: CacheRules, prompt_lens: Sequence[int], output_len: int) -> str | None:
    """Why turn 2 cannot reuse turn 1's decoded tokens, from the server's configuration, with the number of new
    tokens that would let more than half of the prompts; None when the configuration is not the cause.

    A hit reaches past turn 1's prompt only when a checkpoint (or a whole page) lies between the prompt's end
    and turn 1's last computed token (SGLang's decode rule), so short generations never can.
    """
    n = len(prompt_lens)
    if n and rules.decode_reuse_blocked:
        return rules.decode_reuse_blocked

    def hits(new: int) -> int:
        return sum(decode_reach(rules, p, new) > p + 1 for p in prompt_lens)

    if not n or hits(output_len) > n // 2:
        return None
    # A prompt hits from its own count of new tokens on (more only moves turn 1's end further), so the sizes
    # that let more than half, and every prompt, hit are order statistics of those counts.
    needs = sorted(decode_tokens_needed(rules, p) for p in prompt_lens)
    return (
        f"the server {_unit(rules, 'decode')}: {output_len} new tokens cross one past the prompt in only "
        f"{hits(output_len)} of {n} prompts; --max-new-tokens {needs[n // 2]} or more would let more than half "
        f"reuse decoded tokens, {needs[-1]} or more every prompt"
        + (" (or a smaller mamba_track_interval)" if rules.kind == "mamba" else "")
    )
