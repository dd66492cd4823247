package scheduler

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
)

// Function names, fixed by docs/wiring.md: each is built by `make functions`
// to <CodeDir>/<name>/bootstrap.
const (
	FunctionAPI        = "api"
	FunctionEvents     = "events"
	FunctionTicker     = "ticker"
	FunctionReconciler = "reconciler"
	FunctionWorker     = "worker"
)

// FunctionNames lists every function the construct can deploy, in wiring order.
func FunctionNames() []string {
	return []string{FunctionAPI, FunctionEvents, FunctionTicker, FunctionReconciler, FunctionWorker}
}

// Defaults applied by NewScheduler to zero-valued props.
const (
	DefaultPool                  = "default"
	DefaultScheduleRate          = time.Minute
	DefaultHistoryRetention      = 2160 * time.Hour // 90 days, as in docs/wiring.md
	DefaultQueueWaitP99Threshold = 5 * time.Minute
	DefaultStuckThreshold        = 15 * time.Minute
	DefaultMaxReceiveCount       = 5
	DefaultMaxClockSkew          = 30 * time.Second
	DefaultLogRetention          = awslogs.RetentionDays_ONE_MONTH
)

// Unreserved, as a ReservedConcurrency value, leaves a function without
// reserved concurrency, as absent names are.
const Unreserved = -1

// JWTAuthorizer configures a JWT authorizer in place of IAM (SigV4) on the
// operator routes (/v1/jobs..., /v1/runs...).
type JWTAuthorizer struct {
	// Issuer is the token issuer URL, e.g. a Cognito user pool's
	// https://cognito-idp.<region>.amazonaws.com/<pool id>.
	Issuer string
	// Audiences are the accepted `aud` (or Cognito `client_id`) values.
	Audiences []string
}

// Props configure a Scheduler. Every field but CodeDir has a default.
type Props struct {
	// CodeDir holds one folder per function with its `bootstrap` executable
	// (linux/arm64), as `make functions` writes them to dist/. Required.
	// Each must be a static aarch64 ELF executable, or validation stops
	// the synthesis (PlaceholderBootstrap stands in for one in tests).
	CodeDir string

	// Pools are the worker pools; each gets a dispatch queue and its DLQ.
	// Default: ["default"].
	Pools []string
	// ExampleWorkerPool, when set, deploys the example worker function as an
	// SQS consumer of that pool's dispatch queue. It is a demo: it answers
	// success for every task it gets, so give it a pool no real job uses.
	// Empty (the default) deploys none: bring your own workers built with
	// the worker SDK.
	ExampleWorkerPool string

	// TickerRate and ReconcilerRate are the EventBridge schedule rates, whole
	// minutes, at least one. Default: one minute each.
	TickerRate     time.Duration
	ReconcilerRate time.Duration

	// HistoryRetention is how long a finished run of a job that sets no
	// `retention` is kept before the table's TTL removes all of it, its
	// history included (RUNLEDGER_HISTORY_RETENTION, a name kept from when
	// it set the history's alone). Default 90 days; 24h..87600h.
	HistoryRetention time.Duration
	// MaxClockSkew bounds how far a worker's clock may be from the
	// scheduler's (RUNLEDGER_MAX_CLOCK_SKEW). A silent attempt is retried
	// no earlier than its lease's end plus this, unless evidence proves its
	// process gone. Default 30 s.
	MaxClockSkew time.Duration
	// LogRetention applies to every function's log group. Default one month.
	LogRetention awslogs.RetentionDays

	// RemovalPolicy applies to the table and the log groups when the
	// construct is removed. Default RETAIN: removing the stack keeps the data.
	RemovalPolicy awscdk.RemovalPolicy
	// DeletionProtection is the table's deletion protection. Default true.
	DeletionProtection *bool
	// KeepRetiredIndexes keeps the retired index of the newest migration
	// (tableschema.Schema.Migrating) beside the index that replaced it,
	// and the Query grants on it: the first deploy of the two-deploy
	// index migration (docs/deploy.md). CloudFormation creates or deletes
	// one index per update, so a stack that has a retired index deploys
	// once with this set (adding the replacement), then once without
	// (deleting the retired one). Default false.
	KeepRetiredIndexes bool

	// AlarmTopic, when set, receives every alarm's ALARM and OK transitions.
	AlarmTopic awssns.ITopic
	// RunFailedAlarm adds an alarm that fires when any run fails (the
	// functions' Runledger/RunFailed metric, summed over 5 minutes), beside
	// the alarms every stack has. Default false: the event bus carries
	// each failed run (run.failed), and a rule on it can say which.
	RunFailedAlarm bool
	// QueueWaitP99Threshold raises the queue wait alarm when the p99 of
	// QUEUED -> RUNNING stays above it for 15 minutes. Default 5 minutes.
	QueueWaitP99Threshold time.Duration
	// StuckThresholds raise a state's stuck alarm (Stuck-<STATE>) when an
	// instance in it is still listed by the ticker or reconciler this long
	// after its timer fell due (the OverdueInState metric), keyed by state:
	// CREATED, SCHEDULED, QUEUED, RUNNING, UP_FOR_RETRY, LOST, CANCELLING
	// (StuckStates). A state left out has DefaultStuckThreshold (15
	// minutes); at least 1 minute each.
	StuckThresholds map[string]time.Duration

	// JWT, when set, puts a JWT authorizer instead of IAM on the operator routes.
	JWT *JWTAuthorizer

	// ReservedConcurrency reserves concurrent executions per function name
	// (see FunctionNames); 0 disables a function, Unreserved reserves
	// nothing. Absent names stay unreserved, the default for every
	// function: Lambda refuses a reservation that would leave the account
	// under 100 unreserved executions, so a reservation fails the stack's
	// creation in an account whose quota is small (a new account's may be
	// 10). Reserve for the api function (capping it, so that a flood of
	// requests cannot take the concurrency of events, ticker and
	// reconciler) once the account's quota is at least the reservation
	// plus 100.
	ReservedConcurrency map[string]int

	// APIRunRate is the rate of runs a second the HTTP API's throttles
	// admit on each route a run calls (throttle.go): API Gateway answers
	// 429 beyond it, before the api function runs. Default
	// DefaultAPIRunRate.
	APIRunRate float64

	// MaxReceiveCount is how many receives a message gets before its queue
	// moves it to the DLQ. Default 5.
	MaxReceiveCount int

	// ECS, when set, allows the ecs executor on its clusters and task
	// definitions (ecs.go). Nil: a job naming an ecs executor is refused.
	ECS *ECSExecutor
	// Lambda, when set, allows the lambda executor on its functions
	// (lambda.go). Nil: a job naming a lambda executor is refused.
	Lambda *LambdaExecutor

	// EventTriggers, when set, names the event buses and sources whose
	// events may start runs (triggers.go). Nil: none.
	EventTriggers *EventTriggers
}

var poolName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$`)

// withDefaults returns a copy of p with every zero field set to its default.
func (p Props) withDefaults() Props {
	if len(p.Pools) == 0 {
		p.Pools = []string{DefaultPool}
	}
	if p.TickerRate == 0 {
		p.TickerRate = DefaultScheduleRate
	}
	if p.ReconcilerRate == 0 {
		p.ReconcilerRate = DefaultScheduleRate
	}
	if p.HistoryRetention == 0 {
		p.HistoryRetention = DefaultHistoryRetention
	}
	if p.MaxClockSkew == 0 {
		p.MaxClockSkew = DefaultMaxClockSkew
	}
	if p.LogRetention == "" {
		p.LogRetention = DefaultLogRetention
	}
	if p.RemovalPolicy == "" {
		p.RemovalPolicy = awscdk.RemovalPolicy_RETAIN
	}
	if p.DeletionProtection == nil {
		on := true
		p.DeletionProtection = &on
	}
	if p.QueueWaitP99Threshold == 0 {
		p.QueueWaitP99Threshold = DefaultQueueWaitP99Threshold
	}
	stuck := map[string]time.Duration{}
	for _, st := range StuckStates() {
		stuck[st] = DefaultStuckThreshold
	}
	maps.Copy(stuck, p.StuckThresholds)
	p.StuckThresholds = stuck
	if p.MaxReceiveCount == 0 {
		p.MaxReceiveCount = DefaultMaxReceiveCount
	}
	if p.APIRunRate == 0 {
		p.APIRunRate = DefaultAPIRunRate
	}
	return p
}

// deployed lists the functions these props deploy.
func (p Props) deployed() []string {
	names := []string{FunctionAPI, FunctionEvents, FunctionTicker, FunctionReconciler}
	if p.ExampleWorkerPool != "" {
		names = append(names, FunctionWorker)
	}
	return names
}

// Validate reports every problem with p, defaults applied, at once:
// NewScheduler panics with the same error.
func (p Props) Validate() error { return p.withDefaults().validate() }

// validate reports every problem with defaulted props at once.
func (p Props) validate() error {
	var errs []error
	if p.CodeDir == "" {
		errs = append(errs, errors.New("CodeDir is required: the folder `make functions` writes (dist/)"))
	} else {
		for _, name := range p.deployed() {
			path := filepath.Join(p.CodeDir, name, "bootstrap")
			if st, err := os.Stat(path); err != nil || st.IsDir() {
				errs = append(errs, fmt.Errorf("function %s: no executable at %s (run `make functions`)", name, path))
			} else if err := checkBootstrap(path); err != nil {
				errs = append(errs, fmt.Errorf("function %s: %w", name, err))
			}
		}
	}
	seen := map[string]bool{}
	for _, pool := range p.Pools {
		switch {
		case !poolName.MatchString(pool):
			errs = append(errs, fmt.Errorf("pool %q: want 1-40 letters, digits, '-' or '_', starting with a letter or digit", pool))
		case seen[pool]:
			errs = append(errs, fmt.Errorf("pool %q: listed twice", pool))
		}
		seen[pool] = true
	}
	if p.ExampleWorkerPool != "" && !seen[p.ExampleWorkerPool] {
		errs = append(errs, fmt.Errorf("example worker pool %q: not one of the pools %v", p.ExampleWorkerPool, p.Pools))
	}
	for _, r := range []struct {
		name string
		rate time.Duration
	}{{"TickerRate", p.TickerRate}, {"ReconcilerRate", p.ReconcilerRate}} {
		if r.rate < time.Minute || r.rate%time.Minute != 0 {
			errs = append(errs, fmt.Errorf("%s %s: EventBridge rates are whole minutes, at least 1m", r.name, r.rate))
		}
	}
	if p.HistoryRetention < 24*time.Hour || p.HistoryRetention > 87600*time.Hour {
		errs = append(errs, fmt.Errorf("HistoryRetention %s: want 24h..87600h (a run's retention, ledger.MinRunRetention..MaxRunRetention)", p.HistoryRetention))
	}
	if p.MaxClockSkew < time.Millisecond {
		errs = append(errs, fmt.Errorf("MaxClockSkew %s: want at least 1ms", p.MaxClockSkew))
	}
	if p.QueueWaitP99Threshold < time.Millisecond {
		errs = append(errs, fmt.Errorf("QueueWaitP99Threshold %s: want at least 1ms", p.QueueWaitP99Threshold))
	}
	for _, st := range slices.Sorted(maps.Keys(p.StuckThresholds)) {
		if !slices.Contains(StuckStates(), st) {
			errs = append(errs, fmt.Errorf("StuckThresholds: unknown state %q (want one of %v)", st, StuckStates()))
		} else if p.StuckThresholds[st] < time.Minute {
			errs = append(errs, fmt.Errorf("StuckThresholds[%s] %s: want at least 1m (the metric's passes run each minute)", st, p.StuckThresholds[st]))
		}
	}
	if p.MaxReceiveCount < 1 || p.MaxReceiveCount > 1000 {
		errs = append(errs, fmt.Errorf("MaxReceiveCount %d: SQS allows 1-1000", p.MaxReceiveCount))
	}
	for _, name := range slices.Sorted(maps.Keys(p.ReservedConcurrency)) {
		n := p.ReservedConcurrency[name]
		if !slices.Contains(FunctionNames(), name) {
			errs = append(errs, fmt.Errorf("ReservedConcurrency: unknown function %q (want one of %v)", name, FunctionNames()))
		}
		if n < Unreserved {
			errs = append(errs, fmt.Errorf("ReservedConcurrency[%s] %d: want 0 or more, or Unreserved (-1, \"off\")", name, n))
		}
	}
	if p.APIRunRate < 0 {
		errs = append(errs, fmt.Errorf("APIRunRate %v: want more than 0", p.APIRunRate))
	}
	if p.JWT != nil {
		if p.JWT.Issuer == "" {
			errs = append(errs, errors.New("JWT.Issuer is required when JWT is set"))
		}
		if len(p.JWT.Audiences) == 0 {
			errs = append(errs, errors.New("JWT.Audiences needs at least one audience"))
		}
	}
	if err := p.ECS.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := p.Lambda.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := p.EventTriggers.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
