package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func newTestHandler(t *testing.T) *Handler {
	t.Helper()
	h, err := New(nil, Config{Auth: AuthAPIKey, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func serve(h http.Handler, method, path, auth string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(""))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestOpenAPICoversEveryRoute reads the document the handler serves and
// checks that every route the handler serves is in it, and that every
// documented operation is served (answered by its route, not by the
// catch-all 404).
func TestOpenAPICoversEveryRoute(t *testing.T) {
	h := newTestHandler(t)
	rec := serve(h, "GET", "/v1/openapi.json", "")
	if rec.Code != http.StatusOK {
		t.Fatalf("openapi: %d", rec.Code)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	routes := h.routes()
	for _, rt := range routes {
		if _, ok := doc.Paths[rt.Pattern][strings.ToLower(rt.Method)]; !ok {
			t.Errorf("%s %s is served but not documented", rt.Method, rt.Pattern)
		}
	}
	documented := 0
	for path, ops := range doc.Paths {
		for method := range ops {
			documented++
			concrete := pathParam.ReplaceAllString(path, "x")
			rec := serve(h, strings.ToUpper(method), concrete, "")
			var body map[string]string
			_ = json.Unmarshal(rec.Body.Bytes(), &body)
			if rec.Code == http.StatusNotFound && strings.HasPrefix(body["message"], "No route matches") {
				t.Errorf("%s %s is documented but not served", method, path)
			}
		}
	}
	if documented != len(routes) {
		t.Errorf("documented %d operations, the handler has %d routes", documented, len(routes))
	}
	for _, must := range []string{"/healthz", "/v1/openapi.json", "/v1/attempts/claim", "/v1/jobs/{job}/runs"} {
		if _, ok := doc.Paths[must]; !ok {
			t.Errorf("%s missing from the document", must)
		}
	}
}

func TestAuthOrder(t *testing.T) {
	h := newTestHandler(t)
	cases := []struct {
		name, method, path, auth string
		status                   int
		code                     string
	}{
		{"no key", "GET", "/v1/jobs", "", 401, "unauthorized"},
		{"wrong key", "GET", "/v1/jobs", "Bearer nope", 401, "unauthorized"},
		{"worker route without bearer", "POST", "/v1/attempts/claim", "", 401, "unauthorized"},
		{"healthz needs none", "GET", "/healthz", "", 200, ""},
		{"unknown route", "GET", "/v2/nothing", "Bearer k", 404, "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := serve(h, c.method, c.path, c.auth)
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
			}
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("not JSON: %s", rec.Body)
			}
			if c.code != "" && (body["code"] != c.code || body["message"] == "") {
				t.Fatalf("body %v, want code %s with a message", body, c.code)
			}
		})
	}
}

func TestNewRefusesAnOpenAPIWithoutKey(t *testing.T) {
	if _, err := New(nil, Config{Auth: AuthAPIKey}); err == nil {
		t.Fatal("an API without key and without gateway auth must be refused")
	}
	if _, err := New(nil, Config{Auth: AuthGateway}); err != nil {
		t.Fatalf("gateway auth: %v", err)
	}
}
