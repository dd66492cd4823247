package app

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/store"
)

// The queues besides the pools', as Queues names them.
const (
	QueueEvents  = "events"
	QueueDelay   = "delay"
	QueueTrigger = "trigger"
)

// provisionedQueue is the local stack's setting of every queue: SQS's
// default visibility, a dead-letter queue after 5 receives, encrypted.
var provisionedQueue = queue.Spec{VisibilityTimeout: 30 * time.Second, MaxReceiveCount: 5, Encrypt: true}

// provision creates the table and queues that cfg.Provision names, when
// missing, and fills cfg's table and queue settings from them.
func (a *App) provision(ctx context.Context, cfg *Config) error {
	p := cfg.Provision
	// A table persisted by an earlier version may have an older index
	// layout: EnsureTable migrates it, and the log says what changed.
	changes, err := store.EnsureTable(ctx, a.DynamoDB, p.Name)
	if len(changes) > 0 {
		cfg.Logger.WarnContext(ctx, "migrated the table to this version's index layout: "+strings.Join(changes, "; "), "table", p.Name)
	}
	if err != nil {
		return fmt.Errorf("app: table %s: %w", p.Name, err)
	}
	cfg.Table = p.Name
	create := func(name string) (queue.Created, error) {
		spec := provisionedQueue
		spec.Name = name
		c, err := a.Queue.CreateQueue(ctx, spec)
		if err != nil {
			return c, fmt.Errorf("app: queue %s: %w", name, err)
		}
		return c, nil
	}
	cfg.Pools = map[string]string{}
	for _, pool := range provisionedPools(p.Pools, cfg.Parts) {
		c, err := create(p.Name + "-pool-" + pool)
		if err != nil {
			return err
		}
		cfg.Pools[pool] = c.URL
	}
	events, err := create(p.Name + "-" + QueueEvents)
	if err != nil {
		return err
	}
	delay, err := create(p.Name + "-" + QueueDelay)
	if err != nil {
		return err
	}
	// The local stand-in of the trigger queue an EventTriggers deployment
	// has: what is sent to it arrives as an EventBridge rule's delivery.
	trigger, err := create(p.Name + "-" + QueueTrigger)
	if err != nil {
		return err
	}
	cfg.EventsQueueURL, cfg.DelayQueueURL = events.URL, delay.URL
	cfg.TriggerQueueURL, cfg.TriggerQueueARN = trigger.URL, trigger.ARN
	return nil
}

// provisionedPools lists pools then the parts' pools, each once, in order.
func provisionedPools(pools []string, parts []Part) []string {
	var out []string
	add := func(ps []string) {
		for _, p := range ps {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	add(pools)
	for _, p := range parts {
		add(p.Pools)
	}
	return out
}

// Queues maps "events", "delay", "trigger" (when there is one) and each
// pool to its queue URL: what a Part's process and .runledger/local.json
// need.
func (a *App) Queues() map[string]string {
	q := map[string]string{QueueEvents: a.Config.EventsQueueURL, QueueDelay: a.Config.DelayQueueURL}
	if a.Config.TriggerQueueURL != "" {
		q[QueueTrigger] = a.Config.TriggerQueueURL
	}
	for pool, url := range a.Config.Pools {
		q[pool] = url
	}
	return q
}
