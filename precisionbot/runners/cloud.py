"""The EC2 side of the runner lifecycle: a narrow ``Cloud`` protocol and its boto3 implementation.

boto3 is imported lazily (inside ``Ec2Cloud.from_env``) so that ``precisionbot --help`` stays fast. The
client comes from boto3's own chain, so ``AWS_ENDPOINT_URL`` (moto in tests), ``AWS_DEFAULT_REGION``, profiles
and the OIDC credentials of ``aws-actions/configure-aws-credentials`` all work without code of ours. Every
SDK error becomes a one-line ``CloudError``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from precisionbot.errors import CloudError
from precisionbot.runners.records import Instance, InstanceSpec

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

_GONE_CODES = ("InvalidInstanceID.NotFound",)
_TERMINATE_BATCH = 100
"""Instance ids per TerminateInstances call: a reap after an outage can find many, and one refused id must not
hold back the rest of a huge request."""


class Fleet(Protocol):
    """What terminate and reap need: find tagged machines (EC2 instances, Slurm jobs), end them."""

    def find_instances(
        self,
        *,
        instance_ids: Sequence[str] = (),
        tags: Mapping[str, str] | None = None,
        tag_keys: Sequence[str] = (),
    ) -> list[Instance]:
        """Instances matching all the given filters; an unknown instance id is simply absent."""
        ...

    def terminate(self, instance_ids: Sequence[str]) -> None:
        """Terminate; ids that are already gone are not an error."""
        ...


class Cloud(Fleet, Protocol):
    """What launch needs from a cloud besides: start one instance."""

    def run_instance(self, spec: InstanceSpec, user_data: str, tags: Mapping[str, str]) -> Instance:
        """Start one instance that terminates itself on shutdown, tagged at creation."""
        ...


class Ec2Cloud:
    """``Cloud`` over a boto3 EC2 client."""

    def __init__(self, client: EC2Client) -> None:
        self._ec2 = client

    @classmethod
    def from_env(cls, region: str | None = None) -> Ec2Cloud:
        import boto3

        with _aws("create an EC2 client"):
            return cls(boto3.session.Session().client("ec2", region_name=region or None))

    def run_instance(self, spec: InstanceSpec, user_data: str, tags: Mapping[str, str]) -> Instance:
        tag_list: list[Any] = [{"Key": k, "Value": v} for k, v in tags.items()]
        params: dict[str, Any] = {
            "ImageId": spec.ami,
            "InstanceType": spec.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "UserData": user_data,
            # The instance deletes itself when the runner (or the TTL watchdog) powers it off.
            "InstanceInitiatedShutdownBehavior": "terminate",
            # IMDSv2 only, hop limit 1: the instance profile's read-only credentials reach processes on the
            # host, never a container or anything one network hop further.
            "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1},
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
        }
        if spec.subnet:
            params["SubnetId"] = spec.subnet
        if spec.security_groups:
            ids = [g for g in spec.security_groups if g.startswith("sg-")]
            names = [g for g in spec.security_groups if not g.startswith("sg-")]
            if ids:
                params["SecurityGroupIds"] = ids
            if names:
                params["SecurityGroups"] = names
        if spec.instance_profile:
            key = "Arn" if spec.instance_profile.startswith("arn:") else "Name"
            params["IamInstanceProfile"] = {key: spec.instance_profile}
        if spec.root_volume_gb:
            params["BlockDeviceMappings"] = [
                {
                    "DeviceName": self._root_device(spec.ami),
                    "Ebs": {
                        "VolumeSize": spec.root_volume_gb,
                        "VolumeType": "gp3",
                        "DeleteOnTermination": True,
                    },
                }
            ]
        if spec.spot:
            params["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
        if spec.key_name:
            params["KeyName"] = spec.key_name
        with _aws(f"start a {spec.instance_type} instance from {spec.ami}"):
            reply = self._ec2.run_instances(**params)
        return _instance(reply["Instances"][0])

    def _root_device(self, ami: str) -> str:
        """The AMI's root device name: a mapping under any other name would add a second, unused volume
        instead of resizing the root (Ubuntu uses /dev/sda1, Amazon Linux /dev/xvda)."""
        with _aws(f"read AMI {ami}"):
            images = self._ec2.describe_images(ImageIds=[ami]).get("Images", [])
        if not images or not images[0].get("RootDeviceName"):
            raise CloudError(f"AMI {ami} was not found or has no root device (check --ami and --region)")
        return str(images[0]["RootDeviceName"])

    def find_instances(
        self,
        *,
        instance_ids: Sequence[str] = (),
        tags: Mapping[str, str] | None = None,
        tag_keys: Sequence[str] = (),
    ) -> list[Instance]:
        filters: list[Any] = [{"Name": f"tag:{k}", "Values": [v]} for k, v in (tags or {}).items()]
        if tag_keys:
            filters.append({"Name": "tag-key", "Values": list(tag_keys)})
        params: dict[str, Any] = {}
        if filters:
            params["Filters"] = filters
        if instance_ids:
            params["InstanceIds"] = list(instance_ids)
        found: list[Instance] = []
        with _aws("list instances", gone_ok=True):
            for page in self._ec2.get_paginator("describe_instances").paginate(**params):
                for reservation in page.get("Reservations", []):
                    found.extend(_instance(item) for item in reservation.get("Instances", []))
        return found

    def terminate(self, instance_ids: Sequence[str]) -> None:
        if not instance_ids:
            return
        from botocore.exceptions import ClientError

        ids = list(instance_ids)
        for start in range(0, len(ids), _TERMINATE_BATCH):
            batch = ids[start : start + _TERMINATE_BATCH]
            with _aws(f"terminate {', '.join(batch[:3])}{' ...' if len(batch) > 3 else ''}", gone_ok=True):
                try:
                    self._ec2.terminate_instances(InstanceIds=batch)
                except ClientError as exc:
                    # One vanished id fails the whole call: end the others one by one.
                    if len(batch) == 1 or exc.response.get("Error", {}).get("Code") not in _GONE_CODES:
                        raise
                    for one in batch:
                        with _aws(f"terminate {one}", gone_ok=True):
                            self._ec2.terminate_instances(InstanceIds=[one])


def _instance(raw: Any) -> Instance:
    tags = {t["Key"]: t["Value"] for t in raw.get("Tags", []) if "Key" in t and "Value" in t}
    launched = raw.get("LaunchTime")
    return Instance(
        id=raw["InstanceId"],
        state=raw.get("State", {}).get("Name", "unknown"),
        tags=tags,
        launched_at=launched if isinstance(launched, datetime) else None,
    )


@contextmanager
def _aws(action: str, *, gone_ok: bool = False) -> Iterator[None]:
    """Translate boto3/botocore failures into one-line ``CloudError``s; ``gone_ok`` swallows NotFound ids."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        if gone_ok and code in _GONE_CODES:
            return
        message = str(error.get("Message", exc)).splitlines()[0] if error.get("Message") else str(exc)
        hint = _HINTS.get(code, "check the IAM policy in docs/runners.md and the launch arguments")
        raise CloudError(f"AWS refused to {action}: {code}: {message} ({hint})") from exc
    except NoCredentialsError as exc:
        raise CloudError(
            f"cannot {action}: no AWS credentials found (configure them with "
            "aws-actions/configure-aws-credentials and OIDC, or AWS_PROFILE / AWS_ACCESS_KEY_ID locally)"
        ) from exc
    except NoRegionError as exc:
        raise CloudError(f"cannot {action}: no AWS region (pass --region or set AWS_DEFAULT_REGION)") from exc
    except BotoCoreError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CloudError(f"cannot {action}: {first} (check AWS_ENDPOINT_URL, the region and network)") from exc


_HINTS = {
    "UnauthorizedOperation": "the AWS role lacks this permission: see the IAM policy in docs/runners.md",
    "AuthFailure": "the AWS credentials are invalid or expired",
    "InvalidClientTokenId": "the AWS credentials are invalid or expired",
    "InvalidAMIID.NotFound": "check --ami exists in this region",
    "InvalidAMIID.Malformed": "check --ami",
    "InvalidSubnetID.NotFound": "check --subnet exists in this region",
    "InvalidGroup.NotFound": "check --security-group exists in the subnet's VPC",
    "InvalidParameterValue": "check the launch arguments",
    "InsufficientInstanceCapacity": "no capacity now: retry, use another subnet/AZ, or drop --spot",
    "VcpuLimitExceeded": "raise the vCPU quota for this instance family in Service Quotas",
    "MaxSpotInstanceCountExceeded": "raise the spot quota or launch on-demand",
    "SpotMaxPriceTooLow": "launch on-demand instead of --spot",
    "InvalidInstanceID.Malformed": "check --instance-id (it looks like i-0123456789abcdef0)",
}
