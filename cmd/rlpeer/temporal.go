package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// The peer's scenarios are the bench's, as workflows: a chain of no-op
// activities, one-activity workflows of which every tenth fails its first
// attempt, and timers that all come due at one instant.
const (
	taskQueue      = "rlpeer"
	chainSteps     = 40
	throughputRuns = 1000
	timerRuns      = 50
)

// noop is the activity: it does nothing, or fails its first attempt when
// asked to.
func noop(ctx context.Context, failFirst bool) error {
	if failFirst && activity.GetInfo(ctx).Attempt == 1 {
		return errors.New("first attempt fails by design")
	}
	return nil
}

func activityOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2, MaximumAttempts: 3,
		},
	})
}

// Chain runs chainSteps no-op activities one after another.
func Chain(ctx workflow.Context) error {
	ctx = activityOptions(ctx)
	for range chainSteps {
		if err := workflow.ExecuteActivity(ctx, noop, false).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// Single runs one no-op activity.
func Single(ctx workflow.Context, failFirst bool) error {
	return workflow.ExecuteActivity(activityOptions(ctx), noop, failFirst).Get(ctx, nil)
}

// Sleeper sleeps until due and returns when its timer fired, by the
// workflow's clock (the time of the workflow task the timer woke).
func Sleeper(ctx workflow.Context, due time.Time) (time.Time, error) {
	if err := workflow.Sleep(ctx, due.Sub(workflow.Now(ctx))); err != nil {
		return time.Time{}, err
	}
	return workflow.Now(ctx), nil
}

// temporalPeer runs the scenarios against a Temporal server.
type temporalPeer struct {
	c  client.Client
	w  worker.Worker
	id atomic.Int64
}

func startTemporalPeer(addr string) (*temporalPeer, error) {
	c, err := client.Dial(client.Options{HostPort: addr, Namespace: "default", Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("dial temporal at %s: %w", addr, err)
	}
	w := worker.New(c, taskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize:     64,
		MaxConcurrentWorkflowTaskExecutionSize: 64,
		MaxConcurrentActivityTaskPollers:       8,
		MaxConcurrentWorkflowTaskPollers:       8,
	})
	w.RegisterWorkflow(Chain)
	w.RegisterWorkflow(Single)
	w.RegisterWorkflow(Sleeper)
	w.RegisterActivity(noop)
	if err := w.Start(); err != nil {
		c.Close()
		return nil, err
	}
	return &temporalPeer{c: c, w: w}, nil
}

func (p *temporalPeer) close() {
	p.w.Stop()
	p.c.Close()
}

func (p *temporalPeer) start(ctx context.Context, wf any, args ...any) (client.WorkflowRun, error) {
	id := fmt.Sprintf("rlpeer-%d-%d", time.Now().UnixNano(), p.id.Add(1))
	return p.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue}, wf, args...)
}

// chainStepMs runs the chain once to warm up, then runs times, and
// returns the median run's duration over its steps.
func (p *temporalPeer) chainStepMs(ctx context.Context, runs int) (float64, error) {
	var totals []float64
	for i := -1; i < runs; i++ {
		run, err := p.start(ctx, Chain)
		if err != nil {
			return 0, err
		}
		if err := run.Get(ctx, nil); err != nil {
			return 0, fmt.Errorf("chain: %w", err)
		}
		if i >= 0 {
			d, err := p.duration(ctx, run)
			if err != nil {
				return 0, err
			}
			totals = append(totals, d)
		}
	}
	return median(totals) / chainSteps, nil
}

// throughputRunsPerS starts n one-activity workflows (every tenth failing
// its first attempt) with at most 32 starts in flight, and returns n over
// the time from the first start to the last workflow's end.
func (p *temporalPeer) throughputRunsPerS(ctx context.Context, n int) (float64, error) {
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		run, err := p.start(ctx, Single, i%10 == 9)
		<-sem
		if err != nil {
			return 0, err
		}
		wg.Go(func() { errs[i] = run.Get(ctx, nil) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("throughput: %w", err)
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// timerLateP99Ms starts n workflows whose timers are all due at one
// instant (3 s after the first start) and returns the p99 of how late
// each woke.
func (p *temporalPeer) timerLateP99Ms(ctx context.Context, n int) (float64, error) {
	due := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	runs := make([]client.WorkflowRun, n)
	for i := range n {
		run, err := p.start(ctx, Sleeper, due)
		if err != nil {
			return 0, err
		}
		runs[i] = run
	}
	late := make([]float64, n)
	for i, run := range runs {
		var woke time.Time
		if err := run.Get(ctx, &woke); err != nil {
			return 0, fmt.Errorf("timer: %w", err)
		}
		late[i] = float64(woke.Sub(due)) / float64(time.Millisecond)
	}
	return quantile(late, 0.99), nil
}

// duration is a closed workflow's start to close by the server's
// record, in milliseconds (rlbench's run created_at to ended_at).
func (p *temporalPeer) duration(ctx context.Context, run client.WorkflowRun) (float64, error) {
	d, err := p.c.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
	if err != nil {
		return 0, err
	}
	info := d.GetWorkflowExecutionInfo()
	return float64(info.GetCloseTime().AsTime().Sub(info.GetStartTime().AsTime())) / float64(time.Millisecond), nil
}

// quantile is the q-quantile (0..1) of xs by the nearest-rank method, as
// rlbench computes it.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(q * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// median is the middle value, or the mean of the two middle values.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// quietLogger drops the SDK's logs: the figures are the output.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}
