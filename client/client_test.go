package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/runledger/runledger/shared/fault"
	"github.com/runledger/runledger/shared/localinfo"
)

// clearEnv unsets the variables New reads, for this test.
func clearEnv(t *testing.T) {
	for _, k := range []string{EnvAPIURL, EnvAPIKey, EnvStack} {
		t.Setenv(k, "")
	}
	t.Chdir(t.TempDir()) // no .runledger/local.json above the working directory
}

func TestErrorCarriesTheServersCodeAndMessage(t *testing.T) {
	cases := []struct {
		name, body string
		status     int
		code, msg  string
	}{
		{"api error", `{"code":"version_conflict","message":"The job changed since that version; read it again."}`, 412,
			CodeVersionConflict, "The job changed since that version; read it again."},
		{"gateway refusal", `{"message":"Forbidden"}`, 403, "", "Forbidden"},
		{"not json", "upstream went away", 502, "", "upstream went away"},
		{"empty", "", 503, "", "Service Unavailable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, c.body)
			}))
			defer srv.Close()
			cl, err := New(context.Background(), Options{URL: srv.URL, APIKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = cl.UpdateJob(context.Background(), "nightly", 3, map[string]any{"pool": "default"})
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want *Error", err, err)
			}
			if e.Status != c.status || e.Code != c.code || e.Message != c.msg || ErrorCode(err) != c.code {
				t.Fatalf("got %+v, want %d %q %q", e, c.status, c.code, c.msg)
			}
			if !strings.Contains(err.Error(), "update job nightly") {
				t.Fatalf("error text %q does not name the call", err)
			}
		})
	}
	if ErrorCode(errors.New("network")) != "" {
		t.Fatal("a non-API error has no code")
	}
}

func TestErrorClassIsItsCodes(t *testing.T) {
	for code, want := range map[string]fault.Class{
		CodeVersionConflict: fault.Conflict, CodeNotFound: fault.NotFound, CodeInvalidToken: fault.Forbidden, "": fault.Internal,
	} {
		err := fmt.Errorf("apply: %w", &Error{Op: "update job nightly", Status: 400, Code: code})
		if got := fault.ClassOf(err); got != want {
			t.Errorf("code %q: class %v, want %v", code, got, want)
		}
	}
}

// recorder is an API stand-in that records what it was sent.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	Method, Path, Query, Auth, IfMatch, IdemKey string
	Body                                        string
}

func (rc *recorder) server(t *testing.T, answer string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, recorded{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Authorization"),
			r.Header.Get("If-Match"), r.Header.Get("Idempotency-Key"), string(b)})
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func (rc *recorder) last() recorded {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.reqs[len(rc.reqs)-1]
}

func TestRequestsCarryHeadersQueryAndBody(t *testing.T) {
	var rc recorder
	srv := rc.server(t, `{"run":{"id":"r1","job":"j","execution_state":"QUEUED","status":"PENDING","logical_time":"2026-03-01T00:00:00.000Z","ended_at":null},"tasks":[]}`)
	cl, err := New(context.Background(), Options{URL: srv.URL + "/", APIKey: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lt := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	run, created, err := cl.TriggerRun(ctx, "j", Trigger{IdempotencyKey: "k-1", Params: map[string]int{"n": 1}, LogicalTime: lt})
	if err != nil || !created || run.Run.ID != "r1" || !run.Run.LogicalTime.Equal(lt) || !run.Run.EndedAt.IsZero() {
		t.Fatalf("trigger: %+v created=%v err=%v", run, created, err)
	}
	got := rc.last()
	want := recorded{"POST", "/v1/jobs/j/runs", "", "Bearer secret", "", "k-1", `{"params":{"n":1},"logical_time":"2026-03-01T00:00:00.000Z"}`}
	if got != want {
		t.Fatalf("trigger sent %+v, want %+v", got, want)
	}

	if _, err := cl.ListRuns(ctx, RunFilter{Job: "j", Status: "FAILED", Page: Page{Limit: 5, NextToken: "t/1"}}); err != nil {
		t.Fatal(err)
	}
	q, _ := url.ParseQuery(rc.last().Query)
	if q.Get("job") != "j" || q.Get("status") != "FAILED" || q.Get("limit") != "5" || q.Get("next_token") != "t/1" {
		t.Fatalf("list runs query %q", rc.last().Query)
	}

	_, _ = cl.UpdateJob(ctx, "a b", 7, []byte(`{"pool":"demo"}`))
	if got := rc.last(); got.Method != "PUT" || got.Path != "/v1/jobs/a%20b" || got.IfMatch != "7" || got.Body != `{"pool":"demo"}` {
		t.Fatalf("update sent %+v", got)
	}
	if _, err := cl.RetryTask(ctx, "r1", "load", Retry{Operator: "ann", Reason: "fixed", Downstream: true}); err != nil {
		t.Fatal(err)
	}
	if got := rc.last(); got.Path != "/v1/runs/r1/tasks/load/retry" || got.Body != `{"reason":"fixed","operator":"ann","downstream":true}` {
		t.Fatalf("retry sent %+v", got)
	}
}

func TestEndpointAndKeyDiscovery(t *testing.T) {
	writeInfo := func(t *testing.T, dir, apiURL, key string) string {
		p := filepath.Join(dir, localinfo.DefaultPath)
		if err := localinfo.Write(p, localinfo.Info{APIURL: apiURL, APIKey: key}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("explicit URL wins over the environment", func(t *testing.T) {
		clearEnv(t)
		t.Setenv(EnvAPIURL, "https://env.example")
		cl, err := New(context.Background(), Options{URL: "https://opt.example/", APIKey: "k"})
		if err != nil || cl.Endpoint() != "https://opt.example" {
			t.Fatalf("endpoint %v, %v", cl, err)
		}
	})
	t.Run("environment", func(t *testing.T) {
		clearEnv(t)
		t.Setenv(EnvAPIURL, "https://env.example")
		t.Setenv(EnvAPIKey, "envkey")
		cl, err := New(context.Background(), Options{})
		if err != nil || cl.Endpoint() != "https://env.example" || cl.auth != bearer("envkey") {
			t.Fatalf("endpoint %+v, %v", cl, err)
		}
	})
	t.Run("local file found from a subfolder", func(t *testing.T) {
		clearEnv(t)
		root := t.TempDir()
		writeInfo(t, root, "http://127.0.0.1:8080", "localkey")
		sub := filepath.Join(root, "a", "b")
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Chdir(sub)
		cl, err := New(context.Background(), Options{})
		if err != nil || cl.Endpoint() != "http://127.0.0.1:8080" || cl.auth != bearer("localkey") {
			t.Fatalf("client %+v, %v", cl, err)
		}
	})
	t.Run("the local key goes only to the local URL", func(t *testing.T) {
		clearEnv(t)
		p := writeInfo(t, t.TempDir(), "http://127.0.0.1:8080", "localkey")
		cl, err := New(context.Background(), Options{URL: "http://127.0.0.1:8080/", LocalInfo: p})
		if err != nil || cl.auth != bearer("localkey") {
			t.Fatalf("same URL: %+v, %v", cl, err)
		}
		cl, err = New(context.Background(), Options{URL: "https://elsewhere.example", LocalInfo: p, Region: "eu-west-1",
			AWSConfig: &aws.Config{Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")}})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := cl.auth.(*sigv4); !ok {
			t.Fatalf("another URL must be signed, not sent the local key: %T", cl.auth)
		}
	})
	t.Run("nothing to go on", func(t *testing.T) {
		clearEnv(t)
		_, err := New(context.Background(), Options{})
		if err == nil || !strings.Contains(err.Error(), EnvAPIURL) {
			t.Fatalf("want an error naming the ways to set the endpoint, got %v", err)
		}
	})
	t.Run("not a URL", func(t *testing.T) {
		clearEnv(t)
		if _, err := New(context.Background(), Options{URL: "127.0.0.1:8080", APIKey: "k"}); err == nil {
			t.Fatal("an endpoint without scheme must be refused")
		}
	})
}

// TestAPIKeyNotSentOverPlainHTTPToAnotherHost: the bearer key goes over
// plain http only to the loopback; another host wants https or an
// explicit Insecure, and the refusal says how to give it.
func TestAPIKeyNotSentOverPlainHTTPToAnotherHost(t *testing.T) {
	clearEnv(t)
	for _, tc := range []struct {
		url      string
		insecure bool
		ok       bool
	}{
		{"http://127.0.0.1:8080", false, true},
		{"http://127.8.9.10:8080", false, true},
		{"http://localhost:8080", false, true},
		{"http://LOCALHOST", false, true},
		{"http://[::1]:8080", false, true},
		{"https://api.example.com", false, true},
		{"http://api.example.com", false, false},
		{"http://10.0.0.7:8080", false, false},
		{"http://localhost.example.com", false, false},
		{"http://127.0.0.1.nip.io", false, false},
		{"http://[::ffff:10.0.0.7]:8080", false, false},
		{"http://api.example.com", true, true},
	} {
		_, err := New(context.Background(), Options{URL: tc.url, APIKey: "k", Insecure: tc.insecure})
		if (err == nil) != tc.ok {
			t.Errorf("%s insecure=%v: err %v, want ok %v", tc.url, tc.insecure, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--insecure") {
			t.Errorf("%s: %v: the refusal must name the option", tc.url, err)
		}
	}
	// SigV4 carries no reusable secret: a signed request over http is not refused here.
	if _, err := New(context.Background(), Options{URL: "http://api.example.com", Auth: AuthSigV4, Region: "eu-west-1",
		AWSConfig: &aws.Config{Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")}}); err != nil {
		t.Errorf("sigv4 over http: %v", err)
	}
}

// cloudFormation answers DescribeStacks in CloudFormation's query protocol
// (form-encoded request, XML answer), for the stacks it holds.
func cloudFormation(t *testing.T, stacks map[string]map[string]string) (*httptest.Server, *[]url.Values) {
	var mu sync.Mutex
	var seen []url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		mu.Lock()
		seen = append(seen, r.PostForm)
		mu.Unlock()
		if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "text/xml")
		name := r.PostForm.Get("StackName")
		outputs, ok := stacks[name]
		if r.PostForm.Get("Action") != "DescribeStacks" || !ok {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `<ErrorResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/"><Error><Type>Sender</Type><Code>ValidationError</Code><Message>Stack with id %s does not exist</Message></Error><RequestId>r-1</RequestId></ErrorResponse>`, name)
			return
		}
		var out bytes.Buffer
		for k, v := range outputs {
			fmt.Fprintf(&out, `<member><OutputKey>%s</OutputKey><OutputValue>%s</OutputValue></member>`, k, v)
		}
		fmt.Fprintf(w, `<DescribeStacksResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/">
<DescribeStacksResult><Stacks><member><StackName>%s</StackName><StackId>arn:aws:cloudformation:eu-west-1:123456789012:stack/%s/1</StackId>
<CreationTime>2026-11-30T10:00:00.000Z</CreationTime><StackStatus>CREATE_COMPLETE</StackStatus><Outputs>%s</Outputs></member></Stacks></DescribeStacksResult>
<ResponseMetadata><RequestId>r-2</RequestId></ResponseMetadata></DescribeStacksResponse>`, name, name, out.String())
	}))
	t.Cleanup(srv.Close)
	return srv, &seen
}

// signedAPI is an API stand-in that checks each request's SigV4 signature
// as API Gateway does: it signs the request it received (the signed
// headers only, the body it read, the X-Amz-Date sent) with the expected
// secret and compares.
func signedAPI(t *testing.T, region string, creds aws.Credentials) (*httptest.Server, *[]string) {
	var mu sync.Mutex
	var verdicts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		verdict := checkSignature(r, region, creds)
		mu.Lock()
		verdicts = append(verdicts, verdict)
		mu.Unlock()
		if verdict != "ok" {
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"message":"Forbidden"}`)
			return
		}
		_, _ = io.WriteString(w, `{"job":{"id":"hello","name":"hello","pool":"default","version":1,"paused":false}}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &verdicts
}

func checkSignature(r *http.Request, region string, creds aws.Credentials) string {
	auth := r.Header.Get("Authorization")
	scope := "/" + region + "/execute-api/aws4_request"
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential="+creds.AccessKeyID+"/") || !strings.Contains(auth, scope) {
		return "bad credential scope: " + auth
	}
	when, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return "no X-Amz-Date"
	}
	var signed []string
	for _, part := range strings.Split(auth, ", ") {
		if v, ok := strings.CutPrefix(part, "SignedHeaders="); ok {
			signed = strings.Split(v, ";")
		}
	}
	body, _ := io.ReadAll(r.Body)
	again, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	for _, h := range signed {
		if h != "host" {
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	again.Header.Del("Authorization")
	sum := sha256Hex(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, sum, "execute-api", region, when); err != nil {
		return err.Error()
	}
	if again.Header.Get("Authorization") != auth {
		return "signature mismatch"
	}
	return "ok"
}

func TestStackOutputsAndSigV4(t *testing.T) {
	clearEnv(t)
	creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret", SessionToken: "session"}
	api, verdicts := signedAPI(t, "eu-west-1", creds)
	cfn, seen := cloudFormation(t, map[string]map[string]string{
		"Runledger": {"ApiUrl": api.URL, "Region": "eu-west-1", "TableName": "t"},
	})
	cfg := aws.Config{
		Region:       "us-east-1", // the stack's Region output wins for signing
		Credentials:  credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken),
		BaseEndpoint: aws.String(cfn.URL),
	}
	ctx := context.Background()

	t.Setenv(EnvStack, "Runledger")
	cl, err := New(ctx, Options{AWSConfig: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	if cl.Endpoint() != api.URL {
		t.Fatalf("endpoint %s, want the ApiUrl output %s", cl.Endpoint(), api.URL)
	}
	if len(*seen) != 1 || (*seen)[0].Get("Action") != "DescribeStacks" || (*seen)[0].Get("StackName") != "Runledger" {
		t.Fatalf("CloudFormation saw %v", *seen)
	}
	job, err := cl.CreateJob(ctx, map[string]any{"name": "hello", "pool": "default"})
	if err != nil {
		t.Fatalf("signed create: %v (server: %v)", err, *verdicts)
	}
	if job.Job.Name != "hello" || job.Version != 1 {
		t.Fatalf("job %+v", job)
	}
	if _, err := cl.GetJob(ctx, "hello"); err != nil {
		t.Fatalf("signed get: %v (server: %v)", err, *verdicts)
	}

	wrong := cfg
	wrong.Credentials = credentials.NewStaticCredentialsProvider(creds.AccessKeyID, "not the secret", creds.SessionToken)
	cl, err = New(ctx, Options{Stack: "Runledger", AWSConfig: &wrong})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.GetJob(ctx, "hello"); err == nil || (*verdicts)[len(*verdicts)-1] != "signature mismatch" {
		t.Fatalf("a wrong secret must fail the check: %v %v", err, *verdicts)
	}

	_, err = New(ctx, Options{Stack: "Nope", AWSConfig: &cfg})
	if err == nil || !strings.Contains(err.Error(), "Nope") || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("a missing stack: %v", err)
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
