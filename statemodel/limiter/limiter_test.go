package limiter

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestEnterAdmitsOnlyWithRoomAndNobodyWaiting(t *testing.T) {
	s := State{Limit: 1}
	s, ok, _, err := s.Enter(Rate{}, mt0, MaxWaiting)
	if err != nil || !ok || s.Active != 1 {
		t.Fatalf("first run: admitted %v, %+v, %v", ok, s, err)
	}
	s, ok, why, err := s.Enter(Rate{}, mt0, MaxWaiting)
	if err != nil || ok || why != ReasonConcurrency || s.Waiting != 1 {
		t.Fatalf("second run: admitted %v (%s), %+v, %v", ok, why, s, err)
	}
	s = s.Release()
	if _, ok, _, _ := s.Enter(Rate{}, mt0, MaxWaiting); ok {
		t.Fatal("a new run was admitted ahead of a waiting one")
	}
	n, ok := s.AdmitWaiting(Rate{}, mt0)
	if !ok || n.Active != 1 || n.Waiting != 0 || n.Version <= s.Version {
		t.Fatalf("head not admitted: %v %+v", ok, n)
	}
}

func TestEnterRefusesBeyondTheQueue(t *testing.T) {
	s := State{Limit: 1, Active: 1, Waiting: MaxWaiting}
	if _, _, _, err := s.Enter(Rate{}, mt0, MaxWaiting); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("err = %v, want ErrQueueFull", err)
	}
}

func TestRateWindowSlides(t *testing.T) {
	r := Rate{Runs: 2, Per: time.Minute}
	var s State
	for i := range 2 {
		var ok bool
		s, ok, _, _ = s.Enter(r, mt0.Add(time.Duration(i)*10*time.Second), MaxWaiting)
		if !ok {
			t.Fatalf("run %d not admitted", i)
		}
	}
	now := mt0.Add(30 * time.Second)
	if ok, why := s.Room(r, now); ok || why != ReasonRateLimit {
		t.Fatalf("room %v (%s) with the window full", ok, why)
	}
	if at := s.RateRoomAt(r, now); !at.Equal(mt0.Add(time.Minute)) {
		t.Fatalf("room at %v, want %v", at, mt0.Add(time.Minute))
	}
	if ok, _ := s.Room(r, mt0.Add(time.Minute)); !ok {
		t.Fatal("no room once the first admission left the window")
	}
}

func TestPlaceOrderIsSortKeyOrder(t *testing.T) {
	ps := []Place{
		{Priority: 3, CreatedAt: mt0.Add(time.Second), RunID: "b"},
		{Priority: 1, CreatedAt: mt0.Add(time.Hour), RunID: "z"},
		{Priority: 3, CreatedAt: mt0, RunID: "c"},
		{Priority: 3, CreatedAt: mt0, RunID: "a"},
		{Priority: 5, CreatedAt: mt0, RunID: "a"},
	}
	byBefore := slices.Clone(ps)
	slices.SortFunc(byBefore, func(a, b Place) int {
		if a.Before(b) {
			return -1
		}
		return 1
	})
	byKey := slices.Clone(ps)
	slices.SortFunc(byKey, func(a, b Place) int {
		if a.SortKey() < b.SortKey() {
			return -1
		}
		return 1
	})
	if !slices.Equal(byBefore, byKey) {
		t.Fatalf("orders differ:\n%v\n%v", byBefore, byKey)
	}
	for _, p := range ps {
		back, err := ParseSortKey(p.SortKey())
		if err != nil || back.RunID != p.RunID || !back.CreatedAt.Equal(p.CreatedAt) || back.Priority != p.Priority {
			t.Fatalf("round trip of %v: %v %v", p, back, err)
		}
	}
}

func TestMostBeyondCountsOverlapsNotTouches(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	cases := []struct {
		name  string
		spans []Span
		limit int
		want  int
	}{
		{"one after another, touching", []Span{{at(0), at(2)}, {at(2), at(4)}}, 1, 0},
		{"two overlapping over a limit of 1", []Span{{at(0), at(3)}, {at(2), at(4)}}, 1, 1},
		{"three at once over a limit of 1", []Span{{at(0), at(9)}, {at(1), at(8)}, {at(2), at(7)}, {at(8), at(9)}}, 1, 2},
		{"within the limit", []Span{{at(0), at(9)}, {at(1), at(8)}}, 2, 0},
		{"none", nil, 1, 0},
	}
	for _, c := range cases {
		if got := MostBeyond(c.spans, c.limit); got != c.want {
			t.Errorf("%s: %d beyond, want %d", c.name, got, c.want)
		}
	}
}

func TestInGroupNamesAGroupsShards(t *testing.T) {
	for _, c := range []struct {
		held string
		want bool
	}{
		{"jobs", true}, {ShardName("jobs", 2), true}, {"jobs#12", true},
		{"jobs#", false}, {"jobs#a", false}, {"jobs2", false}, {"job", false}, {"other#1", false},
	} {
		if got := InGroup(c.held, "jobs"); got != c.want {
			t.Errorf("InGroup(%q, jobs) = %v, want %v", c.held, got, c.want)
		}
	}
}

func TestReshareRecordsTheGroupLimitAndBorrowKeepsIt(t *testing.T) {
	g := Reshare(make([]State, 1), 2500)
	for s, st := range g {
		if st.Group != 2500 || st.Shards != 3 {
			t.Fatalf("shard %d records group %d of %d shards; want 2500 of 3", s, st.Group, st.Shards)
		}
	}
	f, to := Borrow(g[0], g[1])
	if f.Group != 2500 || to.Group != 2500 {
		t.Fatalf("a borrow changed the recorded limit: %d, %d", f.Group, to.Group)
	}
	if one := Reshare(make([]State, 1), 10); one[0].Group != 0 || one[0].Shards != 0 {
		t.Fatalf("a limiter of one item records a group: %+v", one[0])
	}
}
