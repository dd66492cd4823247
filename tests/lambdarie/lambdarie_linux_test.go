package lambdarie

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// TestRunThroughTheFunctions creates a job and triggers a run through the
// api function (HTTP API events with IAM and JWT authorizer contexts), and
// finishes it through the functions alone: the worker function fed the
// pool queue's batches (claiming and heartbeating through the api function
// behind a local gateway), the events function fed the events and delay
// queues' batches, the ticker and reconciler fed scheduled events. The
// run must end SUCCEEDED, its end published to the stack's event bus.
func TestRunThroughTheFunctions(t *testing.T) {
	h := newHarness(t)
	fns := map[string]*function{}
	for _, name := range functionNames {
		fns[name] = h.start(t, name, h.environment(name))
	}
	api := fns["api"]
	h.serve(api)

	created := api.http(t, httpFixture(t, "http-api-iam-create-job.json"))
	if created.StatusCode != http.StatusCreated {
		t.Fatalf("create the job: %d %s", created.StatusCode, created.Body)
	}
	triggered := api.http(t, httpFixture(t, "http-api-iam-trigger-run.json"))
	var first protocol.RunDetail
	if err := json.Unmarshal([]byte(triggered.Body), &first); err != nil || triggered.StatusCode != http.StatusCreated || first.Run.ID == "" {
		t.Fatalf("trigger a run: %d %s (%v)", triggered.StatusCode, triggered.Body, err)
	}
	run := first.Run

	pool := h.locals.Pools[h.environment("worker")["RUNLEDGER_POOL"]]
	if pool == "" {
		t.Fatalf("the worker's pool has no queue: %v", h.locals.Pools)
	}
	envelopes := map[string]string{} // task -> the envelope the worker got
	ticks := 0
	var detail protocol.RunDetail
	deadline := time.Now().Add(4 * time.Minute)
	for wait := time.Duration(0); ; {
		moved := 0
		for _, body := range h.deliver(fns["worker"], pool, 1, 0).bodies {
			env, err := protocol.ParseEnvelope(body)
			if err != nil {
				t.Fatalf("the pool queue holds no envelope: %v: %s", err, body)
			}
			envelopes[env.Task] = body
			moved++
		}
		moved += len(h.deliver(fns["events"], h.locals.EventsQueue, 10, wait).bodies)
		moved += len(h.deliver(fns["events"], h.locals.DelayQueue, 10, 0).bodies)
		if moved == 0 {
			// Nothing queued: the schedules' turn (due dispatches and
			// retries, lease and queue timeouts).
			fns["ticker"].invokeOK(t, h.scheduled("ticker"), nil)
			fns["reconciler"].invokeOK(t, h.scheduled("reconciler"), nil)
			ticks++
		}
		detail = getRun(t, api, run.ID)
		if st := detail.Run.Status; st == statemodel.StatusSucceeded || st == statemodel.StatusFailed ||
			st == statemodel.StatusCancelled || time.Now().After(deadline) {
			break
		}
		// Wait on the events queue when nothing moved, rather than spin.
		wait = 0
		if moved == 0 {
			wait = time.Second
		}
	}
	if detail.Run.Status != statemodel.StatusSucceeded {
		t.Fatalf("run %s: status %s, want SUCCEEDED: %+v", run.ID, detail.Run.Status, detail)
	}
	for _, task := range detail.Tasks {
		if task.Status != statemodel.StatusSucceeded || len(task.Attempts) != 1 {
			t.Errorf("task %s: status %s with %d attempts, want SUCCEEDED at its first", task.Task, task.Status, len(task.Attempts))
			continue
		}
		if a := task.Attempts[0]; a.Executor != "queue" || !strings.HasPrefix(a.WorkerID, "runledger-worker") {
			t.Errorf("task %s: executor %q, worker %q; want the queue and the worker function", task.Task, a.Executor, a.WorkerID)
		}
		if envelopes[task.Task] == "" {
			t.Errorf("task %s: the worker function got no envelope of it", task.Task)
		}
	}
	if len(detail.Tasks) != 2 {
		t.Errorf("run %s has %d tasks, want extract and load", run.ID, len(detail.Tasks))
	}

	// The schedules ran at least once, whether or not the run needed them.
	if ticks == 0 {
		fns["ticker"].invokeOK(t, h.scheduled("ticker"), nil)
		fns["reconciler"].invokeOK(t, h.scheduled("reconciler"), nil)
	}
	fns["ticker"].waitOutput(t, `"function":"ticker"`, time.Minute)
	fns["reconciler"].waitOutput(t, `"function":"reconciler"`, time.Minute)

	// The run's end went to the stack's event bus.
	published := false
	for _, e := range h.bus.received() {
		if e.DetailType == string(protocol.NoticeRunSucceeded) && strings.Contains(e.Detail, run.ID) {
			published = e.EventBusName == h.locals.EventBus && e.Source == protocol.NoticeSource
		}
	}
	if !published {
		t.Errorf("no run.succeeded of %s on bus %s; the bus got %+v", run.ID, h.locals.EventBus, h.bus.received())
	}

	// Lambda's on-failure record for an attempt that ran from the queue
	// is a forgery or a mix-up: the events function refuses it, and the
	// run stays as it was.
	forged := onFailureRecord(t, envelopes["load"])
	var resp events.SQSEventResponse
	msg := sqstypes.Message{MessageId: aws.String("forged-on-failure"), ReceiptHandle: aws.String("forged"), Body: aws.String(forged)}
	fns["events"].invokeOK(t, h.sqsEvent(h.locals.EventsQueue, []sqstypes.Message{msg}), &resp)
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("the forged record was reported for redelivery: %+v", resp)
	}
	fns["events"].waitOutput(t, `"msg":"event refused","message_id":"forged-on-failure"`, time.Minute)
	if out := fns["events"].out.String(); !strings.Contains(out, "invocation c9e1b0a4-5d3f-4e82-a7b6-0f2d9c8e1a35: attempt "+run.ID+"/load#1 was started as") {
		t.Errorf("the events function refused the forged record for another reason:\n%s", out)
	}
	after := getRun(t, api, run.ID)
	if after.Run.Status != statemodel.StatusSucceeded {
		t.Errorf("after the forged record run %s is %s, want SUCCEEDED", run.ID, after.Run.Status)
	}
	for _, task := range after.Tasks {
		if len(task.Attempts) != 1 || task.Status != statemodel.StatusSucceeded {
			t.Errorf("after the forged record task %s is %s with %d attempts", task.Task, task.Status, len(task.Attempts))
		}
	}
}

// TestMissingEnvironmentFailsInit starts each function without a variable
// its template gives it and it cannot do without: the function must fail
// at init, and its output must say which variable.
func TestMissingEnvironmentFailsInit(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		function, variable, line string
		event                    any
	}{
		{"api", "RUNLEDGER_TABLE", `"error":"environment: RUNLEDGER_TABLE is empty"`, httpFixture(t, "http-api-iam-create-job.json")},
		{"events", "RUNLEDGER_TABLE", `"error":"environment: RUNLEDGER_TABLE is empty"`, events.SQSEvent{}},
		{"ticker", "RUNLEDGER_TABLE", `"error":"environment: RUNLEDGER_TABLE is empty"`, h.scheduled("ticker")},
		{"reconciler", "RUNLEDGER_TABLE", `"error":"environment: RUNLEDGER_TABLE is empty"`, h.scheduled("reconciler")},
		{"worker", "RUNLEDGER_API_URL", `"err":"environment variable RUNLEDGER_API_URL is empty"`, events.SQSEvent{}},
	}
	for _, c := range cases {
		vars := h.environment(c.function)
		t.Run(c.function, func(t *testing.T) {
			t.Parallel() // each init runs under emulation: the waits overlap
			if vars[c.variable] == "" {
				t.Fatalf("the template gives %s no %s", c.function, c.variable)
			}
			delete(vars, c.variable)
			fn := h.start(t, c.function, vars)
			status, body, err := fn.invoke(t.Context(), c.event)
			if err != nil {
				t.Fatal(err)
			}
			if status == http.StatusOK && !strings.Contains(string(body), "errorType") {
				t.Errorf("invoke without %s: status %d, %s; want a failed init", c.variable, status, body)
			}
			fn.waitOutput(t, c.line, time.Minute)
		})
	}
}

// getRun reads a run through the api function with a JWT-authorized
// event (the dashboard's).
func getRun(t *testing.T, api *function, id string) protocol.RunDetail {
	t.Helper()
	ev := httpFixture(t, "http-api-jwt-get-run.json")
	ev.RawPath = strings.ReplaceAll(ev.RawPath, "{run}", id)
	ev.RequestContext.HTTP.Path = ev.RawPath
	ev.PathParameters["proxy"] = id
	resp := api.http(t, ev)
	var d protocol.RunDetail
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("get run %s: %d %s", id, resp.StatusCode, resp.Body)
	}
	if err := json.Unmarshal([]byte(resp.Body), &d); err != nil {
		t.Fatalf("get run %s: %v: %s", id, err, resp.Body)
	}
	return d
}

// onFailureRecord is Lambda's on-failure destination record
// (testdata/lambda-on-failure.json) for an invocation whose event was
// envelope.
func onFailureRecord(t *testing.T, envelope string) string {
	t.Helper()
	if envelope == "" {
		t.Fatal("no envelope to build an on-failure record of")
	}
	var rec map[string]json.RawMessage
	if err := json.Unmarshal(fixture(t, "lambda-on-failure.json"), &rec); err != nil {
		t.Fatal(err)
	}
	rec["requestPayload"] = json.RawMessage(envelope)
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
