"""The GitHub side of precisionbot: the plan gate, ``/precision`` slash commands, the sticky comment.

::

    event.py     the Actions event (name + payload) as a small dataclass             pure
    slash.py     ``/precision <verb> [key=value ...]`` parsing and the usage text     pure
    paths.py     path globs (``**/layers/**``) for the pull_request trigger           pure
    gate.py      event + facts + config -> Decision (run? which sha, suite, reply)    pure
    approval.py  who approved exactly one commit in a review (fork runs need it)     pure
    pinning.py   what the comment job trusts: the plan's SHA, this run's artifacts   pure
    matrix.py    models x runner specs from the config -> the job matrix             pure
    workflow.py  workflow-command escaping, ``$GITHUB_OUTPUT`` heredocs, summary     pure + one writer
    api.py       ``GitHubApi``: the narrow Protocol plan/comment need, and its dataclasses
    rest.py      ``RestGitHub``: that Protocol over PyGithub (errors -> ``GitHubError``)
    plan.py      ``run_plan``: fetch facts, ask the gate, react and reply
    sticky.py    ``upsert_comment``: one comment per PR (marker AND bot login), size guard
"""
