package lambdaexec_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/lambdaexec"
	"github.com/runledger/runledger/shared/protocol"
)

// recorded is one request the fake Lambda endpoint received.
type recorded struct {
	method, path, invocationType, contentType string
	body                                      string
}

// fakeLambda speaks Lambda's REST-JSON protocol for Invoke: it records each
// request and answers with status and, for 202, a request id.
func fakeLambda(t *testing.T, status int, errType string) (*httptest.Server, func() []recorded) {
	t.Helper()
	var mu sync.Mutex
	var got []recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, recorded{method: r.Method, path: r.URL.EscapedPath(), invocationType: r.Header.Get("X-Amz-Invocation-Type"),
			contentType: r.Header.Get("Content-Type"), body: string(b)})
		mu.Unlock()
		w.Header().Set("X-Amzn-Requestid", "5f3c2a10-0000-4000-8000-00000000abcd")
		if errType != "" {
			w.Header().Set("X-Amzn-Errortype", errType)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `{"Type":"User","message":"Function not found: arn:aws:lambda:eu-west-1:123456789012:function:nope"}`)
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []recorded { mu.Lock(); defer mu.Unlock(); return append([]recorded(nil), got...) }
}

func client(url string) lambdaexec.Client {
	return lambdaexec.Client{API: lambda.New(lambda.Options{
		Region: "eu-west-1", BaseEndpoint: aws.String(url),
		Credentials:      credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		RetryMaxAttempts: 1,
	})}
}

var env = protocol.Envelope{Job: "j", Run: "01JRUN", Task: "main", Attempt: 2, Token: "tok", Pool: "default",
	Payload: []byte(`{"x":1}`), HeartbeatInterval: 20 * time.Second, ClaimBy: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}

// Start is one asynchronous Invoke of the named function with the envelope
// as the body; the executor id is the request id Lambda answers with.
func TestStartInvokesAsynchronously(t *testing.T) {
	srv, requests := fakeLambda(t, http.StatusAccepted, "")
	x := lambdaexec.Executor{Invoker: client(srv.URL)}
	id, err := x.Start(context.Background(), env, jobspec.Executor{Type: "lambda", Function: "etl-fn"})
	if err != nil {
		t.Fatal(err)
	}
	if id != "5f3c2a10-0000-4000-8000-00000000abcd" {
		t.Errorf("executor id %q, want the request id", id)
	}
	got := requests()
	if len(got) != 1 {
		t.Fatalf("%d requests, want 1", len(got))
	}
	r := got[0]
	if r.method != http.MethodPost || r.path != "/2015-03-31/functions/etl-fn/invocations" || r.invocationType != "Event" {
		t.Errorf("request %s %s invocation type %q; want POST /2015-03-31/functions/etl-fn/invocations, Event", r.method, r.path, r.invocationType)
	}
	back, err := protocol.ParseEnvelope(r.body)
	if err != nil || back.Run != env.Run || back.Attempt != 2 || back.Token != "tok" || string(back.Payload) != `{"x":1}` {
		t.Errorf("body %s (%v), want the envelope", r.body, err)
	}
}

// An ARN with a qualifier goes in the path as Lambda takes it.
func TestStartNamesTheFunctionByARN(t *testing.T) {
	srv, requests := fakeLambda(t, http.StatusAccepted, "")
	arn := "arn:aws:lambda:eu-west-1:123456789012:function:etl-fn:live"
	if _, err := (lambdaexec.Executor{Invoker: client(srv.URL)}).Start(context.Background(), env, jobspec.Executor{Type: "lambda", Function: arn}); err != nil {
		t.Fatal(err)
	}
	if p := requests()[0].path; p != "/2015-03-31/functions/arn%3Aaws%3Alambda%3Aeu-west-1%3A123456789012%3Afunction%3Aetl-fn%3Alive/invocations" {
		t.Errorf("path %s", p)
	}
}

// Lambda's refusal is Start's error, naming the function and the cause.
func TestStartRefused(t *testing.T) {
	srv, _ := fakeLambda(t, http.StatusNotFound, "ResourceNotFoundException")
	_, err := (lambdaexec.Executor{Invoker: client(srv.URL)}).Start(context.Background(), env, jobspec.Executor{Type: "lambda", Function: "nope"})
	if err == nil || !strings.Contains(err.Error(), "invoke nope") || !strings.Contains(err.Error(), "ResourceNotFoundException") {
		t.Fatalf("err = %v, want the refusal", err)
	}
}

// A 200 (a synchronous answer) is not an accepted asynchronous invoke.
func TestStartWantsAccepted(t *testing.T) {
	srv, _ := fakeLambda(t, http.StatusOK, "")
	if _, err := (lambdaexec.Executor{Invoker: client(srv.URL)}).Start(context.Background(), env, jobspec.Executor{Type: "lambda", Function: "fn"}); err == nil ||
		!strings.Contains(err.Error(), "not 202") {
		t.Fatalf("err = %v", err)
	}
}
