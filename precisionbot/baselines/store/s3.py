"""A ``Store`` under ``s3://bucket/prefix`` through boto3.

Credentials, region and endpoint come from boto3's own chain (``AWS_ENDPOINT_URL`` points it at MinIO or
moto). Writes are conditional (``If-None-Match: *``): S3 refuses to overwrite, so keys stay immutable even
when two recorders race.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import boto3
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
)

from precisionbot.baselines.store.base import CorruptObject, ObjectNotFound, check_key
from precisionbot.errors import StoreError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


class S3Store:
    def __init__(self, client: S3Client, bucket: str, prefix: str, uri: str) -> None:
        self._client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._uri = uri

    @classmethod
    def from_uri(cls, uri: str) -> S3Store:
        parsed = urlparse(uri)
        if not parsed.netloc:
            raise StoreError(f"baseline store URI {uri!r} names no bucket: use s3://bucket/prefix")
        try:
            client = boto3.client("s3")
        except (BotoCoreError, ValueError) as exc:
            raise StoreError(f"cannot create an S3 client for {uri}: {exc}") from exc
        return cls(client, parsed.netloc, parsed.path, uri)

    @property
    def uri(self) -> str:
        return self._uri

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _fail(self, action: str, key: str, exc: Exception) -> StoreError:
        code = _error_code(exc)
        if code == "NoSuchBucket":
            return StoreError(f"S3 bucket {self.bucket!r} of baseline store {self.uri} does not exist")
        detail = f"{code}: {exc}" if code else str(exc)
        return StoreError(f"cannot {action} {key} in baseline store {self.uri}: {detail}{_fix(exc, code)}")

    def put_bytes(self, key: str, data: bytes) -> None:
        try:
            self._client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*")
        except _ERRORS as exc:
            if _error_code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise StoreError(
                    f"baseline store object {key} already exists in {self.uri} (keys are immutable)"
                ) from exc
            raise self._fail("write", key, exc) from exc

    def get_bytes(self, key: str) -> bytes:
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=self._key(key))
            body: bytes = response["Body"].read()
        except _ERRORS as exc:
            if _error_code(exc) in ("NoSuchKey", "404"):
                raise ObjectNotFound(f"baseline store object {key} not found in {self.uri}") from exc
            raise self._fail("read", key, exc) from exc
        expected = response.get("ContentLength")
        if expected is not None and expected != len(body):
            raise CorruptObject(
                f"baseline store object {key} in {self.uri} is truncated ({len(body)} of {expected} bytes)"
            )
        return body

    def list_keys(self, prefix: str) -> list[str]:
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        strip = len(self.prefix) + 1 if self.prefix else 0
        keys: list[str] = []
        try:
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
                keys.extend(obj["Key"][strip:] for obj in page.get("Contents", []))
        except _ERRORS as exc:
            raise self._fail("list", prefix or "(root)", exc) from exc
        return sorted(keys)


_ERRORS = (BotoCoreError, ClientError)

_CREDENTIALS_FIX = (
    "; configure AWS credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or "
    "aws-actions/configure-aws-credentials with OIDC in GitHub Actions; AWS_ENDPOINT_URL for MinIO)"
)
_AUTH_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "403"}
)


def _fix(exc: Exception, code: str) -> str:
    """How to fix the usual S3 setup failures; boto3's own messages name the problem but not the fix."""
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return _CREDENTIALS_FIX
    if code in _AUTH_CODES:
        return "; check the AWS credentials and that they may read and write this bucket (s3:GetObject, "
        "s3:PutObject, s3:ListBucket)"
    if isinstance(exc, EndpointConnectionError):
        return "; check AWS_ENDPOINT_URL (MinIO, moto) or the network"
    return ""


def _error_code(exc: Exception) -> str:
    response: Any = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""
