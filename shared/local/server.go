package local

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/runledger/runledger/shared/gateway"
	"github.com/runledger/runledger/shared/protocol"
)

// DefaultListenAddr is where Server listens when ListenAddr is empty.
const DefaultListenAddr = "127.0.0.1:8080"

// Limits of API Gateway and Lambda that Server enforces.
const (
	// MaxRequestBody is API Gateway's HTTP API payload limit.
	MaxRequestBody = 10 << 20
	// MaxInvokePayload is Lambda's limit on a synchronous invocation's
	// event and on its response, as JSON.
	MaxInvokePayload = 6 << 20
)

// Server is API Gateway's HTTP API with one $default route to a Lambda
// function (payload format 2.0), run in-process: every request it accepts
// becomes an events.APIGatewayV2HTTPRequest, goes through
// gateway.New(Handler).ProxyWithContext, as in the Lambda entry point, and
// the events.APIGatewayV2HTTPResponse is written back.
//
// The event is shaped as API Gateway shapes it, including where that
// surprises: rawPath and requestContext.http.path are the percent-DECODED
// path (an escaped slash, %2F, arrives as a real slash), while
// rawQueryString stays as sent; header names are lower-cased and repeated
// headers joined with commas; cookies move from the Cookie header to the
// cookies list; the body is base64-encoded unless the content type is
// text/*, application/json, application/xml or application/javascript
// (so a form post arrives base64-encoded too). So a path sent with %3F or
// %23 is answered 404 not_found, as in AWS (gateway.RoutedPath).
//
// Gateway answers, as API Gateway gives them: 413 {"message":"Request
// Entity Too Large"} for a body over MaxRequestBody or an event over
// MaxInvokePayload; 500 {"message":"Internal Server Error"} when the
// invocation fails (the adapter's error, a panic) or returns an invalid
// response; 503 {"message":"Service Unavailable"} when it runs past
// FunctionTimeout. Each answer carries the Apigw-Requestid header.
type Server struct {
	// Name is the function name, for counters, logs and the function ARN.
	Name    string
	Handler http.Handler
	// ListenAddr is host:port; empty means DefaultListenAddr. Port 0
	// picks a free port; URL tells which.
	ListenAddr string
	// FunctionTimeout is each invocation's deadline; zero means
	// DefaultFunctionTimeout.
	FunctionTimeout time.Duration
	// Region and Account fill ARNs and the request context; they default
	// to DefaultRegion and DefaultAccount. APIID is the requestContext's
	// apiId, "local" if empty.
	Region, Account, APIID string
	// Now stamps the request context's time; nil means time.Now.
	Now func() time.Time
	// Counters, if set, counts API requests and invocations.
	Counters *Counters
	// Logger receives failed invocations and serving errors. Nil means
	// slog.Default().
	Logger *slog.Logger

	mu      sync.Mutex
	srv     *http.Server
	url     string
	hosts   hostCheck
	served  chan struct{}
	adapter *gateway.Adapter
	fn      function
}

// Start listens on ListenAddr and serves in the background until Shutdown.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.srv != nil:
		return fmt.Errorf("server %s: already started", s.Name)
	case s.Name == "":
		return fmt.Errorf("server: no function name")
	case s.Handler == nil:
		return fmt.Errorf("server %s: no handler", s.Name)
	case s.FunctionTimeout < 0 || s.FunctionTimeout > MaxFunctionTimeout:
		return fmt.Errorf("server %s: function timeout %s, want 0..%s", s.Name, s.FunctionTimeout, MaxFunctionTimeout)
	}
	log := loggerOrDefault(s.Logger)
	s.fn = function{
		name: s.Name, region: orDefault(s.Region, DefaultRegion), account: orDefault(s.Account, DefaultAccount),
		timeout:  orDefault(s.FunctionTimeout, DefaultFunctionTimeout),
		counters: s.Counters, log: log,
	}
	s.adapter = gateway.New(s.Handler)
	addr := orDefault(s.ListenAddr, DefaultListenAddr)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("server %s: listen on %s: %w", s.Name, addr, err)
	}
	s.url = "http://" + ln.Addr().String()
	s.hosts = newHostCheck(ln.Addr())
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.gateway),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	s.served = make(chan struct{})
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serve failed", "function", s.Name, "addr", ln.Addr().String(), "err", err)
		}
	}()
	return nil
}

// URL is the base URL the server answers on, such as http://127.0.0.1:8080,
// once Start has succeeded.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// Shutdown stops accepting requests and waits, up to ctx, for those in
// flight to be answered.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv, served := s.srv, s.served
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("server %s: shut down: %w", s.Name, err)
	}
	<-served
	return nil
}

// gateway is API Gateway in front of the function.
func (s *Server) gateway(w http.ResponseWriter, r *http.Request) {
	s.Counters.apiRequest()
	requestID := newUUID()
	w.Header().Set("Apigw-Requestid", requestID)
	if !s.hosts.allows(r.Host) {
		misdirected(w, r.Host)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			gatewayAnswer(w, http.StatusRequestEntityTooLarge, "Request Entity Too Large")
			return
		}
		// The client went away mid-body; nobody reads an answer.
		return
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	ev := apiGatewayRequest(r, body, requestID, now(), orDefault(s.APIID, "local"), s.fn.account)
	if size := jsonSize(ev); size > MaxInvokePayload {
		gatewayAnswer(w, http.StatusRequestEntityTooLarge, "Request Entity Too Large")
		return
	}
	var resp events.APIGatewayV2HTTPResponse
	err = s.fn.invoke(r.Context(), func(ctx context.Context) error {
		var err error
		resp, err = s.adapter.ProxyWithContext(ctx, ev)
		return err
	})
	switch {
	case errors.Is(err, ErrFunctionTimeout):
		gatewayAnswer(w, http.StatusServiceUnavailable, "Service Unavailable")
		return
	case err != nil:
		gatewayAnswer(w, http.StatusInternalServerError, "Internal Server Error")
		return
	}
	if err := writeResponse(w, resp); err != nil {
		s.fn.log.ErrorContext(r.Context(), "invalid function response", "function", s.Name, "request_id", requestID, "err", err)
		gatewayAnswer(w, http.StatusInternalServerError, "Internal Server Error")
	}
}

// hostCheck guards against DNS rebinding: a page on a site whose name its
// owner then points at 127.0.0.1 reaches this server from the visitor's
// browser as a same-origin request, that name in Host.
// Only the loopback names and addresses with the listening port are
// accepted; a server listening on a non-loopback address (an explicit
// --addr) also accepts an IP literal with that port, which no DNS answer
// can stand for.
type hostCheck struct {
	port    string
	exposed bool
}

func newHostCheck(addr net.Addr) hostCheck {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return hostCheck{}
	}
	return hostCheck{port: fmt.Sprint(ap.Port()), exposed: !ap.Addr().IsLoopback()}
}

// allows reports whether a request's Host names this server.
func (c hostCheck) allows(host string) bool {
	name, port, err := net.SplitHostPort(host)
	if err != nil || port != c.port {
		return false
	}
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(name)
	if err != nil || ip.Zone() != "" {
		return false
	}
	return ip.IsLoopback() || c.exposed
}

// misdirected answers a request whose Host names another server, in the
// API's error shape (docs/api.md, "Errors").
func misdirected(w http.ResponseWriter, host string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusMisdirectedRequest)
	b, _ := json.Marshal(map[string]string{
		"code":    string(protocol.CodeMisdirectedRequest),
		"message": fmt.Sprintf("The Host %q is not this server's address; call it as 127.0.0.1, localhost or [::1] with its port.", host),
	})
	w.Write(b)
}

func gatewayAnswer(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"message": message})
	w.Write(b)
}

func jsonSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}

// hopByHop headers concern one connection; API Gateway does not forward them.
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "te": true,
	"trailer": true, "transfer-encoding": true, "upgrade": true,
}

// apiGatewayRequest shapes r as API Gateway's payload 2.0 event for a
// $default route on the $default stage.
func apiGatewayRequest(r *http.Request, body []byte, requestID string, now time.Time, apiID, account string) events.APIGatewayV2HTTPRequest {
	sourceIP, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		sourceIP = r.RemoteAddr
	}
	headers := make(map[string]string, len(r.Header)+6)
	var cookies []string
	for name, values := range r.Header {
		lower := strings.ToLower(name)
		switch {
		case hopByHop[lower]:
		case lower == "cookie":
			for _, v := range values {
				for c := range strings.SplitSeq(v, ";") {
					if c = strings.TrimSpace(c); c != "" {
						cookies = append(cookies, c)
					}
				}
			}
		default:
			headers[lower] = strings.Join(values, ",")
		}
	}
	headers["host"] = r.Host
	if len(body) > 0 {
		headers["content-length"] = fmt.Sprint(len(body))
	} else {
		delete(headers, "content-length")
	}
	headers["x-forwarded-for"] = sourceIP
	headers["x-forwarded-proto"] = "http"
	if _, port, err := net.SplitHostPort(r.Host); err == nil {
		headers["x-forwarded-port"] = port
	} else {
		headers["x-forwarded-port"] = "80"
	}
	headers["x-amzn-trace-id"] = fmt.Sprintf("Root=1-%08x-%s", now.Unix(), strings.ReplaceAll(newUUID(), "-", "")[:24])

	var query map[string]string
	if values, err := url.ParseQuery(r.URL.RawQuery); err == nil && len(values) > 0 {
		query = make(map[string]string, len(values))
		for k, vs := range values {
			query[k] = strings.Join(vs, ",")
		}
	}

	ev := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              "$default",
		RawPath:               r.URL.Path,
		RawQueryString:        r.URL.RawQuery,
		Cookies:               cookies,
		Headers:               headers,
		QueryStringParameters: query,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     "$default",
			AccountID:    account,
			Stage:        "$default",
			RequestID:    requestID,
			APIID:        apiID,
			DomainName:   r.Host,
			DomainPrefix: domainPrefix(r.Host),
			Time:         now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:    now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      r.URL.Path,
				Protocol:  r.Proto,
				SourceIP:  sourceIP,
				UserAgent: r.UserAgent(),
			},
		},
	}
	if len(body) > 0 {
		if isTextContent(r.Header.Get("Content-Type")) {
			ev.Body = string(body)
		} else {
			ev.Body = base64.StdEncoding.EncodeToString(body)
			ev.IsBase64Encoded = true
		}
	}
	return ev
}

// isTextContent tells the content types API Gateway's HTTP API passes as
// text; every other body, one without a content type included, it
// base64-encodes.
func isTextContent(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"):
		return true
	case mt == "application/json", mt == "application/xml", mt == "application/javascript":
		return true
	}
	return false
}

func domainPrefix(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	prefix, _, _ := strings.Cut(host, ".")
	return prefix
}

// writeResponse writes the function's response as API Gateway does:
// status, headers (multi-value ones too), one Set-Cookie per cookie, and
// the body, decoded when isBase64Encoded.
func writeResponse(w http.ResponseWriter, resp events.APIGatewayV2HTTPResponse) error {
	if resp.StatusCode < 100 || resp.StatusCode > 599 {
		return fmt.Errorf("status code %d", resp.StatusCode)
	}
	if jsonSize(resp) > MaxInvokePayload {
		return fmt.Errorf("response over Lambda's %d-byte limit", MaxInvokePayload)
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(resp.Body); err != nil {
			return fmt.Errorf("base64 body: %w", err)
		}
	}
	h := w.Header()
	for name, values := range resp.MultiValueHeaders {
		for _, v := range values {
			h.Add(name, v)
		}
	}
	for name, v := range resp.Headers {
		if _, multi := resp.MultiValueHeaders[name]; !multi {
			h.Set(name, v)
		}
	}
	for _, c := range resp.Cookies {
		h.Add("Set-Cookie", c)
	}
	w.WriteHeader(resp.StatusCode)
	// A failed write means the client went away; nothing is left to tell it.
	w.Write(body)
	return nil
}
