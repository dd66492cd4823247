package scheduler

import (
	"github.com/runledger/runledger/shared/tableschema"
)

// Route throttles. A throttle shared by every route lets a run's calls
// (its trigger, its claim, its completion) share one budget, and lets
// anonymous requests to the public worker routes take what real claims
// need. Each route has a throttle of its own instead, in three classes:
//
//   - the routes a run calls (runRoutes) admit APIRunRate runs a second.
//     Its default, the heat model's rate for one job
//     (tableschema.TargetRunsPerSecondOneJob), keeps every key shape of the
//     table at most half its partition's limit even when a single job
//     takes all of it;
//   - the operator's other routes (job definitions, reads, cancels,
//     backfills, signals) get OperatorRouteRate each;
//   - the anonymous routes that answer the same to everyone (health,
//     OpenAPI document, dashboard) and $default get PublicRouteRate.
//
// A route's burst is burstFactor times its rate. At the defaults the
// routes add up to less than API Gateway's default quota of 10,000
// requests a second for all the APIs of an account in a region, which
// caps every route's throttle: a flood on one route is refused at that
// route and leaves the others their share.
const (
	DefaultAPIRunRate = tableschema.TargetRunsPerSecondOneJob
	OperatorRouteRate = 100
	PublicRouteRate   = 10
	burstFactor       = 2
)

// runRoutes are the routes each run calls once (each attempt, for the
// worker routes): the trigger, or the events put that starts it; the
// claim and the completion; and the heartbeat, of which APIRunRate a
// second hold 10 x APIRunRate attempts running at once at the worker
// SDK's 10 s beat.
var runRoutes = map[string]bool{
	"POST /v1/jobs/{job}/runs":    true,
	"POST /v1/events/put":         true,
	"POST /v1/attempts/claim":     true,
	"POST /v1/attempts/heartbeat": true,
	"POST /v1/attempts/complete":  true,
}

// publicRoutes answer every caller alike and read no data.
var publicRoutes = map[string]bool{
	"GET /healthz":         true,
	"GET /v1/openapi.json": true,
	"GET /ui":              true,
	"GET /ui/{proxy+}":     true,
}

// Key is the route's key in API Gateway ("POST /v1/attempts/claim").
func (r Route) Key() string { return string(r.Method) + " " + r.Path }

// Throttle is a route's steady rate (requests a second) and burst.
type Throttle struct {
	Rate  float64
	Burst float64
}

func throttleOf(rate float64) Throttle { return Throttle{Rate: rate, Burst: burstFactor * rate} }

// RouteThrottle is the throttle of the route with this key at runRate
// runs a second; a key of no route (and $default) gets the public
// routes' throttle.
func RouteThrottle(key string, runRate float64) Throttle {
	switch {
	case runRoutes[key]:
		return throttleOf(runRate)
	case publicRoutes[key] || !isRoute(key):
		return throttleOf(PublicRouteRate)
	}
	return throttleOf(OperatorRouteRate)
}

func isRoute(key string) bool {
	for _, r := range Routes() {
		if r.Key() == key {
			return true
		}
	}
	return false
}
