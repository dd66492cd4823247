package local

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// ScheduleHandler is the shape of a Lambda function behind an EventBridge
// schedule.
type ScheduleHandler func(ctx context.Context, ev events.EventBridgeEvent) error

// EventBridge's values for a scheduled rule's events.
const (
	ScheduledEventSource     = "aws.events"
	ScheduledEventDetailType = "Scheduled Event"
)

// Ticker is an EventBridge schedule run in-process: it invokes Handler with
// a scheduled event once when Run starts and then every Interval.
//
// Each event has a fresh id and, as its time, the clock's time truncated to
// the second, as EventBridge stamps it. Run paces itself by real time; the
// clock (Now) only stamps the events, so a stack under an injected clock
// sends events of that clock. Invocations do not overlap: a tick that falls
// while the handler still runs is skipped, and the next one comes at the
// next multiple of Interval from the start. A failed invocation is logged
// and counted, not retried: the next tick is the retry (EventBridge's
// asynchronous invocation would retry twice more).
type Ticker struct {
	// Name is the function name, for counters, logs and ARNs.
	Name     string
	Interval time.Duration
	Handler  ScheduleHandler
	// Source and DetailType default to ScheduledEventSource and
	// ScheduledEventDetailType.
	Source     string
	DetailType string
	// RuleARN is the event's only resource. Empty:
	// arn:aws:events:<Region>:<Account>:rule/<Name>.
	RuleARN string
	// Region and Account default to DefaultRegion and DefaultAccount.
	Region  string
	Account string
	// FunctionTimeout is each invocation's deadline; zero means
	// DefaultFunctionTimeout.
	FunctionTimeout time.Duration
	// Now is the clock the events' times come from; nil means time.Now.
	Now func() time.Time
	// Counters, if set, counts the invocations.
	Counters *Counters
	// Logger receives failed invocations. Nil means slog.Default().
	Logger *slog.Logger
}

// Run invokes the handler at once and then every Interval until ctx is
// cancelled; an invocation in flight then finishes before Run returns nil.
// It returns an error at once if the configuration is invalid.
func (t *Ticker) Run(ctx context.Context) error {
	if t.Interval <= 0 {
		return fmt.Errorf("ticker %s: interval %s, want more than 0", t.Name, t.Interval)
	}
	if err := t.check(); err != nil {
		return err
	}
	start := time.Now()
	var slot int64 // slot k is due at start + k*Interval
	for {
		t.Fire(ctx) // a failure is logged and counted; the next tick retries
		// The next slot due after now, skipping those the invocation overran.
		slot = max(slot+1, int64(time.Since(start)/t.Interval)+1)
		timer := time.NewTimer(time.Until(start.Add(time.Duration(slot) * t.Interval)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
	}
}

// Fire invokes the handler once with a new scheduled event and returns the
// invocation's failure, if any. It may run alongside Run.
func (t *Ticker) Fire(ctx context.Context) error {
	if err := t.check(); err != nil {
		return err
	}
	region := orDefault(t.Region, DefaultRegion)
	account := orDefault(t.Account, DefaultAccount)
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	ev := events.EventBridgeEvent{
		Version:    "0",
		ID:         newUUID(),
		DetailType: orDefault(t.DetailType, ScheduledEventDetailType),
		Source:     orDefault(t.Source, ScheduledEventSource),
		AccountID:  account,
		Time:       now().UTC().Truncate(time.Second),
		Region:     region,
		Resources:  []string{orDefault(t.RuleARN, fmt.Sprintf("arn:aws:events:%s:%s:rule/%s", region, account, t.Name))},
		Detail:     json.RawMessage("{}"),
	}
	fn := function{
		name: t.Name, region: region, account: account,
		timeout:  orDefault(t.FunctionTimeout, DefaultFunctionTimeout),
		counters: t.Counters, log: loggerOrDefault(t.Logger),
	}
	return fn.invoke(ctx, func(ctx context.Context) error { return t.Handler(ctx, ev) })
}

func (t *Ticker) check() error {
	switch {
	case t.Name == "":
		return fmt.Errorf("ticker: no function name")
	case t.Handler == nil:
		return fmt.Errorf("ticker %s: no handler", t.Name)
	case t.FunctionTimeout < 0 || t.FunctionTimeout > MaxFunctionTimeout:
		return fmt.Errorf("ticker %s: function timeout %s, want 0..%s", t.Name, t.FunctionTimeout, MaxFunctionTimeout)
	}
	return nil
}
