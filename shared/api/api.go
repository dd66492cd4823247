// Package api is runledger's HTTP API (docs/api.md explains it; every
// route, body and error code is in openapi.yaml) as an ordinary
// http.Handler. The api Lambda adapts API Gateway (payload 2.0)
// events to it; the local stack serves it on 127.0.0.1 through the same
// adapter.
package api

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runledger/runledger/shared/dashboard"
	"github.com/runledger/runledger/shared/fault"
	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/wire"
)

// Auth says who checks the caller of the non-worker routes.
type Auth string

const (
	// AuthAPIKey: the handler checks "Authorization: Bearer <key>".
	AuthAPIKey Auth = "apikey"
	// AuthGateway: API Gateway authorized the caller (IAM or JWT) already.
	AuthGateway Auth = "gateway"
)

// Config configures the handler.
type Config struct {
	// Auth is who checks the callers of the non-worker routes. Defaults
	// to AuthAPIKey.
	Auth Auth
	// APIKey is the bearer key AuthAPIKey checks; it is then required.
	APIKey string
	// Logger receives the handler's logs. Defaults to a logger that
	// discards them.
	Logger *slog.Logger
	// Notices, if set, answers GET /v1/events: the local stack's kept
	// notices. Without it (in AWS, where they go to EventBridge) the route
	// answers 404.
	Notices NoticeLog
}

// NoticeLog is the list of kept notices GET /v1/events reads (the local
// stack's notice.Ring).
type NoticeLog interface {
	// Since lists at most limit notices at or after since, oldest first,
	// from token's position; next is "" when nothing more is kept yet. A
	// bad token is a *protocol.FieldError.
	Since(since time.Time, limit int, token string) (notices []protocol.Notice, next string, err error)
}

// Handler serves the API.
type Handler struct {
	svc  *scheduler.Service
	cfg  Config
	log  *slog.Logger
	mux  *http.ServeMux
	dash *dashboard.Handler
}

// MaxBodyBytes bounds every request body (413 beyond).
const MaxBodyBytes = 1 << 20

// WithDefaults returns c with each zero field that has a default set to it.
func (c Config) WithDefaults() Config {
	if c.Auth == "" {
		c.Auth = AuthAPIKey
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	return c
}

// validate reports the first setting of c, defaults applied, that the
// handler cannot serve with.
func (c Config) validate() error {
	switch c.Auth {
	case AuthAPIKey:
		if c.APIKey == "" {
			return errors.New("api: an API key is required unless the gateway authorizes callers")
		}
	case AuthGateway:
	default:
		// Any other value would check no key: refused, not served open.
		return fmt.Errorf("api: auth %q, want %q or %q", c.Auth, AuthAPIKey, AuthGateway)
	}
	return nil
}

// New builds the handler of cfg with its defaults, or fails naming the
// setting that validate refuses.
func New(svc *scheduler.Service, cfg Config) (*Handler, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &Handler{svc: svc, cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), dash: dashboard.New()}
	for _, r := range h.routes() {
		h.mux.HandleFunc(r.Method+" "+r.Pattern, h.wrap(r))
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, protocol.CodeNotFound, "No route matches "+r.Method+" "+r.URL.Path+".")
	})
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// authKind is how a route authenticates.
type authKind int

const (
	authNone    authKind = iota // healthz, openapi, the dashboard's page and assets
	authClient                  // API key or gateway
	authAttempt                 // bearer attempt token, checked by the service
	authSignal                  // the API key, or a signal attempt's token the service checks
)

type route struct {
	Method, Pattern, Summary string
	Auth                     authKind
	handle                   func(w http.ResponseWriter, r *http.Request) error
}

// RouteInfo is one route the handler serves, for whoever routes requests to
// it (the CDK stack's HTTP API routes): Operator routes want the operator's
// authorization (the API key, or the gateway's IAM or JWT); the others are
// public or carry an attempt token the handler checks.
type RouteInfo struct {
	Method, Pattern string
	Operator        bool
}

// Routes lists every route of the handler, from its one route table.
func Routes() []RouteInfo {
	var out []RouteInfo
	for _, rt := range (&Handler{}).routes() {
		out = append(out, RouteInfo{Method: rt.Method, Pattern: rt.Pattern, Operator: rt.Auth == authClient})
	}
	return out
}

func (h *Handler) wrap(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		if rt.Auth == authClient && h.cfg.Auth == AuthAPIKey {
			key, ok := bearer(r)
			if !ok || subtle.ConstantTimeCompare([]byte(key), []byte(h.cfg.APIKey)) != 1 {
				writeError(w, protocol.CodeUnauthorized, "A valid API key is required: send Authorization: Bearer <key>.")
				return
			}
		}
		if err := rt.handle(w, r); err != nil {
			h.fail(w, r, err)
		}
	}
}

func bearer(r *http.Request) (string, bool) {
	v := r.Header.Get("Authorization")
	const p = "Bearer "
	if len(v) <= len(p) || !strings.EqualFold(v[:len(p)], p) {
		return "", false
	}
	return strings.TrimSpace(v[len(p):]), true
}

// errf is an error the API answers with code and the formatted message.
func errf(code protocol.Code, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	return protocol.NewError(code, string(code)+": "+msg, msg)
}

// answer is what the API answers an error with.
type answer struct {
	class   fault.Class
	code    protocol.Code
	message string
}

// fail answers an error. Internal errors are logged with their detail and
// answered with a generic sentence: err.Error() never reaches a client.
// An Unavailable answer tells the client when to try again.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	a, ok := answerOf(err)
	if !ok {
		h.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "error", err.Error())
		a = answer{fault.Internal, protocol.CodeInternal, "The request could not be completed; try again."}
	}
	if a.class == fault.Unavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, protocol.Status(a.class, a.code), map[string]string{"code": string(a.code), "message": a.message})
}

// answerOf is err's answer: the one of the first error type below in
// err's chain whose answer is built from its fields, else the class, code
// and message the error carries (protocol.Answer, the one table); ok is
// false for an internal error.
func answerOf(err error) (answer, bool) {
	var je *jobspec.Error
	var mbe *http.MaxBytesError
	var env *scheduler.EnvelopeError
	var fe *protocol.FieldError
	switch {
	case errors.As(err, &fe):
		// A worker field the service refused (the routes check first).
		return answerOf(fieldError(fe))
	case errors.As(err, &je):
		return answer{je.Code.Class(), je.Code, je.Message}, true
	case errors.As(err, &env):
		return envelopeAnswer(env), true
	case errors.As(err, &mbe):
		return answer{fault.TooLarge, protocol.CodePayloadTooLarge, fmt.Sprintf("The request body is over %d bytes.", MaxBodyBytes)}, true
	}
	f, ok := protocol.Answer(err)
	if !ok {
		return answer{}, false
	}
	return answer{f.Class(), protocol.Code(f.Code()), f.Message()}, true
}

// envelopeAnswer answers a dispatch message the queue cannot carry.
func envelopeAnswer(env *scheduler.EnvelopeError) answer {
	if env.TooLarge {
		return answer{fault.TooLarge, protocol.CodePayloadTooLarge, fmt.Sprintf(
			"Task %q's dispatch message would be %d bytes, over the queue's limit of %d (256 KiB).", env.Task, env.Size, queue.MaxPayloadBytes)}
	}
	return answer{fault.Invalid, protocol.CodeInvalidField, fmt.Sprintf(
		"Task %q's payload or the params hold a character the queue cannot carry (U+FFFE or U+FFFF).", env.Task)}
}

// writeError answers an error {"code", "message"} with the code's status.
func writeError(w http.ResponseWriter, code protocol.Code, message string) {
	writeJSON(w, code.Status(), map[string]string{"code": string(code), "message": message})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := wire.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"code":"` + string(protocol.CodeInternal) + `","message":"The response could not be encoded."}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// decode reads a JSON body into v, strictly: unknown fields are refused.
// An empty body is allowed when optional.
func decode(r *http.Request, v any, optional bool) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if optional {
			return nil
		}
		return errf(protocol.CodeInvalidJSON, "The request body is empty; a JSON object is required.")
	}
	if !utf8.Valid(body) {
		// encoding/json would quietly turn the bad bytes into U+FFFD, and a
		// raw value (params) would keep them and fail at DynamoDB or SQS.
		return errf(protocol.CodeInvalidJSON, "The request body is not valid UTF-8, which JSON requires.")
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var ute *json.UnmarshalTypeError
		var fe *protocol.FieldError
		if errors.As(err, &fe) {
			// A field of a protocol message that its decoder refuses
			// (a time that is not RFC 3339, say).
			return fieldError(fe)
		}
		if errors.As(err, &ute) {
			return errf(protocol.CodeInvalidField, "Field %q has the wrong type.", ute.Field)
		}
		if strings.HasPrefix(err.Error(), "json: unknown field") {
			return errf(protocol.CodeInvalidField, "The body has an unknown field: %s.", strings.TrimPrefix(err.Error(), "json: unknown field "))
		}
		return errf(protocol.CodeInvalidJSON, "The request body is not valid JSON.")
	}
	if dec.More() {
		return errf(protocol.CodeInvalidJSON, "The request body holds more than one JSON value.")
	}
	return nil
}
