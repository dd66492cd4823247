// Package metricspage is the local stack's GET /metrics: Prometheus text
// counted from the scheduler's applied transitions (app.Part's Moved),
// served on loopback only.
//
//	runledger_state_transitions_total{job,from,to}   counter; from is "" for a creation
//	runledger_state_duration_seconds{job,state}       histogram of the time spent in a state, observed when it is left
//	runledger_instances{state}                        gauge of the task instances in each state
//
// The figures count what this process saw since it started: a stack
// started again on a kept table starts them from zero. The instances
// gauge counts an instance out of a state only if it counted it in, so an
// instance created before the restart is not counted (and never makes a
// state's figure negative) until it enters a state this process sees.
package metricspage

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runledger/runledger/shared/app"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

// Path is where the page is served.
const Path = "/metrics"

// Metrics holds the page's collectors in a registry of their own.
type Metrics struct {
	reg         *prometheus.Registry
	transitions *prometheus.CounterVec
	durations   *prometheus.HistogramVec
	instances   *prometheus.GaugeVec

	// entered is when each live instance this process saw entered its
	// state; a terminal state forgets it, so it holds live work only.
	// ended counts, by terminal state, the instances this process counted
	// into it (an operator's override or clear may take one out again).
	mu      sync.Mutex
	entered map[instanceKey]entry
	ended   map[statemodel.InstanceState]int
}

type instanceKey struct{ run, task string }

type entry struct {
	state statemodel.InstanceState
	at    time.Time
}

// New builds the collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(), entered: map[instanceKey]entry{}, ended: map[statemodel.InstanceState]int{},
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runledger_state_transitions_total",
			Help: "Applied state changes of task instances, by job and from and to state (from is empty for a creation).",
		}, []string{"job", "from", "to"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "runledger_state_duration_seconds",
			Help: "Time task instances spent in a state, observed when they left it.",
			// 10 ms to about 2.8 h.
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}, []string{"job", "state"}),
		instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "runledger_instances",
			Help: "Task instances in each state, as this process saw them change.",
		}, []string{"state"}),
	}
	m.reg.MustRegister(m.transitions, m.durations, m.instances)
	return m
}

// Moved counts one applied change; it never blocks on I/O. The time in
// the state left is known when this process saw the instance enter it.
func (m *Metrics) Moved(mv scheduler.Moved) {
	m.transitions.WithLabelValues(mv.Job, string(mv.From), string(mv.To)).Inc()
	key := instanceKey{mv.Run, mv.Task}
	m.mu.Lock()
	prev, seen := m.entered[key]
	counted := seen && prev.state == mv.From
	if mv.From.Terminal() && m.ended[mv.From] > 0 {
		m.ended[mv.From]--
		counted = true
	}
	if mv.To.Terminal() {
		delete(m.entered, key)
		m.ended[mv.To]++
	} else {
		m.entered[key] = entry{state: mv.To, at: mv.At}
	}
	m.mu.Unlock()
	if counted {
		m.instances.WithLabelValues(string(mv.From)).Dec()
	}
	m.instances.WithLabelValues(string(mv.To)).Inc()
	if seen && prev.state == mv.From && !mv.At.Before(prev.at) {
		m.durations.WithLabelValues(mv.Job, string(mv.From)).Observe(mv.At.Sub(prev.at).Seconds())
	}
}

// Handler serves the page in Prometheus's text format to loopback callers
// only: the local stack may be started on another address, and the page
// needs no key.
func (m *Metrics) Handler() http.Handler {
	page := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopback(r.RemoteAddr) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"code":"` + string(protocol.CodeNotFound) + `","message":"GET /metrics answers loopback callers only."}` + "\n"))
			return
		}
		page.ServeHTTP(w, r)
	})
}

// Part is the page as a Part of the local stack: fed by the scheduler's
// Moved, served at GET /metrics beside the API.
func (m *Metrics) Part() app.Part {
	return app.Part{Name: "metrics", Moved: m.Moved, Routes: map[string]http.Handler{"GET " + Path: m.Handler()}}
}

// loopback reports whether addr ("host:port" or a bare host, as the local
// API gateway passes the source IP) is a loopback address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
