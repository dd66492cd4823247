package api

import (
	"strings"
	"testing"
)

func TestZeroConfigTakesTheDocumentedDefaults(t *testing.T) {
	c := Config{}.WithDefaults()
	if c.Auth != AuthAPIKey || c.Logger == nil {
		t.Errorf("auth %q, logger set %v; want %q and a logger", c.Auth, c.Logger != nil, AuthAPIKey)
	}
	if c := (Config{Auth: AuthGateway}).WithDefaults(); c.Auth != AuthGateway {
		t.Errorf("auth %q replaced by the default", c.Auth)
	}
}

// An auth the handler does not know would check no key on any route.
func TestNewRefusesAnUnknownAuth(t *testing.T) {
	h, err := New(nil, Config{Auth: "iam", APIKey: "k"})
	if h != nil || err == nil || !strings.Contains(err.Error(), `auth "iam"`) {
		t.Fatalf("New = %v, %v; want no handler and an error naming the auth", h, err)
	}
}
