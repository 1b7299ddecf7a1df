from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precisionbot.gh import slash
from precisionbot.gh.slash import USAGE, Malformed, SlashCommand, parse_command
from precisionbot.gh.sticky import COMMENT_LIMIT_CHARS


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("/precision rerun", SlashCommand("rerun")),
        ("  /precision   RERUN  \nthanks!", SlashCommand("rerun")),
        (
            "/precision rerun models=a,b checks=match,golden samples=8",
            SlashCommand("rerun", models=("a", "b"), checks=("match", "golden"), samples=8),
        ),
        ("/precision rerun sha=ABCDEF1", SlashCommand("rerun", sha="abcdef1")),
        ("/precision rerun models=qwen3@tp4,a,a", SlashCommand("rerun", models=("qwen3@tp4", "a"))),
        ("/precision baseline", SlashCommand("baseline")),
        ("/precision baseline models=m1", SlashCommand("baseline", models=("m1",))),
        ("/precision help", SlashCommand("help")),
        # not addressed to us: ignored quietly
        ("", None),
        ("LGTM", None),
        ("please run /precision rerun", None),
        ("> /precision rerun", None),
        ("/precisionbot rerun", None),
        ("thanks\n/precision rerun", None),
        ("\ufeff", None),
        ("\ufeff/precision help", SlashCommand("help")),
        (
            '/precision accept reason="fix  the\tkernel" models=m',
            SlashCommand("accept", ("m",), reason="fix the kernel"),
        ),
        ('/precision accept reason="a" REASON="b"', SlashCommand("accept", reason="b")),
        ('/precision accept reason="a"reason="b"', SlashCommand("accept", reason="b")),
        ('/precision accept reason="a=b c"', SlashCommand("accept", reason="a=b c")),
        ('/precision accept reason="a reason="', SlashCommand("accept", reason="a reason=")),  # a value may end in =
        ('/precision accept reason="unclosed', SlashCommand("accept", reason='"unclosed')),  # as before: a plain word
    ],
)
def test_parse(body: str, expected: SlashCommand | None) -> None:
    assert parse_command(body) == expected


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("/precision", "needs a verb"),
        ("/precision deploy", "unknown verb `deploy`"),
        ("/precision rerun samples", "is not `key=value`"),
        ("/precision rerun samples=", "is not `key=value`"),
        ("/precision rerun samples=0", "from 1 to"),
        ("/precision rerun samples=-3", "from 1 to"),
        ("/precision rerun samples=1e3", "from 1 to"),
        ("/precision rerun checks=match,nope", "unknown check `nope`"),
        ("/precision rerun models=,", "comma-separated"),
        ("/precision rerun models=a;rm", "comma-separated"),
        ("/precision rerun sha=xyz1234", "hex digits"),
        ("/precision rerun sha=abc", "hex digits"),
        ("/precision rerun colour=red", "`colour` is not an option of `rerun`"),
        ("/precision baseline checks=match", "`checks` is not an option of `baseline`"),
        ("/precision help me=1", "options: none"),
        ("/precision rerun samples=4 samples=5", "given twice"),
        ('/precision rerun reason="why"', "only `reason` takes a quoted value"),
        ('/precision accept xreason="why"', "only `reason` takes a quoted value"),
        ('/precision accept reason="a" note="b"', "only `reason` takes a quoted value"),
        ('/precision accept rea\u017fon="why"', "only `reason` takes a quoted value"),  # ſ is not s to str.lower
        ('/precision accept reason="a" reason=b', "`reason` is given twice"),
        ('/precision accept "a="  reason=""', "only `reason` takes a quoted value"),  # `"a` is the key, to `reason=`
        ("/precision accept", "needs `reason="),
    ],
)
def test_malformed(body: str, fragment: str) -> None:
    result = parse_command(body)
    assert isinstance(result, Malformed)
    assert fragment in result.problem


def test_echoed_user_text_cannot_break_out_or_mention() -> None:
    result = parse_command("/precision `@org/team`")
    assert isinstance(result, Malformed)
    assert "`" not in result.problem.replace("unknown verb `", "", 1).rstrip("`")
    assert "@org" not in result.problem


def test_usage_names_every_verb() -> None:
    for verb in ("rerun", "baseline", "help"):
        assert f"/precision {verb}" in USAGE


# --- the parse is linear and answers as the pattern it replaced ------------------------------------------------

_QUOTED = re.compile(r'(\S+?)="([^"]*)"')


def regex_parse(body: str) -> SlashCommand | Malformed | None:
    """The parser before it was made linear, kept as the reference (less its IndexError on a comment of only
    U+FEFF): ``_QUOTED`` backtracks, quadratic in a long word without ``="``, so it runs on short comments only."""
    first = body.lstrip("\ufeff").strip().splitlines()[0].strip() if body.lstrip("\ufeff").strip() else ""
    words = first.split()
    if not words or words[0].lower() != slash.PREFIX:
        return None
    if len(words) == 1:
        return Malformed("the command needs a verb")
    verb = words[1].lower()
    if verb not in slash.VERBS:
        return Malformed(f"unknown verb `{slash._clip(words[1])}`")
    values: dict[str, str] = {}
    rest = first.split(None, 2)[2] if len(words) > 2 else ""
    quoted = {m.group(1).lower(): m.group(2) for m in _QUOTED.finditer(rest)}
    if quoted:
        if verb != "accept" or set(quoted) != {"reason"}:
            return Malformed('only `reason` takes a quoted value (`/precision accept reason="..."`)')
        values["reason"] = quoted["reason"]
        words = words[:2] + _QUOTED.sub(" ", rest).split()
    for word in words[2:]:
        key, sep, value = word.partition("=")
        key = key.lower()
        if not sep or not value:
            return Malformed(f"`{slash._clip(word)}` is not `key=value`")
        if key not in slash.KEYS[verb]:
            allowed = ", ".join(f"`{k}`" for k in slash.KEYS[verb]) or "none"
            return Malformed(f"`{slash._clip(key)}` is not an option of `{verb}` (options: {allowed})")
        if key in values:
            return Malformed(f"`{key}` is given twice")
        values[key] = value
    return slash._build(verb, values)


FRAGMENTS = st.sampled_from(
    ["reason", "REASON", "ReAsOn", "reaso", "rea\u017fon", "x", "a", "models", "=", '"', '="', '""', " ", "  ", "\t",
     "\u00a0", "\u3000", "\n", "\u2028", "\x1c", "\r\n", ",", "\u00e9", "\u0130", "/precision", "accept", "`", "@",
     "samples=3", "models=m", "\ufeff", 'reason="', 'reason=""', '"reason']
)  # fmt: skip
COMMENTS = st.tuples(
    st.sampled_from(["/precision accept ", "/precision rerun ", "/precision ", " /PRECISION Accept\t", "\ufeff", ""]),
    st.lists(FRAGMENTS, max_size=30),
).map(lambda parts: parts[0] + "".join(parts[1]))
OPTIONS = st.lists(
    st.sampled_from(['reason="', "reason", "Reason", '"', '="', "=", " ", "\t", "x", '""', '"="', "\u00e9", "\u00a0"]),
    min_size=1,
    max_size=16,
).map("".join)
EXACT = settings(derandomize=True, database=None, max_examples=400, deadline=None)


@EXACT
@given(COMMENTS)
def test_the_parse_answers_as_the_regex_parse_did(body: str) -> None:
    assert parse_command(body) == regex_parse(body)


@EXACT
@given(OPTIONS)
def test_the_quoted_pairs_are_the_patterns(rest: str) -> None:
    """Compared before the reason's spaces are folded, and whatever the other words would answer."""
    pairs = {m.group(1).lower(): m.group(2) for m in _QUOTED.finditer(rest)}
    assert slash._holds_pair(rest) == bool(pairs)
    if pairs:
        reasons = slash._reasons(rest)
        expected = (pairs["reason"], _QUOTED.sub(" ", rest).split()) if set(pairs) == {"reason"} else None
        assert (reasons and (reasons[0], reasons[1].split())) == expected


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@/-]*$")
NAME_LISTS = st.lists(st.sampled_from(["a", "Z", "9", ".", "_", "@", "/", "-", ",", "\u00e9", ";", "`"]), max_size=12)


@EXACT
@given(NAME_LISTS.map("".join))
def test_a_list_of_names_is_judged_name_by_name(raw: str) -> None:
    """As each name was matched before (a value is one word: no whitespace, which ``$`` would have let end it)."""
    names = tuple(n for n in raw.split(",") if n)
    good = names and all(_NAME.match(n) for n in names)
    expected = (
        tuple(dict.fromkeys(names))
        if good
        else Malformed(f"`{slash._clip(raw)}` is not a comma-separated list of names")
    )
    assert slash._names(raw) == expected


def test_the_first_line_ends_where_splitlines_ends_it() -> None:
    every = "".join(map(chr, range(sys.maxunicode + 1)))
    ends = {line[-1] for line in every.splitlines(keepends=True)[:-1]}
    assert set(slash._LINE_END.findall(every)) == ends


def padded(head: str, unit: str, tail: str = "") -> str:
    """A comment of exactly ``COMMENT_LIMIT_CHARS`` characters (GitHub's largest, the most a commenter can hand
    ``parse_command``): ``head``, ``unit`` repeated whole, spaces, ``tail``."""
    fill = COMMENT_LIMIT_CHARS - len(head) - len(tail)
    return head + unit * (fill // len(unit)) + " " * (fill % len(unit)) + tail


A39, Q39, U39, E39 = ("a" * 39), ('"' * 39), ("\u00fc" * 39), ("\u00e9" * 39)
RERUN_OPTIONS = "(options: `models`, `checks`, `samples`, `sha`)"
ONLY_REASON = 'only `reason` takes a quoted value (`/precision accept reason="..."`)'


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (padded("/precision rerun ", "a"), Malformed(f"`{A39}…` is not `key=value`")),
        (padded("/precision rerun models=", "a"), SlashCommand("rerun", models=("a" * (COMMENT_LIMIT_CHARS - 24),))),
        (padded("/precision rerun models=", "a,"), SlashCommand("rerun", models=("a",))),
        (padded("/precision rerun ", "="), Malformed(f"`` is not an option of `rerun` {RERUN_OPTIONS}")),
        (padded("/precision rerun ", '"'), Malformed(f"`{Q39}…` is not `key=value`")),
        (padded('/precision accept reason="', "x"), Malformed("the reason is longer than 500 characters")),
        (padded('/precision accept reason="', "why ", '"'), Malformed("the reason is longer than 500 characters")),
        (padded("/precision accept ", 'reason="x" ', 'reason="last"'), SlashCommand("accept", reason="last")),
        (padded("/precision accept ", 'reason="x"', 'Reason="y"'), SlashCommand("accept", reason="y")),
        (padded("/precision accept ", 'reason="x" ', "models=m"), SlashCommand("accept", ("m",), reason="x")),
        (padded("/precision accept ", 'reason="x" ', 'note="y"'), Malformed(ONLY_REASON)),
        (padded("/precision accept ", 'reason="x" a '), Malformed("`a` is not `key=value`")),
        (padded("/precision accept ", '="'), Malformed(ONLY_REASON)),
        (padded("/precision rerun ", 'a="'), Malformed(ONLY_REASON)),
        (padded("/precision", " \t\u00a0\u3000", "help"), SlashCommand("help")),
        (padded("/precision rerun\n", "x\n"), SlashCommand("rerun")),
        (padded("", "/precision "), Malformed("unknown verb `/precision`")),
        (padded("/precision ", "\u00fc"), Malformed(f"unknown verb `{U39}…`")),
        (padded("/precision rerun models=", "\u00e9"), Malformed(f"`{E39}…` is not a comma-separated list of names")),
    ],
)  # fmt: skip
def test_the_largest_comments_parse_to_what_they_say(body: str, expected: SlashCommand | Malformed) -> None:
    """Correctness at GitHub's size, shape by shape: one long word (a minute of backtracking before), long
    values, runs of pairs, whitespace, many lines, unicode. The speed is measured in
    ``benchmarks/bench_hostile.py``; ``tests/test_hostile_inputs.py`` shows that no shape hangs."""
    assert len(body) == COMMENT_LIMIT_CHARS
    assert parse_command(body) == expected
