package api

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// The worker routes read their bodies with package protocol's decoders and
// validators and answer each refusal with its status and code before the
// token is looked at (no service is needed to refuse them).
func TestWorkerBodiesRefusedBeforeTheToken(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t)
	const ok = `"run":"r","task":"t","attempt":1,"event_id":"e1"`
	cases := []struct {
		name, path, body string
		status           int
		code, says       string
	}{
		{"broken JSON", "/v1/attempts/complete", `{"run":`, 400, "invalid_json", "not valid JSON"},
		{"wrong type", "/v1/attempts/complete", `{"run":"r","task":"t","attempt":"1","event_id":"e1","outcome":"failed"}`, 422, "invalid_field", `"attempt"`},
		{"unknown field", "/v1/attempts/complete", `{` + ok + `,"outcome":"failed","colour":"red"}`, 422, "invalid_field", "colour"},
		{"event_time not a time", "/v1/attempts/complete", `{` + ok + `,"outcome":"failed","event_time":"noon"}`, 422, "invalid_field", "event_time"},
		{"bad outcome", "/v1/attempts/complete", `{` + ok + `,"outcome":"done"}`, 422, "invalid_field", "outcome"},
		{"reason over 4 KiB", "/v1/attempts/complete", `{` + ok + `,"outcome":"failed","reason":"` + strings.Repeat("x", 4097) + `"}`, 413, "payload_too_large", "reason"},
		{"claim of attempt 0", "/v1/attempts/claim", `{"run":"r","task":"t","attempt":0,"worker_id":"w","event_id":"c1"}`, 422, "invalid_field", "attempt"},
		{"claim without worker id", "/v1/attempts/claim", `{` + ok + `}`, 422, "invalid_field", "worker_id"},
		{"claim with an unknown field", "/v1/attempts/claim", `{` + ok + `,"worker_id":"w","lease":"1m"}`, 422, "invalid_field", "lease"},
		{"heartbeat without task", "/v1/attempts/heartbeat", `{"run":"r","attempt":1,"event_id":"h1"}`, 422, "invalid_field", "task"},
	}
	for _, c := range cases {
		req := httptest.NewRequest("POST", c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer some-token")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var body struct{ Code, Message string }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != c.status || body.Code != c.code || !strings.Contains(body.Message, c.says) {
			t.Errorf("%s: %d %s, want %d %s saying %q", c.name, rec.Code, rec.Body, c.status, c.code, c.says)
		}
	}
}
