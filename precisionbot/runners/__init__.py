"""Ephemeral GPU runners on EC2 (docs/runners.md): one instance, one just-in-time runner, one job.

``records`` (data, names, tags) · ``cloud`` (``Cloud`` protocol, boto3 EC2) · ``github_runners``
(``RunnerRegistry`` protocol, PyGithub) · ``userdata`` (the jinja2 boot script) · ``lifecycle`` (launch /
terminate / reap over the two protocols). The CLI wiring is ``precisionbot.commands.runner``; step outputs
go through ``precisionbot.gh.workflow``.
"""
