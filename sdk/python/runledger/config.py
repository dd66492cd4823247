"""Where the API and the queues are: arguments first, then the
environment (RUNLEDGER_API_URL, RUNLEDGER_API_KEY), then the local stack's
file that `make run` writes (RUNLEDGER_LOCAL, else .runledger/local.json in
the working directory or one of its parents; docs/api.md, "The local
stack's file")."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOCAL_FILE = Path(".runledger") / "local.json"

# What the SDK signs with when it talks to the local stack's emulators:
# they check no credentials, and DynamoDB Local shares one database among
# all of them.
LOCAL_CREDENTIALS = ("runledgerlocal", "runledgerlocal")


@dataclass(frozen=True)
class LocalStack:
    """The local stack's file (.runledger/local.json)."""

    path: Path
    api_url: str
    api_key: str
    dynamodb_endpoint: str
    sqs_endpoint: str
    region: str
    table: str
    queues: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> "LocalStack":
        p = Path(path)
        try:
            raw: dict[str, Any] = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"read {p}: {e}") from e
        return cls(
            path=p,
            api_url=raw.get("api_url", ""),
            api_key=raw.get("api_key", ""),
            dynamodb_endpoint=raw.get("dynamodb_endpoint", ""),
            sqs_endpoint=raw.get("sqs_endpoint", ""),
            region=raw.get("region", ""),
            table=raw.get("table", ""),
            queues=dict(raw.get("queues") or {}),
        )

    def dynamodb(self):
        """A boto3 DynamoDB client for the stack's DynamoDB Local: where a
        worker's own tables live in tests and examples."""
        import boto3

        return boto3.client(
            "dynamodb",
            endpoint_url=self.dynamodb_endpoint,
            region_name=self.region or "us-east-1",
            aws_access_key_id=LOCAL_CREDENTIALS[0],
            aws_secret_access_key=LOCAL_CREDENTIALS[1],
        )


class ConfigError(Exception):
    """A setting the SDK cannot run with; the message says which."""


def find_local(start: str | os.PathLike[str] | None = None) -> LocalStack | None:
    """The local stack's file named by RUNLEDGER_LOCAL, else the nearest
    .runledger/local.json from start (default: the working directory)
    upward; None when there is none."""
    named = os.environ.get("RUNLEDGER_LOCAL")
    if named:
        return LocalStack.read(named)
    d = Path(start or os.getcwd()).resolve()
    for candidate in (d, *d.parents):
        p = candidate / LOCAL_FILE
        if p.is_file():
            return LocalStack.read(p)
    return None


def check_api_url(url: str) -> str:
    from urllib.parse import urlparse

    u = urlparse(url)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise ConfigError(f"API URL {url!r}: want http(s)://host[/prefix]")
    return url.rstrip("/")


@dataclass(frozen=True)
class Settings:
    """What a worker or a client was configured with, each setting from the
    first place that had it."""

    api_url: str
    api_key: str | None
    local: LocalStack | None


def resolve(api_url: str | None = None, api_key: str | None = None, local: LocalStack | None = None) -> Settings:
    """The API's URL and key from the arguments, else the environment,
    else the local stack's file. The file's key is used only with the
    file's URL: a key is never sent to a server it was not made for."""
    if local is None and not (api_url or os.environ.get("RUNLEDGER_API_URL")):
        local = find_local()
    url = api_url or os.environ.get("RUNLEDGER_API_URL") or (local.api_url if local else "")
    if not url:
        raise ConfigError("no API URL: pass api_url, set RUNLEDGER_API_URL, or start the local stack (make run)")
    url = check_api_url(url)
    key = api_key or os.environ.get("RUNLEDGER_API_KEY")
    if not key and local and local.api_url.rstrip("/") == url:
        key = local.api_key
    return Settings(api_url=url, api_key=key or None, local=local)
