// Package scheduler is runledger's service layer: it turns API calls, queue
// messages and schedule ticks into statemodel events, writes them through
// the store, and performs the effects the decisions ask for (dispatch an
// attempt, arm a precise timer, move downstream tasks on, derive the run's
// state). The Lambda functions and the local stack call it; it never reads
// a clock or a random source it was not given.
package scheduler

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler/flow"
	"github.com/runledger/runledger/shared/scheduler/jobs"
	"github.com/runledger/runledger/shared/scheduler/maps"
	"github.com/runledger/runledger/shared/scheduler/signals"
	"github.com/runledger/runledger/shared/scheduler/triggers"
	"github.com/runledger/runledger/shared/scheduler/workers"
	"github.com/runledger/runledger/statemodel"
)

// Queue is what the scheduler needs of SQS; *queue.Client implements it.
type Queue interface {
	Send(ctx context.Context, queueURL, body string, attrs map[string]string) (string, error)
	SendDelayed(ctx context.Context, queueURL, body string, attrs map[string]string, delay time.Duration) (string, error)
	// SendBatch sends entries in as few requests as the queue allows,
	// with one result per entry (the dispatches of a fan-out).
	SendBatch(ctx context.Context, queueURL string, entries []queue.Entry) ([]queue.Result, error)
}

// Config wires a Service. New fills its zero fields with the defaults
// their comments name (WithDefaults) and refuses one that Validate does
// not accept.
type Config struct {
	// Pools maps each worker pool to its dispatch queue URL; neither may
	// be empty.
	Pools map[string]string
	// EventsQueueURL receives worker completions and process leases.
	EventsQueueURL string
	// DelayQueueURL carries precise short timers (retry_at); "" disables
	// them and leaves timers to the ticker's scan.
	DelayQueueURL string
	// TriggerQueueARN is the queue whose records are trigger events (an
	// EventBridge rule's deliveries), each matched against the jobs'
	// on_event; a trigger event from any other queue is refused. "": no
	// queue starts runs (PutEvents still does).
	TriggerQueueARN string
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Random draws retry jitter from [0, 1). Defaults to math/rand/v2's
	// Float64.
	Random func() float64
	// ClaimWait bounds how long a claim waits for the dispatch write that
	// follows the send of its envelope. Defaults to DefaultClaimWait.
	ClaimWait time.Duration
	// Evidence providers consulted for LOST instances of queue attempts,
	// in order (an attempt started by an Executor asks that executor).
	Evidence []EvidenceProvider
	// Executors run the tasks whose executor is not the pool's queue, one
	// per type, lambda or ecs (see Executor).
	Executors []Executor
	// Allowed is what job definitions may name outside the queues (the
	// Lambda functions, ECS clusters and task definitions this deployment
	// may start); definitions naming anything else are refused.
	Allowed jobspec.Allowed
	// Turns is the registry in which this process's limiter writes take
	// turns (ledger.Turns): the composition root builds one per process,
	// and the flow room owns it. Nil: the room builds its own, and takes
	// turns with nobody else.
	Turns *ledger.Turns
	// MaxClockSkew bounds how far a worker's clock may be from the
	// scheduler's: a silent attempt is retried only after its lease's end
	// plus this, unless evidence proves its process gone, and a worker's
	// process lease counts as ended only this long after its end by the
	// scheduler's clock. Defaults to DefaultMaxClockSkew.
	MaxClockSkew time.Duration
	// Metrics receives CloudWatch embedded-metric-format lines. Lambda
	// functions pass os.Stdout. Defaults to io.Discard.
	Metrics io.Writer
	// Notices receives the notices of terminal runs, failed and lost
	// tasks and missed deadlines. Nil: only the log has them.
	Notices NoticeSink
	// Moved, if set, is told of every applied change of a task instance
	// (the local stack's Prometheus page counts them); it must not block.
	Moved func(Moved)
	// RunEnded, if set, is told of every run this process sees end, with
	// its completion deviation (the local stack's Prometheus page
	// measures it); it must not block.
	RunEnded func(RunEnded)
	// Spans, if set, is told of runs created and ended and of attempts
	// ended, for their spans (SpanSink); it must not block.
	Spans SpanSink
	// Logger receives the service's logs. Defaults to a logger that
	// discards them.
	Logger *slog.Logger
	// Margin is how long before its context's deadline a pass stops
	// starting new work. Defaults to DefaultMargin.
	Margin time.Duration
	// TickerPeriod is how often the ticker runs: a slot it first sees more
	// than max(60 s, two periods) after its time is missed, and caught up
	// by the job's catch-up policy. Defaults to DefaultTickerPeriod.
	TickerPeriod time.Duration
}

// The defaults of Config's durations (DefaultTickerPeriod is with the
// catch-up it shapes).
const (
	DefaultClaimWait    = 3 * time.Second
	DefaultMaxClockSkew = 30 * time.Second
	DefaultMargin       = 2 * time.Second
)

// WithDefaults returns c with each zero field that has a default set to it.
func (c Config) WithDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Random == nil {
		c.Random = mrand.Float64
	}
	if c.ClaimWait == 0 {
		c.ClaimWait = DefaultClaimWait
	}
	if c.MaxClockSkew == 0 {
		c.MaxClockSkew = DefaultMaxClockSkew
	}
	if c.Metrics == nil {
		c.Metrics = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	if c.Margin == 0 {
		c.Margin = DefaultMargin
	}
	if c.TickerPeriod == 0 {
		c.TickerPeriod = DefaultTickerPeriod
	}
	return c
}

// Validate reports the first setting of c that no Service can run with.
// New calls it; the composition root calls it too, to refuse a bad
// config before it creates any resource.
func (c Config) Validate() error {
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"ClaimWait", c.ClaimWait}, {"MaxClockSkew", c.MaxClockSkew}, {"Margin", c.Margin}, {"TickerPeriod", c.TickerPeriod}} {
		if d.d < 0 {
			return fmt.Errorf("scheduler: %s %s is negative", d.name, d.d)
		}
	}
	for pool, url := range c.Pools {
		switch {
		case pool == "":
			return errors.New("scheduler: Pools has a pool with no name")
		case url == "":
			return fmt.Errorf("scheduler: pool %q has no queue URL", pool)
		}
	}
	// Only lambda and ecs tasks run on an executor from outside: queue and
	// signal tasks are the scheduler's own, and of two executors of one
	// type one would never run.
	types := map[string]bool{}
	for i, ex := range c.Executors {
		if ex == nil {
			return fmt.Errorf("scheduler: Executors[%d] is nil", i)
		}
		switch t := ex.Type(); {
		case t != jobspec.ExecutorLambda && t != jobspec.ExecutorECS:
			return fmt.Errorf("scheduler: an executor serves type %q, not lambda or ecs", t)
		case types[t]:
			return fmt.Errorf("scheduler: two executors serve type %q", t)
		default:
			types[t] = true
		}
	}
	return nil
}

// Service is the scheduler.
type Service struct {
	// store is New's port with the decision loop over it, arming the
	// delay message of each short timer it writes (armingStore).
	store ledger.Store
	queue Queue
	cfg   Config
	log   *slog.Logger

	entropyMu sync.Mutex
	entropy   io.Reader

	// ticks and reconciles are the ticker's and the reconciler's passes
	// over the timers index (tick.go).
	ticks, reconciles *timerPass

	// executors are Config.Executors by type (executor.go).
	executors *executors

	// triggers is the room that starts runs (room_triggers.go).
	triggers *triggers.Room[effect]

	// flow is the flow room: limiters, task slots and their turns
	// (room_flow.go).
	flow *flow.Room

	// maps is the maps room (room_maps.go): the Service's own, so two
	// Services never share its caches.
	maps *maps.Room[effect]

	// metrics writes the embedded-metric lines (metrics.go).
	metrics *metrics

	// compiled keeps the job versions compiled once (compiled.go).
	compiled compiledJobs

	// jobs is the jobs room (room_jobs.go).
	jobs *jobs.Room

	// workers is the worker protocol's room (room_workers.go).
	workers *workers.Room

	// signals is the signal tasks' room (room_signals.go).
	signals *signals.Room

	// notices raises the notices for people (notice.go).
	notices notices
}

// New builds a Service of cfg with its defaults, or fails naming the
// first setting that Validate refuses.
func New(st Store, q Queue, cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	svc := &Service{queue: q, cfg: cfg, log: cfg.Logger, entropy: ulid.Monotonic(rand.Reader, 0),
		executors: newExecutors(cfg), metrics: &metrics{w: cfg.Metrics, now: cfg.Now}}
	svc.store = armingStore{Store: ledger.New(st), s: svc}
	svc.notices = notices{sink: cfg.Notices, log: cfg.Logger, now: svc.now, metrics: svc.metrics,
		recent: &recentDurations{}, ended: cfg.RunEnded}
	// The rooms, each reaching the kernel through its adapter (room_*.go).
	svc.flow = newFlowRoom(svc)
	svc.maps = newMapsRoom(svc)
	svc.triggers = newTriggersRoom(svc)
	svc.jobs = newJobsRoom(svc)
	svc.workers = newWorkersRoom(svc)
	svc.signals = newSignalsRoom(svc)
	svc.ticks = newTimerPass(svc, TickerStates()...)
	svc.reconciles = newTimerPass(svc, ReconcilerStates()...)
	return svc, nil
}

// Pools returns the configured pool names' queue URLs.
func (s *Service) Pools() map[string]string { return s.cfg.Pools }

func (s *Service) now() time.Time { return s.cfg.Now().UTC() }

// policy is the argument that makes the store decide with the instance's
// stored policy and this service's jitter source.
func (s *Service) policy() statemodel.Policy { return ledger.StoredPolicy(s.cfg.Random) }

// NewID returns a ULID: unique, and sortable by creation time.
func (s *Service) NewID() string {
	s.entropyMu.Lock()
	defer s.entropyMu.Unlock()
	return ulid.MustNew(ulid.Timestamp(s.now()), s.entropy).String()
}

// newSecret returns a new instance's attempt secret (ledger.Instance.Secret).
func newSecret() (ledger.Secret, error) {
	b := make(ledger.Secret, ledger.SecretBytes)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("instance secret: %w", err)
	}
	return b, nil
}

// What an attempt's credentials are derived for.
const (
	purposeToken = "token"
	purposeNonce = "nonce"
)

// deriveCredential is the credential for purpose of attempt n of the
// instance at key: HMAC-SHA256 keyed by the instance's secret over the
// purpose and the attempt's identity (length-prefixed, so no two
// identities share an input), 128 bits in hex, the shape of a random
// token. The same attempt always gets the same credential, and no
// attempt's credential tells anything of another's.
func deriveCredential(secret ledger.Secret, purpose string, key ledger.InstanceKey, n int) string {
	mac := hmac.New(sha256.New, secret)
	fmt.Fprintf(mac, "%s\x00%d:%s%d:%s%d", purpose, len(key.Run), key.Run, len(key.Task), key.Task, n)
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// attemptToken is attempt n's fencing token and its stored hash. It is
// derived from the instance's secret, so every sender of attempt n (two
// evaluators that both found a task's dependencies met, a timer's retry
// of a dispatch) sends the token attempt n's claim accepts: a second
// envelope is a true duplicate. Attempt numbers never repeat within an
// instance (statemodel dispatches Attempt+1 and never lowers Attempt), so
// neither do tokens.
//
// An instance created before instances had a secret gets a random token,
// as every dispatch did then: of two racing senders, the one whose write
// lost sent a token no attempt holds, and its claim is refused.
func attemptToken(inst ledger.Instance, n int) (token, hash string, err error) {
	if len(inst.Secret) == 0 {
		return newToken()
	}
	token = deriveCredential(inst.Secret, purposeToken, inst.Key, n)
	return token, HashToken(token), nil
}

// attemptNonce is attempt n's one-time claim nonce, derived as its token
// is but for another purpose, so it needs no write and tells nothing of
// the token; "" for an instance without a secret, whose attempts have
// none. The claim route takes it as a bearer while the attempt is not
// claimed (the worker protocol's claim check), and answers that claim with the token.
func attemptNonce(inst ledger.Instance, n int) string {
	if len(inst.Secret) == 0 {
		return ""
	}
	return deriveCredential(inst.Secret, purposeNonce, inst.Key, n)
}

// nonceMatches reports whether bearer is attempt n's claim nonce, in
// constant time.
func nonceMatches(inst ledger.Instance, n int, bearer string) bool {
	nonce := attemptNonce(inst, n)
	return nonce != "" && bearer != "" && subtle.ConstantTimeCompare([]byte(bearer), []byte(nonce)) == 1
}

// newToken returns a 128-bit random fencing token and its stored hash.
func newToken() (token, hash string, err error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("fencing token: %w", err)
	}
	token = hex.EncodeToString(b[:])
	return token, HashToken(token), nil
}

// HashToken is how a fencing token is stored: only its SHA-256
// (protocol.HashToken, which a worker's lease proofs are keyed by).
func HashToken(token string) string { return protocol.HashToken(token) }

// deadlineReached reports whether a pass should stop starting new work.
func (s *Service) deadlineReached(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < s.cfg.Margin
}

// The worker protocol's sentinels, under the names the API and the events
// function know them by.
var (
	// ErrBadMessage: a queue message that cannot be understood
	// (workers.ErrBadMessage).
	ErrBadMessage = workers.ErrBadMessage
	// ErrNotDispatchedYet: a claim came before its dispatch write
	// (workers.ErrNotDispatchedYet).
	ErrNotDispatchedYet = workers.ErrNotDispatchedYet
)

// transient reports whether an error may go away by itself (throttling,
// network, contention): such work is retried by redelivery, never dropped.
func transient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	for _, permanent := range []error{
		ledger.ErrNotFound, ledger.ErrInvalidKey, ledger.ErrInvalidInput, ledger.ErrItemTooLarge,
		statemodel.ErrIllegalTransition, statemodel.ErrWrongActor, statemodel.ErrUnknownAttempt,
		statemodel.ErrGuard, statemodel.ErrInvalidEvent, statemodel.ErrOperatorRequired, statemodel.ErrNotDue,
		ledger.ErrInvalidPageToken, protocol.ErrInvalidAttemptToken, ErrBadMessage,
	} {
		if errors.Is(err, permanent) {
			return false
		}
	}
	return true
}
