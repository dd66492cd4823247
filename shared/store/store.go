// Package store is runledger's DynamoDB adapter: every item layout, key,
// condition and expression of the one table lives here, in operations named
// for the domain (CreateRun, Transition, Heartbeat, ListDueTimers), and
// nothing above it sees an SDK type or error.
//
// The item layout (docs/store.md):
//
//	job              JOB#<name>  JOB                      version CAS, spec, next fire, listing JOBS/<name>, timer
//	slot claim       JOB#<name>#nn SLOT#<logical time>     run id; one slot never yields two runs (nn: a hash of the sk)
//	idempotency key  JOB#<name>#nn IDEM#<key>              run id, body hash, TTL +24 h (nn: a hash of the sk)
//	run pointer      JOB#<name>  RUN#<run>                 newest first per job, written once with the run
//	run spec         JOB#<name>  SPEC#<content hash>       a job spec runs were created with, immutable (runspec.go)
//	dependency edge  JOB#<up>    DEP#<down>                job <down> depends on job <up>; written with <down>
//	claims epoch     META        CLAIMS_SHARDED            when slot and idempotency items went to the job's shards (claims.go)
//	backfill pointer JOB#<name>  BACKFILL#<id>             newest first per job, written once with the backfill
//	backfill         BACKFILL#<id> BACKFILL                pending slots, active runs, counts, version CAS, backstop timer
//	run              RUN#<run>   RUN                       spec_ref, derived states, version CAS, listing RUNS/<run>, timer (backstop, deadline, dependency timeout), live index while unfinished
//	instance         RUN#<run>   TASK#<task>               the statemodel.Snapshot (recent event ids, latest
//	                                                       attempts), dispatch data, timer, newest history records
//	attempt          RUN#<run>   TASK#<task>#ATT#nnn       late events; the record once the instance let it go
//	history          RUN#<run>   TR#<task>#<last seq>      spilled history records
//
// Every item of a run (run, pointer, instances, attempts, history, map
// items) carries the run's expiry as its TTL, the same value on all of
// them (expiry.go).
//
// A transition is one conditional UpdateItem of the instance item: its
// history record and its event id travel in the same write (history.go).
// ReadRun is one Query (RUN .. TASK#\uffff), so history stays out of it by
// key design. Only items that wait on a time carry timer_shard and
// timer_at, so the timers index holds live work only.
//
// Conditional writes. Each one documents its condition and what a failed
// condition means, next to the code that sends it. A failed condition is
// never retried blindly: the instance is re-read and the event classified
// again by statemodel.
package store

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
)

// Defaults of the options.
const (

	// conflictRetries bounds resubmitting a transaction that failed only on
	// TransactionConflict (another transaction held an item); its
	// conditions are unchanged, so a resubmission is safe.
	conflictRetries = 8
)

// Store is the DynamoDB store of one table. It is safe for concurrent use.
//
// It is split by concern, one small type per narrow port of the ledger,
// each over the one shared base, and composes them by embedding: every
// method of the port (ledger.Storage) is a method of one concern type,
// promoted to Store.
type Store struct {
	*base
	*runs
	*instances
	*jobs
	*backfills
	*limiters
	*maps
	*outputs
	*timers
	*workerLeases
}

// base is what every concern shares: the client, the table, the options,
// and the helpers every item write and read goes through (capacity
// reports, transactions, the versioned update, batch reads, run specs).
type base struct {
	db        *dynamodb.Client
	table     string
	clock     func() time.Time
	retention time.Duration
	horizon   time.Duration // ledger.IndexedTimer's (WithTimerHorizon)
	backstop  time.Duration
	log       *slog.Logger
	capacity  func(CapacityReport)
	specs     *specCache // run specs written or read (runspec.go)
	claims    *claimsEpoch
	layouts   *mapLayouts // each map's child partitions (mapparts.go)
}

// runs keeps runs and answers from the live-work indexes (ledger.Runs but
// ListDependents, which reads the jobs' dependency edges): run.go. Its
// paged listings are list's.
type runs struct {
	*base
	list *listings
}

// instances keeps task instances, their attempts and their history
// (ledger.InstanceStorage and ledger.InstanceRecords): instance.go and
// history.go. A map child's end moves its map's counts in the same write
// (maps.writeChildEnd).
type instances struct {
	*base
	maps *maps
}

// jobs keeps job definitions, their schedule state and their dependency
// edges (ledger.Jobs, and ListDependents of ledger.Runs): job.go. A job is
// deleted only when runs finds no unfinished run of it.
type jobs struct {
	*base
	list *listings
	runs *runs
}

// listings reads the listing indexes newest first, merged across their
// partitions, for runs and jobs alike: listing.go.
type listings struct{ *base }

// backfills keeps backfills (ledger.Backfills): backfill.go.
type backfills struct{ *base }

// limiters keeps limiter entries (ledger.Limiters): limiter.go.
type limiters struct{ *base }

// maps keeps map states, their item chunks, children and outputs
// (ledger.Maps): mapping.go.
type maps struct{ *base }

// outputs reads task outputs (ledger.Outputs): output.go.
type outputs struct{ *base }

// timers lists due timers (ledger.Timers): timer.go.
type timers struct{ *base }

// workerLeases keeps worker leases (ledger.WorkerLeases): worker_lease.go.
type workerLeases struct{ *base }

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock the store stamps times with (TTL expiries,
// creation times, backstop timers). Decisions take their own now.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.clock = now } }

// WithRunRetention sets how long a finished run of a job that sets no
// retention is kept (default ledger.DefaultRunRetention): every item of
// the run expires together (expiry.go).
func WithRunRetention(d time.Duration) Option { return func(s *Store) { s.retention = d } }

// WithRunBackstop sets how far ahead a live run's backstop timer is set.
func WithRunBackstop(d time.Duration) Option { return func(s *Store) { s.backstop = d } }

// WithTimerHorizon sets how far ahead of its write an instance's timer is
// left out of the timers index (ledger.TimerHorizon by default: a delay
// message carries it); ledger.IndexEveryTimer indexes every timer, for a
// scheduler without a delay queue.
func WithTimerHorizon(d time.Duration) Option { return func(s *Store) { s.horizon = d } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// WithCapacityReports asks DynamoDB for consumed capacity on every write
// (ReturnConsumedCapacity=TOTAL) and passes each write's report to fn.
func WithCapacityReports(fn func(CapacityReport)) Option { return func(s *Store) { s.capacity = fn } }

// New returns the store of table on db.
func New(db *dynamodb.Client, table string, opts ...Option) *Store {
	b := &base{
		db: db, table: table, clock: time.Now,
		retention: ledger.DefaultRunRetention, backstop: ledger.DefaultRunBackstop, horizon: ledger.TimerHorizon,
		log: slog.Default(), specs: &specCache{}, claims: &claimsEpoch{}, layouts: &mapLayouts{fresh: mapChildParts},
	}
	list := &listings{b}
	rs := &runs{base: b, list: list}
	ms := &maps{b}
	s := &Store{
		base: b, runs: rs, instances: &instances{base: b, maps: ms},
		jobs: &jobs{base: b, list: list, runs: rs}, backfills: &backfills{b},
		limiters: &limiters{b}, maps: ms, outputs: &outputs{b},
		timers: &timers{b}, workerLeases: &workerLeases{b},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Table returns the table name.
func (s *base) Table() string { return s.table }

// CapacityReport describes one write for capacity accounting.
type CapacityReport struct {
	Operation     string
	Transactional bool
	// ItemSizes are the sizes of the items written, by DynamoDB's
	// documented size rules (the full item after the write).
	ItemSizes []int
	// IndexWriteSizes are the sizes of the index entries the write puts,
	// moves or removes (an entry whose key moves counts twice): the timers
	// entry (keys and the projected attributes), the listing and live
	// entries (whole items). Filled for the writes of a run's life
	// (create_run, transitions, lease refreshes, run state);
	// job and lease writes leave it empty.
	IndexWriteSizes []int
	// ReportedWCU is the endpoint's own figure (ReturnConsumedCapacity=
	// TOTAL); Reported is false when it sent none. DynamoDB Local's figure
	// for transactions does not follow DynamoDB's pricing (it reports 4
	// WCU for a one-item and for a two-item transaction alike).
	ReportedWCU float64
	Reported    bool
}

// TableWCU is the base-table write cost by DynamoDB's pricing rules: per
// item, 1 WCU per started KB, doubled in a transaction.
func (r CapacityReport) TableWCU() float64 { return writeUnits(r.ItemSizes, r.Transactional) }

// IndexWCU is the cost of the index writes: 1 WCU per started KB each
// (index maintenance is not transactional).
func (r CapacityReport) IndexWCU() float64 { return writeUnits(r.IndexWriteSizes, false) }

// ComputedWCU is TableWCU plus IndexWCU.
func (r CapacityReport) ComputedWCU() float64 { return r.TableWCU() + r.IndexWCU() }

func (s *base) returnCapacity() types.ReturnConsumedCapacity {
	if s.capacity == nil {
		return ""
	}
	return types.ReturnConsumedCapacityTotal
}

// returnNewForReport asks for the item after an update only when someone
// wants its size for a capacity report.
func (s *base) returnNewForReport() types.ReturnValue {
	if s.capacity == nil {
		return types.ReturnValueNone
	}
	return types.ReturnValueAllNew
}

// returnOldForReport asks a write for the item as it was, when capacity is
// reported: a writer that knows its own changes computes the item after.
func (s *base) returnOldForReport() types.ReturnValue {
	if s.capacity == nil {
		return types.ReturnValueNone
	}
	return types.ReturnValueAllOld
}

func (s *base) report(op string, transactional bool, sizes, index []int, cc []types.ConsumedCapacity) {
	if s.capacity == nil {
		return
	}
	r := CapacityReport{Operation: op, Transactional: transactional, ItemSizes: sizes, IndexWriteSizes: index}
	for _, c := range cc {
		if c.CapacityUnits != nil {
			r.ReportedWCU += *c.CapacityUnits
			r.Reported = true
		} else if c.WriteCapacityUnits != nil {
			r.ReportedWCU += *c.WriteCapacityUnits
			r.Reported = true
		}
	}
	s.capacity(r)
}

// transact sends one TransactWriteItems. A cancellation caused only by other
// in-flight transactions (TransactionConflict) or capacity is resubmitted
// unchanged, a bounded number of times with jittered backoff: every action
// carries its own condition, so a resubmission can never do what the first
// submission would not have done. Any other cancellation is returned with
// its reasons for the caller to interpret.
func (s *base) transact(ctx context.Context, op string, actions []types.TransactWriteItem, sizes, index []int) error {
	in := &dynamodb.TransactWriteItemsInput{
		TransactItems:          actions,
		ReturnConsumedCapacity: s.returnCapacity(),
	}
	for try := 0; ; try++ {
		out, err := s.db.TransactWriteItems(ctx, in)
		if err == nil {
			s.report(op, true, sizes, index, out.ConsumedCapacity)
			return nil
		}
		reasons := cancellation(err)
		if reasons == nil || !transientCancel(reasons) || try >= conflictRetries {
			return err
		}
		if werr := backoff(ctx, try); werr != nil {
			return werr
		}
	}
}

// backoff waits before the try-th resubmission: ledger.Backoff from 2 ms,
// at most 100 ms.
func backoff(ctx context.Context, try int) error {
	return ledger.Backoff(ctx, try, 2*time.Millisecond, 100*time.Millisecond)
}

// conditionItem returns the ALL_OLD item of a failed single-item condition.
func conditionItem(err error) (map[string]types.AttributeValue, bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, true
	}
	return nil, false
}

// The DynamoDB store is the production implementation of the storage
// port (ledger.New makes the ledger.Store over it), each concern type of
// the narrow port it keeps.
var (
	_ ledger.Storage         = (*Store)(nil)
	_ ledger.InstanceStorage = (*instances)(nil)
	_ ledger.InstanceRecords = (*instances)(nil)
	_ ledger.Jobs            = (*jobs)(nil)
	_ ledger.Backfills       = (*backfills)(nil)
	_ ledger.Limiters        = (*limiters)(nil)
	_ ledger.Maps            = (*maps)(nil)
	_ ledger.Outputs         = (*outputs)(nil)
	_ ledger.Timers          = (*timers)(nil)
	_ ledger.WorkerLeases    = (*workerLeases)(nil)
)
