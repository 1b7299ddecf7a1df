"""The shapes of the AWS names a config holds: a region, an EC2 instance type, an AMI id, an S3 bucket (pure).

A typo in any of them (``us-west2``, ``g6e.xlarg``, ``ubuntu-22.04``) is otherwise found by EC2 only when the
GPU job launches, minutes into a PR's run, or never: ``store: bucket/prefix`` without ``s3://`` is a local
directory that fills up on the runner while CI reads an empty store. Only the shape is checked here (no
network): ``precisionbot doctor --online`` asks AWS whether the names exist.

Each ``*_problem`` function returns ``(problem, fix)`` for ``Reader.error``, or None when the name is usable.
"""

from __future__ import annotations

import difflib
import re

from precisionbot.config.fields import did_you_mean

REGION = re.compile(r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]{1,2}")
"""``us-west-2``, ``ap-southeast-1``, ``us-gov-west-1``, ``us-isob-east-1``: country, area, number."""
KNOWN_REGIONS = (
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "ca-central-1",
    "ca-west-1",
    "mx-central-1",
    "sa-east-1",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "eu-central-1",
    "eu-central-2",
    "eu-north-1",
    "eu-south-1",
    "eu-south-2",
    "ap-east-1",
    "ap-east-2",
    "ap-south-1",
    "ap-south-2",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-7",
    "me-south-1",
    "me-central-1",
    "il-central-1",
    "af-south-1",
    "us-gov-west-1",
    "us-gov-east-1",
    "cn-north-1",
    "cn-northwest-1",
)
"""For "did you mean" only: a region of the right shape that is missing here is still accepted."""

INSTANCE_SIZE = re.compile(r"nano|micro|small|medium|large|xlarge|[0-9]+xlarge|metal|metal-[0-9]+xl")
INSTANCE_FAMILY = re.compile(r"[a-z][a-z0-9-]*[0-9][a-z0-9-]*")
"""``g6e``, ``p5``, ``p4d``, ``trn1n``, ``u7i-12tb``: letters with a generation number, then attributes."""
COMMON_SIZES = ("large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge")

AMI_ID = re.compile(r"ami-([0-9a-f]{8}|[0-9a-f]{17})")
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
"""An S3 bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending alphanumeric."""


def _short(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:57] + "...")


def region_problem(region: str) -> tuple[str, str] | None:
    if REGION.fullmatch(region):
        return None
    guess = region.strip().lower()
    hyphened = re.sub(r"([a-z])([0-9]{1,2})$", r"\1-\2", guess)
    known = [r for r in (guess, hyphened) if r in KNOWN_REGIONS]
    shaped = [r for r in (guess, hyphened) if REGION.fullmatch(r)]
    hint = (
        (f"did you mean {known[0]!r}?" if known else did_you_mean(hyphened, KNOWN_REGIONS))
        or (f"did you mean {shaped[0]!r}?" if shaped else None)
        or "write a region such as us-west-2 (aws ec2 describe-regions lists them)"
    )
    return f"is not an AWS region (got {_short(region)}; a region reads like us-west-2)", hint


def instance_type_problem(instance_type: str) -> tuple[str, str] | None:
    family, dot, size = instance_type.partition(".")
    if dot and INSTANCE_FAMILY.fullmatch(family) and INSTANCE_SIZE.fullmatch(size):
        return None
    problem = f"is not an EC2 instance type (got {_short(instance_type)}; a type reads family.size, like g6e.xlarge)"
    close = difflib.get_close_matches(size, COMMON_SIZES, n=1) if INSTANCE_FAMILY.fullmatch(family) else []
    if dot and close:
        return problem, f"did you mean {family + '.' + close[0]!r}?"
    return problem, "write e.g. g6e.xlarge (aws ec2 describe-instance-types lists the types)"


def ami_problem(ami: str) -> tuple[str, str] | None:
    if AMI_ID.fullmatch(ami):
        return None
    if ami.startswith("resolve:ssm:"):
        fix = (
            "write the AMI id the parameter holds (aws ssm get-parameter --name ... --query Parameter.Value): "
            "runner launch reads the image's root device, which needs the id"
        )
        return f"is an SSM parameter ({_short(ami)}), not an AMI id", fix
    fix = (
        "write the image's id, ami- and 8 or 17 hex digits; an image name must be resolved to its id first "
        "(aws ec2 describe-images --filters Name=name,Values=NAME --query 'Images[].ImageId')"
    )
    return f"is not an AMI id (got {_short(ami)})", fix


def schemeless_bucket_problem(store: str) -> tuple[str, str] | None:
    """``bucket/prefix`` without a scheme: the first component could be an S3 bucket, and a relative local
    directory is spelled ``./dir`` in the config, so the same file means the same store on every runner (the
    plan job has no such directory; the GPU job might)."""
    text = store.strip()
    if "://" in text or text.startswith((".", "/", "~")) or "/" not in text:
        return None
    first = text.split("/", 1)[0]
    if not BUCKET_NAME.fullmatch(first):
        return None
    return (
        f"{_short(store)} has no scheme, so it would be a local directory named after what looks like a bucket",
        f"write 's3://{text}' for S3, or './{text}' for a local directory",
    )
