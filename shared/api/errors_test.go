package api

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/scheduler/workers"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// answerCase is an error the handler may meet and the answer it gives:
// status, code and message, byte for byte.
type answerCase struct {
	name       string
	err        error
	status     int
	code       protocol.Code
	message    string
	retryAfter string
}

const (
	msgNotFound   = "The resource does not exist."
	msgIllegal    = "The task's current state does not allow this."
	msgInvalidKey = "A name, id or token in the request is not valid."
	msgInternal   = "The request could not be completed; try again."
	msgItemLarge  = "The item would be over DynamoDB's 400 KB limit."
	msgAnother    = "This Idempotency-Key was used with another body."
)

// wrapped is err as a caller wraps it on its way up.
func wrapped(err error) error { return fmt.Errorf("run 01RUN: task t: %w", err) }

// sentinelAnswers pins every sentinel error the API answers with a code
// of its own, bare and wrapped.
func sentinelAnswers() []answerCase {
	return []answerCase{
		{"ledger not found", ledger.ErrNotFound, 404, protocol.CodeNotFound, msgNotFound, ""},
		{"ledger not found wrapped", wrapped(ledger.ErrNotFound), 404, protocol.CodeNotFound, msgNotFound, ""},
		{"table not found", fmt.Errorf("%w: no message", store.ErrTableNotFound), 404, protocol.CodeNotFound, msgNotFound, ""},
		{"not dispatched yet", wrapped(scheduler.ErrNotDispatchedYet), 503, protocol.CodeUnavailable,
			"The attempt's dispatch is not recorded yet; claim again shortly.", "1"},
		{"invalid attempt token", wrapped(protocol.ErrInvalidAttemptToken), 401, protocol.CodeInvalidToken,
			"The attempt token does not match this run, task and attempt.", ""},
		{"already claimed", protocol.ErrAlreadyClaimed, 409, protocol.CodeAlreadyClaimed, "Another worker holds this attempt.", ""},
		{"stale attempt", wrapped(protocol.ErrStaleAttempt), 409, protocol.CodeStaleAttempt, "A newer attempt of this task exists.", ""},
		{"inputs too large", wrapped(workers.ErrInputsTooLarge), 409, protocol.CodeIllegalTransition,
			"The task's inputs are over 1048576 bytes in total, so it failed with error_category inputs_too_large.", ""},
		{"illegal transition", statemodel.ErrIllegalTransition, 409, protocol.CodeIllegalTransition, msgIllegal, ""},
		{"illegal transition wrapped", fmt.Errorf("%w: instance is RUNNING: x", statemodel.ErrIllegalTransition), 409, protocol.CodeIllegalTransition, msgIllegal, ""},
		{"transition error", &statemodel.TransitionError{State: statemodel.StateRunning, Event: statemodel.EvHeartbeat, Err: statemodel.ErrIllegalTransition},
			409, protocol.CodeIllegalTransition, msgIllegal, ""},
		{"version conflict", wrapped(ledger.ErrVersionConflict), 412, protocol.CodeVersionConflict, "The job changed since that version; read it again.", ""},
		{"idempotency mismatch", ledger.ErrIdempotencyMismatch, 409, protocol.CodeConflict, msgAnother, ""},
		{"idempotency mismatch run", &ledger.ExistingRunError{Job: "j", RunID: "r", Err: ledger.ErrIdempotencyMismatch}, 409, protocol.CodeConflict, msgAnother, ""},
		{"already exists", wrapped(ledger.ErrAlreadyExists), 409, protocol.CodeConflict, "It exists already.", ""},
		{"limit queue full", wrapped(ledger.ErrLimitQueueFull), 429, protocol.CodeLimitQueueFull,
			"The run's limiter already has 10,000 runs waiting; nothing was written.", ""},
		{"item too large", ledger.ErrItemTooLarge, 413, protocol.CodePayloadTooLarge, msgItemLarge, ""},
		{"item too large error", wrapped(&ledger.ItemTooLargeError{Item: "run r", Size: 500000, Limit: 400000}), 413, protocol.CodePayloadTooLarge, msgItemLarge, ""},
		{"too many tasks", wrapped(ledger.ErrTooManyTasks), 422, protocol.CodeInvalidField, "A run has at most 48 tasks.", ""},
		{"invalid key", ledger.ErrInvalidKey, 422, protocol.CodeInvalidField, msgInvalidKey, ""},
		{"invalid key error", wrapped(&ledger.InvalidKeyError{Part: "job", Value: "a#b", Reason: "holds #"}), 422, protocol.CodeInvalidField, msgInvalidKey, ""},
		{"invalid input", wrapped(ledger.ErrInvalidInput), 422, protocol.CodeInvalidField, msgInvalidKey, ""},
		{"invalid input over a model error", fmt.Errorf("%w: %w", ledger.ErrInvalidInput, statemodel.ErrInvalidPolicy), 422, protocol.CodeInvalidField, msgInvalidKey, ""},
		{"invalid page token", wrapped(ledger.ErrInvalidPageToken), 422, protocol.CodeInvalidField, msgInvalidKey, ""},
		{"not found before illegal transition", fmt.Errorf("%w: %w", statemodel.ErrIllegalTransition, ledger.ErrNotFound), 404, protocol.CodeNotFound, msgNotFound, ""},
	}
}

// typedAnswers pins the error types whose answer is built from their
// fields.
func typedAnswers() []answerCase {
	return []answerCase{
		{"api error", errf(protocol.CodeInvalidJSON, "The request body is not valid JSON."), 400, protocol.CodeInvalidJSON, "The request body is not valid JSON.", ""},
		{"api error unauthorized", errf(protocol.CodeUnauthorized, "A valid API key is required."), 401, protocol.CodeUnauthorized, "A valid API key is required.", ""},
		{"field error", wrapped(&protocol.FieldError{Field: "event_id", Message: "event_id is too long."}), 422, protocol.CodeInvalidField, "event_id is too long.", ""},
		{"field error too large", &protocol.FieldError{Field: "output", TooLarge: true, Message: "output is over 64 KiB."}, 413, protocol.CodePayloadTooLarge, "output is over 64 KiB.", ""},
		{"invalid completion of a field", fmt.Errorf("%w: %w", workers.ErrInvalidCompletion, &protocol.FieldError{Field: "outcome", Message: "outcome is unknown."}),
			422, protocol.CodeInvalidField, "outcome is unknown.", ""},
		{"jobspec error", &jobspec.Error{Code: protocol.CodeInvalidCron, Field: "schedule.cron", Message: "schedule.cron is not valid."}, 422, protocol.CodeInvalidCron, "schedule.cron is not valid.", ""},
		{"envelope too large", wrapped(&scheduler.EnvelopeError{Task: "t", TooLarge: true, Size: 300000}), 413, protocol.CodePayloadTooLarge,
			`Task "t"'s dispatch message would be 300000 bytes, over the queue's limit of 262144 (256 KiB).`, ""},
		{"envelope bad character", &scheduler.EnvelopeError{Task: "t"}, 422, protocol.CodeInvalidField,
			`Task "t"'s payload or the params hold a character the queue cannot carry (U+FFFE or U+FFFF).`, ""},
		{"body too large", wrapped(&http.MaxBytesError{Limit: MaxBodyBytes}), 413, protocol.CodePayloadTooLarge, "The request body is over 1048576 bytes.", ""},
	}
}

// internalAnswers pins the errors the API answers 500 internal: a class
// without a code of the API's is not the client's to read.
func internalAnswers() []answerCase {
	var out []answerCase
	for _, err := range []error{
		errors.New("boom"), ledger.ErrConflict, ledger.ErrRunEnded, ledger.ErrUnsettled, ledger.ErrThrottled,
		&ledger.ExistingRunError{Job: "j", RunID: "r", Err: ledger.ErrSlotTaken},
		&ledger.ExistingRunError{Job: "j", RunID: "r", Err: ledger.ErrIdempotentReplay},
		ledger.ErrUnfinishedRuns, ledger.ErrCorruptItem, ledger.ErrStaleAttempt, ledger.ErrLostNeedsTransition,
		store.ErrTableLayout, scheduler.ErrBadMessage, fmt.Errorf("%w: no outcome", workers.ErrInvalidCompletion),
		statemodel.ErrWrongActor, statemodel.ErrUnknownAttempt, statemodel.ErrNotDue, statemodel.ErrGuard,
		statemodel.ErrOperatorRequired, statemodel.ErrInvalidEvent, statemodel.ErrTableViolation, statemodel.ErrInvalidPolicy,
	} {
		out = append(out, answerCase{"internal " + err.Error(), wrapped(err), 500, protocol.CodeInternal, msgInternal, ""})
	}
	return out
}

// TestErrorAnswersArePinned holds the API's answer to every error it
// maps: the status, the code and the message, byte for byte, and the
// Retry-After of the one answer that carries it.
func TestErrorAnswersArePinned(t *testing.T) {
	h := &Handler{log: slog.New(slog.NewJSONHandler(io.Discard, nil))}
	cases := append(append(sentinelAnswers(), typedAnswers()...), internalAnswers()...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			h.fail(w, httptest.NewRequest("GET", "/v1/runs/01RUN", nil), c.err)
			want := fmt.Sprintf(`{"code":%q,"message":%q}`, c.code, c.message) + "\n"
			if w.Code != c.status || w.Body.String() != want {
				t.Fatalf("%v: %d %s, want %d %s", c.err, w.Code, w.Body.String(), c.status, want)
			}
			if got := w.Header().Get("Retry-After"); got != c.retryAfter {
				t.Fatalf("Retry-After %q, want %q", got, c.retryAfter)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
		})
	}
}
