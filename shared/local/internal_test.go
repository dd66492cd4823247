package local

import (
	"encoding/base64"
	"errors"
	"net"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/runledger/runledger/shared/queue"
)

func TestSettle(t *testing.T) {
	t.Parallel()
	records := []events.SQSMessage{{MessageId: "a"}, {MessageId: "b"}, {MessageId: "c"}}
	failures := func(ids ...string) events.SQSEventResponse {
		var r events.SQSEventResponse
		for _, id := range ids {
			r.BatchItemFailures = append(r.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
		}
		return r
	}
	for _, tc := range []struct {
		name      string
		resp      events.SQSEventResponse
		err       error
		done      []int
		wholeFail bool
	}{
		{name: "success", done: []int{0, 1, 2}},
		{name: "one failure", resp: failures("b"), done: []int{0, 2}},
		{name: "repeated failure", resp: failures("b", "b"), done: []int{0, 2}},
		{name: "all failed", resp: failures("c", "a", "b")},
		{name: "error", resp: failures("b"), err: errors.New("x"), wholeFail: true},
		{name: "empty identifier", resp: failures("a", ""), wholeFail: true},
		{name: "unknown identifier", resp: failures("z"), wholeFail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, reason := settle(records, tc.resp, tc.err)
			if !reflect.DeepEqual(done, tc.done) || (reason != "") != tc.wholeFail {
				t.Errorf("settle = %v, %q; want %v, whole batch failed %v", done, reason, tc.done, tc.wholeFail)
			}
		})
	}
}

func TestAPIGatewayRequest(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	r := httptest.NewRequest("PATCH", "http://api.example.com:8080/v1/x%3Fy/z?b=2&a=1&a=3", strings.NewReader(`{"k":1}`))
	r.RemoteAddr = "10.1.2.3:5555"
	r.Header.Set("Content-Type", "application/json; charset=utf-8")
	r.Header.Add("Accept", "a/b")
	r.Header.Add("Accept", "c/d")
	r.Header.Set("Connection", "keep-alive")
	r.Header.Add("Cookie", "a=1; b=2")
	r.Header.Add("Cookie", "c=3")
	ev := apiGatewayRequest(r, []byte(`{"k":1}`), "req-1", now, "local", "123456789012")

	if ev.Version != "2.0" || ev.RouteKey != "$default" || ev.RawPath != "/v1/x?y/z" || ev.RawQueryString != "b=2&a=1&a=3" {
		t.Errorf("version %q route %q raw path %q raw query %q", ev.Version, ev.RouteKey, ev.RawPath, ev.RawQueryString)
	}
	if want := map[string]string{"a": "1,3", "b": "2"}; !reflect.DeepEqual(ev.QueryStringParameters, want) {
		t.Errorf("query parameters %v, want %v", ev.QueryStringParameters, want)
	}
	if !reflect.DeepEqual(ev.Cookies, []string{"a=1", "b=2", "c=3"}) {
		t.Errorf("cookies %v", ev.Cookies)
	}
	h := ev.Headers
	for name, want := range map[string]string{
		"accept": "a/b,c/d", "content-type": "application/json; charset=utf-8", "content-length": "7",
		"host": "api.example.com:8080", "x-forwarded-for": "10.1.2.3", "x-forwarded-port": "8080", "x-forwarded-proto": "http",
	} {
		if h[name] != want {
			t.Errorf("header %s = %q, want %q", name, h[name], want)
		}
	}
	for name := range h {
		if name != strings.ToLower(name) || name == "cookie" || name == "connection" {
			t.Errorf("header %q: want lower-case names, no cookie, no hop-by-hop header", name)
		}
	}
	if !strings.HasPrefix(h["x-amzn-trace-id"], "Root=1-") {
		t.Errorf("trace id %q", h["x-amzn-trace-id"])
	}
	if ev.Body != `{"k":1}` || ev.IsBase64Encoded {
		t.Errorf("body %q base64 %v, want JSON as text", ev.Body, ev.IsBase64Encoded)
	}
	rc := ev.RequestContext
	want := events.APIGatewayV2HTTPRequestContext{
		RouteKey: "$default", AccountID: "123456789012", Stage: "$default", RequestID: "req-1", APIID: "local",
		DomainName: "api.example.com:8080", DomainPrefix: "api", Time: "02/Jan/2030:03:04:05 +0000", TimeEpoch: now.UnixMilli(),
		HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "PATCH", Path: "/v1/x?y/z", Protocol: "HTTP/1.1", SourceIP: "10.1.2.3"},
	}
	if !reflect.DeepEqual(rc, want) {
		t.Errorf("request context\n%+v\nwant\n%+v", rc, want)
	}
}

// Which bodies API Gateway's HTTP API passes as text and which it
// base64-encodes.
func TestAPIGatewayRequestBodyEncoding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		contentType string
		text        bool
	}{
		{"application/json", true},
		{"Application/JSON; charset=utf-8", true},
		{"text/plain", true},
		{"text/csv; charset=utf-8", true},
		{"application/xml", true},
		{"application/javascript", true},
		{"", false},
		{"application/x-www-form-urlencoded", false},
		{"application/octet-stream", false},
		{"image/png", false},
		{"multipart/form-data; boundary=x", false},
		{"not a media type;;", false},
	} {
		r := httptest.NewRequest("POST", "/", strings.NewReader("body"))
		if tc.contentType != "" {
			r.Header.Set("Content-Type", tc.contentType)
		}
		ev := apiGatewayRequest(r, []byte("body"), "id", time.Now(), "local", DefaultAccount)
		wantBody := "body"
		if !tc.text {
			wantBody = base64.StdEncoding.EncodeToString([]byte("body"))
		}
		if ev.IsBase64Encoded == tc.text || ev.Body != wantBody {
			t.Errorf("content type %q: body %q base64 %v, want text %v", tc.contentType, ev.Body, ev.IsBase64Encoded, tc.text)
		}
	}
	// No body: nothing to encode, no content-length.
	ev := apiGatewayRequest(httptest.NewRequest("GET", "/", nil), nil, "id", time.Now(), "local", DefaultAccount)
	if ev.Body != "" || ev.IsBase64Encoded || ev.Headers["content-length"] != "" || ev.Cookies != nil || ev.QueryStringParameters != nil {
		t.Errorf("empty request: %+v", ev)
	}
}

func TestWriteResponseRejectsInvalid(t *testing.T) {
	t.Parallel()
	for _, resp := range []events.APIGatewayV2HTTPResponse{
		{StatusCode: 0},
		{StatusCode: 600},
		{StatusCode: 200, Body: "not base64!", IsBase64Encoded: true},
		{StatusCode: 200, Body: strings.Repeat("x", MaxInvokePayload)},
	} {
		w := httptest.NewRecorder()
		if err := writeResponse(w, resp); err == nil {
			t.Errorf("status %d accepted", resp.StatusCode)
		}
		if w.Code != 200 || w.Body.Len() != 0 {
			t.Errorf("an invalid response wrote %d %q", w.Code, w.Body.String())
		}
	}
	w := httptest.NewRecorder()
	err := writeResponse(w, events.APIGatewayV2HTTPResponse{
		StatusCode:        418,
		Headers:           map[string]string{"X-A": "1", "X-B": "ignored"},
		MultiValueHeaders: map[string][]string{"X-B": {"2", "3"}},
		Cookies:           []string{"c=1", "d=2"},
		Body:              base64.StdEncoding.EncodeToString([]byte{0xff, 0}),
		IsBase64Encoded:   true,
	})
	if err != nil || w.Code != 418 || w.Body.String() != "\xff\x00" || w.Header().Get("X-A") != "1" ||
		!reflect.DeepEqual(w.Header().Values("X-B"), []string{"2", "3"}) || !reflect.DeepEqual(w.Header().Values("Set-Cookie"), []string{"c=1", "d=2"}) {
		t.Errorf("wrote %d %q %v (%v)", w.Code, w.Body.String(), w.Header(), err)
	}
}

func TestSQSRecordWithoutAttributes(t *testing.T) {
	t.Parallel()
	rec := sqsRecord(queueMessage("id-1", "body"), "arn:aws:sqs:eu-west-1:1:q", "eu-west-1")
	if len(rec.Attributes) != 0 || rec.Attributes == nil || len(rec.MessageAttributes) != 0 || rec.MessageAttributes == nil {
		t.Errorf("attributes %v message attributes %v: want empty objects, as Lambda sends", rec.Attributes, rec.MessageAttributes)
	}
	if rec.Md5OfBody != "841a2d689ad86bd1611447453c22c6fc" || rec.Md5OfMessageAttributes != "" {
		t.Errorf("md5 of body %q, of attributes %q", rec.Md5OfBody, rec.Md5OfMessageAttributes)
	}
}

func TestCountersSnapshotAndSub(t *testing.T) {
	t.Parallel()
	var none *Counters
	none.invocation("x", time.Second, true) // a nil Counters counts nothing and does not panic
	none.apiRequest()
	if s := none.Snapshot(); s.Invocations() != 0 || s.APIRequests != 0 {
		t.Errorf("nil counters snapshot %+v", s)
	}

	c := NewCounters()
	c.invocation("api", time.Second, false)
	c.apiRequest()
	c.awsRequest(c.sqs, "SendMessage")
	earlier := c.Snapshot()
	c.invocation("api", 2*time.Second, true)
	c.invocation("events", time.Second, false)
	c.apiRequest()
	c.awsRequest(c.sqs, "SendMessage")
	c.awsRequest(c.sqs, "ReceiveMessage")
	c.awsRequest(c.dynamo, "GetItem")
	now := c.Snapshot()
	if now.Invocations() != 3 || now.SQSRequests() != 3 || now.DynamoDBRequests() != 1 || now.APIRequests != 2 {
		t.Errorf("snapshot %+v", now)
	}
	d := now.Sub(earlier)
	want := Snapshot{
		Functions: map[string]FunctionCount{
			"api":    {Invocations: 1, Errors: 1, Duration: 2 * time.Second},
			"events": {Invocations: 1, Duration: time.Second},
		},
		APIRequests: 1,
		SQS:         map[string]int64{"SendMessage": 1, "ReceiveMessage": 1},
		DynamoDB:    map[string]int64{"GetItem": 1},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("Sub\n%+v\nwant\n%+v", d, want)
	}
	// A snapshot is a copy.
	c.invocation("api", time.Second, false)
	if now.Functions["api"].Invocations != 2 {
		t.Error("a snapshot changed after it was taken")
	}
}

func queueMessage(id, body string) queue.Message { return queue.Message{ID: id, Body: body} }

// A message delivered again within one batching window appears once, as
// its latest delivery.
func TestMergeKeepsLatestDelivery(t *testing.T) {
	t.Parallel()
	batch := []queue.Message{{ID: "a", ReceiptHandle: "a1", ReceiveCount: 1}, {ID: "b", ReceiptHandle: "b1", ReceiveCount: 1}}
	got := merge(batch, []queue.Message{{ID: "c", ReceiptHandle: "c1", ReceiveCount: 1}, {ID: "a", ReceiptHandle: "a2", ReceiveCount: 2}})
	want := []queue.Message{{ID: "a", ReceiptHandle: "a2", ReceiveCount: 2}, {ID: "b", ReceiptHandle: "b1", ReceiveCount: 1}, {ID: "c", ReceiptHandle: "c1", ReceiveCount: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merge = %+v, want %+v", got, want)
	}
}

// A server listening on a non-loopback address (an explicit --addr) also
// accepts IP literals with its port, which no DNS answer stands for; names
// other than localhost stay refused.
func TestHostCheckExposed(t *testing.T) {
	t.Parallel()
	loop := newHostCheck(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})
	wide := newHostCheck(&net.TCPAddr{IP: net.IPv4zero, Port: 8080})
	for _, tc := range []struct {
		host          string
		loop, exposed bool
	}{
		{"127.0.0.1:8080", true, true},
		{"localhost:8080", true, true},
		{"192.168.1.5:8080", false, true},
		{"[2001:db8::5]:8080", false, true},
		{"myhost.lan:8080", false, false},
		{"192.168.1.5:9090", false, false},
	} {
		if got := loop.allows(tc.host); got != tc.loop {
			t.Errorf("loopback listener, Host %q: allowed %v, want %v", tc.host, got, tc.loop)
		}
		if got := wide.allows(tc.host); got != tc.exposed {
			t.Errorf("0.0.0.0 listener, Host %q: allowed %v, want %v", tc.host, got, tc.exposed)
		}
	}
}
