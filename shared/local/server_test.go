package local_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/awslabs/aws-lambda-go-api-proxy/core"

	"github.com/runledger/runledger/shared/local"
)

// echo is what the test handler saw of a request.
type echo struct {
	Method, Path, RawQuery, Host string
	Query                        map[string][]string
	Header                       map[string][]string
	Cookies                      []string
	Body                         []byte
	RouteKey, Stage, GatewayPath string
	SourceIP, GatewayRequestID   string
	LambdaRequestID              string
	Deadline                     bool
}

func echoHandler(invoked *atomic.Int64) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/binary", func(w http.ResponseWriter, r *http.Request) {
		invoked.Add(1)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(allBytes())
	})
	mux.HandleFunc("/silent", func(w http.ResponseWriter, r *http.Request) {
		// Writes nothing: net/http would answer 200, the Lambda adapter
		// fails the invocation.
		invoked.Add(1)
	})
	mux.HandleFunc("/panic", func(w http.ResponseWriter, r *http.Request) {
		invoked.Add(1)
		panic("api bug")
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		invoked.Add(1)
		<-r.Context().Done()
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		invoked.Add(1)
		body, _ := io.ReadAll(r.Body)
		e := echo{
			Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Host: r.Host,
			Query: r.URL.Query(), Header: r.Header, Body: body,
		}
		for _, c := range r.Cookies() {
			e.Cookies = append(e.Cookies, c.Name+"="+c.Value)
		}
		if gw, ok := core.GetAPIGatewayV2ContextFromContext(r.Context()); ok {
			e.RouteKey, e.Stage, e.GatewayPath = gw.RouteKey, gw.Stage, gw.HTTP.Path
			e.SourceIP, e.GatewayRequestID = gw.HTTP.SourceIP, gw.RequestID
		}
		if lc, ok := lambdacontext.FromContext(r.Context()); ok {
			e.LambdaRequestID = lc.AwsRequestID
		}
		_, e.Deadline = r.Context().Deadline()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Single", "one")
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		http.SetCookie(w, &http.Cookie{Name: "s1", Value: "v1", Path: "/"})
		http.SetCookie(w, &http.Cookie{Name: "s2", Value: "v2", HttpOnly: true})
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(e)
	})
	return mux
}

func allBytes() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func startServer(t *testing.T, s *local.Server) string {
	t.Helper()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return s.URL()
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func newRequest(t *testing.T, method, url string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// Requests reach the handler through API Gateway's payload 2.0 and the
// Lambda adapter, and its answers come back whole.
func TestServerRoundTripsThroughV2Adapter(t *testing.T) {
	t.Parallel()
	var invoked atomic.Int64
	counters := local.NewCounters()
	s := &local.Server{Name: "api", Handler: echoHandler(&invoked), ListenAddr: "127.0.0.1:0", Counters: counters}
	base := startServer(t, s)
	if !strings.HasPrefix(base, "http://127.0.0.1:") || strings.HasSuffix(base, ":0") {
		t.Fatalf("URL %q, want the port actually bound", base)
	}
	requests := 0

	t.Run("json", func(t *testing.T) {
		requests++
		const query = "x=1&x=2&name=%C3%A9t%C3%A9&plus=a%2Bb&empty="
		req := newRequest(t, http.MethodPost, base+"/v1/jobs/a%20b%2Fc/runs?"+query, []byte(`{"hello":"world"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Add("X-Custom", "v1")
		req.Header.Add("X-Custom", "v2")
		req.Header.Set("User-Agent", "local-test")
		req.Header.Set("Cookie", "session=abc; theme=dark")
		resp, body := do(t, req)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d (%s), want 201", resp.StatusCode, body)
		}
		var e echo
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		// API Gateway's HTTP API hands the function the decoded path: the
		// escaped slash is a slash by the time the handler routes.
		if e.Method != "POST" || e.Path != "/v1/jobs/a b/c/runs" || e.GatewayPath != "/v1/jobs/a b/c/runs" {
			t.Errorf("method %q path %q gateway path %q", e.Method, e.Path, e.GatewayPath)
		}
		if e.RawQuery != query {
			t.Errorf("raw query %q, want %q as sent", e.RawQuery, query)
		}
		wantQuery := map[string][]string{"x": {"1", "2"}, "name": {"été"}, "plus": {"a+b"}, "empty": {""}}
		if !reflect.DeepEqual(e.Query, wantQuery) {
			t.Errorf("query %v, want %v", e.Query, wantQuery)
		}
		if got := e.Header["X-Custom"]; !reflect.DeepEqual(got, []string{"v1", "v2"}) {
			t.Errorf("X-Custom %v, want v1 and v2", got)
		}
		if got := e.Header["User-Agent"]; !reflect.DeepEqual(got, []string{"local-test"}) {
			t.Errorf("User-Agent %v", got)
		}
		if got := e.Header["X-Forwarded-For"]; !reflect.DeepEqual(got, []string{"127.0.0.1"}) {
			t.Errorf("X-Forwarded-For %v, want the client address", got)
		}
		if !reflect.DeepEqual(e.Cookies, []string{"session=abc", "theme=dark"}) {
			t.Errorf("cookies %v", e.Cookies)
		}
		if string(e.Body) != `{"hello":"world"}` {
			t.Errorf("body %q", e.Body)
		}
		if e.RouteKey != "$default" || e.Stage != "$default" || e.SourceIP != "127.0.0.1" {
			t.Errorf("request context: route %q stage %q source %q", e.RouteKey, e.Stage, e.SourceIP)
		}
		if e.LambdaRequestID == "" || !e.Deadline {
			t.Errorf("lambda request id %q, deadline %v: want an invocation context", e.LambdaRequestID, e.Deadline)
		}
		if got := resp.Header.Get("Apigw-Requestid"); got == "" || got != e.GatewayRequestID {
			t.Errorf("Apigw-Requestid %q, request context id %q", got, e.GatewayRequestID)
		}
		if resp.Header.Get("X-Single") != "one" || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("response headers %v", resp.Header)
		}
		// Payload 2.0 has one value per header: the adapter joins repeats.
		if got := resp.Header.Values("X-Multi"); !reflect.DeepEqual(got, []string{"a,b"}) {
			t.Errorf("X-Multi %v, want the joined a,b", got)
		}
		var cookies []string
		for _, c := range resp.Cookies() {
			cookies = append(cookies, c.Name+"="+c.Value)
		}
		if !reflect.DeepEqual(cookies, []string{"s1=v1", "s2=v2"}) || !slices.Contains(resp.Header.Values("Set-Cookie"), "s2=v2; HttpOnly") {
			t.Errorf("Set-Cookie %v, want s1 and s2 as separate headers", resp.Header.Values("Set-Cookie"))
		}
	})

	t.Run("binary request body", func(t *testing.T) {
		requests++
		req := newRequest(t, http.MethodPut, base+"/blob", allBytes())
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, body := do(t, req)
		var e echo
		if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d body %q: %v", resp.StatusCode, body, err)
		}
		if !bytes.Equal(e.Body, allBytes()) || e.Method != "PUT" {
			t.Errorf("%s body %x, want bytes 0..255", e.Method, e.Body)
		}
	})

	t.Run("form body", func(t *testing.T) {
		requests++
		req := newRequest(t, http.MethodPost, base+"/form", []byte("a=1&b=%C3%A9"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		_, body := do(t, req)
		var e echo
		if err := json.Unmarshal(body, &e); err != nil || string(e.Body) != "a=1&b=%C3%A9" {
			t.Errorf("form body %q (%v)", e.Body, err)
		}
	})

	t.Run("binary response body", func(t *testing.T) {
		requests++
		resp, body := do(t, newRequest(t, http.MethodGet, base+"/binary", nil))
		if resp.StatusCode != http.StatusOK || !bytes.Equal(body, allBytes()) || resp.Header.Get("Content-Type") != "application/octet-stream" {
			t.Errorf("status %d type %q body %x, want 200 and bytes 0..255", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	})

	t.Run("failed invocations", func(t *testing.T) {
		for _, path := range []string{"/silent", "/panic"} {
			requests++
			resp, body := do(t, newRequest(t, http.MethodGet, base+path, nil))
			if resp.StatusCode != http.StatusInternalServerError || string(body) != `{"message":"Internal Server Error"}` {
				t.Errorf("%s: %d %s, want API Gateway's 500", path, resp.StatusCode, body)
			}
		}
	})

	t.Run("body over the payload limit", func(t *testing.T) {
		requests++
		before := invoked.Load()
		req := newRequest(t, http.MethodPost, base+"/big", make([]byte, local.MaxRequestBody+1))
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, body := do(t, req)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || string(body) != `{"message":"Request Entity Too Large"}` {
			t.Errorf("%d %s, want 413", resp.StatusCode, body)
		}
		if invoked.Load() != before {
			t.Error("the function was invoked with an oversized body")
		}
	})

	snap := counters.Snapshot()
	if snap.APIRequests != int64(requests) {
		t.Errorf("%d API requests counted, want %d", snap.APIRequests, requests)
	}
	if f := snap.Functions["api"]; f.Invocations != invoked.Load() || f.Errors != 2 {
		t.Errorf("counted %+v, want %d invocations, 2 failed", f, invoked.Load())
	}
}

func TestServerFunctionTimeout(t *testing.T) {
	t.Parallel()
	var invoked atomic.Int64
	s := &local.Server{Name: "api", Handler: echoHandler(&invoked), ListenAddr: "127.0.0.1:0", FunctionTimeout: 200 * time.Millisecond}
	base := startServer(t, s)
	resp, body := do(t, newRequest(t, http.MethodGet, base+"/slow", nil))
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != `{"message":"Service Unavailable"}` {
		t.Errorf("%d %s, want 503", resp.StatusCode, body)
	}
}

func TestServerStartErrors(t *testing.T) {
	t.Parallel()
	h := http.NotFoundHandler()
	first := &local.Server{Name: "api", Handler: h, ListenAddr: "127.0.0.1:0"}
	base := startServer(t, first)
	if err := first.Start(); err == nil {
		t.Error("second Start succeeded")
	}
	taken := &local.Server{Name: "api", Handler: h, ListenAddr: strings.TrimPrefix(base, "http://")}
	if err := taken.Start(); err == nil {
		taken.Shutdown(context.Background())
		t.Error("Start on a taken port succeeded")
	}
	for _, s := range []*local.Server{{Handler: h}, {Name: "api"}} {
		if err := s.Start(); err == nil {
			s.Shutdown(context.Background())
			t.Errorf("Start accepted %+v", s)
		}
	}
	if (&local.Server{}).Shutdown(context.Background()) != nil {
		t.Error("Shutdown of a server never started failed")
	}
}

// TestServerRefusesOtherHosts: DNS rebinding reaches the loopback server
// with another name in Host; only the loopback names and addresses with
// the server's port get through, to the API and to every other route
// (/metrics) alike. The others get 421 in the API's error shape, and the
// function is never invoked.
func TestServerRefusesOtherHosts(t *testing.T) {
	t.Parallel()
	var invoked atomic.Int64
	s := &local.Server{Name: "api", Handler: echoHandler(&invoked), ListenAddr: "127.0.0.1:0"}
	base := startServer(t, s)
	port := base[strings.LastIndex(base, ":")+1:]
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1:" + port, true},
		{"localhost:" + port, true},
		{"LocalHost:" + port, true},
		{"[::1]:" + port, true},
		{"evil.example:" + port, false},
		{"localhost.evil.example:" + port, false},
		{"127.0.0.1.nip.io:" + port, false},
		{"127.0.0.1", false},          // no port: the default 80 is not this server
		{"127.0.0.1:1" + port, false}, // another port
		{"10.1.2.3:" + port, false},
		{"[fe80::1%25lo]:" + port, false},
	} {
		before := invoked.Load()
		for _, path := range []string{"/v1/jobs", "/metrics"} {
			req := newRequest(t, http.MethodGet, base+path, nil)
			req.Host = tc.host
			resp, body := do(t, req)
			if tc.ok {
				if resp.StatusCode == http.StatusMisdirectedRequest {
					t.Errorf("Host %q %s: refused (%s)", tc.host, path, body)
				}
				continue
			}
			var e struct{ Code, Message string }
			if resp.StatusCode != http.StatusMisdirectedRequest || json.Unmarshal(body, &e) != nil ||
				e.Code != "misdirected_request" || e.Message == "" {
				t.Errorf("Host %q %s: %d %s, want 421 misdirected_request", tc.host, path, resp.StatusCode, body)
			}
		}
		if !tc.ok && invoked.Load() != before {
			t.Errorf("Host %q: the function was invoked", tc.host)
		}
	}
}
