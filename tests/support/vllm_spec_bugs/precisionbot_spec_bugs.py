"""A planted speculative-decoding verify bug in a real vLLM server (a ``vllm.general_plugins`` plugin; tests
only).

The file named by ``PRECISIONBOT_SPEC_BUG_FILE`` in the server's environment says whether the bug is live,
read afresh at every verify, so one spec server (vLLM starts in minutes on 2 cores) serves the clean run and the
buggy one in turn; an empty file plants nothing:

* ``accept-all``: verification keeps every drafted token whatever the target model says (the acceptance test
  that lets a non-greedy token through). vLLM's rejection sampler is left to run, then its output rows are
  overwritten with the drafts, so a rejected draft is emitted in place of the target's own token and the
  following positions are computed on it. Steps without drafts are untouched.

It wraps ``vllm.v1.sample.rejection_sampler.rejection_sample``, the module function the sampler calls for each
verify (vLLM 0.32). ``register`` prints one line so a test can tell the plugin loaded.
"""

from __future__ import annotations

import os
import sys
from typing import Any

BUGS = ("accept-all",)


def register() -> None:
    if not os.environ.get("PRECISIONBOT_SPEC_BUG_FILE"):
        raise ValueError("PRECISIONBOT_SPEC_BUG_FILE is not set: name a file holding one of " + ", ".join(BUGS))
    _live()  # a bad name fails the server's start, not a request
    from vllm.v1.sample import rejection_sampler

    original = rejection_sampler.rejection_sample

    def rejection_sample(draft_token_ids: Any, num_draft_tokens: list[int], *args: Any, **kwargs: Any) -> Any:
        out = original(draft_token_ids, num_draft_tokens, *args, **kwargs)
        if _live() != "accept-all":
            return out
        start = 0
        for row, n in enumerate(num_draft_tokens):
            if n:
                out[row, :n] = draft_token_ids[start : start + n].to(out.dtype)
            start += n
        return out

    rejection_sampler.rejection_sample = rejection_sample
    print("precisionbot spec bugs registered", file=sys.stderr, flush=True)


def _live() -> str:
    """The bug named in the file ("" for none)."""
    path = os.environ["PRECISIONBOT_SPEC_BUG_FILE"]
    with open(path, encoding="utf-8") as f:
        bug = f.read().strip()
    if bug and bug not in BUGS:
        raise ValueError(f"{path} names {bug!r}: write one of {', '.join(BUGS)}, or nothing")
    return bug
