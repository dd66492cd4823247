"""Running one claimed attempt: the handler in its own thread, beside it
the heartbeats (which renew the lease and learn of a cancel request) and
the lease fence (which tells the handler to stop before a lease that could
not be renewed ends), and the completion its end makes. The pool worker
(worker.py) and the Lambda helper (lambda_handler.py) share it; they differ
in how an attempt arrives and how its completion leaves."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from . import protocol
from .attempts import AttemptsAPI, TransientError, is_transient
from .errors import APIError, is_refusal
from .task import (ATTEMPT_OVER, CANCEL_REQUESTED, DEADLINE, LEASE_LOST, RUN_TIMEOUT, SHUTDOWN, StopCause, Stopped,
                   Task, _Control, _LeaseFence)

Handler = Callable[[Task], Any]

DEFAULT_HEARTBEAT_INTERVAL = 10.0
DEFAULT_STOP_TIMEOUT = 5.0


class _AttemptLog(logging.LoggerAdapter):
    def process(self, msg, kwargs):
        return f"{self.extra['where']}: {msg}", kwargs


def attempt_log(log: logging.Logger, where: str) -> logging.LoggerAdapter:
    """log, each line prefixed with the attempt (or message) it is about."""
    return _AttemptLog(log, {"where": where})


class Backoff:
    """Doubles from lo to hi, each wait drawn from [d/2, d]."""

    def __init__(self, lo: float, hi: float):
        self.lo, self.hi, self.cur = lo, hi, 0.0

    def next(self) -> float:
        self.cur = self.lo if self.cur == 0 else min(2 * self.cur, self.hi)
        return self.cur / 2 + random.uniform(0, self.cur / 2)


class EnvelopeError(ValueError):
    """An envelope no worker can run."""


def check_envelope(env: Any) -> dict[str, Any]:
    """What a worker needs of an envelope: an attempt, its token, and
    durations that read (protocol.Envelope.Validate)."""
    if not isinstance(env, dict):
        raise EnvelopeError("the envelope is not a JSON object")
    for f in ("run", "task", "token"):
        if not isinstance(env.get(f), str) or not env[f]:
            raise EnvelopeError(f"{f} is required")
    if not isinstance(env.get("attempt"), int) or env["attempt"] < 1:
        raise EnvelopeError("attempt must be 1 or more")
    for f in ("heartbeat_interval", "run_timeout"):
        try:
            if protocol.parse_duration(env.get(f)) < 0:
                raise EnvelopeError(f"{f} is negative")
        except ValueError as e:
            raise EnvelopeError(str(e)) from e
    return env


def claimed_envelope(run: str, task: str, attempt: int, token: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The envelope a worker runs once it claimed the attempt: the claim
    answer's, the attempt as the scheduler stored it; never the message
    that named it, which whoever may write to the queue could have altered."""
    env = answer.get("envelope")
    if not isinstance(env, dict):
        raise EnvelopeError(f"claim {run}/{task}#{attempt}: the answer carries no envelope")
    env = dict(env)
    if (env.get("run"), env.get("task"), env.get("attempt")) != (run, task, attempt):
        raise EnvelopeError(f"claim {run}/{task}#{attempt}: the answer's envelope is another attempt's")
    if not env.get("token"):
        env["token"] = token
    return check_envelope(env)


@dataclass
class Completion:
    body: dict[str, Any]
    token: str

    @property
    def ref(self) -> str:
        b = self.body
        return f"{b['run']}/{b['task']}#{b['attempt']}"


class Runner:
    """What running an attempt needs: the worker routes, the worker's id,
    the handler and the timeouts."""

    def __init__(self, api: AttemptsAPI, worker_id: str, handler: Handler, log: logging.Logger, *,
                 stop_timeout: float = DEFAULT_STOP_TIMEOUT,
                 default_heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
                 clock: Callable[[], float] = time.time):
        self.api = api
        self.worker_id = worker_id
        self.handler = handler
        self.log = log
        self.stop_timeout = stop_timeout
        self.default_heartbeat_interval = default_heartbeat_interval
        self.clock = clock
        # Test hook: when it answers True for a task, that task's
        # heartbeats are dropped before they leave, as a network partition
        # would drop them.
        self.drop_heartbeats: Callable[[Task], bool] | None = None

    def claim(self, token: str, env: dict[str, Any], tries: int, patience: float | None = None) -> tuple[float, dict[str, Any]]:
        """Claims the attempt, repeating through transient failures with
        the same event id (a claim that won but lost its answer wins
        again) for up to tries, or patience seconds. Answers when the
        winning claim was sent, and the answer."""
        event_id = protocol.new_event_id(self.clock())
        bo = Backoff(0.1, 1.0 if patience is None else 5.0)
        give_up = time.monotonic() + (patience or 0)
        n = 0
        while True:
            n += 1
            sent = self.clock()
            try:
                return sent, self.api.claim(token, env["run"], env["task"], env["attempt"], self.worker_id, event_id)
            except (TransientError, APIError) as e:
                wait = bo.next()
                out_of_tries = n >= tries if patience is None else time.monotonic() + wait > give_up
                if not is_transient(e) or out_of_tries:
                    raise
                self.log.warning("claim failed; retrying: %s", e)
                time.sleep(wait)

    def run_claimed(self, env: dict[str, Any], claim_sent: float, lease_expires_at: float | None, log: logging.LoggerAdapter, *,
                    shutdown: threading.Event | None = None, deadline: float | None = None,
                    stop_wait: float | None = None, keep: threading.Event | None = None) -> Completion | None:
        """Runs the handler on a claimed attempt, heartbeating until it
        returns, and answers the completion to report; None when nothing
        may be reported (the lease was lost, or a heartbeat learned that a
        newer attempt or the instance's state superseded this one).
        shutdown, once set, tells the handler to stop (a worker's grace
        period ended); deadline (seconds since the epoch) does the same at
        that time (the Lambda invocation's end less a reserve). Heartbeats
        go on until keep is set, which the caller does once the report is
        out (without keep, when this returns)."""
        interval = protocol.parse_duration(env.get("heartbeat_interval")) or self.default_heartbeat_interval
        run_timeout = protocol.parse_duration(env.get("run_timeout"))
        control = _Control()
        fence = _LeaseFence(interval)
        fence.renew(claim_sent, lease_expires_at)
        task = Task(env, self.worker_id, log, control, fence)
        handler_done = threading.Event()
        own_keep = keep is None
        keep = keep or threading.Event()
        threads = [
            threading.Thread(target=self._heartbeats, args=(task, interval, fence, control, handler_done, keep, log), daemon=True),
            threading.Thread(target=self._fence, args=(fence, control, handler_done, keep, log), daemon=True),
        ]
        for t in threads:
            t.start()
        try:
            started = time.monotonic()
            err, returned, abandoned_by = self._run_handler(task, control, handler_done, run_timeout, shutdown, deadline,
                                                            self.stop_timeout if stop_wait is None else stop_wait)
            ended_at = self.clock()
            return self._completion(task, control, err, returned, abandoned_by, ended_at, time.monotonic() - started, log)
        finally:
            if own_keep:
                keep.set()

    def _run_handler(self, task: Task, control: _Control, done: threading.Event, run_timeout: float,
                     shutdown: threading.Event | None, deadline: float | None, stop_wait: float):
        """Calls the handler in its own thread and waits for it. It stops
        waiting once the handler was told to stop and has had stop_wait to
        return; a cancel request has no such limit (the handler may be
        cleaning up), but a shutdown or the deadline still ends the wait.
        Python cannot stop a thread: one abandoned runs on, its effects
        fenced by the lease it no longer has."""
        box: dict[str, Any] = {}

        def call() -> None:
            try:
                value = self.handler(task)
                if value is not None:
                    task.set_output(value)
            except BaseException as e:  # noqa: BLE001 - every end of the handler is reported
                box["err"] = e
                box["trace"] = traceback.format_exc()
            finally:
                done.set()

        threading.Thread(target=call, name=f"handler {task.ref}", daemon=True).start()
        begun = time.monotonic()
        abandon_at: float | None = None
        abandon_by: StopCause | None = None
        while not done.wait(0.05):
            hard: StopCause | None = None
            if run_timeout and time.monotonic() - begun >= run_timeout:
                control.stop(RUN_TIMEOUT)
            if deadline is not None and self.clock() >= deadline:
                control.stop(DEADLINE)
                hard = DEADLINE
            if shutdown is not None and shutdown.is_set():
                control.stop(SHUTDOWN)
                hard = hard or SHUTDOWN
            cause = control.cause
            if abandon_at is None and cause is not None and (cause is not CANCEL_REQUESTED or hard):
                abandon_by = cause if cause is not CANCEL_REQUESTED else hard
                abandon_at = time.monotonic() + stop_wait
            if abandon_at is not None and time.monotonic() >= abandon_at:
                return None, False, abandon_by
        err = box.get("err")
        if err is not None and "trace" in box and not isinstance(err, Stopped):
            task.log.debug("handler raised:\n%s", box["trace"])
        return err, True, None

    def _completion(self, task: Task, control: _Control, err: BaseException | None, returned: bool,
                    abandoned_by: StopCause | None, ended_at: float, took: float, log: logging.LoggerAdapter) -> Completion | None:
        cause = control.cause
        if not returned:
            assert abandoned_by is not None
            if abandoned_by.silent:
                log.error("handler did not return after it was told to stop; going on without it (%s)", abandoned_by.reason)
                return None
            log.error("handler did not return after it was told to stop; reporting without it (%s)", abandoned_by.reason)
            outcome, category, retryable, exit_code, reason = abandoned_by.outcome, abandoned_by.category, True, None, abandoned_by.reason
        else:
            r = classify(err, cause, log)
            if r is None:
                if cause is not LEASE_LOST:
                    log.warning("attempt superseded; not reporting it (handler error: %s)", err)
                return None
            outcome, category, retryable, exit_code = r
            reason = failure_reason(err, cause, category) if outcome != protocol.OUTCOME_SUCCEEDED else ""
        output, output_ref = task._outputs()
        body: dict[str, Any] = {
            "run": task.run, "task": task.task, "attempt": task.attempt,
            "event_id": protocol.new_event_id(ended_at), "outcome": outcome,
            "event_time": protocol.format_time(ended_at),
        }
        if exit_code is not None:
            body["exit_code"] = exit_code
        if output_ref:
            body["output_ref"] = output_ref
        if outcome == protocol.OUTCOME_SUCCEEDED:
            if output is not None:
                body["output"] = json.loads(output)
        else:
            body["error_category"] = category
            body["retryable"] = retryable
            if reason:
                body["reason"] = protocol.clip_reason(reason)
        log.info("attempt finished: outcome=%s error_category=%s run_ms=%d event_id=%s",
                 outcome, body.get("error_category", ""), int(took * 1000), body["event_id"])
        return Completion(body, task.token)

    def _fence(self, fence: _LeaseFence, control: _Control, handler_done: threading.Event, keep: threading.Event,
               log: logging.LoggerAdapter) -> None:
        """Tells the handler to stop (cause lease_lost) when the lease was
        not renewed and its fencing deadline passed, unless it returned."""
        stop = _Either(handler_done, keep)
        if not fence.watch(stop, self.clock) or handler_done.is_set():
            return
        fence.lost = True
        log.warning("attempt lease not renewed; telling the handler to stop before the lease ends, reporting nothing "
                    "(lease_expires_at=%s)", protocol.format_time(fence.lease_end))
        control.stop(LEASE_LOST)

    def _heartbeats(self, task: Task, interval: float, fence: _LeaseFence, control: _Control,
                    handler_done: threading.Event, keep: threading.Event, log: logging.LoggerAdapter) -> None:
        """Beats every interval until keep is set or the lease is lost,
        renewing the fence with each answer. A cancel request tells the
        handler; a refusal means the attempt is over for this worker."""
        while not keep.wait(interval):
            if fence.lost:
                # The handler was told to stop and nothing will be
                # reported: proving the attempt alive would only delay its
                # retry.
                return
            if self.drop_heartbeats is not None and self.drop_heartbeats(task):
                continue
            sent = self.clock()
            try:
                ans = self.api.heartbeat(task.token, task.run, task.task, task.attempt,
                                         protocol.new_event_id(sent), timeout=max(interval, 5.0))
            except (TransientError, APIError) as e:
                if is_refusal(e):
                    if not handler_done.is_set():
                        log.warning("heartbeat refused; the attempt is over for this worker: %s", e)
                        control.stop(ATTEMPT_OVER)
                    return
                log.warning("heartbeat failed: %s", e)
                continue
            fence.renew(sent, protocol.parse_time(ans.get("lease_expires_at")))
            if ans.get("cancel_requested") and not control.cancel_requested:
                log.info("cancel requested; telling the handler")
                control.stop(CANCEL_REQUESTED)


class _Either:
    """Set when either event is (the fence's wait needs one)."""

    def __init__(self, a: threading.Event, b: threading.Event):
        self.a, self.b = a, b

    def is_set(self) -> bool:
        return self.a.is_set() or self.b.is_set()


def classify(err: BaseException | None, cause: StopCause | None, log) -> tuple[str, str, bool, int | None] | None:
    """How a handler's end is reported: (outcome, category, retryable,
    exit code), or None when nothing may be reported."""
    if cause is not None and cause.silent:
        return None
    if err is None:
        # Work that finished is the truth, even after a cancel request or
        # past a timeout: the API lets it win over CANCELLING.
        return protocol.OUTCOME_SUCCEEDED, "", True, None
    retryable = bool(getattr(err, "retryable", True))
    exit_code = getattr(err, "exit_code", None)
    exit_code = exit_code if isinstance(exit_code, int) else None
    category = getattr(err, "category", None) or ""
    if not isinstance(err, Exception):
        category = category or "panic"
    if cause is not None:
        stopped = isinstance(err, Stopped)
        if cause is CANCEL_REQUESTED and stopped:
            # The acknowledgement of the cancel request.
            return protocol.OUTCOME_CANCELLED, protocol.CATEGORY_CANCELLED, False, exit_code
        if cause is not CANCEL_REQUESTED and (stopped or not category):
            # The worker stopped the work (timeout, shutdown, deadline); an
            # error the handler did not categorise is taken as that.
            return cause.outcome, cause.category, retryable, exit_code
    if category:
        try:
            protocol.check_category(category)
        except protocol.FieldError:
            log.warning("handler error category %r is not snake_case of at most 64 characters; reporting \"error\"", category)
            category = ""
    return protocol.OUTCOME_FAILED, category or protocol.CATEGORY_ERROR, retryable, exit_code


def failure_reason(err: BaseException | None, cause: StopCause | None, category: str) -> str:
    """The reason of a completion that is not a success: the handler's (its
    reason attribute, else its text), prefixed with why the worker stopped
    it when it did."""
    if err is None:
        reason = ""
    else:
        reason = getattr(err, "reason", None) or str(err) or type(err).__name__
    if cause is not None and category == cause.category:
        reason = f"{cause.reason}: {reason}" if reason else cause.reason
    return reason


def check_completion(c: Completion) -> None:
    """The completion's fields against the contract's limits, before
    anything is sent (protocol.Completion.Validate)."""
    b = c.body
    protocol.check_event_id(b["event_id"])
    protocol.check_category(b.get("error_category", ""))
    protocol.check_output_ref(b.get("output_ref", ""))
    if "output" in b:
        protocol.check_output(json.dumps(b["output"], separators=(",", ":"), ensure_ascii=False).encode())
    if len(b.get("reason", "").encode()) > protocol.MAX_REASON_BYTES:
        raise protocol.FieldError("reason", "reason is over 4096 bytes.", too_large=True)
