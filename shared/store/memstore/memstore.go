// Package memstore is an in-memory implementation of the storage port
// (ledger.Storage; ledger.New makes the ledger.Store over it): the same answers and the same errors as the DynamoDB
// store (shared/store) for every operation, held to it by the contract
// suite (shared/ledger/ledgertest), with no emulator. The scheduler's own
// tests use it to check decisions in milliseconds.
//
// It is storage only. Its mutex makes each read and each conditional write
// atomic, as one DynamoDB call is; a task instance's changes are decided
// by the ledger's decision loop (ledger.TransitionAll) between a read and
// a conditional write (WriteInstance), exactly as on DynamoDB, so tests on
// memstore meet the same read-decide-write races. Rules are the ledger's
// and statemodel's; nothing is re-derived here.
//
// What memstore does not model: DynamoDB's item layout and its byte-exact
// size rules (it refuses a write whose caller-supplied bytes alone exceed
// ledger.MaxItemSize or ledger.MaxTransactionSize, a lower bound of the real
// items, so whatever it refuses the DynamoDB store refuses too), TTL
// expiry of history records, and the eventual consistency of DynamoDB's
// indexes (its listings are always current).
package memstore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// Store is an in-memory store. It is safe for concurrent use.
//
// It is split by concern as the DynamoDB store is, one small type per
// narrow port of the ledger, each over the one mutex-guarded mem, and
// composes them by embedding: every method of the port (ledger.Storage)
// is a method of one concern type, promoted to Store.
type Store struct {
	*mem
	*runs
	*instances
	*jobs
	*backfills
	*limiters
	*mapStates
	*outputs
	*timers
	*workerLeases
}

// mem is everything the store holds, behind its one mutex, with the
// helpers that more than one concern calls under it.
type mem struct {
	clock     func() time.Time
	backstop  time.Duration
	retention time.Duration
	horizon   time.Duration // ledger.IndexedTimer's (WithTimerHorizon)

	mu        sync.Mutex
	jobs      map[string]ledger.Job
	edges     map[string]map[string]bool // upstream job -> dependent jobs
	runs      map[string]ledger.Run
	runsOfJob map[string][]string // job -> run ids
	tasks     map[string][]string // run -> task ids, sorted
	instances map[ledger.InstanceKey]*instance
	slots     map[claimKey]string // job, logical time -> run id
	idem      map[claimKey]idemClaim
	leases    map[string]ledger.WorkerLease
	backfills map[string]ledger.Backfill
	maps      map[ledger.InstanceKey]*memMap // run, map task -> its item
	limiters  map[string]*limiterRec
}

// instance is an instance with everything kept beside it: its history, the
// first outcome of every event applied to it, and its attempts.
type instance struct {
	inst     ledger.Instance
	history  []statemodel.Transition
	guards   map[string]statemodel.SeenEvent
	attempts map[int]*ledger.Attempt
}

type claimKey struct{ job, key string }

type idemClaim struct {
	run, bodyHash string
	expires       time.Time
}

// runs keeps runs and answers from the live-work indexes (ledger.Runs but
// ListDependents, which reads the jobs' dependency edges): run.go.
type runs struct{ *mem }

// instances keeps task instances, their attempts and their history
// (ledger.InstanceStorage and ledger.InstanceRecords): instance.go.
type instances struct{ *mem }

// jobs keeps job definitions, their schedule state and their dependency
// edges (ledger.Jobs, and ListDependents of ledger.Runs): job.go.
type jobs struct{ *mem }

// backfills keeps backfills (ledger.Backfills): backfill.go.
type backfills struct{ *mem }

// limiters keeps limiter entries (ledger.Limiters): limiter.go.
type limiters struct{ *mem }

// mapStates keeps map states, their items, children and outputs
// (ledger.Maps): mapping.go.
type mapStates struct{ *mem }

// outputs reads task outputs (ledger.Outputs): output.go.
type outputs struct{ *mem }

// timers lists due timers (ledger.Timers): timer.go.
type timers struct{ *mem }

// workerLeases keeps worker leases (ledger.WorkerLeases): lease.go.
type workerLeases struct{ *mem }

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock the store stamps times with (idempotency key
// expiry, job creation and update times, backstop timers), as
// store.WithClock does.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.clock = now } }

// WithRunBackstop sets how far ahead a live run's backstop timer is set
// (default ledger.DefaultRunBackstop).
func WithRunBackstop(d time.Duration) Option { return func(s *Store) { s.backstop = d } }

// WithTimerHorizon sets how far ahead of its write an instance's timer is
// left out of the timers index (ledger.TimerHorizon by default: a delay
// message carries it); ledger.IndexEveryTimer indexes every timer, for a
// scheduler without a delay queue.
func WithTimerHorizon(d time.Duration) Option { return func(s *Store) { s.horizon = d } }

// WithRunRetention sets how long a finished run of a job that sets no
// retention is kept (default ledger.DefaultRunRetention), as
// store.WithRunRetention does.
func WithRunRetention(d time.Duration) Option { return func(s *Store) { s.retention = d } }

// New returns an empty store.
func New(opts ...Option) *Store {
	m := &mem{
		clock: time.Now, backstop: ledger.DefaultRunBackstop, retention: ledger.DefaultRunRetention, horizon: ledger.TimerHorizon,
		jobs: map[string]ledger.Job{}, edges: map[string]map[string]bool{},
		runs: map[string]ledger.Run{}, runsOfJob: map[string][]string{}, tasks: map[string][]string{},
		instances: map[ledger.InstanceKey]*instance{},
		slots:     map[claimKey]string{}, idem: map[claimKey]idemClaim{},
		leases: map[string]ledger.WorkerLease{}, backfills: map[string]ledger.Backfill{},
	}
	s := &Store{
		mem: m, runs: &runs{m}, instances: &instances{m}, jobs: &jobs{m},
		backfills: &backfills{m}, limiters: &limiters{m}, mapStates: &mapStates{m},
		outputs: &outputs{m}, timers: &timers{m}, workerLeases: &workerLeases{m},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// begin checks the context, as every SDK call does first, and takes the
// lock; the caller defers s.mu.Unlock.
func (s *mem) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	return nil
}

// enter refuses an invalid key (invalid, a key check's answer) or a done
// context, else takes the lock; the caller defers s.mu.Unlock.
func (s *mem) enter(ctx context.Context, invalid error) error {
	if invalid != nil {
		return invalid
	}
	return s.begin(ctx)
}

// tooLarge refuses n caller-supplied bytes that cannot fit in one item (or
// one transaction, with ledger.MaxTransactionSize as limit).
func tooLarge(what string, n, limit int) error {
	if n <= limit {
		return nil
	}
	return &ledger.ItemTooLargeError{Item: what, Size: n, Limit: limit}
}

// Paging tokens: base64url of the listing they were issued for and the
// key of the last entry returned. A token is refused (ledger.ErrInvalidPageToken)
// by every other listing, as the DynamoDB store's are.
type cursor struct {
	Listing string `json:"l"`
	After   string `json:"a"`
}

func encodeToken(listing, after string) string {
	b, _ := json.Marshal(cursor{Listing: listing, After: after})
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeToken returns the key to continue after ("" without a token).
func decodeToken(token, listing string) (after string, err error) {
	if token == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return "", ledger.ErrInvalidPageToken
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil || c.Listing != listing || c.After == "" {
		return "", ledger.ErrInvalidPageToken
	}
	return c.After, nil
}

// page returns at most limit entries of the sorted entries that come after
// the key after (in the listing's order: before reports whether key a
// comes before key b), and the token of the next page ("" at the end).
func page[T any](entries []T, key func(T) string, before func(a, b string) bool, listing, after string, limit int) ([]T, string) {
	start := 0
	if after != "" {
		start = len(entries)
		for i, e := range entries {
			if before(after, key(e)) {
				start = i
				break
			}
		}
	}
	end := len(entries)
	if limit > 0 {
		end = min(end, start+limit)
	}
	out := entries[start:end]
	if end == len(entries) || len(out) == 0 {
		return out, ""
	}
	return out, encodeToken(listing, key(out[len(out)-1]))
}

func ascending(a, b string) bool  { return a < b }
func descending(a, b string) bool { return a > b }

// listLimit is the DynamoDB store's page size rule.
func listLimit(limit int) int {
	if limit <= 0 {
		limit = ledger.DefaultListLimit
	}
	return min(limit, ledger.MaxListLimit)
}

// The clones: nothing a caller holds aliases what the store keeps.

func cloneInstance(i ledger.Instance) ledger.Instance {
	i.Payload = slices.Clone(i.Payload)
	i.Executor = slices.Clone(i.Executor)
	i.DependsOn = slices.Clone(i.DependsOn)
	i.Secret = slices.Clone(i.Secret)
	i.Item = slices.Clone(i.Item)
	i.Map = slices.Clone(i.Map)
	i.Policy.Random = nil
	i.Policy.Retry.Intervals = slices.Clone(i.Policy.Retry.Intervals)
	i.Snapshot = i.Snapshot.Clone()
	return i
}

func cloneAttempt(a ledger.Attempt) ledger.Attempt {
	a.Late = slices.Clone(a.Late)
	return a
}

func cloneTransition(tr statemodel.Transition) statemodel.Transition {
	tr.Evidence = maps.Clone(tr.Evidence)
	if tr.AttemptRecord != nil {
		rec := *tr.AttemptRecord
		tr.AttemptRecord = &rec
	}
	return tr
}

func cloneRun(r ledger.Run) ledger.Run {
	r.Params = slices.Clone(r.Params)
	r.Spec = slices.Clone(r.Spec)
	return r
}

func cloneJob(j ledger.Job) ledger.Job {
	j.Spec = slices.Clone(j.Spec)
	j.Upstream = slices.Clone(j.Upstream)
	return j
}

func opError(format string, args ...any) func(error) error {
	prefix := fmt.Sprintf(format, args...)
	return func(err error) error { return fmt.Errorf("%s: %w", prefix, err) }
}

// The in-memory store is a port of the storage contract, each concern
// type of the narrow port it keeps.
var (
	_ ledger.Storage         = (*Store)(nil)
	_ ledger.InstanceStorage = (*instances)(nil)
	_ ledger.InstanceRecords = (*instances)(nil)
	_ ledger.Jobs            = (*jobs)(nil)
	_ ledger.Backfills       = (*backfills)(nil)
	_ ledger.Limiters        = (*limiters)(nil)
	_ ledger.Maps            = (*mapStates)(nil)
	_ ledger.Outputs         = (*outputs)(nil)
	_ ledger.Timers          = (*timers)(nil)
	_ ledger.WorkerLeases    = (*workerLeases)(nil)
)
