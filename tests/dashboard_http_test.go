package tests

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
)

// get sends a GET with optional headers (name, value, ...) and no API key
// unless one is among them; it answers the response and its body.
func (s *stack) get(path string, headers ...string) (*http.Response, string) {
	s.t.Helper()
	req, err := http.NewRequest("GET", s.url+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		s.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// The dashboard's page and assets need no key, through the same API
// Gateway adapter as the API; /v1 still does.
func TestDashboardServedWithoutAuth(t *testing.T) {
	s := startStack(t, devstack.Options{})
	if got := s.DashboardURL(); got != s.url+"/ui/" {
		t.Fatalf("DashboardURL %q, want %q", got, s.url+"/ui/")
	}
	resp, body := s.get("/ui/")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(body, `<script type="module" src="app.js">`) || resp.Header.Get("Content-Security-Policy") == "" {
		t.Fatalf("/ui/: %d %v\n%s", resp.StatusCode, resp.Header, body)
	}
	resp, body = s.get("/ui/app.js")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") || !strings.Contains(body, "sessionStorage") {
		t.Fatalf("/ui/app.js: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	etag := resp.Header.Get("ETag")
	if resp, _ := s.get("/ui/app.js", "If-None-Match", etag); etag == "" || resp.StatusCode != http.StatusNotModified {
		t.Fatalf("/ui/app.js with If-None-Match %q: %d", etag, resp.StatusCode)
	}
	if resp, _ := s.get("/ui"); resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/ui/index.html" {
		t.Fatalf("/ui: %d to %q, want a redirect to /ui/index.html", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, body := s.get("/ui/index.html"); resp.StatusCode != http.StatusOK || !strings.Contains(body, "app.js") {
		t.Fatalf("/ui/index.html: %d", resp.StatusCode)
	}
	if resp, body := s.get("/ui/nothing.js"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/ui/nothing.js: %d %s", resp.StatusCode, body)
	}
	if resp, _ := s.get("/v1/runs"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/v1/runs without a key: %d", resp.StatusCode)
	}
}

// GET /v1/runs/{run} carries an ETag; If-None-Match with it answers 304
// with no body until the run changes.
func TestRunETag(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(quickJob("etag", nil))
	id := s.trigger("etag", nil)
	s.waitTask(id, "main", "QUEUED", 30*time.Second)
	auth := "Bearer " + s.key
	resp, body := s.get("/v1/runs/"+id, "Authorization", auth)
	etag := resp.Header.Get("ETag")
	if resp.StatusCode != http.StatusOK || etag == "" || !strings.Contains(body, `"execution_state"`) {
		t.Fatalf("GET run: %d etag %q", resp.StatusCode, etag)
	}
	resp, body = s.get("/v1/runs/"+id, "Authorization", auth, "If-None-Match", etag)
	if resp.StatusCode != http.StatusNotModified || body != "" {
		t.Fatalf("GET run with its ETag: %d %q, want 304 and no body", resp.StatusCode, body)
	}
	if resp, _ := s.get("/v1/runs/"+id, "If-None-Match", etag); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET run with its ETag and no key: %d, want 401", resp.StatusCode)
	}
	s.call("POST", "/v1/runs/"+id+"/cancel", map[string]any{"reason": "etag test"}).must(t, http.StatusOK)
	resp, body = s.get("/v1/runs/"+id, "Authorization", auth, "If-None-Match", etag)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") == etag || !strings.Contains(body, `"CANCELLED"`) {
		t.Fatalf("GET run after a cancel with the old ETag: %d etag %q", resp.StatusCode, resp.Header.Get("ETag"))
	}
}
