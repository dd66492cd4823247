package main

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/tableschema"
)

func TestBilledItemBytesCountsEntriesWithOverhead(t *testing.T) {
	ix := tableschema.Index{Name: "byjob", PartitionKey: tableschema.Attribute{Name: "gpk"}, SortKey: tableschema.Attribute{Name: "gsk"},
		Projection: tableschema.ProjectKeysOnly}
	it := map[string]types.AttributeValue{
		tableschema.PK: &types.AttributeValueMemberS{Value: "RUN#R1"},
		tableschema.SK: &types.AttributeValueMemberS{Value: "RUN"},
		"payload":      &types.AttributeValueMemberS{Value: string(make([]byte, 300))},
	}
	alone := billedItemBytes(it, []tableschema.Index{ix})
	if want := store.ItemSize(it) + 100; alone != want {
		t.Errorf("an item with no entry bills %d B, want %d (its size and 100 B)", alone, want)
	}
	it["gpk"] = &types.AttributeValueMemberS{Value: "JOB#j"}
	it["gsk"] = &types.AttributeValueMemberS{Value: "R1"}
	e, _ := indexEntryOf(ix, it)
	if got, want := billedItemBytes(it, []tableschema.Index{ix}), store.ItemSize(it)+100+e.size+100; got != want {
		t.Errorf("an item with an entry bills %d B, want %d (item and keys-only entry, 100 B each)", got, want)
	}
	if e.size >= store.ItemSize(it) {
		t.Errorf("a keys-only entry of %d B is not smaller than its item of %d B", e.size, store.ItemSize(it))
	}
}

func TestKeptIsTheMonthsShareBeforeExpiry(t *testing.T) {
	now := time.Unix(1_765_152_000, 0)
	at := func(d time.Duration) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{tableschema.TTL: &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(d).Unix(), 10)}}
	}
	for _, c := range []struct {
		it   map[string]types.AttributeValue
		want float64
	}{
		{map[string]types.AttributeValue{}, 1}, // no TTL: kept
		{at(24 * time.Hour), 1.0 / 30},         // an idempotency key's day
		{at(90 * 24 * time.Hour), 1},           // past the month
		{at(-time.Hour), 0},                    // expired, not yet deleted
	} {
		if got := kept(c.it, now); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("kept(%v) = %v, want %v", c.it, got, c.want)
		}
	}
}

func TestLogMeterCountsInfoAndPassesTheBenchItsLevel(t *testing.T) {
	var bench bytes.Buffer
	m := &logMeter{}
	log := slog.New(m.handler(slog.NewJSONHandler(&bench, &slog.HandlerOptions{Level: slog.LevelWarn})))
	log.InfoContext(context.Background(), "run ended", "run_id", "R1")
	log.DebugContext(context.Background(), "not at the Lambda entries' level")
	if m.bytes() == 0 || bench.Len() != 0 {
		t.Fatalf("after an Info line: counted %d B, the bench's logger got %q; want counted, not passed on", m.bytes(), bench.String())
	}
	counted := m.bytes()
	log.With("job", "j").WarnContext(context.Background(), "slow")
	if m.bytes() <= counted || !bytes.Contains(bench.Bytes(), []byte(`"job":"j"`)) {
		t.Errorf("a Warn line: counted %d -> %d B, the bench's logger got %q; want both", counted, m.bytes(), bench.String())
	}
	if _, err := m.metrics.Write([]byte("0123456789")); err != nil || m.bytes() != m.lines.n.Load()+10 {
		t.Errorf("metric lines are not counted: %d B", m.bytes())
	}
}

func TestNoticeMeterCountsOneEventPerEntry(t *testing.T) {
	var m noticeMeter
	m.Publish(protocol.Notice{Type: protocol.NoticeRunSucceeded, Run: "R1"})
	m.Publish(protocol.Notice{Type: protocol.NoticeRunFailed, Run: "R2"})
	if m.entries.Load() != 2 || m.events.Load() != 2 {
		t.Errorf("two notices: %d entries, %d events; want 2 and 2", m.entries.Load(), m.events.Load())
	}
}

func TestMeterSubKeepsTheWindowsTransactions(t *testing.T) {
	before := meterCounts{TxTimes: []time.Duration{time.Second}, SQSExtraChunks: 1}
	after := meterCounts{TxTimes: []time.Duration{time.Second, 20 * time.Millisecond, 30 * time.Millisecond}, SQSExtraChunks: 3}
	d := after.sub(before)
	if len(d.TxTimes) != 2 || d.TxTimes[0] != 20*time.Millisecond || d.SQSExtraChunks != 2 {
		t.Errorf("sub = %v transactions, %d extra chunks; want the last two and 2", d.TxTimes, d.SQSExtraChunks)
	}
}
