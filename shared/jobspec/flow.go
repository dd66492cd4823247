package jobspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/fieldtemplate"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel/limiter"
)

// Flow control (docs/api.md, "Limiting concurrency"): a job's or a task's
// concurrency, a job's rate_limit and priority.

// Concurrency is a job's (runs) or a task's (attempts in flight) limit.
// Its limiter is Group (or the job's name) and the rendered Key.
type Concurrency struct {
	Limit int
	Key   string
	Group string
}

// RateLimit admits at most Runs runs of its limiter in any window of Per.
type RateLimit struct {
	Runs  int
	Per   time.Duration
	Key   string
	Group string
}

// Rate is the limiter model's view of r (the zero Rate for nil).
func (r *RateLimit) Rate() limiter.Rate {
	if r == nil {
		return limiter.Rate{}
	}
	return limiter.Rate{Runs: r.Runs, Per: r.Per}
}

// ConcurrencyLimiterName is the limiter a run of j with the rendered key
// enters for its concurrency.
func (j Job) ConcurrencyLimiterName(key string) string {
	return limiter.Name(flowGroup(j.Concurrency.Group, j.Name), key)
}

// RateLimiterName is the limiter a run of j with the rendered key enters
// for its rate limit.
func (j Job) RateLimiterName(key string) string {
	return limiter.Name(flowGroup(j.RateLimit.Group, j.Name), key)
}

// Limited reports whether j's runs go through a limiter.
func (j Job) Limited() bool { return j.Concurrency != nil || j.RateLimit != nil }

func flowGroup(group, job string) string {
	if group != "" {
		return group
	}
	return job
}

// BackfillPriority is the default priority of j's backfill runs: one step
// after the job's, at most the last.
func (j Job) BackfillPriority() int { return min(j.Priority+1, limiter.PriorityLast) }

// CheckPriority refuses a priority outside 1..5 with a 422 naming field.
func CheckPriority(field string, p int) error {
	if p < limiter.PriorityFirst || p > limiter.PriorityLast {
		return fieldError(field, "must be between %d (first) and %d (last), not %d", limiter.PriorityFirst, limiter.PriorityLast, p)
	}
	return nil
}

// RenderKey renders a limiter key template over data (the names worker
// exec offers, and .Task for a task's key) within limiter.MaxKeyLength
// bytes (fieldtemplate says how it is bounded).
func RenderKey(text string, data any) (string, error) {
	return parseKey(text).render(data)
}

var (
	concurrencyFields = []string{"limit", "key", "group"}
	rateLimitFields   = []string{"runs", "per", "key", "group"}
)

// readFlow reads the job's concurrency, rate_limit and priority.
func readFlow(d *decoder, top map[string]json.RawMessage, j *Job, _ parseMode) {
	j.Concurrency = d.concurrency(get(top, "concurrency"), "concurrency")
	j.RateLimit = d.rateLimit(get(top, "rate_limit"), "rate_limit")
	j.Priority = limiter.PriorityDefault
	if raw := get(top, "priority"); raw != nil {
		j.Priority = d.integer(raw, "priority")
		if d.err == nil {
			if err := CheckPriority("priority", j.Priority); err != nil {
				d.fail(err.(*Error))
			}
		}
	}
}

func (d *decoder) concurrency(raw json.RawMessage, field string) *Concurrency {
	if d.err != nil || raw == nil {
		return nil
	}
	m := d.object(raw, field, concurrencyFields...)
	var c Concurrency
	if v := get(m, "limit"); v != nil {
		c.Limit = d.integer(v, join(field, "limit"))
		if d.err == nil && (c.Limit < 1 || c.Limit > limiter.MaxLimit) {
			d.fail(fieldError(join(field, "limit"), "must be between 1 and %d, not %d", limiter.MaxLimit, c.Limit))
		}
	} else {
		d.fail(fieldError(join(field, "limit"), "is required"))
	}
	c.Key, c.Group = d.keyAndGroup(m, field)
	if d.err != nil {
		return nil
	}
	return &c
}

func (d *decoder) rateLimit(raw json.RawMessage, field string) *RateLimit {
	if d.err != nil || raw == nil {
		return nil
	}
	m := d.object(raw, field, rateLimitFields...)
	var r RateLimit
	if v := get(m, "runs"); v != nil {
		r.Runs = d.integer(v, join(field, "runs"))
		if d.err == nil && (r.Runs < 1 || r.Runs > limiter.MaxRateRuns) {
			d.fail(fieldError(join(field, "runs"), "must be between 1 and %d, not %d", limiter.MaxRateRuns, r.Runs))
		}
	} else {
		d.fail(fieldError(join(field, "runs"), "is required"))
	}
	if v := get(m, "per"); v != nil {
		r.Per = d.duration(v, join(field, "per"))
		if d.err == nil && (r.Per < limiter.MinRatePer || r.Per > limiter.MaxRatePer) {
			d.fail(fieldError(join(field, "per"), "must be between 1s and 24h, not %s", FormatDuration(r.Per)))
		}
	} else {
		d.fail(fieldError(join(field, "per"), "is required"))
	}
	r.Key, r.Group = d.keyAndGroup(m, field)
	if d.err != nil {
		return nil
	}
	return &r
}

func (d *decoder) keyAndGroup(m map[string]json.RawMessage, field string) (key, group string) {
	if v := get(m, "key"); v != nil {
		f := join(field, "key")
		key = d.str(v, f)
		if d.err == nil {
			if err := fieldtemplate.Check("key", key); err != nil {
				d.fail(fieldError(f, "is not a template: %s", templateError(err)))
			}
		}
	}
	if v := get(m, "group"); v != nil {
		f := join(field, "group")
		group = d.str(v, f)
		if d.err == nil && !ValidName(group) {
			d.fail(fieldError(f, "%q %s", group, nameRule))
		}
	}
	return key, group
}

func templateError(err error) string {
	var e interface{ Unwrap() error }
	for errors.As(err, &e) && e.Unwrap() != nil {
		err = e.Unwrap()
	}
	return err.Error()
}

// The flow fields' JSON shapes.
type (
	concurrencyJSON struct {
		Limit int    `json:"limit"`
		Key   string `json:"key"`
		Group string `json:"group,omitempty"`
	}
	rateLimitJSON struct {
		Runs  int    `json:"runs"`
		Per   string `json:"per"`
		Key   string `json:"key"`
		Group string `json:"group,omitempty"`
	}
)

func (c *Concurrency) wire() *concurrencyJSON {
	if c == nil {
		return nil
	}
	return &concurrencyJSON{Limit: c.Limit, Key: c.Key, Group: c.Group}
}

func (r *RateLimit) wire() *rateLimitJSON {
	if r == nil {
		return nil
	}
	return &rateLimitJSON{Runs: r.Runs, Per: FormatDuration(r.Per), Key: r.Key, Group: r.Group}
}

// CheckGroupLimit refuses j when a concurrency of it (the job's, or a
// task's) names a group that other, another job, gives another limit: 422
// naming the field's limit. Job groups (runs) and task groups (attempts)
// are separate.
func CheckGroupLimit(j Job, other Job) error {
	if j.Name == other.Name {
		return nil
	}
	if err := sameGroupLimit("concurrency", j.Concurrency, other.Concurrency, other.Name); err != nil {
		return err
	}
	for i, t := range j.TaskDefs {
		for _, o := range other.TaskDefs {
			if err := sameGroupLimit(at("tasks", i)+".concurrency", t.Concurrency, o.Concurrency, other.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

func sameGroupLimit(field string, c, o *Concurrency, otherJob string) error {
	if c == nil || o == nil || c.Group == "" || c.Group != o.Group || c.Limit == o.Limit {
		return nil
	}
	return &Error{Code: protocol.CodeInvalidField, Field: field + ".limit", Message: fmt.Sprintf(
		"%s.limit %d differs from the limit %d job %s gives group %s: jobs of one group share its limit.",
		field, c.Limit, o.Limit, otherJob, c.Group)}
}

// wirePriority writes a priority other than the default; the default is
// left out, so definitions without flow control read as before.
func wirePriority(p int) *int {
	if p == 0 || p == limiter.PriorityDefault {
		return nil
	}
	return &p
}
