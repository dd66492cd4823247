package tests

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/runledger/runledger/shared/app"
	"github.com/runledger/runledger/shared/awscalls"
	"github.com/runledger/runledger/shared/ecsexec"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/wire"
)

// sdkCallsFile holds, per Lambda function, the AWS calls it made in
// TestSDKCallsOfEachFunction; infra's TestRolesAllowEveryRecordedCall
// checks each against the function's role in the synthesized template.
const sdkCallsFile = "testdata/sdk-calls.json"

var updateSDKCalls = flag.Bool("update-sdk-calls", false, "rewrite "+sdkCallsFile+" from TestSDKCallsOfEachFunction")

// TestSDKCallsOfEachFunction drives each scheduler function's code path
// (its own app, wired from the environment the CDK stack gives it, as
// app.Boot wires it, with the ecs executor allowed and the event bus set)
// on DynamoDB Local and the SQS emulator, ECS and EventBridge answered by
// fakes, and records every SDK call it makes with an SDK middleware: the
// api creates, triggers, lists and cancels; events handles the delayed
// timer of that cancel once its deadline passed; the ticker and the
// reconciler run their passes past a lease's end and a cancel's deadline.
// The calls must equal sdkCallsFile (go test ./tests -run
// TestSDKCallsOfEachFunction -update-sdk-calls rewrites it).
func TestSDKCallsOfEachFunction(t *testing.T) {
	clock := runningClock()
	name := fmt.Sprintf("iam%d", os.Getpid())
	base, err := app.New(t.Context(), app.Config{Clients: env, Provision: &app.Provision{Name: name, Pools: []string{"default"}}})
	if err != nil {
		t.Fatal(err)
	}
	bc := base.Config
	names := awscalls.Names{Table: bc.Table, Bus: "runledger-bus", Queues: map[string]string{
		bc.Pools["default"]: "queue/pool", bc.EventsQueueURL: "queue/events", bc.DelayQueueURL: "queue/delay",
	}}
	ecsFake := newRecordingECS(t)
	busFake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		io.WriteString(w, `{"FailedEntryCount":0,"Entries":[{"EventId":"e1"}]}`)
	}))
	t.Cleanup(busFake.Close)

	var apiHandler http.Handler
	apiSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { apiHandler.ServeHTTP(w, r) }))
	t.Cleanup(apiSrv.Close)

	pools, _ := json.Marshal(bc.Pools)
	// The environment of each function in the CDK stack (infra/scheduler).
	common := map[string]string{
		"RUNLEDGER_TABLE": bc.Table, "RUNLEDGER_DELAY_QUEUE_URL": bc.DelayQueueURL, "RUNLEDGER_POOL_QUEUES": string(pools),
		"RUNLEDGER_EVENT_BUS": names.Bus, "RUNLEDGER_API_URL": apiSrv.URL,
		"RUNLEDGER_EXECUTORS_ALLOWED": `{"ecs_clusters":["batch"],"ecs_task_definitions":["etl"]}`,
	}
	envOf := map[string]map[string]string{
		"api":        {"RUNLEDGER_EVENTS_QUEUE_URL": bc.EventsQueueURL, "RUNLEDGER_AUTH": "apikey", "RUNLEDGER_API_KEY": "k"},
		"events":     {"RUNLEDGER_EVENTS_QUEUE_URL": bc.EventsQueueURL, "RUNLEDGER_TRIGGER_QUEUE_ARN": bc.TriggerQueueARN},
		"ticker":     {"RUNLEDGER_TICKER_PERIOD": "1m"},
		"reconciler": {},
	}
	recorders := map[string]*awscalls.Recorder{}
	apps := map[string]*app.App{}
	for fn, own := range envOf {
		vars := map[string]string{}
		for k, v := range common {
			vars[k] = v
		}
		for k, v := range own {
			vars[k] = v
		}
		cfg, err := app.FromEnv(func(k string) string { return vars[k] })
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		rec := &awscalls.Recorder{Names: names}
		recorders[fn] = rec
		cfg.Clients, cfg.Now, cfg.Logger = env, clock.Now, slog.New(slog.NewJSONHandler(io.Discard, nil))
		cfg.DynamoDBOptions = []func(*dynamodb.Options){func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, rec.Add) }}
		cfg.SQSOptions = []func(*sqs.Options){func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, rec.Add) }}
		creds := credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")
		ecsClient := ecs.New(ecs.Options{BaseEndpoint: aws.String(ecsFake.srv.URL), Region: "eu-west-1", Credentials: creds,
			RetryMaxAttempts: 1, APIOptions: []func(*middleware.Stack) error{rec.Add}})
		cfg.Executors = append(cfg.Executors, ecsexec.NewExecutor(ecsexec.Client{API: ecsClient}, apiSrv.URL))
		bus := eventbridge.New(eventbridge.Options{BaseEndpoint: aws.String(busFake.URL), Region: "eu-west-1", Credentials: creds,
			RetryMaxAttempts: 1, APIOptions: []func(*middleware.Stack) error{rec.Add}})
		cfg.Parts = append(cfg.Parts, app.NoticeBusPart(bus, cfg.NoticeBus, cfg.Logger))
		a, err := app.New(t.Context(), cfg)
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		apps[fn] = a
	}
	if apiHandler, err = apps["api"].HTTP(); err != nil {
		t.Fatal(err)
	}
	call := func(method, path string, body any) map[string]any {
		t.Helper()
		var in io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			in = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(t.Context(), method, apiSrv.URL+path, in)
		req.Header.Set("Authorization", "Bearer k")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &out)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
		return out
	}
	flush := func(fn string) { apps[fn].Flush(t.Context()) }

	// api: a job on the queues and one on ECS, a run of each (SendMessage,
	// RunTask), the listings, and the ECS attempt claimed by its task.
	call("POST", "/v1/jobs", map[string]any{"name": "q", "pool": "default", "schedule": map[string]any{"cron": "*/5 * * * *"}})
	call("POST", "/v1/jobs", map[string]any{"name": "e",
		"executor": map[string]any{"type": "ecs", "cluster": "batch", "task_definition": "etl", "container": "main", "launch_type": "EC2"},
		"timeouts": map[string]any{"heartbeat": "30s", "cancel": "2s"}})
	call("POST", "/v1/jobs/q/runs", map[string]any{})
	call("POST", "/v1/jobs", map[string]any{"name": "ev", "pool": "default",
		"on_event": []any{map[string]any{"pattern": map[string]any{"source": []any{"shop"}}}}})
	run1 := call("POST", "/v1/jobs/e/runs", map[string]any{})["run"].(map[string]any)["id"].(string)
	call("GET", "/v1/jobs", nil)
	call("GET", "/v1/runs?job=e", nil)
	call("GET", "/v1/runs/"+run1, nil)
	ecsFake.claim(t, apiSrv.URL, 0)
	call("POST", "/v1/runs/"+run1+"/cancel", map[string]any{"reason": "iam"})
	run2 := call("POST", "/v1/jobs/e/runs", map[string]any{})["run"].(map[string]any)["id"].(string)
	ecsFake.claim(t, apiSrv.URL, 1)
	_ = run2
	flush("api")

	// events: past the cancel's deadline, a delayed timer of the cancelled
	// attempt's instance arrives (one armed before the cancel, say): the
	// events function settles the instance (the cancel timed out: StopTask,
	// then the task's evidence).
	clock.Add(15 * time.Second)
	tasks := call("GET", "/v1/runs/"+run1, nil)["tasks"].([]any)
	timer, _ := wire.Marshal(protocol.Timer{Run: run1, Task: tasks[0].(map[string]any)["task"].(string), At: clock.Now()})
	if _, err := base.Queue.SendDelayed(t.Context(), bc.DelayQueueURL, string(timer), nil, 0); err != nil {
		t.Fatal(err)
	}
	receiveInto(t, base.Queue, apps["events"], bc.DelayQueueURL)
	// An EventBridge rule's delivery from the trigger queue: the events
	// function lists the jobs, matches ev and starts its run (dispatch).
	delivery := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m-trigger", EventSource: "aws:sqs", EventSourceARN: bc.TriggerQueueARN,
		Body: `{"version":"0","id":"iam-event-1","detail-type":"Order Placed","source":"shop","account":"123456789012",` +
			`"time":"2026-01-01T00:00:00Z","region":"eu-west-1","resources":[],"detail":{}}`}}}
	if resp, err := apps["events"].HandleEvents(t.Context(), delivery); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("trigger delivery: %v %v", resp, err)
	}
	flush("events")

	// ticker and reconciler: past every lease and deadline.
	clock.Add(5 * time.Minute)
	if err := apps["ticker"].Tick(t.Context(), events.EventBridgeEvent{}); err != nil {
		t.Fatal(err)
	}
	flush("ticker")
	if err := apps["reconciler"].Reconcile(t.Context(), events.EventBridgeEvent{}); err != nil {
		t.Fatal(err)
	}
	flush("reconciler")

	got := map[string][]awscalls.Call{}
	for fn, rec := range recorders {
		got[fn] = rec.Calls()
	}
	if *updateSDKCalls {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(sdkCallsFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	var want map[string][]awscalls.Call
	raw, err := os.ReadFile(sdkCallsFile)
	if err == nil {
		err = json.Unmarshal(raw, &want)
	}
	if err != nil {
		t.Fatalf("%s: %v (rewrite it with -update-sdk-calls)", sdkCallsFile, err)
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		t.Errorf("the functions' calls differ from %s (rewrite it with -update-sdk-calls, and check infra's roles):\n%s", filepath.Clean(sdkCallsFile), g)
	}
}

// receiveInto hands the messages of a queue to the events function as its
// event source would, once at least one arrived (a delayed timer becomes
// visible when its delay ends).
func receiveInto(t *testing.T, q *queue.Client, a *app.App, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		msgs, err := q.Receive(t.Context(), url, queue.ReceiveOptions{MaxMessages: 10, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no message on %s within 30s", url)
			}
			continue
		}
		var ev events.SQSEvent
		for _, m := range msgs {
			rec := events.SQSMessage{MessageId: m.ID, ReceiptHandle: m.ReceiptHandle, Body: m.Body, EventSource: "aws:sqs",
				EventSourceARN:    "arn:aws:sqs:eu-west-1:123456789012:" + queue.Name(url),
				Attributes:        map[string]string{"ApproximateReceiveCount": fmt.Sprint(m.ReceiveCount)},
				MessageAttributes: map[string]events.SQSMessageAttribute{}}
			for k, v := range m.Attributes {
				rec.MessageAttributes[k] = events.SQSMessageAttribute{DataType: "String", StringValue: aws.String(v)}
			}
			ev.Records = append(ev.Records, rec)
		}
		if _, err := a.HandleEvents(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
		return
	}
}

// recordingECS answers ECS's JSON 1.1 protocol: RunTask starts a task
// (whose start environment it keeps), DescribeTasks finds it running,
// StopTask stops it.
type recordingECS struct {
	srv    *httptest.Server
	mu     sync.Mutex
	starts []map[string]string
}

func newRecordingECS(t *testing.T) *recordingECS {
	f := &recordingECS{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Overrides struct {
				ContainerOverrides []struct {
					Environment []struct{ Name, Value string } `json:"environment"`
				} `json:"containerOverrides"`
			} `json:"overrides"`
			Tasks []string `json:"tasks"`
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		const task = `{"taskArn":"arn:aws:ecs:eu-west-1:123456789012:task/batch/%d","clusterArn":"arn:aws:ecs:eu-west-1:123456789012:cluster/batch","lastStatus":"RUNNING","desiredStatus":"RUNNING"}`
		switch target := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonEC2ContainerServiceV20141113."); target {
		case "RunTask":
			vars := map[string]string{}
			for _, o := range body.Overrides.ContainerOverrides {
				for _, e := range o.Environment {
					vars[e.Name] = e.Value
				}
			}
			f.mu.Lock()
			f.starts = append(f.starts, vars)
			n := len(f.starts)
			f.mu.Unlock()
			fmt.Fprintf(w, `{"tasks":[`+task+`],"failures":[]}`, n)
		case "DescribeTasks":
			fmt.Fprintf(w, `{"tasks":[`+task+`],"failures":[]}`, 1)
		case "StopTask":
			fmt.Fprintf(w, `{"task":`+task+`}`, 1)
		default:
			http.Error(w, `{"__type":"InvalidParameterException","message":"unexpected"}`, http.StatusBadRequest)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// claim claims the i-th started task's attempt as its container would.
func (f *recordingECS) claim(t *testing.T, apiURL string, i int) {
	t.Helper()
	f.mu.Lock()
	if i >= len(f.starts) {
		f.mu.Unlock()
		t.Fatalf("task %d was never started (%d starts)", i, len(f.starts))
	}
	vars := f.starts[i]
	f.mu.Unlock()
	ref, cred, _, err := protocol.ParseStartEnv(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(protocol.ClaimRequest{Run: ref.Run, Task: ref.Task, Attempt: ref.Attempt, WorkerID: "ecs-task", EventID: "claim-" + ref.Run})
	req, _ := http.NewRequestWithContext(t.Context(), "POST", apiURL+"/v1/attempts/claim", bytes.NewReader(body))
	// The container holds the claim nonce (a token only for an instance
	// without a secret), and claims with it.
	bearer := cred.Nonce
	if bearer == "" {
		bearer = cred.Token
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("claim %v: %d %s", ref, resp.StatusCode, raw)
	}
}
