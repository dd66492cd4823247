"""The worker routes (POST /v1/attempts/claim|heartbeat|complete), each
fenced by the attempt's token as the bearer (docs/api.md, "Workers")."""

from __future__ import annotations

import json
from typing import Any

from . import protocol
from .errors import APIError
from .transport import TransportError, send


class TransientError(Exception):
    """A worker route gave no usable answer (no connection, a timeout, an
    answer that does not decode): the call may be repeated with the same
    event id."""


class AttemptsAPI:
    def __init__(self, api_url: str, timeout: float = 30.0):
        self.base = api_url.rstrip("/")
        self.timeout = timeout

    def _call(self, op: str, route: str, token: str, body: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        ref = f"{body['run']}/{body['task']}#{body['attempt']}"
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json", "Authorization": "Bearer " + token}
        try:
            ans = send("POST", self.base + route, data, headers, timeout or self.timeout, protocol.MAX_ANSWER_BYTES)
        except TransportError as e:
            raise TransientError(f"{op} {ref}: {e}") from e
        if ans.status != 200:
            raise APIError.from_answer(f"{op} {ref}", ans.status, ans.body)
        try:
            out = ans.json()
        except ValueError as e:
            # A 200 we cannot read: the call may have taken effect, and
            # repeating it (same event id) is the safe way to learn the answer.
            raise TransientError(f"{op} {ref}: decode answer: {e}") from e
        if not isinstance(out, dict):
            raise TransientError(f"{op} {ref}: the answer is not an object")
        return out

    def claim(self, token: str, run: str, task: str, attempt: int, worker_id: str, event_id: str, timeout: float | None = None) -> dict[str, Any]:
        protocol.check_event_id(event_id)
        out = self._call("claim", "/v1/attempts/claim", token,
                         {"run": run, "task": task, "attempt": attempt, "worker_id": worker_id, "event_id": event_id}, timeout)
        if not out.get("claimed"):
            raise APIError(f"claim {run}/{task}#{attempt}", 200, "not_claimed", "the answer says claimed: false")
        return out

    def heartbeat(self, token: str, run: str, task: str, attempt: int, event_id: str, timeout: float | None = None) -> dict[str, Any]:
        protocol.check_event_id(event_id)
        return self._call("heartbeat", "/v1/attempts/heartbeat", token,
                          {"run": run, "task": task, "attempt": attempt, "event_id": event_id}, timeout)

    def complete(self, token: str, completion: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        body = {k: v for k, v in completion.items() if k != "token"}
        return self._call("complete", "/v1/attempts/complete", token, body, timeout)


def is_transient(err: BaseException) -> bool:
    return isinstance(err, TransientError) or (isinstance(err, APIError) and err.transient)
