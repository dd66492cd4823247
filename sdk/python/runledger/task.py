"""The attempt as a handler sees it, and how a handler says how it ended."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from . import protocol


@dataclass(frozen=True)
class StopCause:
    """Why the worker told a handler to stop. silent: the attempt is over
    for this worker and nothing may be reported for it."""

    name: str
    reason: str
    category: str = ""
    outcome: str = protocol.OUTCOME_FAILED
    silent: bool = False


CANCEL_REQUESTED = StopCause("cancel_requested", "cancel requested", protocol.CATEGORY_CANCELLED, protocol.OUTCOME_CANCELLED)
RUN_TIMEOUT = StopCause("run_timeout", "run timeout passed", protocol.CATEGORY_TIMEOUT)
SHUTDOWN = StopCause("shutdown", "worker shutting down", protocol.CATEGORY_WORKER_SHUTDOWN)
DEADLINE = StopCause("deadline", "invocation deadline near", protocol.CATEGORY_WORKER_DEADLINE)
# A heartbeat learned that the attempt is no longer current.
ATTEMPT_OVER = StopCause("attempt_over", "attempt no longer current", silent=True)
# The lease could not be renewed and is about to end: the handler must stop
# before a retry may start, and the scheduler resolves the attempt as lost.
LEASE_LOST = StopCause("lease_lost", "attempt lease not renewed before its end", silent=True)


class Stopped(Exception):
    """Raised by Task.check() once the worker told the handler to stop
    (the run timeout, a shutdown, the Lambda deadline, a lost lease or a
    cancel request). A handler that lets it propagate reports the stop as
    the worker saw it."""

    def __init__(self, cause: StopCause):
        super().__init__(cause.reason)
        self.cause = cause


class Cancelled(Stopped):
    """Raised by Task.check() after an operator requested a cancel: letting
    it propagate acknowledges the cancel (the attempt ends cancelled)."""


class LeaseLost(Stopped):
    """Raised by Task.check() when the attempt's lease could not be renewed
    and its fencing deadline passed: a retry may start soon, so the handler
    must not write anything more (nothing is reported for the attempt)."""


class TaskError(Exception):
    """A failure with what its completion says: error_category (snake_case,
    default "error"), retryable (default True), exit_code and reason (the
    words an operator reads in the history; default the message)."""

    def __init__(self, message: str, *, category: str | None = None, retryable: bool = True,
                 exit_code: int | None = None, reason: str | None = None):
        super().__init__(message)
        self.category, self.retryable, self.exit_code, self.reason = category, retryable, exit_code, reason


def permanent(err: BaseException) -> BaseException:
    """Marks err as not worth retrying: its completion says retryable
    false. Returns err, so `raise permanent(ValueError(...))` reads well."""
    err.retryable = False  # type: ignore[attr-defined]
    return err


class FenceUnavailable(Exception):
    """The claim answer carried no fence: the ledger is in memory (the local
    stack started without DynamoDB) and has nothing a transaction could
    check."""


class _LeaseFence:
    """What the worker knows of the attempt's lease. Its end is the earlier
    of the lease_expires_at the API answered and the renewing call's send
    time plus the heartbeat timeout: the server computed its expiry from a
    moment after the call was sent, so the second never lies late whatever
    the clocks say. The handler must stop a margin before it:
    min(5 s, heartbeat timeout / 3)."""

    MAX_MARGIN = 5.0
    LIFETIME = 3  # heartbeat intervals in a heartbeat timeout

    def __init__(self, interval: float):
        self.timeout = self.LIFETIME * interval
        self.margin = min(self.MAX_MARGIN, interval)
        self._cond = threading.Condition()
        self._end = 0.0
        self.lost = False

    def renew(self, sent_at: float, expires_at: float | None) -> None:
        end = sent_at + self.timeout
        if expires_at is not None and expires_at < end:
            end = expires_at
        with self._cond:
            self._end = end
            self._cond.notify_all()

    @property
    def lease_end(self) -> float:
        with self._cond:
            return self._end

    @property
    def deadline(self) -> float:
        with self._cond:
            return self._end - self.margin

    def watch(self, done: threading.Event, clock=time.time) -> bool:
        """Waits until the deadline passes without a renewal (True) or done
        is set (False)."""
        with self._cond:
            while not done.is_set():
                wait = self._end - self.margin - clock()
                if wait <= 0:
                    return True
                self._cond.wait(min(wait, 0.5))
            return False


class _Control:
    """The stop signal shared by the worker and one attempt's handler: the
    first cause set wins."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stopped = threading.Event()
        self.cause: StopCause | None = None
        self.cancel_requested = False

    def stop(self, cause: StopCause) -> bool:
        with self._lock:
            if cause is CANCEL_REQUESTED:
                self.cancel_requested = True
            if self.cause is not None:
                return False
            self.cause = cause
        self.stopped.set()
        return True


class Task:
    """One claimed attempt, as the worker hands it to the handler. Every
    field comes from the claim answer's envelope: the attempt as the
    scheduler stored it, never the queue message's copy."""

    def __init__(self, envelope: dict[str, Any], worker_id: str, log: logging.Logger | logging.LoggerAdapter,
                 control: _Control, fence: _LeaseFence):
        self.envelope = envelope
        self.job: str = envelope.get("job", "")
        self.run: str = envelope["run"]
        self.task: str = envelope["task"]
        self.attempt: int = envelope["attempt"]
        # The attempt's token: the bearer of its worker routes, and a key
        # user code may fence its own output writes with.
        self.token: str = envelope["token"]
        self.pool: str = envelope.get("pool", "")
        self.logical_time: str | None = envelope.get("logical_time")
        self.payload: Any = envelope.get("payload")
        self.params: Any = envelope.get("params")
        # The outputs of the direct upstream tasks that succeeded with one.
        self.inputs: dict[str, Any] = dict(envelope.get("inputs") or {})
        # A map child's element and its position; None for other tasks.
        self.item: Any = envelope.get("item")
        self.index: int | None = envelope.get("index")
        self.worker_id = worker_id
        self.log = log
        self._control = control
        self._fence = fence
        self._out_lock = threading.Lock()
        self._output: bytes | None = None
        self._output_ref = ""

    @property
    def ref(self) -> str:
        return f"{self.run}/{self.task}#{self.attempt}"

    # Outputs.

    def set_output(self, value: Any) -> None:
        """Sets the attempt's output (any JSON value, at most 16 KiB
        encoded): a success reports the last value set, and the direct
        downstream tasks get it in their inputs. A handler's return value,
        when not None, is set the same way."""
        b = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        protocol.check_output(b)
        with self._out_lock:
            self._output = b

    def set_output_ref(self, ref: str) -> None:
        """Records where the output lives (a URI or key, at most 2 KiB)."""
        protocol.check_output_ref(ref)
        with self._out_lock:
            self._output_ref = ref

    def _outputs(self) -> tuple[bytes | None, str]:
        with self._out_lock:
            return self._output, self._output_ref

    # Stopping.

    @property
    def cancelled(self) -> bool:
        """An operator requested a cancel (learned from a heartbeat)."""
        return self._control.cancel_requested

    @property
    def stopped(self) -> bool:
        """The worker told the handler to stop, for whatever cause."""
        return self._control.stopped.is_set()

    @property
    def stop_reason(self) -> str | None:
        """"cancel_requested", "run_timeout", "shutdown", "deadline",
        "attempt_over" or "lease_lost"; None while the handler may go on."""
        c = self._control.cause
        return c.name if c else None

    def check(self) -> None:
        """Raises Cancelled, LeaseLost or Stopped once the handler must
        stop; call it between steps of long work."""
        c = self._control.cause
        if c is None:
            return
        if c is CANCEL_REQUESTED:
            raise Cancelled(c)
        if c is LEASE_LOST:
            raise LeaseLost(c)
        raise Stopped(c)

    def wait(self, seconds: float) -> bool:
        """Sleeps up to seconds, waking early when the handler must stop;
        answers whether it must."""
        return self._control.stopped.wait(seconds)

    # Fencing.

    @property
    def fencing_deadline(self) -> float:
        """When (seconds since the epoch, by this machine's clock) the
        worker tells the handler to stop unless it renews the lease first:
        the lease's end less min(5 s, heartbeat timeout / 3). It moves on
        with every heartbeat."""
        return self._fence.deadline

    @property
    def lease_expires_at(self) -> float:
        return self._fence.lease_end

    def fence(self) -> dict[str, Any]:
        """The ConditionCheck that makes the caller's own DynamoDB
        transaction commit only while this attempt owns its task (it is the
        task's current attempt, RUNNING or CANCELLING; no clock involved),
        in the shape of boto3's low-level client:

            ddb.transact_write_items(TransactItems=[task.fence(), {"Put": {...}}])

        A refused check cancels the whole transaction
        (TransactionCanceledException, reason ConditionalCheckFailed). The
        worker needs dynamodb:ConditionCheckItem on the ledger's table and
        nothing else."""
        f = self.envelope.get("fence")
        if not f:
            raise FenceUnavailable(f"fence of {self.ref}: the claim answer carries none (an in-memory ledger has nothing to check)")
        check: dict[str, Any] = {
            "TableName": f["table"],
            "Key": {k: {"S": v} for k, v in f["key"].items()},
            "ConditionExpression": f["condition"],
        }
        if f.get("names"):
            check["ExpressionAttributeNames"] = dict(f["names"])
        if f.get("values"):
            check["ExpressionAttributeValues"] = {k: _attribute(k, v) for k, v in f["values"].items()}
        return {"ConditionCheck": check}


def _attribute(name: str, v: Any) -> dict[str, str]:
    # protocol.Fence: a JSON string is a DynamoDB string, a number a number.
    if isinstance(v, bool):
        raise ValueError(f"fence value {name} is a boolean, want a string or a number")
    if isinstance(v, str):
        return {"S": v}
    if isinstance(v, (int, float)):
        return {"N": str(v) if isinstance(v, int) or not v.is_integer() else str(int(v))}
    raise ValueError(f"fence value {name} is a {type(v).__name__}, want a string or a number")
