"""llama.cpp's ``llama-server`` through its native API (``/completion``, ``/tokenize``, ``/detokenize``, ``/props``,
``/slots``).

Facts (measured on llama.cpp 0c1e570): prompts go as token ids; ``n_probs`` gives the logprob of
each generated token and its top-k from the raw logits; there are no prompt logprobs (``echo`` and
``prompt_logprobs`` are ignored), so a replay scores each position with its own request: the prefix, no cache
(``cache_prompt: false``), one token, the target looked up in the top-k (asked again with the whole vocabulary
when it is not listed). That costs one prefill per scored position, so checks ask only the positions they
compare (``replay_per_position``). ``timings.cache_n`` is the reused prompt length (an exact repeat reuses all
but one token). Flushing needs ``POST /slots/{id}?action=erase`` (only with ``--slot-save-path``) and no
host-memory prompt cache (``--cache-ram 0``); a probe checks both once, and when the server cannot be flushed
every request is sent with ``cache_prompt: false`` and the cache helpers are INCONCLUSIVE with the fix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np

from precisionbot.engines.base import GenerateRequest, Generation, Progress, ServerInfo, TopLogprobs
from precisionbot.engines.http import HttpClient, error_message
from precisionbot.engines.llamacpp_parse import Completion, Entry, parse_completion, top_arrays
from precisionbot.errors import EngineError

FIRST_N_PROBS = 10
"""Top tokens asked per scored position; the whole vocabulary is asked only when the target is not among them."""
PROPS_DROP = ("chat_template", "chat_template_tool_use", "chat_template_caps", "ui_settings", "webui_settings")
FLUSH_FIX = "start llama-server with --slot-save-path DIR and --cache-ram 0 so precisionbot can flush its cache"


class LlamaCppEngine:
    """Client of a llama.cpp ``llama-server``."""

    kind = "llamacpp"
    replay_per_position = True
    """A replay costs one request per scored position: callers ask only the positions they compare."""

    def __init__(
        self,
        url: str,
        *,
        batch_size: int = 8,
        concurrency: int = 4,
        request_timeout_s: float = 600.0,
        retries: int = 4,
        backoff_s: float = 0.25,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.workers = max(1, min(64, concurrency * batch_size))  # the server batches concurrent requests
        self.http = HttpClient(
            self.url,
            timeout_s=request_timeout_s,
            pool_size=self.workers,
            retries=retries,
            backoff_s=backoff_s,
            transport=transport,
        )
        self._props: dict[str, Any] | None = None
        self._pieces: dict[int, str | None] = {}
        """Token id → its text (``/detokenize``), asked once per id: the report shows it for every token."""
        self._flush_problem: str | None = None
        self._probed = False
        self._safe_token: int | None = None
        self._n_vocab: int | None = None
        self.scoring_requests = 0
        """Per-position requests sent (the replay's cost; a benchmark figure)."""

    # --- server facts ---

    def props(self) -> dict[str, Any]:
        if self._props is None:
            data = self.http.json_call("GET", "/props", what="/props")
            if not isinstance(data, dict):
                raise EngineError("/props answered something other than a JSON object; is this llama-server?")
            self._props = {k: v for k, v in data.items() if k not in PROPS_DROP}
        return self._props

    def server_info(self) -> ServerInfo:
        props = self.props()
        raw: dict[str, Any] = dict(props)
        if self._probed:
            raw["cache_flush"] = self._flush_problem or "ok"
        build = props.get("build_info")
        path = props.get("model_path")
        return ServerInfo(
            raw=raw,
            version=None if build is None else str(build),
            model_path=None if path is None else str(path),
        )

    def health(self) -> bool:
        try:
            return self.http.request("GET", "/health", what="/health", retry=False).status_code == 200
        except EngineError:
            return False

    def _slots(self) -> int:
        total = self.props().get("total_slots")
        return total if isinstance(total, int) and not isinstance(total, bool) and total > 0 else 1

    def _vocab(self) -> int:
        if self._n_vocab is None:
            data = self.http.json_call("GET", "/v1/models", what="/v1/models")
            try:
                self._n_vocab = int(data["data"][0]["meta"]["n_vocab"])
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise EngineError("/v1/models does not give the model's n_vocab (data[0].meta.n_vocab)") from exc
        return self._n_vocab

    # --- tokenizer ---

    def _tokenize(self, text: str, what: str, add_special: bool) -> tuple[int, ...]:
        body = {"content": text, "add_special": add_special, "with_pieces": False}
        data = self.http.json_call("POST", "/tokenize", json=body, what=what)
        tokens = data.get("tokens") if isinstance(data, Mapping) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise EngineError(f"{what}: /tokenize answered no token list (got {str(data)[:80]!r})")
        if text and not tokens:
            raise EngineError(f"{what}: /tokenize answered no tokens for a non-empty text")
        return tuple(tokens)

    def _piece(self, token: int) -> str | None:
        data = self.http.json_call("POST", "/detokenize", json={"tokens": [token]}, what=f"/detokenize {token}")
        text = data.get("content") if isinstance(data, Mapping) else None
        # A byte token that is half a UTF-8 character comes back empty or as U+FFFD: no text is better than that.
        return text if isinstance(text, str) and text and text != "\ufffd" else None

    def _texts_read(self, r: GenerateRequest, ids: Sequence[int]) -> tuple[str | None, ...]:
        """The text of the input positions the request reads (``read_from`` on; the others are not shown)."""
        skip = r.unread(len(ids))
        return (None,) * skip + self.token_texts(ids[skip:])

    def token_texts(self, ids: Sequence[int]) -> tuple[str | None, ...]:
        """The text of each token id. llama-server's logprob entries carry no text for prompt positions (they are
        scored one request each), so the text comes from ``/detokenize``, once per distinct id."""
        missing = sorted({int(t) for t in ids} - self._pieces.keys())
        if missing:
            with ThreadPoolExecutor(max_workers=min(self.workers, len(missing))) as pool:
                for token, text in zip(missing, pool.map(self._piece, missing), strict=True):
                    self._pieces[token] = text
        return tuple(self._pieces[int(t)] for t in ids)

    def tokenize(self, texts: Sequence[str]) -> list[tuple[int, ...]]:
        # add_special: the server adds BOS to text prompts itself, so the prompts we send as ids carry it too.
        return [self._tokenize(t, f"/tokenize text {i}", add_special=True) for i, t in enumerate(texts)]

    def _safe(self) -> int:
        """A plain-text token, forced as the sampled token of scoring requests: a sampled byte token that
        leaves an incomplete UTF-8 character gets no logprob entry, and the logprobs come from the raw logits,
        so the bias does not change them."""
        if self._safe_token is None:
            self._safe_token = self._tokenize("x", "/tokenize (scoring token)", add_special=False)[-1]
        return self._safe_token

    # --- cache ---

    def _probe(self) -> None:
        """Can this server be flushed? Erase must work, and a flushed prompt must not come back from the
        host-memory prompt cache (``--cache-ram``), which keeps the prompts a slot switches away from."""
        if self._probed:
            return
        self._probed = True
        response = self.http.request("POST", "/slots/0?action=erase", what="/slots/0?action=erase")
        if response.status_code != 200:
            self._flush_problem = (
                f"llama-server cannot erase its slots (POST /slots/0?action=erase answered HTTP "
                f"{response.status_code}: {error_message(response)}); {FLUSH_FIX}"
            )
            return
        prompts = [
            self._tokenize(f"precisionbot cache probe {i}. " * 6, "/tokenize (cache probe)", True)
            for i in range(self._slots() + 1)
        ]
        for p in prompts:  # one after another: the last ones push the first out of its slot
            self._complete(p, 1, cache=True, what="cache probe")
        self._erase_all()
        again = self._complete(prompts[0], 1, cache=True, what="cache probe")
        if again.cached_tokens:
            self._flush_problem = (
                f"a flushed prompt came back from llama-server's host-memory prompt cache ({again.cached_tokens} "
                f"tokens reused after erasing every slot); {FLUSH_FIX}"
            )
        self._erase_all()

    def _erase_all(self) -> None:
        for slot in range(self._slots()):
            path = f"/slots/{slot}?action=erase"
            response = self.http.request("POST", path, what=path)
            if response.status_code != 200:
                raise EngineError(f"{path} answered HTTP {response.status_code}: {error_message(response)}")

    def flush_cache(self) -> None:
        self._probe()
        if self._flush_problem is None:
            self._erase_all()
        # Else every request already goes with cache_prompt: false, which is a flush per request.

    def cache_unsupported_reason(self) -> str | None:
        self._probe()
        return self._flush_problem

    def _cache(self) -> bool:
        self._probe()
        return self._flush_problem is None

    # --- generation ---

    def _complete(
        self,
        prompt: Sequence[int],
        n: int,
        *,
        cache: bool,
        what: str,
        n_probs: int = 1,
        temperature: float = 0.0,
        ignore_eos: bool = True,
        force: int | None = None,
        seed: int | None = None,
    ) -> Completion:
        body: dict[str, Any] = {
            "prompt": list(prompt),
            "n_predict": max(1, n),  # n_predict 0 still samples one token; the extra one is dropped
            "temperature": temperature,
            "ignore_eos": ignore_eos,
            "n_probs": n_probs,
            "post_sampling_probs": False,
            "cache_prompt": cache,
            "return_tokens": True,
            "stream": False,
        }
        if force is not None:
            body["logit_bias"] = [[force, 1000.0]]
        if seed is not None:  # sampled decodes (temperature > 0) are reproducible per request
            body["seed"] = seed
        data = self.http.json_call("POST", "/completion", json=body, what=what)
        return parse_completion(data, what, prompt_tokens=len(prompt), n_predict=max(1, n), exact=ignore_eos)

    def _score(self, prefix: Sequence[int], target: int, k: int, *, cache: bool, what: str) -> Entry:
        """The distribution after ``prefix`` (one request), with ``target`` and the top ``k`` in it."""
        n = max(k, FIRST_N_PROBS)
        while True:
            self.scoring_requests += 1
            got = self._complete(prefix, 1, cache=cache, what=what, n_probs=n, force=self._safe())
            entry = got.entries[0]
            if entry is None:
                raise EngineError(f"{what}: llama-server gave no logprob entry for the forced plain-text token")
            if entry.logprob_of(target) is not None or n >= self._vocab():
                break
            n = self._vocab()
        lp = entry.logprob_of(target)
        if lp is None:
            raise EngineError(f"{what}: token {target} is not in the model's vocabulary")
        keep = max(k, 1)  # a whole-vocabulary answer is not kept beyond the top-k asked
        return Entry(target, lp, entry.top_ids[:keep], entry.top_logprobs[:keep])

    def generate(self, requests: Sequence[GenerateRequest], progress: Progress | None = None) -> list[Generation]:
        if not requests:
            return []
        cache = self._cache()
        for i, r in enumerate(requests):
            if r.logprob_start_len >= len(r.input_ids):
                raise EngineError(f"request {i}: logprob_start_len {r.logprob_start_len} is past the prompt")

        def one(i: int) -> Generation:
            gen = self._one(requests[i], i, cache)
            if progress is not None:
                progress(1)
            return gen

        with ThreadPoolExecutor(max_workers=min(self.workers, len(requests))) as pool:
            return list(pool.map(one, range(len(requests))))

    def _one(self, r: GenerateRequest, index: int, cache: bool) -> Generation:
        k = r.top_logprobs_num
        out_ids: tuple[int, ...] = ()
        out_entries: list[Entry] = []
        cached = 0
        if r.max_new_tokens > 0 or r.logprob_start_len < 0:
            what = f"/completion request {index}"
            got = self._complete(
                r.input_ids,
                r.max_new_tokens,
                cache=cache,
                what=what,
                n_probs=max(1, k),
                temperature=r.temperature,
                ignore_eos=r.ignore_eos,
                seed=getattr(r, "sampling_seed", None),  # GenerateRequest.sampling_seed where the field exists
            )
            cached = got.cached_tokens
            out_ids = got.tokens[: r.max_new_tokens]
            for j, tok in enumerate(out_ids):
                entry = got.entries[j]
                if entry is None:  # dropped by the server (incomplete UTF-8): score it on the same cache
                    entry = self._score(r.input_ids + out_ids[:j], tok, k, cache=cache, what=f"{what} token {j}")
                out_entries.append(entry)
        in_entries: list[Entry] = []
        start = r.logprob_start_len
        if start >= 0:
            # Position ``start`` has no logprob (SGLang's convention: entry 0 is null); the rest are scored.
            in_entries = self._replay(r.input_ids, start + 1, k, index)
        generation = self._generation(r, out_ids, out_entries, in_entries, cached)
        if not r.return_text:
            return generation
        return dataclasses.replace(
            generation,
            input_token_text=self._texts_read(r, generation.input_token_ids.tolist()),
            output_token_text=self.token_texts(out_ids),
        )

    def _replay(self, ids: tuple[int, ...], first: int, k: int, index: int) -> list[Entry]:
        def one(p: int) -> Entry:
            return self._score(ids[:p], ids[p], k, cache=False, what=f"replay of request {index} position {p}")

        positions = range(max(1, first), len(ids))
        if len(positions) <= 1:
            return [one(p) for p in positions]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(positions))) as pool:
            return list(pool.map(one, positions))

    @staticmethod
    def _generation(
        r: GenerateRequest, out_ids: tuple[int, ...], out: list[Entry], inp: list[Entry], cached: int
    ) -> Generation:
        k = r.top_logprobs_num
        start = r.logprob_start_len
        in_ids = np.asarray(r.input_ids[start:] if start >= 0 else (), dtype=np.int32)
        in_lp = np.empty(0)
        input_top = output_top = None
        if start >= 0:
            in_lp = np.array([np.nan] + [e.logprob for e in inp], dtype=np.float64)
        if k > 0:
            ids, lps = top_arrays(out, k)
            output_top = TopLogprobs(ids=ids, logprobs=lps)
            if start >= 0:
                ids_in, lps_in = top_arrays(inp, k)
                pad_ids = np.full((1, k), -1, dtype=np.int32)
                input_top = TopLogprobs(
                    ids=np.concatenate([pad_ids, ids_in]), logprobs=np.concatenate([np.full((1, k), np.nan), lps_in])
                )
        return Generation(
            input_ids=r.input_ids,
            output_ids=out_ids,
            prompt_tokens=len(r.input_ids),
            cached_tokens=cached,
            input_token_ids=in_ids,
            input_logprobs=in_lp,
            output_logprobs=np.array([e.logprob for e in out], dtype=np.float64),
            input_top=input_top,
            output_top=output_top,
            input_token_text=(None,) * len(in_ids) if r.return_text else (),
            output_token_text=(None,) * len(out_ids) if r.return_text else (),
        )

    def close(self) -> None:
        self.http.close()
