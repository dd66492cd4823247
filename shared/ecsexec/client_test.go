package ecsexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/runledger/runledger/shared/ecsexec"
	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
)

// fakeECS speaks ECS's JSON 1.1 protocol: it records every request (its
// X-Amz-Target and its JSON body) and answers each target with the body
// the test set.
type fakeECS struct {
	t       *testing.T
	mu      sync.Mutex
	calls   []call
	answers map[string]string
}

type call struct {
	target string
	body   map[string]any
	raw    string
}

const targetPrefix = "AmazonEC2ContainerServiceV20141113."

func newFakeECS(t *testing.T, answers map[string]string) (*fakeECS, ecsexec.Client) {
	f := &fakeECS{t: t, answers: answers}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	api := ecs.New(ecs.Options{
		BaseEndpoint: aws.String(srv.URL), Region: "eu-west-1",
		Credentials:      credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		RetryMaxAttempts: 1,
	})
	return f, ecsexec.Client{API: api}
}

func (f *fakeECS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		f.t.Errorf("request body is not JSON: %s", raw)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-amz-json-1.1" {
		f.t.Errorf("Content-Type %q, want application/x-amz-json-1.1", ct)
	}
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		f.t.Errorf("request %s %s, want POST /", r.Method, r.URL.Path)
	}
	target := r.Header.Get("X-Amz-Target")
	f.mu.Lock()
	f.calls = append(f.calls, call{target: target, body: body, raw: string(raw)})
	answer, ok := f.answers[target]
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	if !ok {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"__type":"InvalidParameterException","message":"unexpected target"}`)
		return
	}
	_, _ = io.WriteString(w, answer)
}

func (f *fakeECS) only(t *testing.T) call {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) != 1 {
		t.Fatalf("%d calls, want 1: %+v", len(f.calls), f.calls)
	}
	return f.calls[0]
}

// jsonOf round-trips v so it compares with a decoded request body.
func jsonOf(t *testing.T, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

const taskARN = "arn:aws:ecs:eu-west-1:123456789012:task/batch/0123456789abcdef0123456789abcdef"

// The executor's RunTask carries the cluster, the task definition, the
// launch type, the awsvpc network, one task, the idempotency token, and the
// start environment as the named container's override, with the attempt's
// claim nonce and nowhere its token (RunTask's input is shown by
// DescribeTasks and recorded by CloudTrail); the task's ARN is the
// executor id.
func TestStartSendsRunTaskOfTheSpec(t *testing.T) {
	f, c := newFakeECS(t, map[string]string{
		targetPrefix + "RunTask": `{"tasks":[{"taskArn":"` + taskARN + `","lastStatus":"PROVISIONING"}],"failures":[]}`,
	})
	x := ecsexec.NewExecutor(c, "https://api.example.com")
	env := protocol.Envelope{Run: "01RUN", Task: "extract", Attempt: 2, Token: "secret-token", ClaimNonce: "claim-nonce"}
	spec := jobspec.Executor{Type: "ecs", Cluster: "batch", TaskDefinition: "etl:7", Container: "app",
		Subnets: []string{"subnet-1", "subnet-2"}, SecurityGroups: []string{"sg-1"}, LaunchType: "FARGATE"}
	arn, err := x.Start(context.Background(), env, spec)
	if err != nil {
		t.Fatal(err)
	}
	if arn != taskARN {
		t.Fatalf("executor id %q, want the task ARN %q", arn, taskARN)
	}
	got := f.only(t)
	if got.target != targetPrefix+"RunTask" {
		t.Fatalf("target %q", got.target)
	}
	token, _ := got.body["clientToken"].(string)
	if len(token) != 32 || strings.Contains(token, env.Token) {
		t.Fatalf("clientToken %q: want 32 random characters, not the attempt token", token)
	}
	body := maps.Clone(got.body)
	delete(body, "clientToken")
	want := jsonOf(t, map[string]any{
		"cluster": "batch", "taskDefinition": "etl:7", "launchType": "FARGATE", "count": 1, "startedBy": "runledger",
		"networkConfiguration": map[string]any{"awsvpcConfiguration": map[string]any{
			"subnets": []string{"subnet-1", "subnet-2"}, "securityGroups": []string{"sg-1"}}},
		"overrides": map[string]any{"containerOverrides": []any{map[string]any{
			"name": "app",
			"environment": []any{
				map[string]string{"name": "RUNLEDGER_RUN", "value": "01RUN"},
				map[string]string{"name": "RUNLEDGER_TASK", "value": "extract"},
				map[string]string{"name": "RUNLEDGER_ATTEMPT", "value": "2"},
				map[string]string{"name": "RUNLEDGER_CLAIM_NONCE", "value": "claim-nonce"},
				map[string]string{"name": "RUNLEDGER_API_URL", "value": "https://api.example.com"},
			},
		}}},
	})
	if !reflect.DeepEqual(jsonOf(t, body), want) {
		b1, _ := json.MarshalIndent(body, "", " ")
		b2, _ := json.MarshalIndent(want, "", " ")
		t.Fatalf("RunTask body\n%s\nwant\n%s", b1, b2)
	}
	if strings.Contains(got.raw, env.Token) || strings.Contains(got.raw, "RUNLEDGER_TOKEN") {
		t.Fatalf("RunTask's input holds the attempt's token: %s", got.raw)
	}

	// Another Start of the same attempt (the timer's next try after a
	// refused RunTask) is a new request, not ECS's remembered answer.
	if _, err := x.Start(context.Background(), env, spec); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	t1, t2 := f.calls[0].body["clientToken"], f.calls[1].body["clientToken"]
	f.mu.Unlock()
	if t1 == t2 {
		t.Fatalf("client tokens %v %v: want one per Start", t1, t2)
	}
}

// An EC2 task without subnets takes no network configuration. (Its
// attempt has no claim nonce, as one of a run created before attempts had
// one: its container gets the token.)
func TestStartWithoutSubnetsSendsNoNetwork(t *testing.T) {
	f, c := newFakeECS(t, map[string]string{targetPrefix + "RunTask": `{"tasks":[{"taskArn":"` + taskARN + `"}]}`})
	x := ecsexec.NewExecutor(c, "http://api")
	_, err := x.Start(context.Background(), protocol.Envelope{Run: "r", Task: "t", Attempt: 1, Token: "k"},
		jobspec.Executor{Type: "ecs", Cluster: "batch", TaskDefinition: "etl", Container: "app", LaunchType: "EC2"})
	if err != nil {
		t.Fatal(err)
	}
	got := f.only(t)
	if _, ok := got.body["networkConfiguration"]; ok || got.body["launchType"] != "EC2" {
		t.Fatalf("body %v: want launchType EC2 and no networkConfiguration", got.body)
	}
	if !strings.Contains(got.raw, `{"name":"RUNLEDGER_TOKEN","value":"k"}`) || strings.Contains(got.raw, "RUNLEDGER_CLAIM_NONCE") {
		t.Fatalf("RunTask %s: want the token for an attempt without a claim nonce", got.raw)
	}
}

// RunTask's failures are a refused dispatch, naming ECS's reason.
func TestRunTaskFailuresAreARefusal(t *testing.T) {
	_, c := newFakeECS(t, map[string]string{
		targetPrefix + "RunTask": `{"tasks":[],"failures":[{"arn":"arn:aws:ecs:eu-west-1:1:container-instance/x","reason":"RESOURCE:MEMORY","detail":"not enough memory"}]}`,
	})
	_, err := c.RunTask(context.Background(), ecsexec.RunInput{Cluster: "batch", TaskDefinition: "etl", Container: "app"})
	if !errors.Is(err, ecsexec.ErrRefused) {
		t.Fatalf("error %v, want ErrRefused", err)
	}
	if want := "RESOURCE:MEMORY not enough memory"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name %q", err, want)
	}
}

// An API error (access denied, a task definition that does not exist) is
// an error of the call.
func TestRunTaskAPIErrorIsAnError(t *testing.T) {
	_, c := newFakeECS(t, map[string]string{})
	if _, err := c.RunTask(context.Background(), ecsexec.RunInput{Cluster: "batch", TaskDefinition: "etl", Container: "app"}); err == nil {
		t.Fatal("RunTask answered 400: want an error")
	}
}

func TestDescribeTask(t *testing.T) {
	cases := []struct {
		name, answer string
		want         ecsexec.Task
	}{
		{"stopped with exit code",
			`{"tasks":[{"taskArn":"` + taskARN + `","lastStatus":"STOPPED","stopCode":"EssentialContainerExited","stoppedReason":"Essential container in task exited",
			  "containers":[{"name":"app","exitCode":3,"reason":"boom"},{"name":"sidecar"}]}],"failures":[]}`,
			ecsexec.Task{ARN: taskARN, LastStatus: "STOPPED", StopCode: "EssentialContainerExited", StoppedReason: "Essential container in task exited",
				Containers: []ecsexec.Container{{Name: "app", ExitCode: ptr(3), Reason: "boom"}, {Name: "sidecar"}}}},
		{"running", `{"tasks":[{"taskArn":"` + taskARN + `","lastStatus":"RUNNING","containers":[{"name":"app"}]}]}`,
			ecsexec.Task{ARN: taskARN, LastStatus: "RUNNING", Containers: []ecsexec.Container{{Name: "app"}}}},
		{"missing", `{"tasks":[],"failures":[{"arn":"` + taskARN + `","reason":"MISSING"}]}`,
			ecsexec.Task{ARN: taskARN, Missing: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newFakeECS(t, map[string]string{targetPrefix + "DescribeTasks": tc.answer})
			got, err := c.DescribeTask(context.Background(), "batch", taskARN)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("task %+v, want %+v", got, tc.want)
			}
			req := f.only(t)
			if req.target != targetPrefix+"DescribeTasks" || !reflect.DeepEqual(req.body, jsonOf(t, map[string]any{"cluster": "batch", "tasks": []string{taskARN}})) {
				t.Fatalf("request %s %v", req.target, req.body)
			}
		})
	}
}

func TestStopTaskNamesClusterTaskAndReason(t *testing.T) {
	f, c := newFakeECS(t, map[string]string{targetPrefix + "StopTask": `{"task":{"taskArn":"` + taskARN + `","desiredStatus":"STOPPED"}}`})
	x := ecsexec.NewExecutor(c, "")
	// The cluster comes from the ARN, whatever the spec says.
	if err := x.Stop(context.Background(), taskARN, jobspec.Executor{Type: "ecs", Cluster: "other"}); err != nil {
		t.Fatal(err)
	}
	req := f.only(t)
	want := jsonOf(t, map[string]string{"cluster": "batch", "task": taskARN, "reason": "runledger: the attempt was cancelled"})
	if req.target != targetPrefix+"StopTask" || !reflect.DeepEqual(req.body, want) {
		t.Fatalf("request %s %v, want %v", req.target, req.body, want)
	}
}

func ptr(n int) *int { return &n }
