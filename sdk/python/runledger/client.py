"""The client of the API's main routes: jobs and runs (docs/api.md).

    from runledger import Client
    c = Client()                      # the URL and key from the environment or the local stack
    c.create_job({"name": "hello", "pool": "default"})
    run = c.trigger_run("hello", params={"day": "2026-03-01"})
    done = c.wait_run(run["run"]["id"])

Answers are the API's JSON, decoded. Every error answer raises APIError
with the server's status, code and message (status 0, code "unreachable"
when no answer came). Reads, and a trigger with an idempotency key, are
repeated through transient failures.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterator, TypedDict
from urllib.parse import quote, urlencode, urlparse

from .config import LocalStack, resolve
from .errors import APIError
from .transport import Signer, TransportError, send

FINISHED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})


class RunAnswer(TypedDict):
    """GET /v1/runs/{run}: the run and its tasks."""

    run: dict[str, Any]
    tasks: list[dict[str, Any]]


class Page(TypedDict, total=False):
    next_token: str | None


class Client:
    """Calls the main routes with the API key as the bearer (api_key,
    RUNLEDGER_API_KEY, or the local stack's file for the local stack's
    URL), or, without a key, signed with SigV4 (service execute-api) with
    boto3's credentials, as a deployed stack behind IAM wants. Plain http
    carries a key to the loopback only."""

    def __init__(self, api_url: str | None = None, api_key: str | None = None, *, local: LocalStack | None = None,
                 region: str | None = None, timeout: float = 30.0):
        s = resolve(api_url, api_key, local)
        self.base, self._key, self._timeout = s.api_url, s.api_key, timeout
        self.local = s.local
        u = urlparse(self.base)
        if self._key and u.scheme == "http" and u.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise APIError("new client", 0, "insecure", f"an API key would travel in clear text to {u.hostname}; use https")
        self._signer = None if self._key else Signer("execute-api", region)

    def _call(self, op: str, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None,
              headers: dict[str, str] | None = None, ok: tuple[int, ...] = (200,), repeatable: bool | None = None) -> Any:
        """One call; a call that is safe to repeat (a GET, or one carrying an
        Idempotency-Key) is repeated through transient failures (no
        answer, 429, a 5xx) for up to RETRY_FOR seconds."""
        if repeatable is None:
            repeatable = method == "GET" or bool(headers and headers.get("Idempotency-Key"))
        give_up = time.monotonic() + (self.RETRY_FOR if repeatable else 0)
        wait = 0.2
        while True:
            try:
                return self._call_once(op, method, path, body, query, headers, ok)
            except APIError as e:
                if not (e.transient or e.status == 0) or time.monotonic() + wait > give_up:
                    raise
            time.sleep(wait)
            wait = min(2 * wait, 5.0)

    # How long a repeatable call is repeated through transient failures.
    RETRY_FOR = 60.0

    def _call_once(self, op: str, method: str, path: str, body: Any, query: dict[str, Any] | None,
                   headers: dict[str, str] | None, ok: tuple[int, ...]) -> Any:
        url = self.base + path
        q = {k: v for k, v in (query or {}).items() if v is not None}
        if q:
            url += "?" + urlencode(q)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        h = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            h["Content-Type"] = "application/json"
        if self._key:
            h["Authorization"] = "Bearer " + self._key
        elif self._signer is not None:
            h = self._signer.headers(method, url, data, h)
        try:
            ans = send(method, url, data, h, self._timeout)
        except TransportError as e:
            raise APIError(op, 0, "unreachable", str(e)) from e
        if ans.status not in ok:
            raise APIError.from_answer(op, ans.status, ans.body)
        return ans.json() if ans.body else None

    # Jobs.

    def create_job(self, definition: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/jobs: the job as stored, every default written out."""
        return self._call(f"create job {definition.get('name')}", "POST", "/v1/jobs", definition, ok=(201,))["job"]

    def get_job(self, name: str) -> dict[str, Any]:
        return self._call(f"get job {name}", "GET", f"/v1/jobs/{quote(name, safe='')}")["job"]

    def list_jobs(self, limit: int | None = None, next_token: str | None = None) -> dict[str, Any]:
        """One page: {"jobs": [...], "next_token": ...}."""
        return self._call("list jobs", "GET", "/v1/jobs", query={"limit": limit, "next_token": next_token})

    def delete_job(self, name: str) -> None:
        self._call(f"delete job {name}", "DELETE", f"/v1/jobs/{quote(name, safe='')}", ok=(204,))

    # Runs.

    def trigger_run(self, job: str, params: dict[str, Any] | None = None, logical_time: str | None = None,
                    idempotency_key: str | None = None) -> RunAnswer:
        """POST /v1/jobs/{job}/runs: {"run", "tasks"}. The same
        idempotency_key again answers the run the first call created."""
        body: dict[str, Any] = {}
        if params is not None:
            body["params"] = params
        if logical_time is not None:
            body["logical_time"] = logical_time
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self._call(f"trigger {job}", "POST", f"/v1/jobs/{quote(job, safe='')}/runs", body, headers=headers, ok=(200, 201))

    def get_run(self, run: str) -> RunAnswer:
        return self._call(f"get run {run}", "GET", f"/v1/runs/{quote(run, safe='')}")

    def list_runs(self, job: str | None = None, status: str | None = None, limit: int | None = None,
                  next_token: str | None = None) -> dict[str, Any]:
        """One page, newest first: {"runs": [...], "next_token": ...}."""
        return self._call("list runs", "GET", "/v1/runs",
                          query={"job": job, "status": status, "limit": limit, "next_token": next_token})

    def all_runs(self, job: str | None = None, status: str | None = None) -> Iterator[dict[str, Any]]:
        token = None
        while True:
            page = self.list_runs(job, status, 500, token)
            yield from page.get("runs") or []
            token = page.get("next_token")
            if not token:
                return

    def cancel_run(self, run: str, reason: str | None = None) -> RunAnswer:
        return self._call(f"cancel run {run}", "POST", f"/v1/runs/{quote(run, safe='')}/cancel",
                          {"reason": reason} if reason else None)

    def cancel_task(self, run: str, task: str, reason: str | None = None) -> RunAnswer:
        return self._call(f"cancel task {run}/{task}", "POST",
                          f"/v1/runs/{quote(run, safe='')}/tasks/{quote(task, safe='')}/cancel",
                          {"reason": reason} if reason else None)

    def wait_run(self, run: str, timeout: float = 300.0, interval: float = 0.5) -> RunAnswer:
        """Polls the run until its execution_state is SUCCEEDED, FAILED or
        CANCELLED; raises TimeoutError with the last state seen."""
        give_up = time.monotonic() + timeout
        while True:
            r = self.get_run(run)
            state = r["run"].get("execution_state")
            if state in FINISHED:
                return r
            if time.monotonic() >= give_up:
                raise TimeoutError(f"run {run} still {state} after {timeout:.0f}s")
            time.sleep(interval)
