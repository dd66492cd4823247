"""HTTP for the SDK: one JSON call over urllib, with SigV4 from boto3's
credential chain when a request must be signed (SQS, and the API deployed
behind IAM), and the SQS calls a worker makes.

SQS is spoken in its JSON protocol (X-Amz-Target, application/x-amz-json-1.0)
here rather than through boto3's SQS client: the boto3 of older
distributions (Debian 12's) speaks only the query protocol, which the
local stack's SQS emulator does not understand, while AWS answers both.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse


class TransportError(Exception):
    """No answer: the connection failed or timed out. Worth repeating."""


@dataclass
class Answer:
    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def send(method: str, url: str, body: bytes | None, headers: dict[str, str], timeout: float, limit: int = 8 << 20) -> Answer:
    """One HTTP request; any status is an Answer, no answer a TransportError.
    Redirects are not followed: an Authorization header must not travel to
    another host."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with _opener.open(req, timeout=timeout) as resp:
            return Answer(resp.status, resp.read(limit), dict(resp.headers.items()))
    except urllib.error.HTTPError as e:
        try:
            data = e.read(limit)
        except OSError:
            data = b""
        return Answer(e.code, data, dict(e.headers.items()) if e.headers else {})
    except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as e:
        raise TransportError(f"{method} {url}: {getattr(e, 'reason', e)}") from e


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401
        return None


_opener = urllib.request.build_opener(_NoRedirect)


class Signer:
    """Signs requests with SigV4 for one service and region, with the
    credentials boto3 finds (or fixed ones, for the local emulators)."""

    def __init__(self, service: str, region: str | None = None, credentials: tuple[str, str] | None = None):
        import boto3
        from botocore.auth import SigV4Auth

        session = boto3.Session()
        if credentials is not None:
            from botocore.credentials import Credentials

            creds = Credentials(*credentials)
        else:
            creds = session.get_credentials()
            if creds is None:
                raise TransportError("no AWS credentials found to sign with (boto3's credential chain is empty)")
        self._creds = creds
        self.region = region or session.region_name or "us-east-1"
        self._service = service
        self._auth = SigV4Auth

    def headers(self, method: str, url: str, body: bytes | None, headers: dict[str, str]) -> dict[str, str]:
        from botocore.awsrequest import AWSRequest

        creds = self._creds.get_frozen_credentials() if hasattr(self._creds, "get_frozen_credentials") else self._creds
        req = AWSRequest(method=method, url=url, data=body or b"", headers=headers)
        self._auth(creds, self._service, self.region).add_auth(req)
        return dict(req.headers.items())


class SQSError(Exception):
    def __init__(self, op: str, status: int, code: str, message: str):
        super().__init__(f"sqs {op}: {status} {code}: {message}")
        self.status, self.code = status, code

    @property
    def queue_missing(self) -> bool:
        return self.code.endswith("NonExistentQueue") or self.code.endswith("QueueDoesNotExist")

    @property
    def receipt_invalid(self) -> bool:
        return "ReceiptHandle" in self.code or "MessageNotInflight" in self.code


class SQS:
    """The SQS calls a worker makes, over the JSON protocol. endpoint is
    the service's URL (the local stack's sqs_endpoint); None sends each
    call to the queue URL's own host, which is AWS's regional endpoint."""

    def __init__(self, region: str | None = None, endpoint: str | None = None, credentials: tuple[str, str] | None = None, timeout: float = 30.0):
        self._signer = Signer("sqs", region, credentials)
        self._endpoint = endpoint.rstrip("/") if endpoint else None
        self._timeout = timeout

    def _call(self, op: str, queue_url: str, params: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        url = self._endpoint or "{0.scheme}://{0.netloc}".format(urlparse(queue_url))
        body = json.dumps({"QueueUrl": queue_url, **params}).encode()
        headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{op}"}
        headers = self._signer.headers("POST", url + "/", body, headers)
        ans = send("POST", url + "/", body, headers, timeout or self._timeout)
        if ans.status != 200:
            try:
                e = ans.json() or {}
            except ValueError:
                e = {}
            code = str(e.get("__type", "")).split("#")[-1] or ans.headers.get("x-amzn-query-error", "").split(";")[0]
            raise SQSError(op, ans.status, code, str(e.get("message") or e.get("Message") or ans.body[:200]))
        return ans.json() or {}

    def receive(self, queue_url: str, max_messages: int, wait: float, visibility: float) -> list[dict[str, Any]]:
        out = self._call("ReceiveMessage", queue_url, {
            "MaxNumberOfMessages": max(1, min(10, max_messages)),
            "WaitTimeSeconds": int(wait),
            "VisibilityTimeout": int(visibility),
            "AttributeNames": ["ApproximateReceiveCount"],
        }, timeout=wait + 10)
        return list(out.get("Messages") or [])

    def send(self, queue_url: str, body: str) -> str:
        return str(self._call("SendMessage", queue_url, {"MessageBody": body}).get("MessageId", ""))

    def delete(self, queue_url: str, receipt: str) -> None:
        self._call("DeleteMessage", queue_url, {"ReceiptHandle": receipt})

    def change_visibility(self, queue_url: str, receipt: str, timeout: float) -> None:
        self._call("ChangeMessageVisibility", queue_url, {"ReceiptHandle": receipt, "VisibilityTimeout": int(timeout)})

    def attributes(self, queue_url: str, names: list[str]) -> dict[str, str]:
        return dict(self._call("GetQueueAttributes", queue_url, {"AttributeNames": names}).get("Attributes") or {})
