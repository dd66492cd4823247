// Package metricspage is the local stack's GET /metrics: Prometheus text
// counted from the scheduler's applied transitions (app.Part's Moved),
// served on loopback only.
//
//	runledger_state_transitions_total{job,from,to}     counter; from is "" for a creation
//	runledger_state_duration_seconds{job,state}         histogram of the time spent in a state, observed when it is left
//	runledger_instances{state}                          gauge of the task instances in each state
//	runledger_transition_lag_seconds{event}             histogram of observed_at less event_time, per applied transition
//	runledger_oldest_in_state_seconds{state}            gauge: age in its state of the oldest instance in each non-terminal state, 0 when none
//	runledger_completion_deviation_seconds{job}         histogram of a succeeded run's duration less its job's recent median
//
// The figures count what this process saw since it started: a stack
// started again on a kept table starts them from zero. The instances
// gauge counts an instance out of a state only if it counted it in, so an
// instance created before the restart is not counted (and never makes a
// state's figure negative) until it enters a state this process sees; the
// oldest-in-state gauge likewise knows only the instances it saw enter
// their state. A scrape computes it with one pass over the live instances
// this process saw enter a non-terminal state (a terminal state forgets
// one), under the lock Moved takes: linear in live work, never in history
// (BenchmarkOldestInState measures it).
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
	lag         *prometheus.HistogramVec
	deviation   *prometheus.HistogramVec
	now         func() time.Time

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

// Option sets up New's Metrics.
type Option func(*Metrics)

// WithClock makes now the clock the oldest-in-state ages are read by.
// Defaults to time.Now.
func WithClock(now func() time.Time) Option { return func(m *Metrics) { m.now = now } }

// New builds the collectors.
func New(opts ...Option) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(), entered: map[instanceKey]entry{}, ended: map[statemodel.InstanceState]int{}, now: time.Now,
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
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "runledger_transition_lag_seconds",
			Help: "State-update lag: when a transition was written (observed_at) less when its event happened by its reporter's clock (event_time), by event type.",
			// 1 ms to about 4.4 min.
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"event"}),
		deviation: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runledger_completion_deviation_seconds",
			Help:    "A succeeded run's duration (created to ended) less the median duration of its job's last succeeded runs this process ended; negative when faster.",
			Buckets: deviationBuckets(),
		}, []string{"job"}),
	}
	for _, o := range opts {
		o(m)
	}
	m.reg.MustRegister(m.transitions, m.durations, m.instances, m.lag, m.deviation, newOldest(m))
	return m
}

// deviationBuckets are symmetric about 0: an hour faster to an hour slower.
func deviationBuckets() []float64 {
	up := []float64{1, 10, 60, 300, 900, 3600}
	var b []float64
	for i := len(up) - 1; i >= 0; i-- {
		b = append(b, -up[i])
	}
	return append(append(b, 0), up...)
}

// oldest collects runledger_oldest_in_state_seconds at each scrape from
// the entered times Moved keeps.
type oldest struct {
	m    *Metrics
	desc *prometheus.Desc
}

func newOldest(m *Metrics) oldest {
	return oldest{m: m, desc: prometheus.NewDesc("runledger_oldest_in_state_seconds",
		"Age in its state of the oldest task instance in each non-terminal state, by this process's clock; 0 when none is.",
		[]string{"state"}, nil)}
}

func (o oldest) Describe(ch chan<- *prometheus.Desc) { ch <- o.desc }

func (o oldest) Collect(ch chan<- prometheus.Metric) {
	now := o.m.now()
	since := o.m.oldestEntered()
	for _, st := range statemodel.AllStates() {
		if st.Terminal() {
			continue
		}
		age := 0.0
		if at, ok := since[st]; ok {
			age = max(now.Sub(at).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(o.desc, prometheus.GaugeValue, age, string(st))
	}
}

// oldestEntered is, per state, when its oldest live instance entered it:
// one pass over the live instances this process saw.
func (m *Metrics) oldestEntered() map[statemodel.InstanceState]time.Time {
	out := map[statemodel.InstanceState]time.Time{}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entered {
		if at, ok := out[e.state]; !ok || e.at.Before(at) {
			out[e.state] = e.at
		}
	}
	return out
}

// RunEnded measures a run's end: a succeeded run's completion deviation.
func (m *Metrics) RunEnded(e scheduler.RunEnded) {
	if e.HasDeviation {
		m.deviation.WithLabelValues(e.Job).Observe(e.Deviation.Seconds())
	}
}

// Moved counts one applied change; it never blocks on I/O. The time in
// the state left is known when this process saw the instance enter it.
func (m *Metrics) Moved(mv scheduler.Moved) {
	m.transitions.WithLabelValues(mv.Job, string(mv.From), string(mv.To)).Inc()
	if lag, ok := mv.Lag(); ok && mv.Event != "" {
		m.lag.WithLabelValues(string(mv.Event)).Observe(lag.Seconds())
	}
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
// Moved and RunEnded, served at GET /metrics beside the API.
func (m *Metrics) Part() app.Part {
	return app.Part{Name: "metrics", Moved: m.Moved, RunEnded: m.RunEnded, Routes: map[string]http.Handler{"GET " + Path: m.Handler()}}
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
