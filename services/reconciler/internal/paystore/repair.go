package paystore

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// A payment's key and the check queue's keys live in different Redis
// Cluster slots, so storing a payment and scheduling its first check
// cannot be one script, and the queue's write can be lost on its own (its
// master failed over or split off) after it was acknowledged. Instead a
// creator records the order code in a repair set, due a grace after the
// first check, before it stores the payment, and the first check to run
// removes it. A creator that stops before scheduling (it died, Redis or
// the queue failed), or a first check lost after it was scheduled, leaves
// the code there, and a repair (any replica) finds it after the grace and
// schedules the stored payment's check again.

// repairKey is the repair set that holds code: a sorted set of order
// codes being created, scored by the time (ms) after which a repair may
// look at them.
//
// The repair set is Shards sorted sets, each under a hash tag of its own
// ("{payrepair:<shard>}", the shard of the order code), so on a Redis
// Cluster the add and removal of every payment spread over the masters
// instead of bounding them by one master's core. Each write touches one
// set, so sharding costs nothing on one Redis: the set is sharded on every
// deployment. A repair claims from every shard in one pipeline, one round
// trip per master.
func (s *Store) repairKey(code string) string { return s.repairShardKey(shard(code)) }

// Shards is the number of shards of each family of keys sharded by order
// code: the repair set, the stuck list and each day set. Every replica
// must agree on where an entry lives, so it is fixed in the code, not
// configured: changing it strands the entries of the shards that go.
const Shards = 16

// legacyShard is the index of a family's single-tag key of earlier
// versions ("{payrepair}", "{paystuck}", "{paydone}:<status>:<day>"):
// readers still read it as one more shard and it takes no new entries.
// Repairs move what they claim from it to its shard, so codes left there
// by a replica of an earlier version (a rolling upgrade) are repaired and
// then leave through their shard.
const legacyShard = Shards

// shard is the shard of order code: FNV-1a of the code, modulo Shards.
func shard(code string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(code))
	return int(h.Sum32() % Shards)
}

// repairShardKey is the repair set of shard i, or the single-tag set of
// earlier versions for legacyShard.
func (s *Store) repairShardKey(i int) string {
	if i == legacyShard {
		return s.prefix + ":{payrepair}"
	}
	return s.prefix + ":{payrepair:" + strconv.Itoa(i) + "}"
}

// MarkCreating records that the payment of code is being created; a
// repair may look at it from due on.
func (s *Store) MarkCreating(ctx context.Context, code string, due time.Time) error {
	if err := s.rdb.ZAdd(ctx, s.repairKey(code), redis.Z{Score: float64(ms(due)), Member: code}).Err(); err != nil {
		return fmt.Errorf("mark payment %s as being created: %w", code, err)
	}
	return nil
}

// DoneCreating removes code from the repair set: its payment's first
// check has run, or it needs none.
func (s *Store) DoneCreating(ctx context.Context, code string) error {
	if err := s.rdb.ZRem(ctx, s.repairKey(code), code).Err(); err != nil {
		return fmt.Errorf("payment %s created: %w", code, err)
	}
	return nil
}

// claimCreatingScript hands the due codes of the repair set to one
// replica by moving them retry later, so replicas do not repair the same
// payment together.
// KEYS[1] repair set; ARGV[1] now ms, ARGV[2] retry ms, ARGV[3] limit.
// Returns the claimed order codes.
var claimCreatingScript = redis.NewScript(`
-- KEYS repair set | ARGV now ms, retry ms, limit | returns the claimed order codes
local repairKey = KEYS[1]
local codes = redis.call('ZRANGE', repairKey, '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[3])
local next = tonumber(ARGV[1]) + tonumber(ARGV[2])
for i = 1, #codes do
  redis.call('ZADD', repairKey, 'XX', next, codes[i])
end
return codes`)

// ClaimCreating returns up to limit order codes of each shard due at now
// for a repair, making them due again after retry in case the repair
// fails too. The shards are claimed in one pipeline. Codes claimed from
// the single-tag set of earlier versions are moved to their shard, due
// again as claimed, so DoneCreating finds them there.
func (s *Store) ClaimCreating(ctx context.Context, now time.Time, retry time.Duration, limit int) ([]string, error) {
	args := []any{ms(now), retry.Milliseconds(), strconv.Itoa(limit)}
	cmds := make([]*redis.Cmd, legacyShard+1)
	pipe := s.rdb.Pipeline()
	for i := range cmds {
		cmds[i] = claimCreatingScript.EvalSha(ctx, pipe, []string{s.repairShardKey(i)}, args...)
	}
	_, _ = pipe.Exec(ctx)
	var codes, legacy []string
	for i, cmd := range cmds {
		got, err := cmd.StringSlice()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// The script cache is empty (a restart): nothing ran here.
			got, err = claimCreatingScript.Run(ctx, s.rdb, []string{s.repairShardKey(i)}, args...).StringSlice()
		}
		if err != nil {
			return codes, fmt.Errorf("claim payments to repair in %s: %w", s.repairShardKey(i), err)
		}
		if i == legacyShard {
			legacy = got
		}
		codes = append(codes, got...)
	}
	if len(legacy) == 0 {
		return codes, nil
	}
	// Moved with the claimed score; a crash between the add and the
	// removal leaves a code in both, which only means a second look.
	due := float64(ms(now) + retry.Milliseconds())
	pipe = s.rdb.Pipeline()
	for _, code := range legacy {
		pipe.ZAddNX(ctx, s.repairKey(code), redis.Z{Score: due, Member: code})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return codes, fmt.Errorf("move payments to repair to their shards: %w", err)
	}
	rem := make([]any, len(legacy))
	for i, code := range legacy {
		rem[i] = code
	}
	if err := s.rdb.ZRem(ctx, s.repairShardKey(legacyShard), rem...).Err(); err != nil {
		return codes, fmt.Errorf("remove moved payments to repair: %w", err)
	}
	return codes, nil
}
