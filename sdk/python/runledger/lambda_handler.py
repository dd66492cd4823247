"""The handler of a Lambda function that the lambda executor invokes with
an attempt's envelope as the event (docs/workers.md, "Running it as a
Lambda function the scheduler invokes"): claim, run the handler while
heartbeating, complete over HTTP. One invocation is one attempt; the
function needs no queue, only RUNLEDGER_API_URL.

    from runledger.lambda_handler import handle_invoke

    def load(task):
        ...

    handler = handle_invoke(load)   # the function's handler: module.handler
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable

from . import protocol
from .attempts import AttemptsAPI, TransientError, is_transient
from .config import ConfigError, check_api_url
from .errors import APIError
from .runner import (Backoff, EnvelopeError, Handler, Runner, attempt_log, check_completion, check_envelope,
                     claimed_envelope)

# How long the claim and the completion are retried through transient
# failures.
CLAIM_TIMEOUT = 60.0
REPORT_TIMEOUT = 60.0
# Handlers are told to stop this long before the invocation's deadline, to
# leave time to report.
DEADLINE_RESERVE = 5.0


class NotClaimed(Exception):
    """The attempt could not be claimed for a transient reason: the
    invocation fails, so Lambda retries it (then sends its on-failure
    record, which the scheduler takes as a failure of the attempt)."""


def handle_invoke(handler: Handler, *, api_url: str | None = None, name: str | None = None,
                  logger: logging.Logger | None = None, stop_timeout: float = 5.0,
                  deadline_reserve: float = DEADLINE_RESERVE) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """Returns the Lambda handler (event, context). The invocation fails
    only when the claim could not be made for a transient reason, before
    the handler ran; a reported outcome, a claim the scheduler refused (the
    attempt was cancelled or superseded) and an attempt that lost its lease
    all end it successfully: the scheduler knows, or decides from the
    lease. It answers {"attempt", "result"} for the logs."""
    log = logger or logging.getLogger("runledger.lambda")

    def invoke(event: dict[str, Any], context: Any) -> dict[str, Any]:
        url = check_api_url(api_url or os.environ.get("RUNLEDGER_API_URL", "") or _missing())
        worker_name = (name or os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or "lambda").replace("@", "_")
        runner = Runner(AttemptsAPI(url), f"{worker_name}@{protocol.new_event_id()}", handler, log, stop_timeout=stop_timeout)
        deadline = None
        stop_wait = stop_timeout
        if context is not None and hasattr(context, "get_remaining_time_in_millis"):
            deadline = time.time() + context.get_remaining_time_in_millis() / 1000 - deadline_reserve
            stop_wait = min(stop_timeout, deadline_reserve / 2)
        return run_attempt(runner, event, log, deadline=deadline, stop_wait=stop_wait)

    return invoke


def _missing() -> str:
    raise ConfigError("no API URL: pass api_url or set RUNLEDGER_API_URL")


def run_attempt(runner: Runner, event: dict[str, Any], log: logging.Logger, *, deadline: float | None = None,
                stop_wait: float | None = None) -> dict[str, Any]:
    """Claims the attempt the envelope names, runs it and completes it over
    HTTP."""
    try:
        env = check_envelope(event)
    except EnvelopeError as e:
        log.error("the event is not an attempt's envelope; running nothing: %s", e)
        return {"attempt": None, "result": "not_an_envelope"}
    ref = f"{env['run']}/{env['task']}#{env['attempt']}"
    alog = attempt_log(log, ref)
    try:
        sent, claimed = runner.claim(env["token"], env, 0, patience=CLAIM_TIMEOUT)
        run = claimed_envelope(env["run"], env["task"], env["attempt"], env["token"], claimed)
    except (TransientError, APIError) as e:
        if is_transient(e):
            raise NotClaimed(f"claim {ref}: {e}") from e
        alog.info("attempt not claimed: %s", e)
        return {"attempt": ref, "result": "not_claimed"}
    except EnvelopeError as e:
        alog.error("claim answer unusable; running nothing: %s", e)
        return {"attempt": ref, "result": "not_claimed"}
    alog.info("attempt claimed")
    keep = threading.Event()  # heartbeats go on until the report is out
    try:
        comp = runner.run_claimed(run, sent, protocol.parse_time(claimed.get("lease_expires_at")), alog,
                                  deadline=deadline, stop_wait=stop_wait, keep=keep)
        if comp is None:
            return {"attempt": ref, "result": "not_reported"}
        return _complete(runner, comp, ref, alog)
    finally:
        keep.set()


def _complete(runner: Runner, comp, ref: str, alog) -> dict[str, Any]:
    """Completes over HTTP, repeating (same event id) through transient
    failures for up to REPORT_TIMEOUT."""
    check_completion(comp)
    give_up = time.monotonic() + REPORT_TIMEOUT
    bo = Backoff(0.1, 5.0)
    while True:
        try:
            ans = runner.api.complete(comp.token, comp.body)
        except (TransientError, APIError) as e:
            wait = bo.next()
            if not is_transient(e) or time.monotonic() + wait > give_up:
                alog.error("completion not reported (event_id %s): %s", comp.body["event_id"], e)
                return {"attempt": ref, "result": "not_reported"}
            alog.warning("completion not sent; retrying in %.1fs: %s", wait, e)
            time.sleep(wait)
            continue
        result = str(ans.get("result", ""))
        if result == protocol.RESULT_STALE:
            alog.warning("completion is stale: a newer attempt owns the task; not repeated")
        else:
            alog.info("completion reported: %s, state %s", result, ans.get("state"))
        return {"attempt": ref, "result": result, "outcome": comp.body["outcome"]}
