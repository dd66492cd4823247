package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/runledger/runledger/shared/gateway"
)

const signalRoute = "POST /v1/runs/{run}/tasks/{task}/signal"

func event(method, routeKey, rawPath string, params map[string]string) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: routeKey, RawPath: rawPath, PathParameters: params,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: routeKey, DomainName: "api.example.com",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: rawPath},
		},
	}
}

// routes is a handler with the public signal route and the operator's
// cancel route; it records which one a request reached and with what.
func routes(reached *[]string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/runs/{run}/cancel", func(w http.ResponseWriter, r *http.Request) {
		*reached = append(*reached, "cancel "+r.PathValue("run"))
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc(signalRoute, func(w http.ResponseWriter, r *http.Request) {
		*reached = append(*reached, "signal "+r.PathValue("run")+" "+r.PathValue("task"))
		w.WriteHeader(http.StatusOK)
	})
	return mux
}

// An event the gateway matched to the public signal route reaches the
// signal route and nothing else: a decoded rawPath with '?' (sent as %3F,
// which would end the path at "/v1/runs/R/cancel" if parsed again) is
// refused 404, and a rawPath that disagrees with the route key is not
// what is routed.
func TestSignalRouteEventNeverReachesAnotherRoute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		ev          events.APIGatewayV2HTTPRequest
		wantStatus  int
		wantReached string
	}{
		{"a rawPath with '?'", event("POST", signalRoute, "/v1/runs/R/cancel?/tasks/a/signal",
			map[string]string{"run": "R/cancel?", "task": "a"}), http.StatusNotFound, ""},
		{"a rawPath with '#'", event("POST", signalRoute, "/v1/runs/R/cancel#/tasks/a/signal",
			map[string]string{"run": "R/cancel#", "task": "a"}), http.StatusNotFound, ""},
		{"a rawPath that is not the route's", event("POST", signalRoute, "/v1/runs/R/cancel",
			map[string]string{"run": "R", "task": "a"}), http.StatusOK, "signal R a"},
		{"a run id holding a slash", event("POST", signalRoute, "/v1/runs/R/cancel/tasks/a/signal",
			map[string]string{"run": "R/cancel", "task": "a"}), http.StatusOK, "signal R/cancel a"},
		{"the signal route as sent", event("POST", signalRoute, "/v1/runs/R/tasks/a/signal",
			map[string]string{"run": "R", "task": "a"}), http.StatusOK, "signal R a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var reached []string
			resp, err := gateway.New(routes(&reached)).ProxyWithContext(context.Background(), tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status %d (%s), want %d", resp.StatusCode, resp.Body, tc.wantStatus)
			}
			if tc.wantReached == "" && len(reached) != 0 || tc.wantReached != "" && (len(reached) != 1 || reached[0] != tc.wantReached) {
				t.Errorf("reached %q, want %q", reached, tc.wantReached)
			}
			if tc.wantStatus == http.StatusNotFound {
				var body struct{ Code, Message string }
				if err := json.Unmarshal([]byte(resp.Body), &body); err != nil || body.Code != "not_found" || body.Message == "" {
					t.Errorf("refusal body %q: want the API's not_found with a sentence", resp.Body)
				}
			}
		})
	}
}

// RoutedPath is the route key's path filled with the path parameters,
// escaped; $default routes by rawPath; a route key the request does not
// match, or parameters that do not fill it, are refused.
func TestRoutedPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		ev      events.APIGatewayV2HTTPRequest
		want    string
		refused bool
	}{
		{"explicit route", event("POST", signalRoute, "/v1/runs/R/tasks/a/signal", map[string]string{"run": "R", "task": "a"}),
			"/v1/runs/R/tasks/a/signal", false},
		{"parameters escaped", event("POST", signalRoute, "/v1/runs/R x/tasks/a%/signal", map[string]string{"run": "R x", "task": "a%"}),
			"/v1/runs/R%20x/tasks/a%25/signal", false},
		{"greedy parameter keeps its slashes", event("POST", "ANY /v1/runs/{proxy+}", "/v1/runs/R/cancel", map[string]string{"proxy": "R/cancel"}),
			"/v1/runs/R/cancel", false},
		{"$default routes by rawPath", event("GET", "$default", "/v1/jobs/nightly", nil), "/v1/jobs/nightly", false},
		{"$default with '?'", event("GET", "$default", "/v1/jobs/x?y", nil), "", true},
		{"another method than the route's", event("GET", signalRoute, "/v1/runs/R/tasks/a/signal", map[string]string{"run": "R", "task": "a"}), "", true},
		{"a parameter missing", event("POST", signalRoute, "/v1/runs/R/tasks/a/signal", map[string]string{"run": "R"}), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, refusal := gateway.RoutedPath(tc.ev)
			if (refusal != "") != tc.refused || got != tc.want {
				t.Errorf("RoutedPath = %q, refusal %q; want %q, refused %v", got, refusal, tc.want, tc.refused)
			}
		})
	}
}
