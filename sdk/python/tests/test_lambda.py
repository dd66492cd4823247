"""The Lambda executor's helper: an invocation's event is the attempt's
envelope; the helper claims it, runs the handler and completes it over
HTTP. Here the envelope is taken from the pool's queue, as the scheduler
would have sent it to the function."""

from __future__ import annotations

import json
import time
import unittest

import runledger
from runledger.lambda_handler import handle_invoke
from runledger.transport import SQS
from runledger.config import LOCAL_CREDENTIALS
from support import POOL, StackTest, name, poll, quick_job


class FakeContext:
    """What the helper reads of Lambda's context object."""

    def __init__(self, seconds: float):
        self.end = time.time() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int((self.end - time.time()) * 1000)


class LambdaTest(StackTest):
    def envelope_of(self, run: str) -> dict:
        sqs = SQS(region=self.local.region, endpoint=self.local.sqs_endpoint, credentials=LOCAL_CREDENTIALS)
        queue = self.local.queues[POOL]

        def take() -> dict | None:
            for m in sqs.receive(queue, 10, 1, 30):
                env = json.loads(m["Body"])
                if env.get("run") == run:
                    sqs.delete(queue, m["ReceiptHandle"])
                    return env
                sqs.change_visibility(queue, m["ReceiptHandle"], 0)
            return None

        return poll(f"the envelope of {run}", take, 60, 0)

    def test_an_invocation_runs_and_completes_its_attempt(self):
        invoke = handle_invoke(lambda task: {"sum": sum(task.params["xs"])}, api_url=self.local.api_url, name="fn")
        job = self.create_job(quick_job(name("lambda")))
        run = self.client.trigger_run(job, params={"xs": [1, 2, 3]})["run"]["id"]
        env = self.envelope_of(run)
        self.assertEqual(invoke(env, FakeContext(60)), {"attempt": f"{run}/main#1", "result": "applied", "outcome": "succeeded"})
        done = self.client.wait_run(run, 30)
        self.assertEqual(done["run"]["execution_state"], "SUCCEEDED")
        self.assertEqual(done["tasks"][0]["output"], {"sum": 6})
        self.assertTrue(done["tasks"][0]["attempts"][0]["worker_id"].startswith("fn@"))
        # The same event again (Lambda delivers at least once): the claim
        # is refused and the handler does not run.
        ran = []
        again = handle_invoke(lambda task: ran.append(task), api_url=self.local.api_url)
        self.assertEqual(again(env, FakeContext(60))["result"], "not_claimed")
        self.assertEqual(ran, [])

    def test_the_handler_is_stopped_before_the_invocation_deadline(self):
        def slow(task: runledger.Task):
            task.wait(60)
            task.check()

        invoke = handle_invoke(slow, api_url=self.local.api_url, deadline_reserve=5)
        job = self.create_job(quick_job(name("deadline"), retry={"max_attempts": 1}))
        run = self.client.trigger_run(job)["run"]["id"]
        out = invoke(self.envelope_of(run), FakeContext(7))
        self.assertEqual((out["result"], out["outcome"]), ("applied", "failed"))
        attempt = self.client.wait_run(run, 30)["tasks"][0]["attempts"][0]
        self.assertEqual(attempt["error_category"], "worker_deadline")


if __name__ == "__main__":
    unittest.main()
