"""precisionbot on Buildkite: the pipeline it uploads, the environment a step reads, the build a rerun starts.

vLLM's GPU CI is Buildkite, not GitHub Actions; this package lets precisionbot run there and still answer on
GitHub with the same sticky comment (``commands/github.py``'s ``comment_action``) and the same gate
(``gh/plan.py``'s ``run_plan``)::

    env.py       BUILDKITE_* variables -> BuildkiteEnv (repo, PR or not, commit, build page)  pure
    pipeline.py  config + queue -> the pipeline YAML for ``buildkite-agent pipeline upload``  pure
    dispatch.py  the gate's decision on ``/precision rerun`` -> the build request             pure
    api.py       ``BuildkiteApi``: create one build (REST, httpx), errors -> BuildkiteError
"""
