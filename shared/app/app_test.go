package app_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runledger/runledger/shared/api"
	"github.com/runledger/runledger/shared/app"
	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/worker"
	"github.com/runledger/runledger/statemodel"
)

// sdk builds clients that are never called: New does no I/O without
// Provision.
var sdk = app.SDK{Config: aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")}}

// partEvidence is a Part's evidence provider (never consulted here).
type partEvidence struct{ scheduler.EvidenceProvider }

func base() app.Config {
	return app.Config{
		Clients: sdk, Table: "rl", Pools: map[string]string{"default": "http://sqs/q-default"},
		EventsQueueURL: "http://sqs/q-events", DelayQueueURL: "http://sqs/q-delay",
	}
}

func TestNewBuildsTheGraph(t *testing.T) {
	t.Parallel()
	cfg := base()
	var dynamoOpts, sqsOpts int
	cfg.DynamoDBOptions = []func(*dynamodb.Options){func(*dynamodb.Options) { dynamoOpts++ }}
	cfg.SQSOptions = []func(*sqs.Options){func(*sqs.Options) { sqsOpts++ }}
	cfg.Parts = []app.Part{
		{Name: "executor", Evidence: func(st *store.Store) []scheduler.EvidenceProvider {
			if st.Table() != "rl" {
				t.Errorf("part evidence got the store of table %q", st.Table())
			}
			return []scheduler.EvidenceProvider{partEvidence{}}
		}},
		{Name: "quiet"},
	}
	a, err := app.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a.Store.Table() != "rl" {
		t.Errorf("store: table %q", a.Store.Table())
	}
	if !reflect.DeepEqual(a.Service.Pools(), cfg.Pools) {
		t.Errorf("service pools = %v, want %v", a.Service.Pools(), cfg.Pools)
	}
	if dynamoOpts != 1 || sqsOpts != 1 {
		t.Errorf("client options ran %d (DynamoDB) and %d (SQS) times, want once each", dynamoOpts, sqsOpts)
	}
	if len(a.Evidence) != 2 {
		t.Fatalf("evidence = %#v, want the worker leases' then the part's", a.Evidence)
	}
	if _, ok := a.Evidence[0].(scheduler.WorkerLeaseEvidence); !ok {
		t.Errorf("evidence[0] = %T, want the worker leases'", a.Evidence[0])
	}
	if _, ok := a.Evidence[1].(partEvidence); !ok {
		t.Errorf("evidence[1] = %T, want the part's", a.Evidence[1])
	}
	want := map[string]string{"default": "http://sqs/q-default", "events": "http://sqs/q-events", "delay": "http://sqs/q-delay"}
	if got := a.Queues(); !reflect.DeepEqual(got, want) {
		t.Errorf("queues = %v, want %v", got, want)
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	a, err := app.New(t.Context(), base())
	if err != nil {
		t.Fatal(err)
	}
	c := a.Config
	if c.Now == nil || c.Logger == nil || c.Metrics != io.Discard {
		t.Errorf("clock, logger, metrics = %v, %v, %v; want set, set, discarded", c.Now != nil, c.Logger != nil, c.Metrics)
	}
	if c.MaxClockSkew != scheduler.DefaultMaxClockSkew || c.Auth != api.AuthAPIKey || c.Retention != 0 {
		t.Errorf("skew %s, auth %q, retention %s; want %s, %q, the store's", c.MaxClockSkew, c.Auth, c.Retention, scheduler.DefaultMaxClockSkew, api.AuthAPIKey)
	}
	if c.TickerPeriod != scheduler.DefaultTickerPeriod {
		t.Errorf("ticker period %s, want %s", c.TickerPeriod, scheduler.DefaultTickerPeriod)
	}
	if len(a.Evidence) != 1 {
		t.Errorf("evidence = %#v, want the worker leases' alone", a.Evidence)
	}
}

func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(*app.Config)
		says   string
	}{
		{"no clients", func(c *app.Config) { c.Clients = nil }, "Clients is required"},
		{"no table", func(c *app.Config) { c.Table = "" }, "Table is required"},
		{"provision without a name", func(c *app.Config) {
			c.Table, c.Pools, c.EventsQueueURL, c.DelayQueueURL = "", nil, "", ""
			c.Provision = &app.Provision{}
		}, "Provision.Name is required"},
		{"provision and a table", func(c *app.Config) { c.Provision = &app.Provision{Name: "rl"} }, "set them or Provision, not both"},
		{"negative retention", func(c *app.Config) { c.Retention = -time.Hour }, "retention -1h is not within 24h..87600h"},
		{"retention under a day", func(c *app.Config) { c.Retention = time.Hour }, "retention 1h is not within 24h..87600h"},
		{"negative skew", func(c *app.Config) { c.MaxClockSkew = -time.Second }, "MaxClockSkew -1s is negative"},
		{"negative ticker period", func(c *app.Config) { c.TickerPeriod = -time.Minute }, "TickerPeriod -1m0s is negative"},
		{"unnamed part", func(c *app.Config) { c.Parts = []app.Part{{}} }, "Parts[0] has no name"},
		{"two parts of a name", func(c *app.Config) { c.Parts = []app.Part{{Name: "x"}, {Name: "x"}} }, `two parts are named "x"`},
		{"two executors of a type", func(c *app.Config) {
			c.Executors = []scheduler.Executor{typed("lambda")}
			c.Parts = []app.Part{{Name: "x", Executors: []scheduler.Executor{typed("lambda")}}}
		}, `two executors serve type "lambda"`},
		{"an executor of no type", func(c *app.Config) { c.Executors = []scheduler.Executor{typed("batch")} }, `serves type "batch"`},
		{"a pool without a queue", func(c *app.Config) { c.Pools["default"] = "" }, `pool "default" has no queue URL`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := base()
			tc.change(&cfg)
			a, err := app.New(t.Context(), cfg)
			if !errors.Is(err, app.ErrConfig) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("New = %v, %v; want an ErrConfig saying %q", a, err, tc.says)
			}
		})
	}
}

func TestHTTPServesTheAPIAndThePartsRoutes(t *testing.T) {
	t.Parallel()
	cfg := base()
	cfg.APIKey = "key"
	cfg.Parts = []app.Part{{Name: "metrics", Routes: map[string]http.Handler{
		"GET /metrics": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "runs 0\n") }),
	}}}
	a, err := app.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := a.HTTP()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/metrics", http.StatusOK, "runs 0\n"},
		{"/healthz", http.StatusOK, ""},
		{"/v1/jobs", http.StatusUnauthorized, ""}, // the API's own auth still applies
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if rec.Code != tc.code || (tc.body != "" && rec.Body.String() != tc.body) {
			t.Errorf("GET %s = %d %q, want %d %q", tc.path, rec.Code, rec.Body, tc.code, tc.body)
		}
	}
}

func TestHTTPRefusesABadSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(*app.Config)
		says   string
	}{
		{"no API key", func(*app.Config) {}, "an API key is required"},
		{"malformed route", func(c *app.Config) {
			c.APIKey = "key"
			c.Parts = []app.Part{{Name: "bad", Routes: map[string]http.Handler{"GET": http.NotFoundHandler()}}}
		}, "part routes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := base()
			tc.change(&cfg)
			a, err := app.New(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.HTTP(); !errors.Is(err, app.ErrConfig) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("HTTP = %v, want an ErrConfig saying %q", err, tc.says)
			}
		})
	}
	// The gateway authorizes callers: no key needed.
	cfg := base()
	cfg.Auth = api.AuthGateway
	a, err := app.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.HTTP(); err != nil {
		t.Errorf("HTTP with gateway auth = %v", err)
	}
}

func TestFromEnv(t *testing.T) {
	t.Parallel()
	full := map[string]string{
		"RUNLEDGER_TABLE":             "rl-table",
		"RUNLEDGER_POOL_QUEUES":       `{"default":"https://sqs/q1","gpu":"https://sqs/q2"}`,
		"RUNLEDGER_EVENTS_QUEUE_URL":  "https://sqs/events",
		"RUNLEDGER_DELAY_QUEUE_URL":   "https://sqs/delay",
		"RUNLEDGER_HISTORY_RETENTION": "48h",
		"RUNLEDGER_MAX_CLOCK_SKEW":    "5s",
		"RUNLEDGER_TICKER_PERIOD":     "2m",
		"RUNLEDGER_AUTH":              "gateway",
		"RUNLEDGER_API_KEY":           "k",
		"RUNLEDGER_EXECUTORS_ALLOWED": `{"lambda_functions": ["fn"], "ecs_clusters": ["main"], "ecs_task_definitions": ["etl"]}`,
	}
	with := func(k, v string) func(string) string {
		return func(key string) string {
			if key == k {
				return v
			}
			return full[key]
		}
	}
	cfg, err := app.FromEnv(with("", ""))
	if err != nil {
		t.Fatal(err)
	}
	want := app.Config{
		Table: "rl-table", Pools: map[string]string{"default": "https://sqs/q1", "gpu": "https://sqs/q2"},
		EventsQueueURL: "https://sqs/events", DelayQueueURL: "https://sqs/delay",
		Retention: 48 * time.Hour, MaxClockSkew: 5 * time.Second, TickerPeriod: 2 * time.Minute, Auth: api.AuthGateway, APIKey: "k",
		Allowed: jobspec.Allowed{LambdaFunctions: []string{"fn"}, ECSClusters: []string{"main"}, ECSTaskDefinitions: []string{"etl"}},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("FromEnv = %+v, want %+v", cfg, want)
	}
	if cfg, err := app.FromEnv(with("RUNLEDGER_MAX_CLOCK_SKEW", "")); err != nil || cfg.MaxClockSkew != scheduler.DefaultMaxClockSkew {
		t.Errorf("unset skew: %s, %v; want the default %s", cfg.MaxClockSkew, err, scheduler.DefaultMaxClockSkew)
	}
	for _, tc := range []struct{ key, value, says string }{
		{"RUNLEDGER_TABLE", "", "RUNLEDGER_TABLE is empty"},
		{"RUNLEDGER_POOL_QUEUES", `["q"]`, "RUNLEDGER_POOL_QUEUES is not a JSON object"},
		{"RUNLEDGER_HISTORY_RETENTION", "-1h", `RUNLEDGER_HISTORY_RETENTION "-1h" is not a positive duration`},
		{"RUNLEDGER_MAX_CLOCK_SKEW", "1us", `RUNLEDGER_MAX_CLOCK_SKEW "1us" is not a duration of at least 1ms`},
		{"RUNLEDGER_EXECUTORS_ALLOWED", `["fn"]`, "RUNLEDGER_EXECUTORS_ALLOWED is not a JSON object"},
		{"RUNLEDGER_TICKER_PERIOD", "10ms", `RUNLEDGER_TICKER_PERIOD "10ms" is not a duration of at least 1s`},
	} {
		if _, err := app.FromEnv(with(tc.key, tc.value)); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s=%q: FromEnv = %v, want an error saying %q", tc.key, tc.value, err, tc.says)
		}
	}
}

func TestWorkerPart(t *testing.T) {
	t.Parallel()
	p := app.Worker{Pool: "shell", Name: "exec-shell", Concurrency: 2, Handler: func(context.Context, worker.Task) error { return nil }}.Part()
	if p.Name != "worker exec-shell" || !reflect.DeepEqual(p.Pools, []string{"shell"}) || p.Start == nil {
		t.Fatalf("part = %+v", p)
	}
	l := app.Local{
		APIURL: "http://127.0.0.1:8080", Queues: map[string]string{"shell": "http://sqs/q-shell", "events": "http://sqs/q-events"},
		Queue: queue.New(sdk.SQSClient()), PollWait: time.Second,
	}
	if run, err := p.Start(l); err != nil || run == nil {
		t.Errorf("Start = %v, want a worker to run", err)
	}
	l.APIURL = ""
	if _, err := p.Start(l); err == nil || !strings.Contains(err.Error(), "exec-shell worker") {
		t.Errorf("Start without an API URL = %v, want an error naming the worker", err)
	}
}

// Boot is what the scheduler Lambda entries run at start: the graph from
// the environment, or the setting that is missing.
func TestBootReadsTheEnvironment(t *testing.T) {
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	t.Setenv("AWS_CONFIG_FILE", "/dev/null")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
	t.Setenv("RUNLEDGER_TABLE", "")
	if _, log, err := app.Boot(t.Context()); err == nil || log == nil || !strings.Contains(err.Error(), "RUNLEDGER_TABLE is empty") {
		t.Errorf("Boot without a table = %v (logger %v), want the missing setting named", err, log != nil)
	}
	t.Setenv("RUNLEDGER_TABLE", "rl-prod")
	t.Setenv("RUNLEDGER_POOL_QUEUES", `{"default":"https://sqs/q1"}`)
	t.Setenv("RUNLEDGER_API_KEY", "k")
	a, _, err := app.Boot(t.Context(), app.Part{Name: "executor", Evidence: func(*store.Store) []scheduler.EvidenceProvider {
		return []scheduler.EvidenceProvider{partEvidence{}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Evidence) != 2 {
		t.Errorf("evidence = %#v, want the worker leases' and the part's", a.Evidence)
	}
	if a.Store.Table() != "rl-prod" || a.Service.Pools()["default"] != "https://sqs/q1" || a.Config.Metrics == io.Discard {
		t.Errorf("table %q, pools %v, metrics discarded %v; want rl-prod, the env's pools, metrics on stdout",
			a.Store.Table(), a.Service.Pools(), a.Config.Metrics == io.Discard)
	}
	if _, err := a.HTTP(); err != nil {
		t.Errorf("HTTP = %v", err)
	}
}

// typed is an Executor that only has a type.
type typed string

func (t typed) Type() string { return string(t) }
func (typed) Start(context.Context, protocol.Envelope, jobspec.Executor) (string, error) {
	return "", errors.New("not started")
}
func (typed) Stop(context.Context, string, jobspec.Executor) error { return nil }
func (typed) Check(context.Context, jobspec.Executor, ledger.Instance, statemodel.AttemptRecord) (scheduler.Evidence, error) {
	return scheduler.Evidence{Verdict: scheduler.VerdictUnknown}, nil
}
