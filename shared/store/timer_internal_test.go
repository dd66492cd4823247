package store

import (
	"reflect"
	"strings"
	"testing"

	"github.com/runledger/runledger/shared/tableschema"
)

// TestTimerIndexWrites: the timers index writes of an item's update follow
// DynamoDB's rules for a projected index, and an entry is its keys and
// projected attributes only, whatever else the item holds.
func TestTimerIndexWrites(t *testing.T) {
	big := strings.Repeat("x", 5000)
	at := func(when, kind string) item {
		return item{
			tableschema.PK: str("RUN#r1"), tableschema.SK: str("TASK#a"), attrPayload: str(big),
			tableschema.TimerShard: str("T#03"), tableschema.TimerAt: optStr(when), attrTimerKind: optStr(kind), attrJob: str("nightly"),
		}
	}
	entry := len(tableschema.PK) + len("RUN#r1") + len(tableschema.SK) + len("TASK#a") +
		len(tableschema.TimerShard) + len("T#03") + len(tableschema.TimerAt) + len("2031-01-01T00:00:00Z") +
		len(attrTimerKind) + len("queue") + len(attrJob) + len("nightly")
	for _, tc := range []struct {
		name      string
		old, next item
		want      []int
	}{
		{"enters", at("", ""), at("2031-01-01T00:00:00Z", "queue"), []int{entry}},
		{"leaves", at("2031-01-01T00:00:00Z", "queue"), at("", ""), []int{entry}},
		{"moves: delete and put", at("2031-01-01T00:00:00Z", "queue"), at("2031-01-02T00:00:00Z", "queue"), []int{entry, entry}},
		{"kind changes in place", at("2031-01-01T00:00:00Z", "queue"), at("2031-01-01T00:00:00Z", "lease"), []int{entry}},
		{"only unprojected attributes change", at("2031-01-01T00:00:00Z", "queue"), at("2031-01-01T00:00:00Z", "queue"), nil},
		{"never in the index", at("", ""), at("", ""), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.next[attrPayload] = str(big + "y")
			if got := timerIndexWrites(tc.old, tc.next); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("index writes %v, want %v", got, tc.want)
			}
		})
	}
}

// TestInstanceOfKeyReadsEveryLayout: a timer entry names its instance by
// its keys alone, a task's, a map child's in the run's partition (maps
// stored before child partitions) and a map child's in its own.
func TestInstanceOfKeyReadsEveryLayout(t *testing.T) {
	for _, tc := range []struct{ pk, sk, run, task string }{
		{"RUN#r1", "TASK#load", "r1", "load"},
		{"RUN#r1", "MAP#each#C#00042", "r1", "each[42]"},
		{childPartPK("r1", "each", 42%mapChildParts), "MAP#each#C#00042", "r1", "each[42]"},
	} {
		run, task, ok := instanceOfKey(tc.pk, tc.sk)
		if !ok || run != tc.run || task != tc.task {
			t.Errorf("instanceOfKey(%q, %q) = %q %q %v, want %q %q", tc.pk, tc.sk, run, task, ok, tc.run, tc.task)
		}
	}
	for _, k := range [][2]string{{"RUN#r1", "RUN"}, {"JOB#j", "TASK#x"}, {"RUN#r1", "MAP#each#I#001"}} {
		if _, _, ok := instanceOfKey(k[0], k[1]); ok {
			t.Errorf("instanceOfKey(%q, %q) names an instance", k[0], k[1])
		}
	}
}
