package scheduler

import "testing"

// TestPublicRouteReasons: every public route says why it is public, and no
// reason outlives its route.
func TestPublicRouteReasons(t *testing.T) {
	public := map[string]bool{}
	for _, r := range Routes() {
		if !r.Public {
			continue
		}
		public[r.Path] = true
		if len(publicRouteReasons[r.Path]) < 10 { // cdk-nag wants at least 10 characters
			t.Errorf("public route %s: no reason in publicRouteReasons", r.Path)
		}
	}
	for path := range publicRouteReasons {
		if !public[path] {
			t.Errorf("publicRouteReasons[%s]: not a public route", path)
		}
	}
}
