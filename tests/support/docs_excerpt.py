"""The README's demo excerpt, cut from the comment ``precisionbot demo`` writes at the documented sizes.

``scripts/docs-figures`` writes it into the README between the ``demo-excerpt`` markers;
``tests/report/test_docs.py`` cuts it again from the test suite's own demo run (the same sizes) and compares, so
the README cannot drift from what the demo prints. The excerpt is the verdict line, the check table and the
diagnosis: the environment line (a date, a wall time) and the details change from run to run and stay out.
"""

from __future__ import annotations

import re

from precisionbot.report.escape import markdown_plain

DEMO_ARGS = ("--samples", "4", "--max-new-tokens", "72", "--prompt-tokens", "64..128", "--golden-depths", "128,256")
"""The documented demo sizes: small enough for CI, past the hybrid preset's first 64-token checkpoint."""
START = "<!-- demo-excerpt:start -->"
END = "<!-- demo-excerpt:end -->"


def excerpt(comment: str) -> str:
    """The verdict line, the first check table and the "What it points to" bullets of ``comment``, unescaped."""
    lines = comment.splitlines()
    out = [next(line for line in lines if line.startswith("## "))]
    i = next(i for i, line in enumerate(lines) if line.startswith("| Check |"))
    while i < len(lines) and lines[i].startswith("|"):
        if not lines[i].startswith("|---"):
            out.append(lines[i])
        i += 1
    if "**What it points to**" in lines:
        j = lines.index("**What it points to**")
        out += ["", "What it points to"]
        j += 1
        while j < len(lines) and lines[j].startswith("- "):
            out.append(lines[j])
            j += 1
    return "\n".join(markdown_plain(line) for line in out) + "\n"


def readme_block(readme: str) -> str:
    """The excerpt the README holds between the markers (inside its code fence)."""
    m = re.search(re.escape(START) + r"\n```text\n(.*?)```\n" + re.escape(END), readme, re.DOTALL)
    if m is None:
        raise ValueError(f"README.md has no {START} ... {END} block with a ```text fence")
    return m.group(1)


def with_block(readme: str, block: str) -> str:
    """``readme`` with its excerpt replaced by ``block``."""
    readme_block(readme)  # the markers are there
    return re.sub(
        re.escape(START) + r".*?" + re.escape(END),
        lambda _: f"{START}\n```text\n{block}```\n{END}",
        readme,
        flags=re.DOTALL,
    )
