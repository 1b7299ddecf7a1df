"""The README's demo excerpt, cut from the comment ``precisionbot demo`` writes at the documented sizes.

``scripts/docs-figures`` writes it into the README between the ``demo-excerpt`` markers;
``tests/report/test_docs.py`` cuts it again from the test suite's own demo run (the same sizes) and compares, so
the README cannot drift from what the demo prints. The excerpt is the verdict line, the check table and the
diagnosis: the environment line (a date, a wall time) and the details change from run to run and stay out.
"""

from __future__ import annotations

import re

DEMO_ARGS = ("--samples", "4", "--max-new-tokens", "72", "--prompt-tokens", "64..128", "--golden-depths", "128,256")
"""The documented demo sizes: small enough for CI, past the hybrid preset's first 64-token checkpoint."""
START = "<!-- demo-excerpt:start -->"
END = "<!-- demo-excerpt:end -->"


def excerpt(comment: str) -> str:
    """The verdict line (bold, not a heading: the README has its own), the first check table and the "What it
    points to" bullets of ``comment``, as the comment's own Markdown (GitHub renders the README's copy alike)."""
    lines = comment.splitlines()
    verdict = next(line for line in lines if line.startswith("## "))
    out = [f"**{verdict[3:]}**", ""]
    i = next(i for i, line in enumerate(lines) if line.startswith("| Check |"))
    while i < len(lines) and lines[i].startswith("|"):
        out.append(lines[i])
        i += 1
    if "**What it points to**" in lines:
        j = lines.index("**What it points to**")
        out += ["", lines[j]]
        j += 1
        while j < len(lines) and lines[j].startswith("- "):
            out.append(lines[j])
            j += 1
    return "\n".join(out) + "\n"


def readme_block(readme: str) -> str:
    """The excerpt the README holds between the markers."""
    m = re.search(re.escape(START) + r"\n\n(.*?)\n" + re.escape(END), readme, re.DOTALL)
    if m is None:
        raise ValueError(f"README.md has no {START} ... {END} block")
    return m.group(1)


def with_block(readme: str, block: str) -> str:
    """``readme`` with its excerpt replaced by ``block``."""
    readme_block(readme)  # the markers are there
    return re.sub(
        re.escape(START) + r".*?" + re.escape(END),
        lambda _: f"{START}\n\n{block}\n{END}",
        readme,
        flags=re.DOTALL,
    )
