"""``runner.kind: slurm``: the batch job's pure parts, then end to end against a real Slurm.

The real cluster (tests/support/slurm_cluster.py) is Debian's slurmctld, slurmd and munged: one node on
loopback, and two nodes as two hosts in network namespaces. ``runner launch`` registers a just-in-time runner on
the fake GitHub (real PyGithub over HTTP), submits the job with ``sbatch``, and waits; the job's stand-in for the
actions runner then runs ``precisionbot check`` with ``engine.launch`` naming ``{nnodes}``, ``{node_rank}`` and
``{dist_init_addr}``, so on two nodes the builtin engine is split over both (rank 1 started by ``srun`` on the
second node), and a planted cross-node fault must fail ``match`` where the clean split passes.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from precisionbot.cli import main
from precisionbot.engines.allocation import parse_hostnames, parse_node_addr, rank_argv
from precisionbot.engines.launcher import render_command, uses_ranks
from precisionbot.errors import ConfigError, EngineStartError
from precisionbot.runners.records import TAG_EXPIRES_AT, TAG_RUN_ID, TAG_RUNNER
from precisionbot.runners.slurm_jobs import (
    JIT_ENV,
    SlurmJobSpec,
    batch_script,
    comment_tags,
    instance_state,
    job_comment,
    parse_squeue,
    sbatch_argv,
    validate_spec,
)
from tests.runners.conftest import REPO
from tests.support import slurm_cluster
from tests.support.fake_github import FakeGitHub

needs_slurm = pytest.mark.skipif(
    not slurm_cluster.available() and not os.environ.get("PRECISIONBOT_REQUIRE_SLURM"),
    reason="needs root and Debian's slurmctld slurmd slurm-client munge",
)

SPEC = SlurmJobSpec(name="precisionbot-7-tabc-0a1b", runner_dir="/shared/actions-runner", ttl_minutes=90, nodes=2,
                    gpus_per_node=8, partition="h100", account="llm-ci")  # fmt: skip
TAGS = {"precisionbot:repo": REPO, TAG_RUN_ID: "7", "precisionbot:pr": "12", TAG_RUNNER: SPEC.name,
        TAG_EXPIRES_AT: "2026-12-02T20:00:00Z"}  # fmt: skip


# --- the pure parts -------------------------------------------------------------------------------------------


def test_sbatch_argv_asks_slurm_for_the_ttl_nodes_and_gpus_and_exports_only_the_jit_config() -> None:
    argv = sbatch_argv(SPEC, TAGS)
    assert argv[0] == "sbatch" and "--parsable" in argv
    for flag in ("--time=90", "--nodes=2", "--gres=gpu:8", "--partition=h100", "--account=llm-ci", "--no-requeue",
                 f"--job-name={SPEC.name}", f"--export=PATH,HOME,{JIT_ENV}"):  # fmt: skip
        assert flag in argv
    comment = next(a for a in argv if a.startswith("--comment="))
    assert comment_tags(comment.removeprefix("--comment=")) == TAGS
    assert "--gres=gpu:0" not in sbatch_argv(
        SlurmJobSpec(name="n", runner_dir="/r", ttl_minutes=5, gpus_per_node=0), {}
    )


def test_the_batch_script_runs_a_private_copy_of_the_runner_and_never_holds_the_jit_config() -> None:
    script = batch_script(SPEC)
    assert script.startswith("#!/bin/bash\n") and 'cp -a /shared/actions-runner/. "$work/"' in script
    assert JIT_ENV not in script and 'rm -rf "$work"' in script


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"runner_dir": "relative/dir"}, "runner_dir"),
        ({"runner_dir": "/a/../etc"}, "runner_dir"),
        ({"runner_dir": "/a dir"}, "runner_dir"),
        ({"partition": "gpu;rm -rf"}, "partition"),
        ({"account": "a b"}, "account"),
        ({"nodes": 0}, "nodes"),
        ({"name": "x y"}, "job name"),
    ],
)
def test_a_spec_the_shell_or_slurm_would_misread_is_refused_by_name(change: dict[str, object], key: str) -> None:
    import dataclasses

    with pytest.raises(ConfigError, match=key):
        validate_spec(dataclasses.replace(SPEC, **change))  # type: ignore[arg-type]


def test_a_comment_carries_no_label_and_a_foreign_comment_has_no_tags() -> None:
    assert "label" not in job_comment(TAGS)
    assert comment_tags("nightly build of alice") == {}
    assert comment_tags("(null)") == {}
    with pytest.raises(ConfigError, match="cannot carry"):
        job_comment({"precisionbot:pr": "1 2"})


def test_squeue_rows_become_instances_and_a_foreign_line_is_an_error() -> None:
    text = (
        f"41|PENDING|Resources|2026-12-02T17:01:55|{SPEC.name}|{job_comment(TAGS)}\n"
        "42|RUNNING|None|2026-12-02T17:02:00|train|(null)\n"
        "43|TIMEOUT|None|2026-12-02T17:03:00|x|precisionbot precisionbot:run-id=9\n"
    )
    jobs = parse_squeue(text)
    assert [j.reason for j in jobs] == ["Resources", "", ""]
    assert [j.instance().state for j in jobs] == ["pending", "running", "timeout"]
    assert jobs[0].instance().tags == TAGS and jobs[1].instance().tags == {}
    assert [j.instance().live for j in jobs] == [True, True, False]
    with pytest.raises(ConfigError, match="not a row of --format"):
        parse_squeue("JOBID PARTITION NAME\n")


def test_slurm_states_map_onto_the_lifecycle() -> None:
    assert instance_state("CONFIGURING") == "pending" and instance_state("COMPLETING") == "running"
    assert instance_state("CANCELLED+") == "cancelled" and instance_state("NODE_FAIL") == "node_fail"


def test_a_template_with_node_rank_renders_one_command_per_rank() -> None:
    template = "serve --port {port} --nnodes {nnodes} --node-rank {node_rank} --dist-init-addr {dist_init_addr}"
    assert uses_ranks(template) and not uses_ranks("serve --port {port}")
    argv = render_command(template, model="m", tp=1, port=5, nnodes=2, node_rank=1, dist_init_addr="10.0.0.2:7")
    assert argv == ["serve", "--port", "5", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.2:7"]
    assert rank_argv(1, argv)[:5] == ["srun", "--nodes=1", "--ntasks=1", "--relative=1", "--kill-on-bad-exit=1"]


def test_scontrol_answers_are_parsed_and_garbage_is_refused() -> None:
    assert parse_hostnames("node1\nnode2\n") == ("node1", "node2")
    assert (
        parse_node_addr("NodeName=node1 Arch=x86_64\n   NodeAddr=10.1.0.2 NodeHostName=node1\n", "node1") == "10.1.0.2"
    )
    with pytest.raises(EngineStartError, match="no NodeAddr"):
        parse_node_addr("Node node9 not found", "node9")
    with pytest.raises(EngineStartError, match="not node names"):
        parse_hostnames("")


def test_slurm_keys_load_and_the_gate_keeps_fork_code_off_the_cluster() -> None:
    from precisionbot.config import from_mapping

    config = from_mapping({"runner": {"kind": "slurm", "partition": "gpu", "nodes": 2, "gpus": 4,
                                      "runner_dir": "/shared/runner"}})  # fmt: skip
    assert (config.runner.kind, config.runner.nodes, config.runner.gpus) == ("slurm", 2, 4)
    with pytest.raises(ConfigError, match="nodes"):
        from_mapping({"runner": {"kind": "slurm", "nodes": 0}})


def test_launch_without_slurms_commands_registers_nothing_and_says_where_to_run(
    github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "precision.yml"
    config.write_text(yaml.safe_dump({"runner": {"kind": "slurm", "runner_dir": "/shared/runner"}}))
    monkeypatch.setenv("GITHUB_REPOSITORY", REPO)
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    assert main(["runner", "launch", "--config", str(config)]) == 3
    assert "sbatch is not on PATH" in capsys.readouterr().err
    assert github.runners() == []


def test_a_slurm_job_id_needs_a_slurm_runner_in_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runner", "terminate", "--instance-id", "12"]) == 3
    assert "is a Slurm job id, but no runner in the config is kind: slurm" in capsys.readouterr().err


# --- against a real Slurm -------------------------------------------------------------------------------------

RUNNER = r"""#!/bin/bash
# A stand-in for actions/runner's run.sh: reads its JIT config as the real one does, says it started (the test
# then marks it online on the fake GitHub, as GitHub would), and does what the GPU job does: precisionbot check.
set -u
control=@CONTROL@
name=$(@PYTHON@ -c 'import base64, json, os
print(json.loads(base64.b64decode(os.environ["ACTIONS_RUNNER_INPUT_JITCONFIG"]))["name"])')
env | sort > "$control/env-$name.txt"
touch "$control/started-$name"
if [ -e "$control/hold" ]; then sleep 300; fi
@PYTHON@ -m precisionbot check --config "$control/job.yml" --engine launch --suite small --checks match \
  --out "$control/out-$name" --quiet > "$control/check-$name.log" 2>&1
echo $? > "$control/rc-$name"
"""


def _job_config(control: Path, faults: tuple[str, ...]) -> dict[str, object]:
    args = " ".join(f"--fault {f}" for f in faults)
    return {
        "engine": {
            "kind": "builtin",
            "launch": f"{sys.executable} -m precisionbot serve --port {{port}} --nnodes {{nnodes}} "
            "--node-rank {node_rank} --dist-init-addr {dist_init_addr} --dist-timeout 120 {args}",
            "health_timeout_s": 300,
        },
        "models": [{"name": "builtin", "path": "builtin", "args": args}],
        "suites": {"small": {"checks": ["match"], "samples": 4, "max_new_tokens": 32, "prompt_tokens": [64, 160]}},
    }


def _started(tmp: pytest.TempPathFactory, *, two_nodes: bool) -> Iterator[slurm_cluster.Cluster]:
    # needs_slurm skips the tests when Slurm is missing; CI sets PRECISIONBOT_REQUIRE_SLURM, and then it fails.
    if not slurm_cluster.available():
        pytest.fail("PRECISIONBOT_REQUIRE_SLURM is set but Slurm's daemons, ip/nsenter or root are missing")
    with slurm_cluster.cluster(tmp.mktemp("slurm"), two_nodes=two_nodes, index=int(two_nodes)) as made:
        yield made


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_cluster.Cluster]:
    yield from _started(tmp_path_factory, two_nodes=False)


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_cluster.Cluster]:
    yield from _started(tmp_path_factory, two_nodes=True)


class Site:
    """A launch site: the config, the runner folder, the control folder the stand-in reports to."""

    def __init__(self, root: Path, cluster: slurm_cluster.Cluster, github: FakeGitHub, *, nodes: int,
                 faults: tuple[str, ...] = (), wait_timeout_s: float = 120.0) -> None:  # fmt: skip
        self.control = root / "control"
        runner_dir = root / "actions-runner"
        self.control.mkdir(parents=True)
        runner_dir.mkdir()
        run = runner_dir / "run.sh"
        run.write_text(RUNNER.replace("@CONTROL@", str(self.control)).replace("@PYTHON@", sys.executable))
        run.chmod(0o755)
        (self.control / "job.yml").write_text(yaml.safe_dump(_job_config(self.control, faults)))
        self.config = root / "precision.yml"
        runner = {"kind": "slurm", "partition": "debug", "nodes": nodes, "gpus": 1, "runner_dir": str(runner_dir),
                  "ttl_minutes": 30, "wait_timeout_s": wait_timeout_s}  # fmt: skip
        self.config.write_text(yaml.safe_dump({"runner": runner}))
        self.cluster = cluster
        self.github = github
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._online, daemon=True)

    def _online(self) -> None:
        """What GitHub does when a runner connects: its registration turns online."""
        while not self._stop.is_set():
            for runner in self.github.runners():
                if (self.control / f"started-{runner['name']}").exists() and runner["status"] != "online":
                    self.github.set_runner_status(runner["id"], "online")
            time.sleep(0.1)

    def __enter__(self) -> Site:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def launch(self, *extra: str) -> dict[str, str]:
        out = self.control / "outputs.txt"
        os.environ["GITHUB_OUTPUT"] = str(out)
        try:
            rc = main(
                [
                    "runner",
                    "launch",
                    "--config",
                    str(self.config),
                    "--run-id",
                    "77",
                    "--pr",
                    "5",
                    "--poll-interval",
                    "0.3",
                    *extra,
                ]
            )
        finally:
            del os.environ["GITHUB_OUTPUT"]
        assert rc == 0
        return _outputs(out.read_text())

    def wait_done(self, name: str, timeout_s: float = 420.0) -> int:
        deadline = time.monotonic() + timeout_s
        rc_file = self.control / f"rc-{name}"
        while not rc_file.exists():
            if time.monotonic() > deadline:
                log = self.control / f"check-{name}.log"
                raise AssertionError(
                    f"the job's check did not finish in {timeout_s:g} s; check log:\n"
                    f"{log.read_text()[-3000:] if log.exists() else '(none)'}\n{self.cluster.logs()}"
                )
            time.sleep(0.5)
        return int(rc_file.read_text())

    def result(self, name: str) -> dict[str, object]:
        data: dict[str, object] = json.loads((self.control / f"out-{name}" / "result.json").read_text())
        return data

    def our_jobs(self) -> str:
        return self.cluster.run("squeue", "--me", "--states=all", "--noheader", "--format=%i %T %k")


def _outputs(text: str) -> dict[str, str]:
    """``$GITHUB_OUTPUT``'s ``name<<DELIMITER`` blocks (and plain ``name=value`` lines)."""
    found: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        if "<<" in line:
            name, delimiter = line.split("<<", 1)
            found[name] = "\n".join(iter(lambda: next(lines), delimiter))
        elif "=" in line:
            name, value = line.split("=", 1)
            found[name] = value
    return found


@pytest.fixture
def slurm_env(monkeypatch: pytest.MonkeyPatch, github: FakeGitHub, tmp_path: Path) -> FakeGitHub:
    monkeypatch.setenv("GITHUB_REPOSITORY", REPO)
    monkeypatch.chdir(tmp_path)  # sbatch's submit folder: the job's %x.out log lands here
    return github


def _match_verdict(result: dict[str, object]) -> str:
    checks = result["checks"]
    assert isinstance(checks, list)
    return str(next(c for c in checks if c["name"] == "match")["verdict"])


@needs_slurm
def test_one_node_job_runs_the_check_and_leaves_nothing(
    one_node: slurm_cluster.Cluster, slurm_env: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(one_node.conf))
    with Site(tmp_path, one_node, slurm_env, nodes=1) as site:
        outputs = site.launch()
        job_id = outputs["job-id"]
        name = next(r["name"] for r in slurm_env.runners())
        shown = one_node.run("scontrol", "show", "job", job_id)
        assert (
            "TimeLimit=00:30:00" in shown and "TresPerNode=gres:gpu:1" in shown
        )  # Slurm itself holds the TTL and the GPU
        assert site.wait_done(name) == 0
        env = (site.control / f"env-{name}.txt").read_text()
        # The launch step's GitHub token never reaches the job that runs PR code.
        assert "PRECISIONBOT_GITHUB_TOKEN" not in env and "GITHUB_API_URL" not in env
        assert _match_verdict(site.result(name)) == "pass"
        deadline = time.monotonic() + 30
        while outputs["job-id"] in site.our_jobs() and "RUNNING" in site.our_jobs():
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert not list(Path("/tmp").glob(f"precisionbot-runner-{job_id}.*"))  # the private copy is gone
        assert (tmp_path / f"{name}.out").exists()


@needs_slurm
def test_two_node_split_passes_clean_and_a_planted_cross_node_fault_fails(
    two_nodes: slurm_cluster.Cluster, slurm_env: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(two_nodes.conf))
    verdicts = {}
    for faults in ((), ("cross-node-stale",)):
        root = tmp_path / ("faulty" if faults else "clean")
        with Site(root, two_nodes, slurm_env, nodes=2, faults=faults) as site:
            site.launch()
            name = next(r["name"] for r in slurm_env.runners() if (site.control / f"started-{r['name']}").exists())
            rc = site.wait_done(name)
            verdicts[faults] = (rc, _match_verdict(site.result(name)))
            # Rank 1 ran through srun on the other node (its own log), and rank 0 served a 2-node engine.
            assert list((site.control / f"out-{name}").rglob("engine-rank1.log")), "no rank 1 log"
            assert "2 nodes" in "".join(p.read_text() for p in (site.control / f"out-{name}").rglob("engine.log"))
    assert verdicts[()] == (0, "pass")
    assert verdicts[("cross-node-stale",)] == (1, "fail")


@needs_slurm
def test_a_job_that_never_starts_is_cancelled_with_slurms_reason_and_its_registration_deleted(
    one_node: slurm_cluster.Cluster,
    slurm_env: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(one_node.conf))
    # The node's two GPUs are taken by another job: ours pends (Slurm's reason: Resources); launch gives up after
    # its wait and cleans up.
    with Site(tmp_path, one_node, slurm_env, nodes=1, wait_timeout_s=3) as site:
        blocker = one_node.run("sbatch", "--parsable", "--gres=gpu:2", "--wrap=sleep 300").strip()
        try:
            rc = main(["runner", "launch", "--config", str(site.config), "--run-id", "78", "--poll-interval", "0.3"])
        finally:
            one_node.run("scancel", blocker)
        err = capsys.readouterr().err
        assert rc == 3, err
        assert "still pending (" in err and "raise runner.wait_timeout_s" in err and "terminated" in err
        assert slurm_env.runners() == []
        # A request the cluster can never meet is refused at submission: the error quotes Slurm, and the
        # registration made for it is deleted too.
        config = yaml.safe_load(site.config.read_text())
        config["runner"]["gpus"] = 3
        site.config.write_text(yaml.safe_dump(config))
        rc = main(["runner", "launch", "--config", str(site.config), "--run-id", "79"])
        err = capsys.readouterr().err
        assert rc == 3 and "Requested node configuration is not available" in err, err
        assert slurm_env.runners() == []
        assert "PENDING" not in site.our_jobs() and "RUNNING" not in site.our_jobs()


@needs_slurm
def test_terminate_by_run_id_and_reap_of_an_expired_job(
    one_node: slurm_cluster.Cluster, slurm_env: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(one_node.conf))
    with Site(tmp_path, one_node, slurm_env, nodes=1) as site:
        (site.control / "hold").touch()  # the stand-in holds the job, as a long check would
        job_id = site.launch()["job-id"]
        assert main(["runner", "terminate", "--run-id", "77", "--config", str(site.config)]) == 0
        deadline = time.monotonic() + 30
        while "RUNNING" in site.our_jobs():
            assert time.monotonic() < deadline, site.our_jobs()
            time.sleep(0.5)
        assert slurm_env.runners() == []
        assert f"{job_id} CANCELLED" in site.our_jobs() or job_id not in site.our_jobs()
    # reap: a job of ours whose expiry passed (here: submitted with one in the past) is cancelled; a foreign
    # job with a look-alike name is left alone.
    expired = "precisionbot precisionbot:run-id=5 precisionbot:runner=precisionbot-5-t0-aaaa " + (
        "precisionbot:expires-at=2020-01-01T00:00:00Z"
    )
    ours = one_node.run("sbatch", "--parsable", f"--comment={expired}", "--wrap=sleep 300").strip()
    foreign = one_node.run("sbatch", "--parsable", "--job-name=precisionbot-9-t0-bbbb", "--wrap=sleep 300").strip()
    assert main(["runner", "reap", "--config", str(site.config)]) == 0
    time.sleep(1)
    jobs = site.our_jobs()
    assert f"{ours} CANCELLED" in jobs or f"{ours} COMPLETING" in jobs, jobs
    assert f"{foreign} RUNNING" in jobs or f"{foreign} PENDING" in jobs, jobs
    one_node.run("scancel", foreign)
