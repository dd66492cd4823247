// Package gateway serves API Gateway HTTP API events (payload format 2.0)
// with an http.Handler: the api function's entry point and the local
// stack's server both go through it.
//
// The request's path is rebuilt from the route API Gateway matched (its
// route key) and the path parameters it extracted, each escaped, never
// from rawPath. API Gateway matches a route on the path as sent and hands
// over a rawPath it has percent-decoded: a path sent with %3F matches the
// public signal route, and its decoded rawPath, parsed again as a URL,
// would end at the '?' and reach an operator route the gateway never
// authorized. Rebuilt, the handler routes what the gateway routed.
package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/runledger/runledger/shared/protocol"
)

// DefaultRoute is the route key of the catch-all route, whose requests
// are routed by their path.
const DefaultRoute = "$default"

// Adapter answers API Gateway events with an http.Handler.
type Adapter struct {
	proxy *httpadapter.HandlerAdapterV2
}

// New adapts h.
func New(h http.Handler) *Adapter {
	return &Adapter{proxy: httpadapter.NewV2(h)}
}

// ProxyWithContext serves one event. An event whose path cannot be
// routed as the gateway routed it is answered 404 not_found, and the
// handler never sees it.
func (a *Adapter) ProxyWithContext(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	path, refusal := RoutedPath(ev)
	if refusal != "" {
		return notFound(refusal), nil
	}
	ev.RawPath = path
	return a.proxy.ProxyWithContext(ctx, ev)
}

// RoutedPath is the path the handler is to route for ev, or a refusal
// (one sentence for the caller): the route key's path with each {name}
// and {name+} replaced by its path parameter, escaped; for the $default
// route, rawPath itself. A rawPath holding '?' or '#' is refused whatever
// the route: a decoded rawPath with them cannot be a path again.
func RoutedPath(ev events.APIGatewayV2HTTPRequest) (path, refusal string) {
	raw := ev.RawPath
	if raw == "" {
		raw = ev.RequestContext.HTTP.Path
	}
	if strings.ContainsAny(raw, "?#") {
		return "", "No route takes a path holding '?' or '#' (it arrived percent-encoded)."
	}
	key := ev.RouteKey
	if key == "" {
		key = ev.RequestContext.RouteKey
	}
	if key == "" || key == DefaultRoute {
		return raw, ""
	}
	method, template, ok := strings.Cut(key, " ")
	if !ok || (method != "ANY" && method != ev.RequestContext.HTTP.Method) {
		return "", "The request does not match the gateway's route " + key + "."
	}
	path, ok = fill(template, ev.PathParameters)
	if !ok {
		return "", "The request's path parameters do not fill the gateway's route " + key + "."
	}
	return path, ""
}

// fill puts params into a route template's {name} and {name+} segments,
// escaped, so that each parses back as the one value (a {name+}'s slashes
// stay separators). ok is false when a parameter is missing or empty, or
// a greedy one is not the last segment.
func fill(template string, params map[string]string) (string, bool) {
	segs := strings.Split(template, "/")
	for i, s := range segs {
		if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
			continue
		}
		name, greedy := strings.CutSuffix(s[1:len(s)-1], "+")
		v := params[name]
		if v == "" || (greedy && i != len(segs)-1) {
			return "", false
		}
		if !greedy {
			segs[i] = url.PathEscape(v)
			continue
		}
		parts := strings.Split(v, "/")
		for j, p := range parts {
			parts[j] = url.PathEscape(p)
		}
		segs[i] = strings.Join(parts, "/")
	}
	return strings.Join(segs, "/"), true
}

// notFound is the API's error answer, as the handler words its own.
func notFound(message string) events.APIGatewayV2HTTPResponse {
	body, _ := json.Marshal(map[string]string{"code": string(protocol.CodeNotFound), "message": message})
	return events.APIGatewayV2HTTPResponse{
		StatusCode: protocol.CodeNotFound.Status(),
		Headers:    map[string]string{"Content-Type": "application/json"},
		Body:       string(body) + "\n",
	}
}
