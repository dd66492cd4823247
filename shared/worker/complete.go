package worker

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"
)

// DefaultCompleteTimeout bounds one completion over HTTP before the worker
// sends it to the events queue instead.
const DefaultCompleteTimeout = 10 * time.Second

// completeRoute is what became of a completion offered to the API's
// complete route.
type completeRoute int

const (
	// routeDone: the API answered 200 (applied, duplicate or stale); the
	// completion is recorded.
	routeDone completeRoute = iota
	// routeFinal: the API refused the completion with a 4xx (a newer
	// attempt, a terminal instance, a wrong token): the refusal is the
	// server's decision, and the events queue would refuse it the same way.
	routeFinal
	// routeUnreachable: no answer, a timeout, 429 or a 5xx: the events
	// queue takes the completion, with the same event id.
	routeUnreachable
)

// completeOverRoute offers the completion to the API's complete route,
// once, bounded by Config.CompleteTimeout. The completion is fenced by the
// attempt's token and idempotent by its event id, so sending it to the
// events queue after a try whose answer was lost is safe: the second copy
// is a duplicate.
func (w *Worker) completeOverRoute(ctx context.Context, c Completion, log *slog.Logger) (completeRoute, error) {
	callCtx, cancel := context.WithTimeout(ctx, w.cfg.CompleteTimeout)
	defer cancel()
	answer, err := w.api.Complete(callCtx, c.Token, c)
	if err == nil {
		log.InfoContext(ctx, "completion reported over HTTP", "result", answer.Result, "state", answer.State, "event_id", c.EventID)
		return routeDone, nil
	}
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.Status >= 400 && apiErr.Status < 500 && apiErr.Status != http.StatusTooManyRequests {
		log.WarnContext(ctx, "completion refused by the API; the refusal is final", "err", err, "event_id", c.EventID)
		return routeFinal, err
	}
	return routeUnreachable, err
}
