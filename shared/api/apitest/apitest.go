// Package apitest checks HTTP traffic against the API's OpenAPI document
// (shared/api/openapi.yaml) with kin-openapi's openapi3filter: the answers
// the handler gives (Middleware, for the end-to-end tests) and the requests
// and answers a client exchanges (Transport, for the Go client's tests). A
// mismatch is a failed test, so the document cannot drift from the server.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/runledger/runledger/shared/api"
)

// Validator checks requests and answers against the document.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
}

var shared = sync.OnceValues(func() (*Validator, error) {
	doc, err := api.LoadOpenAPI()
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is invalid: %w", err)
	}
	r, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route the OpenAPI document: %w", err)
	}
	return &Validator{doc: doc, router: r}, nil
})

// New answers the validator of the API's document (built once per
// process).
func New() (*Validator, error) { return shared() }

// Operation names a documented operation: "GET /v1/runs/{run}".
type Operation string

// route finds the request's operation in the document.
func (v *Validator) route(req *http.Request) (*routers.Route, map[string]string, error) {
	rt, params, err := v.router.FindRoute(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s is not in the OpenAPI document: %w", req.Method, req.URL.Path, err)
	}
	return rt, params, nil
}

// Operation answers the documented operation the request calls.
func (v *Validator) Operation(req *http.Request) (Operation, error) {
	rt, _, err := v.route(req)
	if err != nil {
		return "", err
	}
	return Operation(rt.Method + " " + rt.Path), nil
}

// Operations lists every operation of the document.
func (v *Validator) Operations() []Operation {
	var out []Operation
	for path, item := range v.doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, Operation(method+" "+path))
		}
	}
	return out
}

var filterOptions = &openapi3filter.Options{
	IncludeResponseStatus:             true,
	MultiError:                        true,
	RejectWhenRequestBodyNotSpecified: true,
	// Authentication is the server's to check; the document only says
	// which scheme a route takes.
	AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
}

// Request checks a request: its route and method are documented and its
// parameters and body validate. body is the request's body (nil: none).
func (v *Validator) Request(req *http.Request, body []byte) error {
	rt, params, err := v.route(req)
	if err != nil {
		return err
	}
	in := &openapi3filter.RequestValidationInput{Request: cloneWithBody(req, body), PathParams: params, Route: rt, Options: filterOptions}
	if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
		return fmt.Errorf("%s %s: the request does not match the OpenAPI document: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

// Response checks an answer to req: its status is documented for the
// operation and its body validates against that status's schema. An
// answer to an undocumented path must be the API's 404 not_found error.
func (v *Validator) Response(req *http.Request, status int, header http.Header, body []byte) error {
	if isDashboardFile(req.URL.Path) {
		return nil
	}
	rt, params, err := v.route(req)
	if err != nil {
		if status == http.StatusNotFound && v.isError(body) == nil {
			return nil // the handler's answer to a route it does not have
		}
		return err
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: rt, Options: filterOptions},
		Status:                 status, Header: header, Options: filterOptions,
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(req.Context(), in); err != nil {
		return fmt.Errorf("%s %s answered %d %s: the answer does not match the OpenAPI document: %w",
			req.Method, req.URL.Path, status, clip(body), err)
	}
	return nil
}

// isDashboardFile tells the dashboard's page and static files (/ui,
// /ui/...): the document lists their routes, but they answer files (HTML,
// JavaScript, CSS), not API bodies, so there is nothing to validate.
func isDashboardFile(path string) bool {
	return path == "/ui" || strings.HasPrefix(path, "/ui/")
}

// isError checks a body against the document's Error schema.
func (v *Validator) isError(body []byte) error {
	var val any
	if err := json.Unmarshal(body, &val); err != nil {
		return err
	}
	ref := v.doc.Components.Schemas["Error"]
	if ref == nil || ref.Value == nil {
		return errors.New("the document has no Error schema")
	}
	return ref.Value.VisitJSON(val)
}

func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func cloneWithBody(req *http.Request, body []byte) *http.Request {
	c := req.Clone(req.Context())
	c.Body = io.NopCloser(bytes.NewReader(body))
	c.ContentLength = int64(len(body))
	return c
}

// Middleware wraps the API's handler: every answer it gives is checked
// against the document, and each mismatch goes to report.
func (v *Validator) Middleware(next http.Handler, report func(error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		check := r.Clone(r.Context()) // the handler consumes r's body; the check needs only its line and headers
		next.ServeHTTP(rec, r)
		if err := v.Response(check, rec.status, w.Header(), rec.body.Bytes()); err != nil {
			report(err)
		}
	})
}

// recorder passes an answer through and keeps a copy.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

// Transport wraps a client's transport (nil: http.DefaultTransport): each
// request must be a documented operation with a valid body, and each
// answer must match the document. Mismatches go to report; the request is
// sent and its answer returned either way. seen, if not nil, is called
// with each operation sent.
func (v *Validator) Transport(next http.RoundTripper, report func(error), seen func(Operation)) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		var body []byte
		if req.Body != nil {
			b, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			_ = req.Body.Close()
			body = b
			req.Body = io.NopCloser(bytes.NewReader(b))
		}
		if op, err := v.Operation(req); err == nil && seen != nil {
			seen(op)
		}
		if err := v.Request(req, body); err != nil {
			report(err)
		}
		resp, err := next.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		answer, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(answer))
		if err := v.Response(cloneWithBody(req, body), resp.StatusCode, resp.Header, answer); err != nil {
			report(err)
		}
		return resp, nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Tagged reports whether the operation carries one of the tags.
func (v *Validator) Tagged(op Operation, tags ...string) bool {
	method, path, _ := strings.Cut(string(op), " ")
	item := v.doc.Paths.Value(path)
	if item == nil || item.GetOperation(method) == nil {
		return false
	}
	for _, have := range item.GetOperation(method).Tags {
		for _, want := range tags {
			if have == want {
				return true
			}
		}
	}
	return false
}
