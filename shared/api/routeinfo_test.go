package api

import "testing"

// Routes lists the route table as it is: every route once, the operator's
// ones marked (the CDK stack gates exactly those at the gateway).
func TestRoutesListTheRouteTable(t *testing.T) {
	t.Parallel()
	table := (&Handler{}).routes()
	got := Routes()
	if len(got) != len(table) {
		t.Fatalf("%d routes listed, the table has %d", len(got), len(table))
	}
	for i, rt := range table {
		if got[i] != (RouteInfo{Method: rt.Method, Pattern: rt.Pattern, Operator: rt.Auth == authClient}) {
			t.Errorf("route %d: %+v, table %s %s", i, got[i], rt.Method, rt.Pattern)
		}
	}
	marks := map[string]bool{}
	for _, r := range got {
		marks[r.Method+" "+r.Pattern] = r.Operator
	}
	for key, operator := range map[string]bool{"POST /v1/jobs": true, "GET /v1/backfills/{backfill}": true, "GET /healthz": false, "POST /v1/attempts/claim": false} {
		if marks[key] != operator {
			t.Errorf("%s: operator %v, want %v", key, marks[key], operator)
		}
	}
}
