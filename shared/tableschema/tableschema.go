// Package tableschema is the one definition of runledger's DynamoDB table:
// its keys, its secondary indexes and its TTL attribute. The store creates
// the table from it (local stack, tests) and the CDK stack reads it, so the
// two can never disagree. It imports nothing from the AWS SDK on purpose:
// the CDK module depends on it without pulling the SDK in.
package tableschema

import "fmt"

// AttributeType is a DynamoDB scalar key type.
type AttributeType string

const (
	String AttributeType = "S"
	Number AttributeType = "N"
)

// Attribute names a key attribute and its type.
type Attribute struct {
	Name string
	Type AttributeType
}

// Projection is what a global secondary index copies of an item besides
// the table's and the index's keys.
type Projection string

const (
	// ProjectAll copies the whole item: an entry costs what the item costs.
	ProjectAll Projection = "ALL"
	// ProjectInclude copies the index's NonKeyAttributes only: an entry
	// costs what its keys and those attributes cost, whatever else the item
	// holds.
	ProjectInclude Projection = "INCLUDE"
	// ProjectKeysOnly copies the table's and the index's keys only: an
	// entry costs the same small amount whatever the item holds, and a
	// write that changes no key writes no entry.
	ProjectKeysOnly Projection = "KEYS_ONLY"
)

// Index is a global secondary index.
type Index struct {
	Name         string
	PartitionKey Attribute
	SortKey      Attribute
	Projection   Projection
	// NonKeyAttributes are the attributes an INCLUDE projection copies.
	NonKeyAttributes []string
	// Replaces names the retired index this one took over from (see
	// Schema.Retired), "" for none.
	Replaces string
}

// Schema is the whole table definition.
type Schema struct {
	PartitionKey Attribute
	SortKey      Attribute
	Indexes      []Index
	// Retired are indexes of earlier layouts, which nothing reads any more.
	// A GSI's key schema and projection cannot change in place, so a new
	// layout is a new index under a new name (Index.Replaces). The CDK
	// stack keeps a retired index only for the first deploy of the
	// two-deploy migration (docs/deploy.md); the local stack deletes one
	// it finds on a persisted table.
	Retired []Index
	// TTLAttribute holds an epoch-seconds expiry; DynamoDB deletes expired
	// items (history past retention, idempotency keys past 24 h).
	TTLAttribute string
}

// Key and index attribute names. Items write them; nothing else may use
// these names for other meanings.
const (
	PK = "pk"
	SK = "sk"

	// The timers index is sparse: an item carries TimerShard and TimerAt only
	// while it waits on a time (a non-terminal instance, a cron job's next
	// fire). Finished work drops both attributes and so leaves the index:
	// a scheduler pass costs what live work costs, never what history costs.
	// It projects only what ListDueTimers reads besides the keys (TimerKind
	// and JobName), so an entry stays under 1 KB, one WCU per write,
	// however large the item grows. "timers_v2" replaced "timers", which
	// projected whole items.
	TimerIndex = "timers_v2"
	TimerShard = "timer_shard" // "T#00".."T#15"
	TimerAt    = "timer_at"    // RFC 3339 UTC, fixed width, so it sorts as text
	TimerKind  = "timer_kind"  // what the timer is for
	JobName    = "job"         // the job an item belongs to

	// RetiredTimerIndex is the timers index before the INCLUDE projection.
	RetiredTimerIndex = "timers"

	// The listing index serves the newest-first and by-name listings that a
	// Query on the main key cannot (all jobs, all runs). It projects the
	// keys only: an entry is written once, when the item is created (its
	// keys never change), and readers read the items it names.
	// A run's list_pk is one of RunListShards shard values, so runs spread
	// their entries over as many partitions. "listing_v2" replaced
	// "listing", which projected whole items (every write of a run wrote
	// its entry again).
	ListIndex = "listing_v2"
	ListPK    = "list_pk"
	ListSK    = "list_sk"

	// RetiredListIndex is the listing index before the KEYS_ONLY projection.
	RetiredListIndex = "listing"

	// The live index is sparse too: a run item carries LivePK (one of its
	// job's LiveShards shards) and LiveSK (its id) only while the run is
	// unfinished, so "the unfinished
	// runs of a job" (overlap policies, DELETE of a job) costs what is live,
	// never what the job ran before, and the write that finishes a run
	// takes it out. It projects only what its readers decode besides the
	// keys (RunID, LogicalTime, Trigger), none of which a run's writes
	// change: an entry is written when the run is created and removed
	// when it ends, one WCU each, whatever else the run's writes change
	// and however large its params. "live_v2" replaced "live", which
	// projected whole items (every write of a run wrote its entry again).
	LiveIndex   = "live_v2"
	LivePK      = "live_pk"
	LiveSK      = "live_sk"
	RunID       = "run_id"       // a run item's id
	LogicalTime = "logical_time" // a run's logical time
	Trigger     = "trigger"      // what created a run

	// RetiredLiveIndex is the live index before the INCLUDE projection.
	RetiredLiveIndex = "live"

	TTL = "expires_at"
)

// The sustained rates of single-task runs the layout is sized for, with
// every key shape of the table and its indexes at most half its
// partition's limit (cmd/rlbench's heat model measures a run against
// them): runs of many jobs together, and the runs of one job, whose
// shards they share. The deployed API's route throttles admit the
// one-job rate (infra/scheduler).
const (
	TargetRunsPerSecond       = 10000
	TargetRunsPerSecondOneJob = 1000
)

// TimerShards is how many partitions the timers index is spread over, so that
// due-timer writes and reads never concentrate on one partition. A
// single-task run writes about 8 timer entries (each move of a timer is
// two), so 10,000 runs a second write 80,000 WCU a second to the index:
// 256 shards keep each at about a third of a partition's 1,000. The first
// 16 (T#00..T#15) are the shards of earlier versions, so their entries
// stay where the readers look.
const TimerShards = 256

// RunListShards is how many list_pk values the runs' listing entries are
// spread over (by a hash of the run id), so that no partition of the
// listing index takes every run's entry.
const RunListShards = 32

// LiveShards is how many live_pk values one job's unfinished runs are
// spread over in the live index (JOB#<job>#nn, by a hash of the run id),
// so that one job's runs (each puts, changes and removes its entry) do not
// all write one partition.
const LiveShards = 8

// JobShards is how many partitions of the table one job's per-run items
// are spread over (JOB#<job>#nn, by a hash of the run id): each run's
// pointer, and the gate item its creating write checks, so that one job's
// runs do not all write one partition.
const JobShards = 16

// MapChildShards is how many partitions of the table a map's children and
// their end counts are spread over (RUN#<run>#M#<task>#nn, by the child's
// index), so one map's children are not bound by one partition's 1,000
// WCU a second. A map stored before has its children under RUN#<run>.
const MapChildShards = 64

// ShardName returns the timer shard partition value for shard n.
func ShardName(n int) string { return fmt.Sprintf("T#%02d", n) }

var (
	timerShard = Attribute{Name: TimerShard, Type: String}
	timerAt    = Attribute{Name: TimerAt, Type: String}
	listPK     = Attribute{Name: ListPK, Type: String}
	listSK     = Attribute{Name: ListSK, Type: String}
	livePK     = Attribute{Name: LivePK, Type: String}
	liveSK     = Attribute{Name: LiveSK, Type: String}
)

// Table returns the table definition.
func Table() Schema {
	return Schema{
		PartitionKey: Attribute{Name: PK, Type: String},
		SortKey:      Attribute{Name: SK, Type: String},
		Indexes: []Index{
			{
				Name: TimerIndex, PartitionKey: timerShard, SortKey: timerAt,
				Projection: ProjectInclude, NonKeyAttributes: []string{TimerKind, JobName},
				Replaces: RetiredTimerIndex,
			},
			{
				Name: ListIndex, PartitionKey: listPK, SortKey: listSK, Projection: ProjectKeysOnly,
				Replaces: RetiredListIndex,
			},
			{
				Name: LiveIndex, PartitionKey: livePK, SortKey: liveSK,
				Projection: ProjectInclude, NonKeyAttributes: []string{RunID, LogicalTime, Trigger},
				Replaces: RetiredLiveIndex,
			},
		},
		Retired: []Index{
			{Name: RetiredTimerIndex, PartitionKey: timerShard, SortKey: timerAt, Projection: ProjectAll},
			{Name: RetiredListIndex, PartitionKey: listPK, SortKey: listSK, Projection: ProjectAll},
			{Name: RetiredLiveIndex, PartitionKey: livePK, SortKey: liveSK, Projection: ProjectAll},
		},
		TTLAttribute: TTL,
	}
}

// Migrating is the retired index of the newest migration: the one the CDK
// stack keeps in the first of the two deploys (an update may create or
// delete one index only). Retired lists indexes in the order they were
// retired, so it is the last; a stack that still has an older retired
// index upgrades through the version that retired it first.
func (s Schema) Migrating() Index {
	return s.Retired[len(s.Retired)-1]
}

// Attributes lists every key attribute of the table and its indexes once,
// as DynamoDB's AttributeDefinitions wants them.
func (s Schema) Attributes() []Attribute {
	seen := map[string]bool{}
	var out []Attribute
	add := func(a Attribute) {
		if a.Name != "" && !seen[a.Name] {
			seen[a.Name] = true
			out = append(out, a)
		}
	}
	add(s.PartitionKey)
	add(s.SortKey)
	for _, ix := range s.Indexes {
		add(ix.PartitionKey)
		add(ix.SortKey)
	}
	return out
}
