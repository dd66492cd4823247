package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/runledger/runledger/shared/protocol"
)

// A process that an executor starts for one attempt (the ecs executor's
// container) gets only the attempt's name, its one-time claim nonce and
// the API's URL (protocol.StartEnv). RunFromEnv and RunAttempt claim that
// attempt, which answers with its envelope (payload, params, timeouts and
// the token the other calls take), run the handler
// while heartbeating as a pool's worker does, and complete it over HTTP:
// such a process has no events queue.

// Defaults of AttemptConfig.
const (
	// DefaultReportTimeout bounds how long a completion is retried.
	DefaultReportTimeout = time.Minute
	// DefaultClaimTimeout bounds how long a claim is retried.
	DefaultClaimTimeout = time.Minute
)

// AttemptConfig configures RunAttempt.
type AttemptConfig struct {
	// APIURL is the base URL of the API (the worker routes).
	APIURL string
	// Ref names the attempt. ClaimNonce or Token proves the right to
	// claim it: the attempt's one-time claim nonce (a start environment's
	// RUNLEDGER_CLAIM_NONCE), after which the claim answer's token is used;
	// or the attempt's token itself. One of them is set.
	Ref        AttemptRef
	ClaimNonce string
	Token      string
	// Name is the worker's name in the claim ("<Name>@<boot id>").
	// Default: the host name (an ECS task's is its own).
	Name       string
	HTTPClient *http.Client
	// Clock stamps event times (default time.Now).
	Clock  func() time.Time
	Logger *slog.Logger
	// StopTimeout, DefaultHeartbeatInterval: as in Config.
	StopTimeout              time.Duration
	DefaultHeartbeatInterval time.Duration
	// ReportTimeout bounds the retries of the completion through
	// transient failures (default DefaultReportTimeout).
	ReportTimeout time.Duration
	// ClaimTimeout bounds the retries of the claim through transient
	// failures (default DefaultClaimTimeout): a container may start
	// before its network is up, or before the dispatch write lands.
	ClaimTimeout time.Duration
}

// Errors of RunAttempt besides the handler's own.
var (
	// ErrNotClaimed: the claim was refused (the attempt was cancelled,
	// superseded, or claimed by another process) or could not be made.
	ErrNotClaimed = errors.New("attempt not claimed")
	// ErrNotReported: the attempt ended without a completion the API
	// accepted (its lease was lost, a newer attempt superseded it, or the
	// report failed); the scheduler resolves it from what the executor saw.
	ErrNotReported = errors.New("attempt ended without a report")
)

// AttemptError is how RunAttempt reports an attempt that ran and did not
// succeed: the completion it reported.
type AttemptError struct {
	Completion Completion
	// State is the instance's state after the completion.
	State string
}

func (e *AttemptError) Error() string {
	c := e.Completion
	s := fmt.Sprintf("attempt %s %s (%s)", c.Ref(), c.Outcome, c.ErrorCategory)
	if c.ExitCode != nil {
		s += fmt.Sprintf(", exit code %d", *c.ExitCode)
	}
	return s
}

// RunFromEnv runs the one attempt the process's environment names
// (RUNLEDGER_RUN, RUNLEDGER_TASK, RUNLEDGER_ATTEMPT,
// RUNLEDGER_CLAIM_NONCE, RUNLEDGER_API_URL) with h; see RunAttempt.
func RunFromEnv(ctx context.Context, h Handler) error {
	ref, cred, apiURL, err := protocol.ParseStartEnv(os.Getenv)
	if err != nil {
		return err
	}
	return RunAttempt(ctx, AttemptConfig{APIURL: apiURL, Ref: ref, ClaimNonce: cred.Nonce, Token: cred.Token}, h)
}

// RunAttempt claims cfg.Ref, runs h on the envelope the claim answers
// with, heartbeating until h returns (a cancel request, the run timeout
// or a lost lease end h's ctx, as for a pool's worker), and completes the
// attempt over HTTP. It returns nil once a success is reported; an
// *AttemptError (its Completion.ExitCode is the exit code) for a reported
// failure or cancellation; ErrNotClaimed or ErrNotReported otherwise.
// ctx's end stops h as a worker's shutdown does.
func RunAttempt(ctx context.Context, cfg AttemptConfig, h Handler) error {
	w, err := newAttemptWorker(cfg, h)
	if err != nil {
		return err
	}
	log := w.log.With("run_id", cfg.Ref.Run, "task_id", cfg.Ref.Task, "attempt", cfg.Ref.Attempt)
	ops := context.WithoutCancel(ctx)
	claimSent, claimed, err := w.claimPatiently(ops, cfg, log)
	if err != nil {
		log.WarnContext(ctx, "claim failed", "err", err)
		return fmt.Errorf("%w: %w", ErrNotClaimed, err)
	}
	// A claim made with the nonce must get its token from the answer: the
	// nonce is no token.
	fallback := cfg.Token
	if cfg.ClaimNonce != "" {
		fallback = ""
	}
	env, err := claimedEnvelope(cfg.Ref, fallback, claimed)
	if err != nil {
		log.ErrorContext(ctx, "claim answer unusable; running nothing", "err", err)
		return fmt.Errorf("%w: %w", ErrNotClaimed, err)
	}
	if env.Token == "" {
		return fmt.Errorf("%w: claim %s: the answer carries no token", ErrNotClaimed, cfg.Ref)
	}
	log.InfoContext(ctx, "attempt claimed")

	keepCtx, stopKeep := context.WithCancel(ops)
	var keepWG sync.WaitGroup
	defer func() { stopKeep(); keepWG.Wait() }()
	m := mode{ops: ops, handlerParent: ctx, stopWait: w.cfg.StopTimeout}
	comp, ok := w.runClaimed(keepCtx, &keepWG, env, claimSent, claimed.LeaseExpiresAt, m, log)
	if !ok {
		return ErrNotReported
	}
	answer, err := w.completeOverHTTP(ops, cfg, comp, log)
	if err != nil {
		log.ErrorContext(ctx, "completion not reported", "err", err, "event_id", comp.EventID)
		return fmt.Errorf("%w: %w", ErrNotReported, err)
	}
	if comp.Outcome == OutcomeSucceeded {
		return nil
	}
	return &AttemptError{Completion: comp, State: string(answer.State)}
}

// claimPatiently claims the attempt, repeating through transient failures
// (same event id: a claim with the token that won but lost its answer wins
// again; one with the claim nonce is refused, the nonce being used) until
// the claim timeout. It returns when the claim that won was sent.
func (w *Worker) claimPatiently(ctx context.Context, cfg AttemptConfig, log *slog.Logger) (time.Time, ClaimResponse, error) {
	timeout := cfg.ClaimTimeout
	if timeout <= 0 {
		timeout = DefaultClaimTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := ClaimRequest{Run: cfg.Ref.Run, Task: cfg.Ref.Task, Attempt: cfg.Ref.Attempt, WorkerID: w.id, EventID: w.newEventID()}
	bo := backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
	for try := 1; ; try++ {
		sent := w.now()
		resp, err := w.api.Claim(ctx, cmp.Or(cfg.ClaimNonce, cfg.Token), req)
		if err == nil || !IsTransient(err) {
			return sent, resp, err
		}
		wait := bo.next()
		log.WarnContext(ctx, "claim failed; retrying", "err", err, "try", try, "backoff", wait.String())
		if !sleep(ctx, wait) {
			return sent, resp, err
		}
	}
}

// newAttemptWorker is a worker for one attempt: the API client, the clock
// and the timeouts of a pool's worker, and no queue.
func newAttemptWorker(cfg AttemptConfig, h Handler) (*Worker, error) {
	if h == nil {
		return nil, errors.New("run attempt: handler is nil")
	}
	if err := checkAPIURL(cfg.APIURL); err != nil {
		return nil, fmt.Errorf("run attempt: %w", err)
	}
	if err := cfg.Ref.Validate(); err != nil {
		return nil, fmt.Errorf("run attempt: %w", err)
	}
	if cfg.Token == "" && cfg.ClaimNonce == "" {
		return nil, errors.New("run attempt: neither a claim nonce nor a token is set")
	}
	if cfg.Name == "" {
		cfg.Name = hostName("attempt")
	}
	cfg.Name = strings.ReplaceAll(cfg.Name, "@", "_")
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.DefaultHeartbeatInterval <= 0 {
		cfg.DefaultHeartbeatInterval = DefaultHeartbeatInterval
	}
	w := &Worker{
		cfg: Config{APIURL: cfg.APIURL, Name: cfg.Name, StopTimeout: cfg.StopTimeout,
			DefaultHeartbeatInterval: cfg.DefaultHeartbeatInterval, Clock: cfg.Clock, Logger: cfg.Logger},
		handler: h,
		api:     NewClient(cfg.APIURL, cfg.HTTPClient),
		now:     cfg.Clock,
		after:   realAfter,
		bootID:  ulid.MustNew(ulid.Timestamp(cfg.Clock()), ulid.DefaultEntropy()).String(),
		running: runningSet{m: map[AttemptRef]string{}},
	}
	w.id = cfg.Name + "@" + w.bootID
	w.log = cfg.Logger.With("worker_id", w.id)
	return w, nil
}

// completeOverHTTP sends the completion to the API, repeating it (same
// event id) through transient failures for up to the report timeout.
func (w *Worker) completeOverHTTP(ctx context.Context, cfg AttemptConfig, c Completion, log *slog.Logger) (CompleteResponse, error) {
	timeout := cfg.ReportTimeout
	if timeout <= 0 {
		timeout = DefaultReportTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	bo := backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
	for try := 1; ; try++ {
		answer, err := w.api.Complete(ctx, c.Token, c)
		if err == nil {
			log.InfoContext(ctx, "completion reported", "result", answer.Result, "state", answer.State, "event_id", c.EventID)
			return answer, nil
		}
		if !IsTransient(err) {
			return CompleteResponse{}, err
		}
		wait := bo.next()
		log.WarnContext(ctx, "completion not sent; retrying", "err", err, "try", try, "backoff", wait.String())
		if !sleep(ctx, wait) {
			return CompleteResponse{}, fmt.Errorf("complete %s (try %d): %w", c.Ref(), try, err)
		}
	}
}
