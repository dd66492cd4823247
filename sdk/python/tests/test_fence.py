"""Exactly-once effects: the handler's own DynamoDB transaction carries
task.fence(), so its write lands only while its attempt owns the task. A
worker partitioned past its lease (its heartbeats dropped) that commits
after the retry started is refused; the retry's commit lands."""

from __future__ import annotations

import random
import threading
import time
import unittest

import runledger
from support import StackTest, name, poll, quick_job

ROUNDS = 100
COMMITTED, FENCED, ALREADY = "committed", "fenced", "already"


def fence_job(job: str) -> dict:
    """A job whose partitioned attempts are retried within seconds, with
    room for a loaded machine: a 9 s heartbeat timeout leaves a heartbeat
    6 s to be answered before the fence stops a healthy attempt, and four
    attempts let a round absorb an attempt such a machine loses anyway."""
    return quick_job(job, retry={"max_attempts": 4, "initial_interval": "200ms", "max_interval": "1s", "jitter": "none"},
                     timeouts={"heartbeat": "9s", "queue": "5m", "cancel": "10s", "run": "5m"})


class FenceTest(StackTest):
    def setUp(self) -> None:
        self.ddb = self.local.dynamodb()
        self.addCleanup(self.ddb.close)
        # The user's own table, beside the ledger on the stack's DynamoDB:
        # one output row per round (run), written once.
        self.table = name("out")
        self.ddb.create_table(
            TableName=self.table, BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
        )
        self.addCleanup(self.ddb.delete_table, TableName=self.table)

    def commit(self, task: runledger.Task) -> str:
        """The handler's effect and the attempt's fence in one transaction.
        The effect is the round's output row, put only if the round has
        none: an attempt that committed and was then lost before its report
        arrived leaves its retry nothing to add. Answers COMMITTED, FENCED
        (the fence refused it: the attempt no longer owns its task) or
        ALREADY (the fence let it through, but an earlier attempt of the
        round had committed)."""
        try:
            self.ddb.transact_write_items(TransactItems=[
                task.fence(),
                {"Put": {"TableName": self.table, "ConditionExpression": "attribute_not_exists(pk)", "Item": {
                    "pk": {"S": task.run}, "sk": {"S": "output"}, "attempt": {"N": str(task.attempt)}}}},
            ])
            return COMMITTED
        except self.ddb.exceptions.TransactionCanceledException as e:
            codes = [r.get("Code") for r in e.response.get("CancellationReasons", [])]
            if codes[0] == "ConditionalCheckFailed":
                return FENCED
            self.assertEqual(codes[1], "ConditionalCheckFailed", codes)
            return ALREADY

    def rows(self) -> dict[str, list[int]]:
        """The attempts whose output rows each round holds."""
        out: dict[str, list[int]] = {}
        for page in self.ddb.get_paginator("scan").paginate(TableName=self.table, ConsistentRead=True):
            for item in page["Items"]:
                out.setdefault(item["pk"]["S"], []).append(int(item["attempt"]["N"]))
        return out

    def test_a_partitioned_attempt_cannot_commit_after_its_retry_started(self):
        committed: dict[int, str] = {}
        seen: dict[int, runledger.Task] = {}

        def handle(task: runledger.Task):
            seen[task.attempt] = task
            if task.attempt == 1:
                # The partition: no heartbeat gets through. Go on past the
                # lease, as a paused process would, until the retry runs.
                self.wait_attempt_started(task.run, 2, within=300)
            committed[task.attempt] = self.commit(task)

        w = self.start_worker(handle)
        w.drop_heartbeats = lambda task: task.attempt == 1
        job = self.create_job(fence_job(name("fence")))
        run = self.client.trigger_run(job)["run"]["id"]
        done = self.client.wait_run(run, 180)
        poll("the partitioned attempt's commit", lambda: 1 in committed, 60)
        self.assertEqual(done["run"]["execution_state"], "SUCCEEDED")
        last = done["tasks"][0]["attempt"]
        self.assertGreater(last, 1)
        self.assertEqual(committed[1], FENCED)
        self.assertEqual(committed[last], COMMITTED)
        self.assertEqual(self.rows().get(run), [last])
        # The worker told the partitioned handler to stop before the lease
        # it could not renew ended, and reported nothing for it.
        self.assertEqual(seen[1].stop_reason, "lease_lost")
        self.assertLess(seen[1].fencing_deadline, seen[1].lease_expires_at)
        self.assertEqual(done["tasks"][0]["attempts"][0]["state"], "LOST")

    def test_rounds_with_random_partitions_leave_one_row_each(self):
        rng = random.Random()
        seed = rng.randrange(1 << 30)
        rng.seed(seed)
        lock = threading.Lock()
        partitioned: dict[str, bool] = {}
        outcome: dict[tuple[str, int], str] = {}

        def is_partitioned(task: runledger.Task) -> bool:
            with lock:
                if task.run not in partitioned:
                    # The first round is always partitioned, so no draw
                    # leaves the fence untested.
                    partitioned[task.run] = not partitioned or rng.random() < 0.3
                return task.attempt == 1 and partitioned[task.run]

        def handle(task: runledger.Task):
            if is_partitioned(task):
                time.sleep(rng.random() * 0.5)
                self.wait_attempt_started(task.run, task.attempt + 1, within=300)
            result = self.commit(task)
            with lock:
                outcome[(task.run, task.attempt)] = result

        w = self.start_worker(handle, concurrency=32)
        w.drop_heartbeats = is_partitioned
        job = self.create_job(fence_job(name("rounds")))
        started = time.monotonic()
        # An idempotency key makes a trigger safe to repeat when a loaded
        # stack answers late.
        runs = [self.client.trigger_run(job, idempotency_key=f"round-{i}")["run"]["id"] for i in range(ROUNDS)]
        for run in runs:
            done = self.client.wait_run(run, 600)
            self.assertEqual(done["run"]["execution_state"], "SUCCEEDED", f"run {run} (seed {seed})")
        fenced = [r for r in runs if partitioned.get(r)]
        poll("every partitioned attempt's commit", lambda: all((r, 1) in outcome for r in fenced), 60)
        rows = self.rows()
        for run in runs:
            # Exactly one output row, and the attempt that wrote it is one
            # whose commit the fence let through.
            self.assertEqual(len(rows.get(run, [])), 1, f"run {run}: rows of attempts {rows.get(run)} (seed {seed})")
            self.assertEqual(outcome.get((run, rows[run][0])), COMMITTED, f"run {run} (seed {seed})")
        for run in fenced:
            self.assertEqual(outcome[(run, 1)], FENCED, f"partitioned attempt of {run} (seed {seed})")
            self.assertNotEqual(rows[run], [1])
        already = sum(1 for v in outcome.values() if v == ALREADY)
        print(f"\n{ROUNDS} rounds, {len(fenced)} partitioned, {already} retried after a commit whose report was lost, "
              f"in {time.monotonic() - started:.1f}s (seed {seed})")


if __name__ == "__main__":
    unittest.main()
