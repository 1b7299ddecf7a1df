"""Ephemeral GPU runners (docs/runners.md): one just-in-time GitHub runner for one job, on one of three kinds.

Shared by every kind: ``records`` (data, names, tags) · ``github_runners`` (``RunnerRegistry`` protocol,
PyGithub) · ``lifecycle`` (launch / terminate / reap over the protocols).
``runner.kind: ec2``: ``cloud`` (``Cloud`` protocol, boto3 EC2) · ``userdata`` (the jinja2 boot script).
``runner.kind: slurm``: ``slurm_jobs`` (the batch job, pure) · ``slurm_cli`` (sbatch/squeue/scancel behind
``Fleet``) · ``slurm_launch`` (register, submit, wait online).
``runner.kind: host``: ``host_queue`` (the create-only job queue in the store) · ``host_agent`` (one job at a
time) · ``host_containers`` (``ContainerRuntime``, Docker/Podman) · ``host_sandbox`` (the bubblewrap runtime)
· ``host_gpus`` (GPU leases). The CLI wiring is ``precisionbot.commands.runner`` (with ``runner_host`` and
``runner_slurm``); step outputs go through ``precisionbot.gh.workflow``.
"""
