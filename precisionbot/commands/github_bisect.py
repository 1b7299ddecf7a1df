"""``precisionbot github bisect-comment DIR...``: the ``/precision bisect`` comment, rendered on the trusted side.

Each ``DIR/bisect.json`` was written by ``precisionbot bisect`` on the GPU runner, in the PR's trust domain
(it builds and runs every commit of the PR). Posting a Markdown file from there as the bot would let the PR
write the bot's words: the verdict comment's marker (so the verdict's upsert takes that comment over),
``@org/team`` mentions, any size, one comment per cell and run. So this job reads only the JSON, capped at
:data:`BISECT_MAX_BYTES`, checks it field by field (precisionbot.report.bisect_comment.parse_bisect; a bad
file becomes that cell's "no result" line naming the file and the field), renders the comment itself with
every string escaped, and upserts one comment under the bisect's own marker.

Exit 0 when every cell named one first bad commit, 2 otherwise (an ambiguous answer, a missing or invalid
file, no result at all), 3 when GitHub refuses the comment.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from precisionbot.errors import DataError

if TYPE_CHECKING:
    from precisionbot.gh.api import GitHubApi
    from precisionbot.report.bisect_comment import BisectCell

BISECT_FILE = "bisect.json"
BISECT_MAX_BYTES = 1024 * 1024
"""Largest ``bisect.json`` read: a real one is a few hundred bytes per step, and steps are capped at 256."""


def read_cell(directory: str, pinned: str | None) -> BisectCell:
    """One cell for the comment: its parsed result, or the problem (naming the file) in its place."""
    from precisionbot.report.bisect_comment import BisectCell, parse_bisect
    from precisionbot.untrusted import TooLarge, read_capped

    path = Path(directory) / BISECT_FILE
    label = Path(directory).name or directory
    if path.is_symlink() or (path.exists() and not path.is_file()):
        return BisectCell(label, problem=f"{path} is not a regular file")
    try:
        data = json.loads(read_capped(path, BISECT_MAX_BYTES).decode("utf-8"))
        return BisectCell(label, parse_bisect(data, pinned))
    except FileNotFoundError:
        return BisectCell(label, problem=f"{path} is missing: the bisect did not finish (see the gpu job's log)")
    except TooLarge as exc:
        return BisectCell(label, problem=f"{path} is not a bisect result: {exc}")
    except OSError as exc:
        return BisectCell(label, problem=f"cannot read {path}: {exc.strerror or exc}")
    except UnicodeDecodeError as exc:
        return BisectCell(label, problem=f"{path} is not a bisect result: not UTF-8 text (byte {exc.start})")
    except RecursionError:
        return BisectCell(label, problem=f"{path} is not a bisect result: nested too deeply")
    except json.JSONDecodeError as exc:
        return BisectCell(label, problem=f"{path} is not JSON: {str(exc)[:200]}")
    except DataError as exc:
        return BisectCell(label, problem=f"{path} is not a bisect result: {exc}")
    except (ArithmeticError, TypeError, ValueError) as exc:
        # Whatever else hostile content makes the parser raise (an integer past Python's 4,300-digit limit is a
        # ValueError) is this cell's "no result", never an internal error that posts no comment at all.
        return BisectCell(label, problem=f"{path} is not a bisect result: {type(exc).__name__}: {str(exc)[:200]}")


def bisect_comment_action(
    api: GitHubApi | None,
    dirs: Sequence[str],
    *,
    pr: int | None,
    sha: str | None = None,
    run_url: str | None = None,
    step_summary: str | None = None,
    output: str | None = None,
    out: TextIO | None = None,
) -> int:
    """Render the cells of ``dirs`` into one comment and upsert it on ``pr``. ``sha``: the commit the plan
    pinned, which every cell's bisect must have ended at (None: not checked). ``run_url``, ``step_summary``
    and ``output``: the workflow run's page, ``$GITHUB_STEP_SUMMARY`` and ``$GITHUB_OUTPUT``."""
    from precisionbot.gh.sticky import upsert_comment
    from precisionbot.gh.workflow import command, log_block, log_text, write_outputs, write_summary
    from precisionbot.report.bisect_comment import MARKER, render_bisect

    out = out or sys.stdout
    cells = [read_cell(d, sha) for d in dirs]
    for cell in cells:
        if cell.problem:
            print(command("warning", f"precisionbot: bisect cell {cell.label[:60]}: {cell.problem}"), file=out)
    body = render_bisect(cells, run_url=run_url)
    if not write_summary(body, step_summary):
        print(log_block(body), file=out)
    url = ""
    if api is None or pr is None:
        why = "no GITHUB_TOKEN" if api is None else "no PR number (pass --pr N)"
        print(command("warning", f"precisionbot: bisect comment skipped: {why}"), file=out)
        print(f"precisionbot: the bisect comment was not posted: {log_text(why)}", file=sys.stderr)
    else:
        url = upsert_comment(api, pr, body, MARKER).comment.url  # GitHubError: exit 3, one line
    print(write_outputs({"comment-url": url}, output), end="", file=out)
    named = bool(cells) and all(c.result is not None and len(c.result.first_bad) == 1 for c in cells)
    return 0 if named else 2
