package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
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

// TestOpenAPICoversEveryRoute checks the document against the route list:
// every route the handler serves is documented with the same summary and
// authentication, and every documented operation is served (answered by
// its route, not by the catch-all 404).
func TestOpenAPICoversEveryRoute(t *testing.T) {
	h := newTestHandler(t)
	doc, err := LoadOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the document is not valid OpenAPI: %v", err)
	}
	routes := h.routes()
	for _, rt := range routes {
		item := doc.Paths.Value(rt.Pattern)
		var op *openapi3.Operation
		if item != nil {
			op = item.GetOperation(rt.Method)
		}
		if op == nil {
			t.Errorf("%s %s is served but not documented in openapi.yaml", rt.Method, rt.Pattern)
			continue
		}
		if op.Summary != rt.Summary {
			t.Errorf("%s %s: summary %q in openapi.yaml, %q in routes()", rt.Method, rt.Pattern, op.Summary, rt.Summary)
		}
		if got, want := securityOf(op), securityFor(rt.Auth); got != want {
			t.Errorf("%s %s: security %s in openapi.yaml, want %s", rt.Method, rt.Pattern, got, want)
		}
	}
	documented := 0
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented++
			concrete := pathParam.ReplaceAllString(path, "x")
			rec := serve(h, method, concrete, "")
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
}

// securityOf names an operation's security: "none", "attemptToken", or
// "client" (the document's default: the API key or SigV4).
func securityOf(op *openapi3.Operation) string {
	switch {
	case op.Security == nil:
		return "client"
	case len(*op.Security) == 0:
		return "none"
	}
	var names []string
	for _, req := range *op.Security {
		for name := range req {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func securityFor(a authKind) string {
	switch a {
	case authNone:
		return "none"
	case authAttempt:
		return "attemptToken"
	case authSignal:
		return "apiKey,attemptToken"
	}
	return "client"
}

// TestOpenAPIEnumsAreTheStateModels checks that the document's enums list
// exactly statemodel's values, so a state, event or rule added there must
// be documented.
func TestOpenAPIEnumsAreTheStateModels(t *testing.T) {
	doc, err := LoadOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	strs := func(vs ...string) []string { return vs }
	each := func(n int, f func(int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	states := statemodel.AllStates()
	stateNames := each(len(states), func(i int) string { return string(states[i]) })
	events := statemodel.AllEventTypes()
	actors := statemodel.AllActors()
	rules := statemodel.AllTriggerRules()
	pubs := statemodel.AllPublicationStates()
	runStates := statemodel.AllRunStates()
	statuses := statemodel.AllStatuses()
	reqs := statemodel.AllRequirements()
	notices := protocol.NoticeTypes()
	triggers := statemodel.AllTriggers()
	backfillStates := statemodel.AllBackfillStates()
	cases := []struct {
		schema, property string
		want             []string
	}{
		{"InstanceState", "", stateNames},
		{"Transition", "from", append(strs(""), stateNames...)},
		{"EventType", "", each(len(events), func(i int) string { return string(events[i]) })},
		{"Actor", "", each(len(actors), func(i int) string { return string(actors[i]) })},
		{"TriggerRule", "", each(len(rules), func(i int) string { return string(rules[i]) })},
		{"PublicationState", "", each(len(pubs), func(i int) string { return string(pubs[i]) })},
		{"RunState", "", each(len(runStates), func(i int) string { return string(runStates[i]) })},
		{"Status", "", each(len(statuses), func(i int) string { return string(statuses[i]) })},
		{"JobDependency", "require", each(len(reqs), func(i int) string { return string(reqs[i]) })},
		{"Notice", "type", each(len(notices), func(i int) string { return string(notices[i]) })},
		{"Run", "trigger", each(len(triggers), func(i int) string { return string(triggers[i]) })},
		{"Backfill", "state", each(len(backfillStates), func(i int) string { return string(backfillStates[i]) })},
	}
	for _, c := range cases {
		s := doc.Components.Schemas[c.schema].Value
		if c.property != "" {
			s = s.Properties[c.property].Value
		}
		var got []string
		for _, v := range s.Enum {
			got = append(got, v.(string))
		}
		sort.Strings(got)
		want := append([]string(nil), c.want...)
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s %s: the document lists %v, statemodel has %v", c.schema, c.property, got, want)
		}
	}
}

// TestOpenAPIIsServedAsJSON reads /v1/openapi.json: the YAML document,
// converted.
func TestOpenAPIIsServedAsJSON(t *testing.T) {
	rec := serve(newTestHandler(t), "GET", "/v1/openapi.json", "")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("openapi: %d %s", rec.Code, rec.Header())
	}
	served, err := openapi3.NewLoader().LoadFromData(rec.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	doc, err := LoadOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	if served.OpenAPI != "3.0.3" || served.Paths.Len() != doc.Paths.Len() || len(served.Components.Schemas) != len(doc.Components.Schemas) {
		t.Fatalf("served %s with %d paths and %d schemas, the YAML has %d and %d",
			served.OpenAPI, served.Paths.Len(), len(served.Components.Schemas), doc.Paths.Len(), len(doc.Components.Schemas))
	}
	for _, must := range []string{"/healthz", "/v1/openapi.json", "/v1/attempts/claim", "/v1/jobs/{job}/runs"} {
		if served.Paths.Value(must) == nil {
			t.Errorf("%s missing from the served document", must)
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

// TestErrorCodesAreDocumented checks that the OpenAPI document's Error.code
// enum and docs/api.md's table of errors name exactly protocol's codes,
// each with the status Code.Status answers, so a code added to the API
// must be documented in both.
func TestErrorCodesAreDocumented(t *testing.T) {
	var want []string
	status := map[string]int{}
	for _, c := range protocol.Codes() {
		want = append(want, string(c))
		status[string(c)] = c.Status()
	}
	sort.Strings(want)

	doc, err := LoadOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	var inDoc []string
	for _, v := range doc.Components.Schemas["Error"].Value.Properties["code"].Value.Enum {
		inDoc = append(inDoc, v.(string))
	}
	sort.Strings(inDoc)
	if strings.Join(inDoc, ",") != strings.Join(want, ",") {
		t.Errorf("openapi.yaml's Error.code enum lists %v, protocol.Codes has %v", inDoc, want)
	}

	md, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(md)[strings.Index(string(md), "\n## Errors\n"):]
	section = section[:strings.Index(section[1:], "\n## ")+1]
	row := regexp.MustCompile("(?m)^\\| (\\d{3}) \\| `([a-z_]+)` \\|")
	var inTable []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		inTable = append(inTable, m[2])
		if s, ok := status[m[2]]; ok && strconv.Itoa(s) != m[1] {
			t.Errorf("docs/api.md answers %s with %s, Code.Status with %d", m[2], m[1], s)
		}
	}
	sort.Strings(inTable)
	if strings.Join(inTable, ",") != strings.Join(want, ",") {
		t.Errorf("docs/api.md's table of errors lists %v, protocol.Codes has %v", inTable, want)
	}
}
