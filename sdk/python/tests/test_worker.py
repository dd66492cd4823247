"""The worker and the client against a local stack: a job end to end,
inputs, retries, cancel, refused claims and a stale completion."""

from __future__ import annotations

import json
import threading
import unittest

import runledger
from support import POOL, StackTest, name, poll, quick_job


class WorkerTest(StackTest):
    def test_a_job_runs_end_to_end(self):
        seen: list[runledger.Task] = []

        def handle(task: runledger.Task):
            seen.append(task)
            return {"double": task.payload["n"] * 2, "day": task.params["day"]}

        w = self.start_worker(handle)
        job = self.create_job(quick_job(name("e2e"), payload={"n": 21}))
        run = self.client.trigger_run(job, params={"day": "2026-03-01"})["run"]["id"]
        done = self.client.wait_run(run, 60)
        self.assertEqual(done["run"]["execution_state"], "SUCCEEDED")
        self.assertEqual(done["tasks"][0]["output"], {"double": 42, "day": "2026-03-01"})
        t = seen[0]
        self.assertEqual((t.job, t.run, t.task, t.attempt, t.pool), (job, run, "main", 1, POOL))
        self.assertTrue(t.worker_id.startswith("pytest@"))
        self.assertIsNotNone(t.logical_time)
        self.assertEqual(done["tasks"][0]["attempts"][0]["worker_id"], w.id)
        self.assertEqual(w.stats["report_applied"], 1)

    def test_an_unreachable_complete_route_leaves_the_report_on_the_events_queue(self):
        from runledger.attempts import TransientError

        reports: list[str] = []
        w = self.start_worker(lambda task: {"via": "events queue"}, on_report=lambda ref, result, state: reports.append(result))

        def unreachable(*args, **kwargs):
            raise TransientError("complete: connection refused (the test cut the route)")

        w.api.complete = unreachable
        job = self.create_job(quick_job(name("fallback")))
        run = self.client.trigger_run(job)["run"]["id"]
        done = self.client.wait_run(run, 60)
        self.assertEqual(done["run"]["execution_state"], "SUCCEEDED")
        self.assertEqual(done["tasks"][0]["output"], {"via": "events queue"})
        self.assertEqual(reports, [runledger.REPORT_QUEUED])

    def test_a_task_reads_its_upstream_output(self):
        def handle(task: runledger.Task):
            if task.task == "extract":
                return {"n": 41}
            return {"n": task.inputs["extract"]["n"] + 1}

        self.start_worker(handle)
        job = self.create_job(quick_job(name("inputs"), tasks=[
            {"id": "extract"}, {"id": "load", "depends_on": ["extract"]}]))
        run = self.client.trigger_run(job)["run"]["id"]
        done = self.client.wait_run(run, 60)
        self.assertEqual(done["run"]["execution_state"], "SUCCEEDED")
        self.assertEqual(self.task_of(run, "load")["output"], {"n": 42})

    def test_a_failing_handler_is_retried(self):
        def handle(task: runledger.Task):
            if task.payload == "permanent":
                raise runledger.permanent(ValueError("the input will never parse"))
            if task.attempt == 1:
                raise runledger.TaskError("upstream file not there yet", category="input_missing", exit_code=3)
            return "ok"

        self.start_worker(handle)
        job = self.create_job(quick_job(name("retry"), payload="flaky"))
        run = self.client.trigger_run(job)["run"]["id"]
        done = self.client.wait_run(run, 60)
        self.assertEqual(done["run"]["execution_state"], "SUCCEEDED")
        first, second = done["tasks"][0]["attempts"]
        self.assertEqual((first["state"], first["error_category"], first["exit_code"]), ("FAILED", "input_missing", 3))
        self.assertEqual(second["state"], "SUCCEEDED")

        # retryable false: no second attempt, though the policy allows one.
        job = self.create_job(quick_job(name("permanent"), payload="permanent"))
        run = self.client.trigger_run(job)["run"]["id"]
        done = self.client.wait_run(run, 60)
        self.assertEqual(done["run"]["execution_state"], "FAILED")
        self.assertEqual(len(done["tasks"][0]["attempts"]), 1)

    def test_the_handler_sees_a_cancel(self):
        started = threading.Event()
        saw: dict[str, object] = {}

        def handle(task: runledger.Task):
            started.set()
            while not task.wait(5):
                pass
            saw["cancelled"], saw["reason"] = task.cancelled, task.stop_reason
            task.check()  # raises Cancelled: the acknowledgement

        self.start_worker(handle)
        job = self.create_job(quick_job(name("cancel")))
        run = self.client.trigger_run(job)["run"]["id"]
        poll("the handler to start", started.is_set, 60)
        self.client.cancel_run(run, reason="test")
        done = self.client.wait_run(run, 60)
        self.assertEqual(done["run"]["execution_state"], "CANCELLED")
        self.assertEqual(saw, {"cancelled": True, "reason": "cancel_requested"})
        self.assertEqual(done["tasks"][0]["attempts"][0]["state"], "CANCELLED")

    def test_a_refused_claim_runs_nothing_and_drops_the_message(self):
        calls: list[str] = []
        envelopes: list[dict] = []

        def handle(task: runledger.Task):
            calls.append(task.ref)
            envelopes.append(task.envelope)

        w = self.start_worker(handle)
        job = self.create_job(quick_job(name("refused")))
        run = self.client.trigger_run(job)["run"]["id"]
        self.assertEqual(self.client.wait_run(run, 60)["run"]["execution_state"], "SUCCEEDED")
        env = {k: v for k, v in envelopes[0].items() if k not in ("fence", "inputs")}
        # The same envelope again (a duplicate delivery of a finished
        # attempt: 409) and one whose token is not the attempt's (401).
        w.sqs.send(w.queue_url, json.dumps(env))
        w.sqs.send(w.queue_url, json.dumps({**env, "token": "forged"}))
        poll("both claims to be refused", lambda: w.stats["claims_refused"] >= 2, 60)
        self.assertEqual(calls, [f"{run}/main#1"])

        def queue_empty() -> bool:
            a = w.sqs.attributes(w.queue_url, ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])
            return a.get("ApproximateNumberOfMessages") == "0" and a.get("ApproximateNumberOfMessagesNotVisible") == "0"

        poll("the refused messages to be deleted", queue_empty, 30, 0.2)

    def test_a_stale_completion_is_reported_not_repeated(self):
        reports: list[tuple[str, str]] = []
        retry_started, release = threading.Event(), threading.Event()
        first: dict[str, runledger.Task] = {}

        def handle(task: runledger.Task):
            if task.attempt == 1:
                first["task"] = task
                self.wait_attempt_started(task.run, 2)
                retry_started.set()
                return None
            release.wait(60)
            return {"by": task.attempt}

        w = self.start_worker(handle, on_report=lambda ref, result, state: reports.append((ref, result)))
        w.drop_heartbeats = lambda task: task.attempt == 1
        job = self.create_job(quick_job(name("stale")))
        run = self.client.trigger_run(job)["run"]["id"]
        poll("the retry to start", retry_started.is_set, 90)
        t1 = first["task"]
        self.assertEqual(t1.stop_reason, "lease_lost")

        # The partitioned attempt's completion, offered late: the API
        # records it as a late event and the worker neither repeats it nor
        # sends it to the events queue.
        calls = {"complete": 0, "queue": 0}
        complete, send = w.api.complete, w.sqs.send

        def counted_complete(*a, **kw):
            calls["complete"] += 1
            return complete(*a, **kw)

        def counted_send(*a, **kw):
            calls["queue"] += 1
            return send(*a, **kw)

        w.api.complete, w.sqs.send = counted_complete, counted_send
        from runledger.runner import Completion
        from runledger import protocol

        event_id = protocol.new_event_id()
        result = w.report(Completion({"run": run, "task": "main", "attempt": 1, "event_id": event_id,
                                      "outcome": "succeeded"}, t1.token))
        self.assertEqual(result, runledger.REPORT_STALE)
        self.assertEqual(calls, {"complete": 1, "queue": 0})
        self.assertIn((f"{run}/main#1", runledger.REPORT_STALE), reports)
        late = self.task_of(run)["attempts"][0]["late_events"]
        self.assertIn(event_id, [e["event_id"] for e in late])
        release.set()
        done = self.client.wait_run(run, 60)
        self.assertEqual(done["run"]["execution_state"], "SUCCEEDED")
        self.assertEqual(done["tasks"][0]["output"], {"by": 2})

    def test_client_errors_carry_the_code(self):
        with self.assertRaises(runledger.APIError) as e:
            self.client.get_run("no-such-run")
        self.assertEqual((e.exception.status, e.exception.code), (404, "not_found"))
        with self.assertRaises(runledger.APIError) as e:
            self.client.create_job({"name": "Bad Name"})
        self.assertEqual((e.exception.status, e.exception.code), (422, "invalid_field"))
        self.assertTrue(e.exception.message)
        job = self.create_job(quick_job(name("client")))
        self.assertEqual(self.client.get_job(job)["name"], job)
        self.assertIn(job, [j["name"] for j in self.client.list_jobs(limit=500)["jobs"]])
        self.client.delete_job(job)
        with self.assertRaises(runledger.APIError) as e:
            self.client.get_job(job)
        self.assertEqual(e.exception.code, "not_found")


if __name__ == "__main__":
    unittest.main()
