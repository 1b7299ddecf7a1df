"""The environment variables precisionbot reads or sets, named once, each with who sets it and who reads it.

The shell side (``action.yml``, ``templates/runner-user-data.sh.j2``, the example workflows) spells the names
itself; where Python renders or reads one, it uses these constants. A module of the ground floor: any room may
import it, and it imports nothing.
"""

from __future__ import annotations

ENGINE_COMMIT = "PRECISIONBOT_ENGINE_COMMIT"
"""The engine build's commit. Set by the user's workflow for ``check`` and ``baseline record`` (the default of
``--engine-commit``), and by ``engines/checkout.py`` for ``engine.install`` and ``engine.launch`` at a bisect or
merge-base commit; read by ``check``, ``baseline record`` and ``merge_base`` (default ``HEAD``)."""

INSTANCE_TYPE = "PRECISIONBOT_INSTANCE_TYPE"
"""The EC2 instance type the job runs on. Set by the runner's ``pr.sh`` (``templates/runner-user-data.sh.j2``,
from the metadata service) and by ``action.yml``'s ``instance-type`` input; read by ``check`` into the run's
fingerprint."""

CACHE_DIR = "PRECISIONBOT_CACHE_DIR"
"""Where the builtin engine caches its subword vocabulary and bigram factors. Set by the user (or CI); read by
``builtin/bpe.py`` (else ``$XDG_CACHE_HOME/precisionbot``, else ``~/.cache/precisionbot``)."""

CONFIG = "PRECISIONBOT_CONFIG"
"""The config file. Set by ``action.yml`` from its ``config`` input; read by the ``github`` commands (the
default of ``--config``, else ``.github/precision.yml``)."""

GITHUB_TOKEN = "PRECISIONBOT_GITHUB_TOKEN"
"""The GitHub token, which wins over Actions' ``GITHUB_TOKEN``. Set by ``action.yml`` (its ``token`` input, only
for the ``github`` and ``runner`` commands) or the workflow; read by the ``github`` and ``runner`` commands."""

BOT_LOGIN = "PRECISIONBOT_BOT_LOGIN"
"""Our login, when the token may not call ``GET /user`` (an App token). Set by the workflow; read by the
``github`` commands (default ``github-actions[bot]``)."""

REPORT_URL = "PRECISIONBOT_REPORT_URL"
"""The uploaded HTML report (upload-artifact's ``artifact-url``), linked as "full report". Set by ``action.yml``
from its ``report-url`` input or the workflow; read by the ``github`` commands and ``report``."""

ARTIFACT_URL = "PRECISIONBOT_ARTIFACT_URL"
"""The uploaded result directory, linked from the report. Set by the workflow; read by ``report``
(``report/load.py``)."""

BUILDKITE_TOKEN = "PRECISIONBOT_BUILDKITE_TOKEN"
"""A Buildkite API access token with the ``write_builds`` scope only. Set by the GitHub workflow that answers
``/precision rerun`` (from a secret); read by ``buildkite trigger``, which starts the build."""

RERUN_SUITE = "PRECISIONBOT_RERUN_SUITE"
RERUN_MODELS = "PRECISIONBOT_RERUN_MODELS"
RERUN_CHECKS = "PRECISIONBOT_RERUN_CHECKS"
RERUN_SAMPLES = "PRECISIONBOT_RERUN_SAMPLES"
"""What a ``/precision rerun`` asked for (suite, comma-separated models and checks, samples). Set by
``buildkite trigger`` on the Buildkite build it creates, from the gate's decision; read by ``buildkite pipeline``
in that build's upload step (the defaults of its ``--suite``, ``--models``, ``--checks``, ``--samples``)."""
