package lambdarie

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/runledger/runledger/shared/app"
)

// functionNames are the functions make functions builds and the template
// deploys.
var functionNames = []string{"api", "events", "ticker", "reconciler", "worker"}

// account is the account id of the fixtures and of the ARNs the harness
// writes into events.
const account = "123456789012"

var harnessSeq atomic.Int64

// harness holds one test's local stand-ins of a deployed stack: the table
// and queues (provisioned as the local stack does), an EventBridge
// endpoint that records PutEvents, and an HTTP endpoint in front of the api
// function, as API Gateway is, for the worker's calls.
type harness struct {
	t              *testing.T
	rie, dist, qmu string
	tmpl           cfnTemplate
	fns            map[string]cfnFunction
	app            *app.App
	sqs            *sqs.Client
	locals         locals
	bus            *fakeEventBridge
	creds          aws.Credentials
	workerRoute    []byte // testdata/http-api-worker-route.json

	apiMu sync.Mutex
	api   *function // set by serve: the function behind the gateway
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	rie, dist, cdkOut := needBinaries(t)
	h := &harness{t: t, rie: rie, dist: dist, workerRoute: fixture(t, "http-api-worker-route.json")}
	if runtime.GOARCH != "arm64" {
		q, err := exec.LookPath("qemu-aarch64-static")
		if err != nil {
			t.Fatalf("the functions are linux/arm64 and this is %s: qemu-aarch64-static runs them (Debian: apt-get install qemu-user-static): %v", runtime.GOARCH, err)
		}
		h.qmu = q
	}
	var err error
	if h.tmpl, err = readTemplate(cdkOut); err != nil {
		t.Fatal(err)
	}
	if h.fns, err = h.tmpl.functions(); err != nil {
		t.Fatal(err)
	}
	for _, name := range functionNames {
		fn, ok := h.fns[name]
		if !ok {
			t.Fatalf("the template in %s deploys no %s function", cdkOut, name)
		}
		h.checkAsset(cdkOut, fn)
	}

	ctx := context.Background()
	name := fmt.Sprintf("rie%d-%d", os.Getpid(), harnessSeq.Add(1))
	h.app, err = app.New(ctx, app.Config{Clients: env, Provision: &app.Provision{Name: name, Pools: h.tmpl.pools()}})
	if err != nil {
		t.Fatal(err)
	}
	h.sqs = h.app.SQS
	t.Cleanup(func() { h.deleteResources(name) })
	if h.creds, err = env.Config().Credentials.Retrieve(ctx); err != nil {
		t.Fatal(err)
	}
	h.bus = newFakeEventBridge(t)
	gateway := httptest.NewServer(http.HandlerFunc(h.gateway)) // 127.0.0.1
	t.Cleanup(gateway.Close)
	cfg := h.app.Config
	h.locals = locals{Table: cfg.Table, Pools: cfg.Pools, EventsQueue: cfg.EventsQueueURL, DelayQueue: cfg.DelayQueueURL,
		EventBus: name + "-bus", APIURL: gateway.URL, Region: env.Region(), Account: account}
	return h
}

// checkAsset fails t unless the function's asset in cdk.out is the built
// bootstrap: the template and the binaries under test belong together.
func (h *harness) checkAsset(cdkOut string, fn cfnFunction) {
	h.t.Helper()
	built, err := os.ReadFile(filepath.Join(h.dist, fn.Name, "bootstrap"))
	if err != nil {
		h.t.Fatalf("%v: make functions builds it", err)
	}
	if fn.Handler != "bootstrap" {
		h.t.Fatalf("function %s: handler %q, want bootstrap", fn.Name, fn.Handler)
	}
	if fn.Asset == "" {
		return
	}
	synthesized, err := os.ReadFile(filepath.Join(cdkOut, fn.Asset, "bootstrap"))
	if err != nil {
		h.t.Fatalf("function %s: its asset: %v", fn.Name, err)
	}
	if sha256.Sum256(built) != sha256.Sum256(synthesized) {
		h.t.Fatalf("function %s: dist/%s/bootstrap differs from the asset the template deploys (%s): run make synth after make functions", fn.Name, fn.Name, fn.Asset)
	}
}

// pools are the pools the template gives a dispatch queue (not their
// dead-letter queues).
func (t cfnTemplate) pools() []string {
	var found []string
	for _, r := range t.Resources {
		if m := poolQueuePath.FindStringSubmatch(r.path()); r.Type == "AWS::SQS::Queue" && m != nil {
			found = append(found, m[1])
		}
	}
	var out []string
	for _, p := range found {
		if base, ok := strings.CutSuffix(p, "DeadLetter"); ok && slices.Contains(found, base) {
			continue
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func (h *harness) deleteResources(table string) {
	ctx := context.Background()
	for _, url := range h.app.Queues() {
		if err := h.app.Queue.DeleteQueue(ctx, url); err != nil {
			h.t.Logf("delete queue %s: %v", url, err)
		}
	}
	if _, err := h.app.DynamoDB.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
		h.t.Logf("delete table %s: %v", table, err)
	}
}

// environment is function name's environment from the template, its
// references resolved to the local stand-ins.
func (h *harness) environment(name string) map[string]string {
	h.t.Helper()
	vars, err := h.tmpl.environment(h.fns[name], h.locals)
	if err != nil {
		h.t.Fatal(err)
	}
	return vars
}

// start runs function name under its own emulator with vars (its
// template environment, or a variation of it), plus what Lambda itself
// sets and the SDK settings that point it at the local endpoints.
func (h *harness) start(t *testing.T, name string, vars map[string]string) *function {
	t.Helper()
	fn := h.fns[name]
	procEnv := map[string]string{
		"AWS_REGION":                      h.locals.Region,
		"AWS_DEFAULT_REGION":              h.locals.Region,
		"AWS_ACCESS_KEY_ID":               h.creds.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY":           h.creds.SecretAccessKey,
		"AWS_ENDPOINT_URL_DYNAMODB":       env.DynamoDB().URL,
		"AWS_ENDPOINT_URL_SQS":            env.SQS().URL,
		"AWS_ENDPOINT_URL_EVENTBRIDGE":    h.bus.srv.URL,
		"AWS_EC2_METADATA_DISABLED":       "true",
		"AWS_LAMBDA_FUNCTION_NAME":        "runledger-" + name,
		"AWS_LAMBDA_FUNCTION_TIMEOUT":     strconv.Itoa(fn.Timeout),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(fn.MemorySize),
		"TZ":                              ":UTC",
	}
	if h.creds.SessionToken != "" {
		procEnv["AWS_SESSION_TOKEN"] = h.creds.SessionToken
	}
	for k, v := range vars {
		procEnv[k] = v
	}
	f := &function{name: name, timeout: time.Duration(fn.Timeout) * time.Second, out: &logBuffer{}}
	bootstrap := filepath.Join(h.dist, name, "bootstrap")
	rieAddr, apiAddr := freeAddr(t), freeAddr(t)
	args := []string{"--runtime-interface-emulator-address", rieAddr, "--runtime-api-address", apiAddr}
	if h.qmu != "" {
		args = append(args, h.qmu)
	}
	args = append(args, bootstrap)
	cmd := exec.Command(h.rie, args...)
	cmd.Dir = filepath.Dir(bootstrap)
	for k, v := range procEnv {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = f.out, f.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the emulator for %s: %v", name, err)
	}
	f.url = "http://" + rieAddr + "/2015-03-31/functions/function/invocations"
	t.Cleanup(func() {
		stopTree(cmd)
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, f.out.String())
		}
	})
	waitListening(t, rieAddr, name)
	return f
}

// stopTree kills the emulator and the runtime it started (in a process
// group of its own), and reaps the emulator.
func stopTree(cmd *exec.Cmd) {
	for _, child := range childPIDs(cmd.Process.Pid) {
		_ = syscall.Kill(-child, syscall.SIGKILL)
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
}

// childPIDs lists the processes whose parent is pid, from /proc.
func childPIDs(pid int) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		if c, err := strconv.Atoi(filepath.Base(filepath.Dir(d))); err == nil {
			out = append(out, c)
		}
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// waitListening polls until the emulator accepts connections.
func waitListening(t *testing.T, addr, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the emulator of %s does not listen on %s: %v", name, addr, err)
		}
		runtime.Gosched()
	}
}

// function is one Lambda function under its own emulator: one execution
// environment, so one invocation at a time.
type function struct {
	name    string
	url     string
	timeout time.Duration
	out     *logBuffer
	mu      sync.Mutex
}

// invoke sends payload as the function's event and answers the status and
// body of the emulator's answer.
func (f *function) invoke(ctx context.Context, payload any) (int, []byte, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return 0, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// The first invocation starts the runtime (init) under emulation.
	ctx, cancel := context.WithTimeout(ctx, f.timeout+time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("invoke %s: %w", f.name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// invokeOK invokes and decodes the function's result into out (nil: none
// wanted); an error answer fails t.
func (f *function) invokeOK(t *testing.T, payload, out any) {
	t.Helper()
	status, body, err := f.invoke(context.Background(), payload)
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusOK || bytes.Contains(body, []byte(`"errorType"`)) {
		t.Fatalf("invoke %s: status %d: %s", f.name, status, body)
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("invoke %s: result %s: %v", f.name, body, err)
		}
	}
}

// http invokes the api function with an HTTP API (payload 2.0) event.
func (f *function) http(t *testing.T, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	t.Helper()
	var resp events.APIGatewayV2HTTPResponse
	f.invokeOK(t, ev, &resp)
	if resp.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body, resp.IsBase64Encoded = string(b), false
	}
	return resp
}

// logBuffer collects a function's output (the emulator's and the
// runtime's) for assertions.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitOutput polls f's output until it holds want.
func (f *function) waitOutput(t *testing.T, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(f.out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the output of %s holds no %q; it is:\n%s", f.name, want, f.out.String())
		}
		runtime.Gosched()
	}
}

// fixture reads testdata/name.
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func httpFixture(t *testing.T, name string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(fixture(t, name), &ev); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return ev
}

// serve puts api behind the gateway endpoint.
func (h *harness) serve(api *function) {
	h.apiMu.Lock()
	defer h.apiMu.Unlock()
	h.api = api
}

var gatewayRequests atomic.Int64

// gateway does what the HTTP API does for the routes it leaves
// unauthorized: the worker routes (/v1/attempts/*, which carry the attempt
// token) become a payload 2.0 event for the api function. Any other route
// needs IAM or a JWT, which this endpoint cannot check: 403, as the
// gateway answers an unsigned caller.
func (h *harness) gateway(w http.ResponseWriter, r *http.Request) {
	h.apiMu.Lock()
	api := h.api
	h.apiMu.Unlock()
	if api == nil || r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1/attempts/") {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"message":"Forbidden"}`))
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(h.workerRoute, &ev); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	ev.RouteKey = r.Method + " " + r.URL.Path
	ev.RawPath, ev.RawQueryString = r.URL.Path, r.URL.RawQuery
	for k, vs := range r.Header {
		ev.Headers[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	rc := &ev.RequestContext
	rc.RouteKey = ev.RouteKey
	rc.HTTP.Method, rc.HTTP.Path, rc.HTTP.UserAgent = r.Method, r.URL.Path, r.UserAgent()
	rc.RequestID = fmt.Sprintf("rie-gateway-%d", gatewayRequests.Add(1))
	rc.TimeEpoch = time.Now().UnixMilli()
	rc.Time = time.Now().UTC().Format("02/Jan/2006:15:04:05 -0700")
	ev.Body, ev.IsBase64Encoded = string(body), false

	var resp events.APIGatewayV2HTTPResponse
	status, out, err := api.invoke(r.Context(), ev)
	if err == nil && status == http.StatusOK {
		err = json.Unmarshal(out, &resp)
	}
	if err != nil || status != http.StatusOK {
		// API Gateway's answer to a failed integration.
		h.t.Logf("gateway: %s %s: invoke status %d, err %v: %s", r.Method, r.URL.Path, status, err, out)
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"message":"Internal Server Error"}`))
		return
	}
	respBody := []byte(resp.Body)
	if resp.IsBase64Encoded {
		respBody, _ = base64.StdEncoding.DecodeString(resp.Body)
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
}

// fakeEventBridge answers PutEvents and keeps the entries.
type fakeEventBridge struct {
	srv     *httptest.Server
	mu      sync.Mutex
	entries []busEntry
}

type busEntry struct {
	EventBusName string `json:"EventBusName"`
	Source       string `json:"Source"`
	DetailType   string `json:"DetailType"`
	Detail       string `json:"Detail"`
}

func newFakeEventBridge(t *testing.T) *fakeEventBridge {
	b := &fakeEventBridge{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		var in struct {
			Entries []busEntry `json:"Entries"`
		}
		if r.Header.Get("X-Amz-Target") != "AWSEvents.PutEvents" || json.NewDecoder(r.Body).Decode(&in) != nil {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"__type":"ValidationException","message":"only PutEvents is served here"}`))
			return
		}
		b.mu.Lock()
		b.entries = append(b.entries, in.Entries...)
		n := len(b.entries)
		b.mu.Unlock()
		type result struct {
			EventID string `json:"EventId"`
		}
		out := struct {
			FailedEntryCount int      `json:"FailedEntryCount"`
			Entries          []result `json:"Entries"`
		}{}
		for i := range in.Entries {
			out.Entries = append(out.Entries, result{EventID: fmt.Sprintf("event-%d", n-len(in.Entries)+i)})
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *fakeEventBridge) received() []busEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.entries)
}

// delivery is what the event source mapping did with one batch.
type delivery struct {
	bodies []string // the messages handed to the function
}

// deliver does what Lambda's SQS event source mapping does: it receives
// up to batch messages, hands them to fn as one SQS event (shaped like
// testdata/sqs-batch.json), and deletes those the function did not report
// as failed; failed ones become visible again at once.
func (h *harness) deliver(fn *function, queueURL string, batch int, wait time.Duration) delivery {
	h.t.Helper()
	ctx := context.Background()
	out, err := h.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(queueURL), MaxNumberOfMessages: int32(batch), WaitTimeSeconds: int32(wait / time.Second),
		VisibilityTimeout:           int32(6 * fn.timeout / time.Second),
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		h.t.Fatalf("receive from %s: %v", queueURL, err)
	}
	if len(out.Messages) == 0 {
		return delivery{}
	}
	ev := h.sqsEvent(queueURL, out.Messages)
	var resp events.SQSEventResponse
	fn.invokeOK(h.t, ev, &resp)
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	var d delivery
	for _, m := range out.Messages {
		d.bodies = append(d.bodies, aws.ToString(m.Body))
		if failed[aws.ToString(m.MessageId)] {
			_, err = h.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle})
		} else {
			_, err = h.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle})
		}
		if err != nil {
			h.t.Fatalf("settle message %s of %s: %v", aws.ToString(m.MessageId), queueURL, err)
		}
	}
	return d
}

// sqsEvent is the event Lambda hands a function for msgs of the queue,
// each record shaped like the fixture's.
func (h *harness) sqsEvent(queueURL string, msgs []sqstypes.Message) events.SQSEvent {
	h.t.Helper()
	var base events.SQSEvent
	if err := json.Unmarshal(fixture(h.t, "sqs-batch.json"), &base); err != nil || len(base.Records) != 1 {
		h.t.Fatalf("sqs-batch.json: want one record: %v", err)
	}
	arn := "arn:aws:sqs:" + h.locals.Region + ":" + account + ":" + queueURL[strings.LastIndexByte(queueURL, '/')+1:]
	var ev events.SQSEvent
	for _, m := range msgs {
		rec := base.Records[0]
		rec.MessageId, rec.ReceiptHandle, rec.Body = aws.ToString(m.MessageId), aws.ToString(m.ReceiptHandle), aws.ToString(m.Body)
		rec.Md5OfBody, rec.EventSourceARN, rec.AWSRegion = aws.ToString(m.MD5OfBody), arn, h.locals.Region
		rec.Attributes = map[string]string{}
		for k, v := range base.Records[0].Attributes {
			rec.Attributes[k] = v
		}
		for k, v := range m.Attributes {
			rec.Attributes[k] = v
		}
		rec.MessageAttributes = map[string]events.SQSMessageAttribute{}
		for k, v := range m.MessageAttributes {
			rec.MessageAttributes[k] = events.SQSMessageAttribute{StringValue: v.StringValue, BinaryValue: v.BinaryValue, DataType: aws.ToString(v.DataType)}
		}
		ev.Records = append(ev.Records, rec)
	}
	return ev
}

// scheduled is an EventBridge scheduled event of the function's rule,
// shaped like testdata/eventbridge-scheduled.json, at now.
func (h *harness) scheduled(name string) events.EventBridgeEvent {
	h.t.Helper()
	var ev events.EventBridgeEvent
	if err := json.Unmarshal(fixture(h.t, "eventbridge-scheduled.json"), &ev); err != nil {
		h.t.Fatal(err)
	}
	ev.Time = time.Now().UTC().Truncate(time.Second)
	ev.Region = h.locals.Region
	ev.Resources = []string{"arn:aws:events:" + h.locals.Region + ":" + account + ":rule/runledger-" + name + "-schedule"}
	return ev
}
