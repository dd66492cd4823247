package jobspec

import (
	"github.com/runledger/runledger/shared/fieldtemplate"
	"github.com/runledger/runledger/statemodel/limiter"
)

// Compiled is one version of a job's definition as its runs use it, made
// once (Compile) and shared by every run of that version: the Job, with
// its priority, and its limiter keys parsed, so admitting a run renders
// its keys without parsing them again. It is read-only once made: callers
// read Job and never change it.
type Compiled struct {
	Job Job
	// concurrencyKey and rateKey are the job's keys (zero: the job has no
	// such limit); taskKeys are the keys of the tasks with a concurrency,
	// by task id.
	concurrencyKey, rateKey key
	taskKeys                map[string]key
}

// key is a limiter key template parsed, or why it does not parse (which
// its renderings answer, as RenderKey does for such a text).
type key struct {
	t   *fieldtemplate.Template
	err error
}

func parseKey(text string) key {
	t, err := fieldtemplate.Parse("key", text)
	return key{t: t, err: err}
}

func (k key) render(data any) (string, error) {
	if k.err != nil {
		return "", k.err
	}
	return k.t.Render(data, limiter.MaxKeyLength)
}

// Compile parses j's limiter keys. j is a job as Parse, ParseUpdate or
// Load returns it.
func Compile(j Job) *Compiled {
	c := &Compiled{Job: j}
	if j.Concurrency != nil {
		c.concurrencyKey = parseKey(j.Concurrency.Key)
	}
	if j.RateLimit != nil {
		c.rateKey = parseKey(j.RateLimit.Key)
	}
	for _, t := range j.TaskDefs {
		if t.Concurrency != nil {
			if c.taskKeys == nil {
				c.taskKeys = map[string]key{}
			}
			c.taskKeys[t.ID] = parseKey(t.Concurrency.Key)
		}
	}
	return c
}

// ConcurrencyKey renders the job's concurrency key over data, as
// RenderKey does; the job has a concurrency.
func (c *Compiled) ConcurrencyKey(data any) (string, error) { return c.concurrencyKey.render(data) }

// RateKey renders the job's rate_limit key over data, as RenderKey does;
// the job has a rate_limit.
func (c *Compiled) RateKey(data any) (string, error) { return c.rateKey.render(data) }

// TaskConcurrency is the concurrency of the task id (nil: none, or no
// such task).
func (c *Compiled) TaskConcurrency(id string) *Concurrency {
	for _, t := range c.Job.TaskDefs {
		if t.ID == id {
			return t.Concurrency
		}
	}
	return nil
}

// TaskKey renders the concurrency key of the task id over data, as
// RenderKey does; the task has a concurrency (TaskConcurrency).
func (c *Compiled) TaskKey(id string, data any) (string, error) { return c.taskKeys[id].render(data) }
