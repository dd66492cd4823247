package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// hostsToLoopback is a transport trusting httptest's certificate (made
// for example.com and *.example.com) that dials every host:port at
// 127.0.0.1:port: the client sees the hosts a deployment would have, not
// the loopback its refusal exempts.
func hostsToLoopback(tls *httptest.Server) *http.Transport {
	tr := tls.Client().Transport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
	}
	return tr
}

// authSeen records the Authorization header of each request a server got.
type authSeen struct {
	mu   sync.Mutex
	auth []string
}

func (a *authSeen) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.auth = append(a.auth, r.Header.Get("Authorization"))
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"name": "x"}`))
	})
}

func (a *authSeen) got() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.auth...)
}

// A 307 from the https endpoint never hands the API key over: not to
// plain http on the same host (net/http would keep the header there), and
// not to another host (net/http would keep it for a subdomain). The
// endpoint is https://example.com, dialled on 127.0.0.1 by the transport.
func TestRedirectNeverCarriesTheKey(t *testing.T) {
	clearEnv(t)
	plain, sub := &authSeen{}, &authSeen{}
	plainSrv := httptest.NewServer(plain.handler())
	defer plainSrv.Close()
	subSrv := httptest.NewTLSServer(sub.handler())
	defer subSrv.Close()
	port := func(s *httptest.Server) string { u, _ := url.Parse(s.URL); return u.Port() }
	targets := map[string]string{
		"/v1/jobs/to-plain": "http://example.com:" + port(plainSrv),
		"/v1/jobs/to-sub":   "https://api.example.com:" + port(subSrv),
	}
	origin := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, targets[r.URL.Path]+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer origin.Close()

	cl, err := New(context.Background(), Options{URL: "https://example.com:" + port(origin), APIKey: "the-key",
		HTTPClient: &http.Client{Transport: hostsToLoopback(origin)}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.GetJob(context.Background(), "to-plain")
	if err == nil || !strings.Contains(err.Error(), "plain http") {
		t.Errorf("a redirect to plain http: %v, want it refused", err)
	}
	if got := plain.got(); len(got) != 0 {
		t.Errorf("the plain http server got requests with Authorization %q, want none", got)
	}
	if _, err := cl.GetJob(context.Background(), "to-sub"); err != nil {
		t.Errorf("a redirect to another https host: %v", err)
	}
	if got := sub.got(); len(got) != 1 || got[0] != "" {
		t.Errorf("another host got Authorization %q, want one request without it", got)
	}
}

// A redirect with the key goes over plain http only where New would send
// the key itself: the loopback, or with Insecure.
func TestRedirectRefusal(t *testing.T) {
	from, _ := url.Parse("https://api.example.com/v1/jobs")
	for _, tc := range []struct {
		to      string
		withKey bool
		refused bool
	}{
		{"https://api.example.com/v1/jobs/x", true, false},
		{"http://api.example.com/v1/jobs/x", true, true},
		{"http://10.0.0.7/v1/jobs/x", true, true},
		{"http://127.0.0.1:8080/v1/jobs/x", true, false},
		{"http://api.example.com/v1/jobs/x", false, false},
	} {
		to, _ := url.Parse(tc.to)
		if err := redirectRefusal(from, to, tc.withKey); (err != nil) != tc.refused {
			t.Errorf("%s (key to keep safe %v): %v, want refused %v", tc.to, tc.withKey, err, tc.refused)
		}
	}
}
