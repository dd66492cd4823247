"""What the suite's tests share: the local stack they run against (the
file RUNLEDGER_LOCAL names, else .runledger/local.json found upward from
the working directory), short-timeout job definitions, and polling with a
deadline (no test sleeps to wait for a state)."""

from __future__ import annotations

import logging
import os
import secrets
import time
import unittest
from typing import Any, Callable, TypeVar

import runledger

T = TypeVar("T")

# The pool the suite's workers serve: every local stack has it.
POOL = "default"

if os.environ.get("RUNLEDGER_SDK_LOG"):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(levelname)s %(message)s")


def local_stack() -> runledger.LocalStack | None:
    try:
        return runledger.find_local()
    except runledger.ConfigError:
        return None


def name(prefix: str) -> str:
    """A job (or table) name no other test uses."""
    return f"py-{prefix}-{secrets.token_hex(4)}"


def quick_job(job: str, **over: Any) -> dict[str, Any]:
    """A one-task job whose timeouts are short enough that a lost lease, a
    retry and a cancel happen within seconds. The heartbeat timeout (6 s: a
    beat every 2 s, and the fence stops a handler 2 s before its lease
    ends) leaves a heartbeat 4 s to be answered, which a loaded machine
    needs."""
    d: dict[str, Any] = {
        "name": job,
        "pool": POOL,
        "retry": {"max_attempts": 2, "initial_interval": "200ms", "max_interval": "1s", "jitter": "none"},
        "timeouts": {"heartbeat": "6s", "queue": "2m", "cancel": "10s", "run": "2m"},
        "evidence_window": "1s",
    }
    d.update(over)
    return d


def poll(what: str, f: Callable[[], T | None], within: float = 60.0, every: float = 0.1) -> T:
    """Calls f until it answers something other than None or False, for up
    to within seconds; fails naming what it waited for."""
    give_up = time.monotonic() + within
    while True:
        v = f()
        if v is not None and v is not False:
            return v
        if time.monotonic() >= give_up:
            raise AssertionError(f"waited {within:.0f}s for {what}")
        time.sleep(every)


class StackTest(unittest.TestCase):
    """A test against the local stack, with a client and workers that stop
    when the test ends."""

    local: runledger.LocalStack
    client: runledger.Client

    @classmethod
    def setUpClass(cls) -> None:
        local = local_stack()
        if local is None:
            raise unittest.SkipTest("no local stack: start one with `make run`, or name its local.json in RUNLEDGER_LOCAL")
        cls.local = local
        cls.client = runledger.Client(local=local)

    def start_worker(self, handler: Callable[[runledger.Task], Any], concurrency: int = 4, **kw: Any) -> runledger.Worker:
        kw.setdefault("poll_wait", 1.0)
        kw.setdefault("shutdown_grace", 5.0)
        kw.setdefault("stop_timeout", 1.0)
        w = runledger.Worker(POOL, handler, concurrency, local=self.local, name="pytest", **kw)
        w.start()
        self.addCleanup(w.stop)
        return w

    def create_job(self, definition: dict[str, Any]) -> str:
        """Creates the job; when the test ends, its unfinished runs are
        cancelled, so that no retry of theirs reaches the next test's
        worker on the shared pool."""
        self.client.create_job(definition)
        self.addCleanup(self.cancel_unfinished, definition["name"])
        return definition["name"]

    def cancel_unfinished(self, job: str) -> None:
        for run in self.client.all_runs(job=job):
            if run.get("execution_state") not in runledger.client.FINISHED:
                try:
                    self.client.cancel_run(run["id"], reason="the test ended")
                except runledger.APIError as e:
                    if e.code != "illegal_transition":
                        raise

    def task_of(self, run: str, task: str = "main") -> dict[str, Any]:
        for t in self.client.get_run(run)["tasks"]:
            if t["task"] == task:
                return t
        raise AssertionError(f"run {run} has no task {task}")

    def wait_attempt_started(self, run: str, attempt: int, task: str = "main", within: float = 60.0) -> dict[str, Any]:
        """Polls until the task's attempt has been claimed (started_at set)."""
        def started() -> dict[str, Any] | None:
            for a in self.task_of(run, task).get("attempts") or []:
                if a["n"] == attempt and a.get("started_at"):
                    return a
            return None

        # Each poll is a read of the whole run: once a second keeps dozens of
        # waiting handlers from loading the stack they wait on.
        return poll(f"attempt {attempt} of {run}/{task} to start", started, within, 1.0)
