"""The pool worker: it takes attempt envelopes from a pool's queue, claims
each attempt (fenced by its token), runs the handler while heartbeating and
keeping the message hidden, and reports the outcome through the API's
complete route, or durably on the events queue when the route cannot be
reached, before it lets the message go (docs/workers.md, "Python")."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections import Counter
from typing import Any, Callable
from urllib.parse import urlparse

from . import protocol
from .attempts import AttemptsAPI, TransientError, is_transient
from .config import LOCAL_CREDENTIALS, ConfigError, LocalStack, find_local, resolve
from .errors import APIError, is_refusal
from .runner import (DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_STOP_TIMEOUT, Backoff, Completion, EnvelopeError, Handler,
                     Runner, attempt_log, check_completion, check_envelope, claimed_envelope)
from .transport import SQS, SQSError, TransportError

# How many times one delivery tries to claim through transient failures
# before leaving the message for redelivery.
CLAIM_TRIES = 3
# How long reports may still go on after the grace period and the stop
# timeout have run out at a shutdown.
SHUTDOWN_REPORT_BUDGET = 10.0

# What became of a completion (the on_report callback's second argument).
REPORT_APPLIED = protocol.RESULT_APPLIED
REPORT_DUPLICATE = protocol.RESULT_DUPLICATE
# A newer attempt owns the task: the API recorded the report as a late
# event of this attempt and applied nothing. Never repeated.
REPORT_STALE = protocol.RESULT_STALE
# The API refused the completion (4xx): final, never repeated.
REPORT_REFUSED = "refused"
# The route could not be reached; the completion is on the events queue.
REPORT_QUEUED = "queued"


class Worker:
    """Runs the attempts of one pool with handler(task), up to concurrency
    at once.

    Settings, each from the first place that has it:
      - api_url: the argument, RUNLEDGER_API_URL, the local stack's file;
      - queue_url (the pool's queue) and events_queue_url: the arguments,
        RUNLEDGER_POOL_QUEUE_URL and RUNLEDGER_EVENTS_QUEUE_URL, the local
        stack's file ("queues": the pool's name and "events");
      - SQS: the local stack's endpoint when the queues came from its file,
        else boto3's credentials and endpoint (AWS_ENDPOINT_URL works).

    Timeouts: visibility_timeout hides a received message, extended every
    third of it while the attempt runs; poll_wait is one receive's long
    poll (at most 20 s); shutdown_grace is how long running handlers may
    finish after stop(); stop_timeout how long a handler told to stop may
    take to return before it is reported (or, for a lost lease, dropped)
    without it; complete_timeout bounds one completion over HTTP before the
    events queue takes it. on_report(task_ref, result, state) hears what
    became of each completion (REPORT_APPLIED, REPORT_STALE, ...).
    """

    def __init__(self, pool: str, handler: Handler, concurrency: int = 1, *,
                 api_url: str | None = None, queue_url: str | None = None, events_queue_url: str | None = None,
                 name: str | None = None, local: LocalStack | None = None, sqs: SQS | None = None,
                 visibility_timeout: float = 30.0, poll_wait: float = 20.0, shutdown_grace: float = 30.0,
                 stop_timeout: float = DEFAULT_STOP_TIMEOUT, complete_timeout: float = 10.0,
                 default_heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL, queue_completions: bool = False,
                 on_report: Callable[[str, str, str], None] | None = None, logger: logging.Logger | None = None):
        if handler is None:
            raise ConfigError("new worker: handler is None")
        if concurrency < 1:
            raise ConfigError(f"new worker: concurrency {concurrency}, want >= 1")
        if not 1 <= visibility_timeout <= 12 * 3600:
            raise ConfigError(f"new worker: visibility timeout {visibility_timeout}s, want 1s..12h")
        if not 0 <= poll_wait <= 20:
            raise ConfigError(f"new worker: poll wait {poll_wait}s, want 0..20s")
        name = name or socket.gethostname() or "worker"
        if "@" in name:
            raise ConfigError(f"new worker: name {name!r} contains @")
        if local is None and not (queue_url or os.environ.get("RUNLEDGER_POOL_QUEUE_URL")):
            local = find_local()
        settings = resolve(api_url, None, local)
        self.pool = pool
        self.queue_url = queue_url or os.environ.get("RUNLEDGER_POOL_QUEUE_URL") or (local.queues.get(pool, "") if local else "")
        self.events_queue_url = (events_queue_url or os.environ.get("RUNLEDGER_EVENTS_QUEUE_URL")
                                 or (local.queues.get("events", "") if local else ""))
        if not self.queue_url:
            raise ConfigError(f"new worker: no queue URL for pool {pool!r}: pass queue_url, set RUNLEDGER_POOL_QUEUE_URL, "
                              "or name a pool of the local stack")
        if not self.events_queue_url:
            raise ConfigError("new worker: no events queue URL: pass events_queue_url or set RUNLEDGER_EVENTS_QUEUE_URL")
        self.sqs = sqs or _sqs_for(self.queue_url, local)
        self.concurrency = concurrency
        self.visibility_timeout = visibility_timeout
        self.poll_wait = poll_wait
        self.shutdown_grace = shutdown_grace
        self.complete_timeout = complete_timeout
        self.queue_completions = queue_completions
        self.on_report = on_report
        self.boot_id = protocol.new_event_id()
        self.id = f"{name}@{self.boot_id}"
        self.log = logger or logging.getLogger("runledger.worker")
        self.api = AttemptsAPI(settings.api_url)
        self.runner = Runner(self.api, self.id, handler, self.log, stop_timeout=stop_timeout,
                             default_heartbeat_interval=default_heartbeat_interval)
        self.stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()
        self._stopping = threading.Event()
        self._shutdown = threading.Event()  # handlers must stop
        self._ops_deadline: float | None = None  # reports give up after it
        self._slots = threading.BoundedSemaphore(concurrency)
        self._active: set[threading.Thread] = set()
        self._active_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def drop_heartbeats(self) -> Callable[[Any], bool] | None:
        """Test hook: when it answers True for a task, that task's
        heartbeats are dropped before they leave, as a network partition
        would drop them (the lease then runs out and the handler is told to
        stop)."""
        return self.runner.drop_heartbeats

    @drop_heartbeats.setter
    def drop_heartbeats(self, f: Callable[[Any], bool] | None) -> None:
        self.runner.drop_heartbeats = f

    def _count(self, what: str) -> None:
        with self._stats_lock:
            self.stats[what] += 1

    # Lifecycle.

    def start(self) -> "Worker":
        """Runs the worker in a background thread; stop() ends it."""
        if self._thread is not None:
            raise RuntimeError("worker already started")
        self._thread = threading.Thread(target=self.run, name=f"worker {self.id}", daemon=True)
        self._thread.start()
        return self

    def stop(self, wait: bool = True) -> None:
        """Stops receiving; running handlers may finish for the shutdown
        grace period, then are told to stop (cause "shutdown"); run()
        returns once their reports are out."""
        self._stopping.set()
        if wait and self._thread is not None:
            self._thread.join()

    def run(self) -> None:
        """Receives and processes messages until stop(); then shuts down
        gracefully. Raises ConfigError when the pool's queue does not exist."""
        self.log.info("worker %s started on %s (concurrency %d)", self.id, self.queue_url, self.concurrency)
        try:
            self._receive_loop()
        finally:
            self._drain()
            self.log.info("worker %s stopped", self.id)

    def _drain(self) -> None:
        grace_end = time.monotonic() + self.shutdown_grace
        self._ops_deadline = time.monotonic() + self.shutdown_grace + self.runner.stop_timeout + SHUTDOWN_REPORT_BUDGET
        while True:
            with self._active_lock:
                active = [t for t in self._active if t.is_alive()]
            if not active:
                return
            if time.monotonic() >= grace_end and not self._shutdown.is_set():
                self.log.warning("shutdown grace period over; telling %d running handlers to stop", len(active))
                self._shutdown.set()
            if time.monotonic() >= self._ops_deadline:
                self.log.error("shutdown budget over; abandoning %d unreported attempts", len(active))
                return
            active[0].join(0.1)

    def _receive_loop(self) -> None:
        bo = Backoff(0.2, 30.0)
        while not self._stopping.is_set():
            if not self._slots.acquire(timeout=0.2):
                continue
            n = 1
            while n < min(self.concurrency, 10) and self._slots.acquire(blocking=False):
                n += 1
            try:
                msgs = self.sqs.receive(self.queue_url, n, self.poll_wait, self.visibility_timeout)
            except (SQSError, TransportError) as e:
                for _ in range(n):
                    self._slots.release()
                if isinstance(e, SQSError) and e.queue_missing:
                    raise ConfigError(f"run worker {self.id}: pool queue {self.queue_url} does not exist") from e
                wait = bo.next()
                self.log.warning("receive failed; backing off %.1fs: %s", wait, e)
                self._stopping.wait(wait)
                continue
            bo.cur = 0
            for _ in range(n - len(msgs)):
                self._slots.release()
            if self._stopping.is_set():
                # Received after the stop: hand them back at once rather
                # than keep them hidden for the visibility timeout.
                for m in msgs:
                    self._hand_back(m)
                    self._slots.release()
                return
            for m in msgs:
                t = threading.Thread(target=self._process_slot, args=(m,), daemon=True)
                with self._active_lock:
                    self._active = {x for x in self._active if x.is_alive()}
                    self._active.add(t)
                t.start()

    def _hand_back(self, m: dict[str, Any]) -> None:
        try:
            self.sqs.change_visibility(self.queue_url, m["ReceiptHandle"], 0)
        except (SQSError, TransportError) as e:
            self.log.warning("hand back message %s on stop: %s", m.get("MessageId"), e)

    def _process_slot(self, m: dict[str, Any]) -> None:
        try:
            self.process(m)
        except Exception:  # noqa: BLE001 - one message must not end the worker
            self.log.exception("processing message %s failed", m.get("MessageId"))
        finally:
            self._slots.release()

    # One message.

    def process(self, m: dict[str, Any]) -> None:
        """Takes one received message through claim, run and report."""
        self._count("received")
        receipt = m["ReceiptHandle"]
        log = attempt_log(self.log, f"message {m.get('MessageId')}")
        try:
            env = check_envelope(json.loads(m.get("Body") or ""))
        except (ValueError, EnvelopeError) as e:
            # No worker can ever run it; the scheduler's queue timeout takes
            # care of the attempt, if there is one.
            log.error("dropping a message that is not an envelope: %s", e)
            self._delete(receipt, log)
            return
        ref = f"{env['run']}/{env['task']}#{env['attempt']}"
        log = attempt_log(self.log, f"{ref} (message {m.get('MessageId')})")
        claim_sent, claimed = self._claim(env, log)
        if claimed is None:
            if claim_sent < 0:
                self._delete(receipt, log)
            return
        try:
            run = claimed_envelope(env["run"], env["task"], env["attempt"], env["token"], claimed)
        except EnvelopeError as e:
            # Claimed, but what to run is unknown: the lease runs out and
            # the scheduler retries it; a redelivery would be refused.
            log.error("claim answer unusable; running nothing: %s", e)
            self._delete(receipt, log)
            return
        self._count("claimed")
        log.info("attempt %s claimed", ref)
        keep = threading.Event()
        hider = threading.Thread(target=self._keep_hidden, args=(receipt, keep, log), daemon=True)
        hider.start()
        try:
            # Heartbeats and the message's hiding last until the report is out.
            comp = self.runner.run_claimed(run, claim_sent, protocol.parse_time(claimed.get("lease_expires_at")), log,
                                           shutdown=self._shutdown, keep=keep)
            if comp is None:
                self._count("not_reported")
                keep.set()
                self._delete(receipt, log)
                return
            if self.report(comp, log) is None:
                # What remains is the redelivered message and the lease.
                log.error("completion of %s not reported; leaving the message (event_id %s)", ref, comp.body["event_id"])
                return
        finally:
            keep.set()
        hider.join()
        # Only now may the message go: the API has the report, or it is
        # durable on the events queue.
        self._delete(receipt, log)

    def _claim(self, env: dict[str, Any], log) -> tuple[float, dict[str, Any] | None]:
        """Claims the message's attempt. Answers (sent, answer); answer is
        None when the claim did not win: sent is -1 when the message must
        go (the claim was refused), else it stays for redelivery."""
        try:
            return self.runner.claim(env["token"], env, CLAIM_TRIES)
        except (TransientError, APIError, protocol.FieldError) as e:
            if is_refusal(e):
                # Exactly one claim wins; this delivery is a duplicate or
                # the attempt is no longer wanted. The handler never runs.
                self._count("claims_refused")
                log.info("claim refused; dropping the message: %s", e)
                return -1, None
            if is_transient(e):
                log.warning("claim failed; leaving the message for redelivery: %s", e)
            else:
                # An answer outside the contract (a wrong API URL, a
                # proxy): dropping would lose the attempt.
                log.error("claim answered outside the contract; leaving the message for redelivery: %s", e)
            return 0, None

    def _keep_hidden(self, receipt: str, keep: threading.Event, log) -> None:
        while not keep.wait(self.visibility_timeout / 3):
            try:
                self.sqs.change_visibility(self.queue_url, receipt, self.visibility_timeout)
            except SQSError as e:
                if e.receipt_invalid:
                    # A redelivery is harmless: its claim is refused.
                    log.warning("message no longer held; it may be delivered again: %s", e)
                    return
                log.warning("message visibility not extended: %s", e)
            except TransportError as e:
                log.warning("message visibility not extended: %s", e)

    def _delete(self, receipt: str, log) -> None:
        try:
            self.sqs.delete(self.queue_url, receipt)
        except (SQSError, TransportError) as e:
            log.warning("message not deleted; it will be delivered again and refused: %s", e)

    # Reports.

    def report(self, comp: Completion, log=None) -> str | None:
        """Completes the attempt through the complete route; when the route
        cannot be reached (no answer, a timeout, 429 or a 5xx) it sends the
        same completion (same event id) to the events queue, retrying until
        accepted. A 4xx answer is final and a stale answer is only reported:
        neither is ever repeated. Answers what became of it (REPORT_*), or
        None when it could not be sent before the shutdown budget ran out."""
        log = log or self.log
        check_completion(comp)
        if not self.queue_completions:
            try:
                ans = self.api.complete(comp.token, comp.body, timeout=self.complete_timeout)
            except (TransientError, APIError) as e:
                if isinstance(e, APIError) and not e.transient:
                    log.warning("completion of %s refused by the API; the refusal is final: %s", comp.ref, e)
                    return self._reported(comp, REPORT_REFUSED, "")
                log.warning("complete route unreachable; sending the completion to the events queue: %s", e)
            else:
                result, state = str(ans.get("result", "")), str(ans.get("state", ""))
                if result == protocol.RESULT_STALE:
                    log.warning("completion of %s is stale: a newer attempt owns the task; recorded as a late event, "
                                "not repeated (state %s)", comp.ref, state)
                else:
                    log.info("completion of %s reported: %s, state %s", comp.ref, result, state)
                return self._reported(comp, result, state)
        body = json.dumps({**comp.body, "token": comp.token}, separators=(",", ":"), ensure_ascii=False)
        bo = Backoff(0.1, 5.0)
        while True:
            try:
                self.sqs.send(self.events_queue_url, body)
                log.info("completion of %s sent to the events queue (event_id %s)", comp.ref, comp.body["event_id"])
                return self._reported(comp, REPORT_QUEUED, "")
            except (SQSError, TransportError) as e:
                wait = bo.next()
                if self._ops_deadline is not None and time.monotonic() + wait > self._ops_deadline:
                    return None
                log.warning("completion not sent; retrying in %.1fs: %s", wait, e)
                time.sleep(wait)

    def _reported(self, comp: Completion, result: str, state: str) -> str:
        self._count("report_" + result)
        if self.on_report is not None:
            try:
                self.on_report(comp.ref, result, state)
            except Exception:  # noqa: BLE001 - a callback must not lose the message
                self.log.exception("on_report raised")
        return result


def _sqs_for(queue_url: str, local: LocalStack | None) -> SQS:
    """The SQS client for queue_url: the local stack's emulator when the
    queue is one of its own, else AWS through boto3's settings (an
    AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL overrides the endpoint)."""
    if local is not None and local.sqs_endpoint and queue_url in local.queues.values():
        return SQS(region=local.region or None, endpoint=local.sqs_endpoint, credentials=LOCAL_CREDENTIALS)
    endpoint = os.environ.get("AWS_ENDPOINT_URL_SQS") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or _region_of(queue_url)
    return SQS(region=region, endpoint=endpoint)


def _region_of(queue_url: str) -> str | None:
    parts = urlparse(queue_url).netloc.split(".")
    return parts[1] if len(parts) > 3 and parts[0] == "sqs" else None
