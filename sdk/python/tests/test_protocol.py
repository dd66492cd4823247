"""The SDK's reading and writing of the wire, with no stack: durations,
times, event ids, the fence's shape, and how a handler's end is reported."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import unittest
from pathlib import Path
from unittest import mock

import runledger
from runledger import protocol
from runledger.runner import check_envelope, classify, failure_reason
from runledger.task import CANCEL_REQUESTED, LEASE_LOST, RUN_TIMEOUT, Task, _Control, _LeaseFence

LOG = logging.getLogger("runledger.test")


def make_task(**env) -> Task:
    base = {"run": "01RUN", "task": "main", "attempt": 2, "token": "tok", "pool": "default"}
    base.update(env)
    return Task(base, "w@1", LOG, _Control(), _LeaseFence(1.0))


class DurationTest(unittest.TestCase):
    def test_go_durations(self):
        for s, want in [("90s", 90), ("1m30s", 90), ("1.5h", 5400), ("200ms", 0.2), ("0", 0), ("", 0), ("1h2m3s", 3723), ("-2s", -2)]:
            with self.subTest(s=s):
                self.assertAlmostEqual(protocol.parse_duration(s), want)

    def test_bad_durations(self):
        for s in ["90", "s", "1x", "1m 30s"]:
            with self.subTest(s=s), self.assertRaises(ValueError):
                protocol.parse_duration(s)


class TimeTest(unittest.TestCase):
    def test_round_trip_in_the_api_format(self):
        s = protocol.format_time(1767225600.123456)
        self.assertEqual(s, "2026-01-01T00:00:00.123Z")
        self.assertAlmostEqual(protocol.parse_time(s), 1767225600.123, places=3)
        self.assertAlmostEqual(protocol.parse_time("2026-01-01T01:00:00.123+01:00"), 1767225600.123, places=3)
        self.assertIsNone(protocol.parse_time(None))


class EventIDTest(unittest.TestCase):
    def test_ids_are_ulids_the_api_accepts(self):
        ids = {protocol.new_event_id() for _ in range(1000)}
        self.assertEqual(len(ids), 1000)
        for i in list(ids)[:20]:
            self.assertEqual(len(i), 26)
            protocol.check_event_id(i)

    def test_ids_sort_by_time(self):
        self.assertLess(protocol.new_event_id(1000.0), protocol.new_event_id(2000.0))

    def test_refused_ids(self):
        for bad in ["", "deps", "a:b", "x" * 129]:
            with self.subTest(bad=bad), self.assertRaises(protocol.FieldError):
                protocol.check_event_id(bad)


class FenceTest(unittest.TestCase):
    def test_fence_is_a_boto3_condition_check(self):
        t = make_task(fence={
            "table": "ledger", "key": {"pk": "RUN#01RUN", "sk": "TASK#main"},
            "condition": "#a = :a AND #s IN (:s0, :s1)", "names": {"#a": "attempt", "#s": "state"},
            "values": {":a": 2, ":s0": "RUNNING", ":s1": "CANCELLING"},
        })
        self.assertEqual(t.fence(), {"ConditionCheck": {
            "TableName": "ledger",
            "Key": {"pk": {"S": "RUN#01RUN"}, "sk": {"S": "TASK#main"}},
            "ConditionExpression": "#a = :a AND #s IN (:s0, :s1)",
            "ExpressionAttributeNames": {"#a": "attempt", "#s": "state"},
            "ExpressionAttributeValues": {":a": {"N": "2"}, ":s0": {"S": "RUNNING"}, ":s1": {"S": "CANCELLING"}},
        }})

    def test_no_fence_from_an_in_memory_ledger(self):
        with self.assertRaisesRegex(runledger.FenceUnavailable, "carries none"):
            make_task().fence()

    def test_lease_fence_stops_a_margin_before_the_lease(self):
        f = _LeaseFence(1.0)
        f.renew(100.0, 104.0)
        self.assertEqual(f.lease_end, 103.0)  # send time + 3 beats is earlier
        self.assertEqual(f.deadline, 102.0)
        f = _LeaseFence(10.0)
        f.renew(100.0, 110.0)
        self.assertEqual(f.deadline, 105.0)  # the margin is at most 5 s


class OutputTest(unittest.TestCase):
    def test_limits(self):
        t = make_task()
        t.set_output({"rows": 3})
        self.assertEqual(t._outputs()[0], b'{"rows":3}')
        with self.assertRaises(protocol.FieldError) as e:
            t.set_output("x" * protocol.MAX_OUTPUT_BYTES)
        self.assertTrue(e.exception.too_large)
        with self.assertRaises(protocol.FieldError):
            t.set_output_ref("bad\nref")
        with self.assertRaises(ValueError):
            t.set_output(float("nan"))

    def test_reason_keeps_the_tail(self):
        r = protocol.clip_reason("é" * 3000)
        self.assertLessEqual(len(r.encode()), protocol.MAX_REASON_BYTES)
        self.assertTrue(r.endswith("é"))


class ClassifyTest(unittest.TestCase):
    def test_ends(self):
        cases = [
            ("success", None, None, (protocol.OUTCOME_SUCCEEDED, "", True, None)),
            ("plain error", ValueError("x"), None, (protocol.OUTCOME_FAILED, "error", True, None)),
            ("task error", runledger.TaskError("x", category="bad_input", exit_code=3), None,
             (protocol.OUTCOME_FAILED, "bad_input", True, 3)),
            ("permanent", runledger.permanent(ValueError("x")), None, (protocol.OUTCOME_FAILED, "error", False, None)),
            ("bad category", runledger.TaskError("x", category="Bad-Category"), None, (protocol.OUTCOME_FAILED, "error", True, None)),
            ("cancel acknowledged", runledger.Cancelled(CANCEL_REQUESTED), CANCEL_REQUESTED,
             (protocol.OUTCOME_CANCELLED, "cancelled", False, None)),
            ("success wins over a cancel", None, CANCEL_REQUESTED, (protocol.OUTCOME_SUCCEEDED, "", True, None)),
            ("timeout", runledger.Stopped(RUN_TIMEOUT), RUN_TIMEOUT, (protocol.OUTCOME_FAILED, "timeout", True, None)),
            ("uncategorised error at a timeout", ValueError("x"), RUN_TIMEOUT, (protocol.OUTCOME_FAILED, "timeout", True, None)),
        ]
        for label, err, cause, want in cases:
            with self.subTest(label):
                self.assertEqual(classify(err, cause, LOG), want)

    def test_lost_lease_reports_nothing(self):
        self.assertIsNone(classify(None, LEASE_LOST, LOG))
        self.assertIsNone(classify(ValueError("x"), LEASE_LOST, LOG))

    def test_reason(self):
        self.assertEqual(failure_reason(ValueError("disk full"), None, "error"), "disk full")
        self.assertEqual(failure_reason(ValueError("slow"), RUN_TIMEOUT, "timeout"), "run timeout passed: slow")
        self.assertEqual(failure_reason(runledger.TaskError("x", reason="tail"), None, "error"), "tail")


class CheckTest(unittest.TestCase):
    def test_stop_signals(self):
        t = make_task()
        t.check()
        self.assertFalse(t.wait(0))
        t._control.stop(CANCEL_REQUESTED)
        self.assertTrue(t.cancelled)
        self.assertTrue(t.wait(0))
        self.assertEqual(t.stop_reason, "cancel_requested")
        with self.assertRaises(runledger.Cancelled):
            t.check()
        # The first cause stands; a later one does not replace it.
        t._control.stop(LEASE_LOST)
        self.assertEqual(t.stop_reason, "cancel_requested")

    def test_envelope_checks(self):
        ok = {"run": "r", "task": "t", "attempt": 1, "token": "x", "heartbeat_interval": "1s"}
        check_envelope(ok)
        for bad in [{**ok, "attempt": 0}, {**ok, "token": ""}, {**ok, "heartbeat_interval": "soon"}, []]:
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                check_envelope(bad)


class ConfigTest(unittest.TestCase):
    def test_the_local_file_is_found_upward_and_its_key_kept_for_its_url(self):
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / ".runledger" / "local.json"
            p.parent.mkdir()
            p.write_text(json.dumps({"api_url": "http://127.0.0.1:9", "api_key": "k", "queues": {"default": "q"}}))
            sub = Path(d) / "a" / "b"
            sub.mkdir(parents=True)
            env = {k: v for k, v in os.environ.items() if not k.startswith("RUNLEDGER_")}
            with mock.patch.dict(os.environ, env, clear=True):
                local = runledger.find_local(sub)
                self.assertEqual(local.queues, {"default": "q"})
                from runledger.config import resolve

                s = resolve(local=local)
                self.assertEqual((s.api_url, s.api_key), ("http://127.0.0.1:9", "k"))
                # Another URL never gets the file's key.
                s = resolve(api_url="http://127.0.0.1:10", local=local)
                self.assertIsNone(s.api_key)

    def test_no_api_url(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNLEDGER_")}
        with tempfile.TemporaryDirectory() as d, mock.patch.dict(os.environ, env, clear=True), \
                mock.patch("os.getcwd", return_value=d):
            from runledger.config import resolve

            with self.assertRaisesRegex(runledger.ConfigError, "no API URL"):
                resolve()


if __name__ == "__main__":
    unittest.main()
