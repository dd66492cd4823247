package triggers

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/runledger/runledger/shared/eventpattern"
	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/statemodel"
)

// Trigger events start runs (docs/api.md, "Starting runs from trigger
// events"): a trigger event as EventBridge delivers it is matched against
// every job's on_event patterns, through an index built from the jobs'
// definitions, and each job it matches gets one run, whose idempotency
// key in that job is the event's id.

// The account and region of the events PutEvents builds (the local
// stack's; in AWS, EventBridge fills in its own).
const (
	LocalEventAccount = "000000000000"
	LocalEventRegion  = "local"
)

// MaxPutEntries bounds the entries of one PutEvents call, as EventBridge's.
const MaxPutEntries = 10

// eventIndexTTL is how long a process trusts the on_event index it built.
// Job writes through this service drop it at once; a job written in
// another process (another Lambda instance) is seen within the TTL.
const eventIndexTTL = 10 * time.Second

// EventEntry is one entry of PutEvents: an event to deliver.
type EventEntry struct {
	Source     string
	DetailType string
	// Detail is a JSON object.
	Detail    json.RawMessage
	Resources []string
	// Time is the event's time (zero: now).
	Time time.Time
	// TraceID is the trace the runs it starts join (the put's
	// traceparent's); "": a new one each.
	TraceID string
}

// EventOutcome is what one event did: the runs it started or found
// already started by an earlier delivery, and the jobs whose params did
// not render.
type EventOutcome struct {
	Runs   []string
	Failed []string
}

// eventEnvelope is an event as EventBridge delivers it to a target.
type eventEnvelope struct {
	Version    string          `json:"version"`
	ID         string          `json:"id"`
	DetailType string          `json:"detail-type"`
	Source     string          `json:"source"`
	Account    string          `json:"account"`
	Time       string          `json:"time"`
	Region     string          `json:"region"`
	Resources  []string        `json:"resources"`
	Detail     json.RawMessage `json:"detail"`
}

// PutEvents delivers entries as EventBridge would: each gets an id and is
// matched at once. It returns the ids, in order. Entries are checked by
// the caller (the API); an entry whose detail is not a JSON object is an
// error.
func (r *Room[E]) PutEvents(ctx context.Context, entries []EventEntry) ([]string, error) {
	ids := make([]string, 0, len(entries))
	for i, e := range entries {
		id, err := newEventID()
		if err != nil {
			return nil, err
		}
		at := e.Time
		if at.IsZero() {
			at = r.k.Now()
		}
		resources := e.Resources
		if resources == nil {
			resources = []string{}
		}
		raw, err := wire.Marshal(eventEnvelope{Version: "0", ID: id, DetailType: e.DetailType, Source: e.Source,
			Account: LocalEventAccount, Time: protocol.FormatTime(at), Region: LocalEventRegion, Resources: resources, Detail: e.Detail})
		if err != nil {
			return nil, fmt.Errorf("put event %d: %w", i, err)
		}
		if _, err := r.startFromEnvelope(ctx, raw, e.TraceID); err != nil {
			return nil, fmt.Errorf("put event %d: %w", i, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// newEventID is a random UUID, the form of EventBridge's event ids.
func newEventID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

// IsEventEnvelope reports whether a queue message's body is an event as
// an EventBridge rule delivers it (rather than a worker's message).
func IsEventEnvelope(body string) bool {
	var probe struct {
		DetailType *string `json:"detail-type"`
		Source     *string `json:"source"`
	}
	return json.Unmarshal([]byte(body), &probe) == nil && probe.DetailType != nil && probe.Source != nil
}

// StartFromEvent matches one event (EventBridge's JSON) against the jobs'
// on_event entries and starts one run of each job it matches, for the
// first entry that does: trigger event, logical time the event's time,
// params rendered over the event, the event's id as the idempotency key.
// A delivery of an event seen before starts nothing new. An event without
// an id is Params.BadMessage.
func (r *Room[E]) StartFromEvent(ctx context.Context, raw []byte) (EventOutcome, error) {
	return r.startFromEnvelope(ctx, raw, "")
}

// startFromEnvelope is StartFromEvent; the runs it starts join trace
// traceID ("": a new one each).
func (r *Room[E]) startFromEnvelope(ctx context.Context, raw []byte, traceID string) (EventOutcome, error) {
	ev, err := eventpattern.DecodeEvent(raw)
	if err != nil {
		return EventOutcome{}, fmt.Errorf("%w: event: %v", r.badMessage, err)
	}
	id, _ := ev["id"].(string)
	if id == "" || ledger.CheckIdempotencyKey(id) != nil {
		return EventOutcome{}, fmt.Errorf("%w: the event has no usable id", r.badMessage)
	}
	logical, err := eventLogicalTime(ev, r.k.Now())
	if err != nil {
		return EventOutcome{}, fmt.Errorf("%w: event %s: %v", r.badMessage, id, err)
	}
	ix, err := r.eventIndex(ctx)
	if err != nil {
		return EventOutcome{}, err
	}
	// Each matched job's outcome is its own: one job's refusal or error
	// does not keep the event from the jobs after it. Errors are returned
	// once every job was tried (eventError).
	var out EventOutcome
	var errs []error
	for _, hit := range ix.index.Match(ev) {
		job := ix.jobs[hit.Key]
		runID, err := r.startFromEvent(ctx, job, hit.Pattern, id, logical, ev, traceID)
		var rf *renderFailure
		switch {
		case errors.As(err, &rf):
			out.Failed = append(out.Failed, job.spec.Name)
		case errors.Is(err, ledger.ErrLimitQueueFull):
			// Refused before anything was written, as a trigger into a
			// full limiter is: this job misses the event, and no
			// redelivery would find room sooner than its waiting runs.
			r.triggerFailed(ctx, job.spec.Name, id, string(protocol.CodeLimitQueueFull), err)
			out.Failed = append(out.Failed, job.spec.Name)
		case errors.Is(err, ledger.ErrNotFound):
			// Deleted since the index was built.
		case err != nil:
			errs = append(errs, err)
		case runID != "":
			out.Runs = append(out.Runs, runID)
		}
	}
	return out, eventError(errs, r.k.Transient)
}

// eventError is what the errors of one event's jobs amount to for its
// delivery: the transient ones when there are any, so the delivery is
// retried for those jobs rather than dropped for another job's permanent
// error (the runs already started are found by their key), else all.
// transient is the kernel's (Kernel.Transient).
func eventError(errs []error, transient func(error) bool) error {
	var retry []error
	for _, err := range errs {
		if transient(err) {
			retry = append(retry, err)
		}
	}
	if len(retry) > 0 {
		return errors.Join(retry...)
	}
	return errors.Join(errs...)
}

// eventLogicalTime is an event's time, its runs' logical time, or now for
// an event without one. A time that does not parse, or lies outside the
// years a logical time may (statemodel.LogicalTimeInRange), is an error:
// EventBridge always sends a valid one, so such an event was made by hand.
func eventLogicalTime(ev map[string]any, now time.Time) (time.Time, error) {
	raw, ok := ev["time"]
	if !ok || raw == nil {
		return now, nil
	}
	text, _ := raw.(string)
	t, err := time.Parse(time.RFC3339, text)
	if err != nil {
		return time.Time{}, fmt.Errorf("its time %v is not an RFC 3339 time", raw)
	}
	if t = t.UTC(); !statemodel.LogicalTimeInRange(t) {
		return time.Time{}, fmt.Errorf("its time %s is not in %s", text, statemodel.LogicalTimeRange)
	}
	return t, nil
}

// triggerFailed reports that a trigger event matched job but started no
// run of it: a warning in the log and an event.trigger_failed notice.
func (r *Room[E]) triggerFailed(ctx context.Context, job, eventID, reason string, err error) {
	r.log.WarnContext(ctx, "event trigger failed", "job", job, "event_id", eventID, "reason", reason, "error", err.Error())
	r.k.Notice(ctx, protocol.Notice{Type: protocol.NoticeEventTriggerFailed, Time: r.k.Now(), Job: job, EventID: eventID, Reason: reason})
}

type renderFailure struct{ err error }

func (r *renderFailure) Error() string { return r.err.Error() }

// startFromEvent starts the run of one matched job and moves it on. It
// returns the run's id ("" when the key was used by another request).
func (r *Room[E]) startFromEvent(ctx context.Context, job indexedJob, entry int, eventID string, logical time.Time, ev map[string]any, traceID string) (string, error) {
	j := job.spec
	runID := r.k.NewID()
	params, err := j.OnEvent[entry].RenderParams(jobspec.NewEventTemplateData(j.Name, runID, logical, ev))
	if err != nil {
		r.triggerFailed(ctx, j.Name, eventID, fmt.Sprintf("on_event[%d].params: %v", entry, err), err)
		return "", &renderFailure{err}
	}
	source, _ := ev["source"].(string)
	detailType, _ := ev["detail-type"].(string)
	sum := sha256.Sum256([]byte("event\x00" + eventID))
	view, created, effs, err := r.startRun(ctx, j, TriggerRequest{
		Job: j.Name, Params: params, LogicalTime: logical, Trigger: statemodel.TriggerEvent, RunID: runID,
		IdempotencyKey: eventID, BodyHash: hex.EncodeToString(sum[:]),
		Event:   &protocol.RunEvent{ID: eventID, Source: source, DetailType: detailType},
		TraceID: traceID,
	})
	if errors.Is(err, ledger.ErrIdempotencyMismatch) {
		// A manual trigger used the event's id as its key: that run stands.
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("start run of %s for event %s: %w", j.Name, eventID, err)
	}
	if created {
		r.k.Perform(ctx, effs, nil)
	}
	return view.Run.ID, nil
}

// indexedJob is a job of the on_event index at one version.
type indexedJob struct {
	version int64
	paused  bool
	spec    jobspec.Job
}

// eventIndex is the on_event patterns of every job, compiled once per job
// version.
type eventIndex struct {
	index *eventpattern.Index
	jobs  map[string]indexedJob
	built time.Time
	// gen is the count of job writes it was built after.
	gen uint64
}

// eventIndexCache is the room's latest index (nil until built); it is
// stale once a job was written after it was built, or eventIndexTTL
// after, and a rebuild reuses its jobs whose version is unchanged.
type eventIndexCache struct {
	// building is held by the one rebuild at a time: the records of a
	// batch that all find the index stale wait for one listing.
	building sync.Mutex
	mu       sync.Mutex
	cur      *eventIndex
	// gen counts job writes through this service.
	gen uint64
}

// ForgetEventIndex makes the index stale: a job was written.
func (r *Room[E]) ForgetEventIndex() {
	r.events.mu.Lock()
	r.events.gen++
	r.events.mu.Unlock()
}

// eventIndex returns the index, rebuilding it when it is older than
// eventIndexTTL or a job was written since, one rebuild at a time. A rebuild lists the jobs and
// reuses the compiled definition of every job whose version is unchanged.
func (r *Room[E]) eventIndex(ctx context.Context) (*eventIndex, error) {
	fresh := func() (*eventIndex, uint64, bool) {
		now := time.Now() // an operational bound on real time, not domain time
		r.events.mu.Lock()
		defer r.events.mu.Unlock()
		cur := r.events.cur
		return cur, r.events.gen, cur != nil && cur.gen == r.events.gen && now.Sub(cur.built) < eventIndexTTL
	}
	if cur, _, ok := fresh(); ok {
		return cur, nil
	}
	r.events.building.Lock()
	defer r.events.building.Unlock()
	cur, gen, ok := fresh()
	if ok {
		return cur, nil
	}
	now := time.Now()
	var prev map[string]indexedJob
	if cur != nil {
		prev = cur.jobs
	}
	next, err := r.buildEventIndex(ctx, prev, now)
	if err != nil {
		return nil, err
	}
	// Built from a listing that began after write gen: a write since
	// leaves it stale, and the next event rebuilds from it.
	next.gen = gen
	r.events.mu.Lock()
	r.events.cur = next
	r.events.mu.Unlock()
	return next, nil
}

func (r *Room[E]) buildEventIndex(ctx context.Context, prev map[string]indexedJob, now time.Time) (*eventIndex, error) {
	jobs := map[string]indexedJob{}
	var entries []eventpattern.Entry
	token := ""
	for {
		page, next, err := r.store.ListJobs(ctx, ledger.MaxListLimit, token)
		if err != nil {
			return nil, fmt.Errorf("event index: %w", err)
		}
		for _, sj := range page {
			ij, ok := prev[sj.Name]
			if !ok || ij.version != sj.Version {
				if ij, ok = r.loadIndexedJob(ctx, sj); !ok {
					continue
				}
			}
			ij.paused = sj.Paused
			// Every job is kept, so the next rebuild loads only the
			// changed ones; only those with on_event are indexed.
			jobs[sj.Name] = ij
			if len(ij.spec.OnEvent) == 0 || ij.paused {
				continue
			}
			pats := make([]*eventpattern.Pattern, len(ij.spec.OnEvent))
			for i, t := range ij.spec.OnEvent {
				pats[i] = t.Compiled()
			}
			entries = append(entries, eventpattern.Entry{Key: sj.Name, Patterns: pats})
		}
		if next == "" {
			break
		}
		token = next
	}
	return &eventIndex{index: eventpattern.NewIndex(entries), jobs: jobs, built: now}, nil
}

// loadIndexedJob reads a job's definition; one that fails to load is left
// out of the index (and logged).
func (r *Room[E]) loadIndexedJob(ctx context.Context, sj ledger.Job) (indexedJob, bool) {
	spec := sj.Spec
	if len(spec) == 0 {
		full, err := r.store.GetJob(ctx, sj.Name)
		if err != nil {
			return indexedJob{}, false
		}
		spec = full.Spec
	}
	j, err := r.k.CompiledJob(spec)
	if err != nil {
		r.log.ErrorContext(ctx, "event index: job definition does not load", "job", sj.Name, "error", err.Error())
		return indexedJob{}, false
	}
	return indexedJob{version: sj.Version, spec: j}, true
}
