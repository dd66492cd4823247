package limiter

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// ShardLimit is the largest share one limiter item holds: a concurrency
// limit above it is a group of shard limiters, each its own item and
// partition, whose shares sum to the limit (docs/store.md, "A group with
// a large limit"). One item takes at most 1,000 writes a second.
const ShardLimit = 1000

// Shards is how many shard limiters a concurrency limit needs:
// ceil(limit / ShardLimit), at least one.
func Shards(limit int) int {
	return max(1, (limit+ShardLimit-1)/ShardLimit)
}

// Shares splits limit over n shards: limit / n each, the remainder one
// each to the first shards, so they sum to limit.
func Shares(limit, n int) []int {
	out := make([]int, n)
	for s := range out {
		out[s] = limit / n
		if s < limit%n {
			out[s]++
		}
	}
	return out
}

// ShardName is shard s of group name: shard 0 is the group's own limiter
// item (so a limiter stored before groups existed is a group of one), the
// others `<name>#<s>`.
func ShardName(name string, s int) string {
	if s == 0 {
		return name
	}
	return fmt.Sprintf("%s#%d", name, s)
}

// InGroup reports whether limiter held is group name or one of its
// shards (ShardName): a run's item records the shard it stands in, which
// its job's limiter names as the group.
func InGroup(held, name string) bool {
	if held == name {
		return true
	}
	rest, ok := strings.CutPrefix(held, name+"#")
	if !ok || rest == "" {
		return false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Home is a holder's home shard in a group of n: where it waits when no
// shard admits it at once.
func Home(holder string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(holder))
	return int(h.Sum32() % uint32(n))
}

// Order is the order in which an entry tries a group's n shards: its home
// shard, then the others in order from there.
func Order(home, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (home + i) % n
	}
	return out
}

// GroupShards is how many shards a group has, as any of its shards says
// (0 on an item stored before groups: one).
func (s State) GroupShards() int { return max(1, s.Shards) }

// CanLend reports whether a shard has a unit of share nobody uses: room
// under its share and no unpaused run it could admit (headWaits: the
// caller's read of its queue found an unpaused run).
func (s State) CanLend(headWaits bool) bool {
	return s.limited() && s.Active < s.Limit && !headWaits
}

// Short reports whether a shard has an unpaused run waiting and no room
// for it: the shard a borrow gives to.
func (s State) Short(headWaits bool) bool {
	return headWaits && s.limited() && s.Active >= s.Limit
}

// Borrow moves one unit of share from a shard that can lend it to one that
// is short: the two states to write, in one write conditioned on both
// versions as read. The shares' sum never changes (nor the Group each
// shard records), and the lender keeps at least its active runs' worth.
func Borrow(from, to State) (State, State) {
	f, t := from.clone(), to.clone()
	f.Limit--
	t.Limit++
	f.Version++
	t.Version++
	return f, t
}

// Reshare answers a group's shard states with the shares of a new limit:
// the group keeps its shards (each may hold runs) and grows to
// Shards(limit) when that is more, every shard recording the count and
// the limit (Group). Each
// shard's share covers its active runs first and the rest of the limit is
// split evenly, so no shard has room while the group holds its limit: a
// lowered limit stops nothing already active, and admits nothing until
// the group is under it. The answer is written in one write conditioned on
// every version read (a shard not yet stored: Version 0).
func Reshare(group []State, limit int) []State {
	n := max(len(group), Shards(limit))
	out := make([]State, n)
	left := limit
	for s := range out {
		if s < len(group) {
			out[s] = group[s].clone()
		}
		out[s].Limit = min(out[s].Active, left)
		left -= out[s].Limit
	}
	for s, more := range Shares(left, n) {
		out[s].Limit += more
		out[s].Shards, out[s].Group = 0, 0
		if n > 1 {
			out[s].Shards, out[s].Group = n, limit
		}
		out[s].Version++
	}
	return out
}
