package taskstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/platform/backoff"
)

// The repair set finds tasks whose job is gone: a job the broker dropped
// (a policy, a lost queue) or a task restored by a Redis restart after its
// job was already handled. Every task queued by CreateQueued gets an entry
// due after the repair grace. A repair (any gateway replica; the claim
// hands each entry to one) looks at due entries: a finished or missing
// task's entry is removed; a task whose lease is live is being worked on
// and is looked at again later; any other task is still PROCESSING with
// no worker, so its stored job is published again (the worker skips
// duplicates), at most MaxRepairs times, after which the task is failed.
// A republished job may wait behind a backlog (or in the prefetch of a
// stopped worker) with no lease on its task for a while, which is no sign
// that it is lost: the wait before the next look doubles with each
// repair (the retry, then 2×, 4×..., each drawn at random from up to half
// as much again so that tasks lost together are not looked at together),
// so a task is failed only after at least 2^MaxRepairs − 1 retries' time
// with no worker on it, not after MaxRepairs.

// MaxRepairs is how many times a repair republishes one task's job before
// it fails the task instead.
const MaxRepairs = 3

// RepairEntry is a task PROCESSING past the repair grace with no live lease.
type RepairEntry struct {
	Member string
	TaskID string
	// Job is the message body to republish; empty when the task has none.
	Job []byte
	// Repairs counts the repairs of the task, this one included.
	Repairs int
}

// inspectScript looks at a task for a repair and counts the repair.
// KEYS[1] task, KEYS[2] lease.
// Returns {0} when the task is missing, {1} when it is terminal, {2} when
// its lease is live, else {3, job or "", repairs so far including this one}.
var inspectScript = redis.NewScript(`
-- KEYS task, lease | counts a repair | returns {0 gone|1 final|2 leased} or {3, job, repairs}
local taskKey, leaseKey = KEYS[1], KEYS[2]
local s = redis.call('HGET', taskKey, 's')
if not s then return {0} end
if s ~= '1' then return {1} end
if redis.call('EXISTS', leaseKey) == 1 then return {2} end
local n = redis.call('HINCRBY', taskKey, 'r', 1)
return {3, redis.call('HGET', taskKey, 'j') or '', n}`)

// backoffScript makes a repair entry due again after ARGV[2] ms from the
// Redis server time, if it is still there.
// KEYS[1] repair set; ARGV[1] member, ARGV[2] delay ms. Returns nothing.
var backoffScript = redis.NewScript(`
-- KEYS repair | ARGV member, delay ms | writes the entry's due time
local repairKey = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', repairKey, 'XX', now + tonumber(ARGV[2]) + 0.5, ARGV[1])`)

// repairDelay is how long after its n-th repair a task is looked at
// again: drawn from [d, 3d/2] where d = retry × 2^(n−1), n counted up to
// MaxRepairs (a look after that only retries failing the task), so it
// never exceeds 1.5 × retry × 2^(MaxRepairs−1), below retry × 2^MaxRepairs.
// The jitter only lengthens the doubling, so a task still has at least
// 2^MaxRepairs − 1 retries' time to reach a worker before it is failed.
func repairDelay(retry time.Duration, n int) time.Duration {
	d := retry << (min(max(n, 1), MaxRepairs) - 1)
	return backoff.Between(d, d+d/2)
}

// RepairClaim returns up to limit due repair entries of each shard whose task is still
// PROCESSING with no live lease, making each due again after retry (an
// entry returned for its n-th repair after retry × 2^(n−1) to 1.5 times
// that, see repairDelay).
// Entries of missing or finished tasks are removed; tasks with a live
// lease are only made due again.
func (s *Store) RepairClaim(ctx context.Context, limit int, retry time.Duration) ([]RepairEntry, error) {
	claimed, err := s.claimShards(ctx, s.repairShardKey, limit, retry)
	if err != nil {
		return nil, fmt.Errorf("repair claim: %w", err)
	}
	var out []RepairEntry
	for _, c := range claimed {
		m := c.member
		member, id, _ := strings.Cut(m, "\n")
		res, err := inspectScript.Run(ctx, s.rdb, []string{s.TaskKey(member, id), s.LeaseKey(member, id)}).Slice()
		if err != nil {
			return out, fmt.Errorf("repair inspect %s: %w", id, err)
		}
		switch res[0].(int64) {
		case 0, 1:
			if err := s.rdb.ZRem(ctx, c.key, m).Err(); err != nil {
				return out, fmt.Errorf("repair done %s: %w", id, err)
			}
		case 3:
			n := int(res[2].(int64))
			if err := backoffScript.Run(ctx, s.rdb, []string{c.key}, m, repairDelay(retry, n).Milliseconds()).Err(); err != nil && !errors.Is(err, redis.Nil) {
				return out, fmt.Errorf("repair backoff %s: %w", id, err)
			}
			out = append(out, RepairEntry{Member: member, TaskID: id, Job: []byte(res[1].(string)), Repairs: n})
		}
	}
	return out, nil
}

// Forget removes member's task id from the outbox and the repair set: the
// task was never created or was rolled back.
func (s *Store) Forget(ctx context.Context, member, id string) error {
	m := outboxMember(member, id)
	pipe := s.rdb.Pipeline()
	pipe.ZRem(ctx, s.outboxKey(id), m)
	pipe.ZRem(ctx, s.repairKey(id), m)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("forget task %s: %w", id, err)
	}
	return nil
}

// RepairDone removes member's task id from the repair set.
func (s *Store) RepairDone(ctx context.Context, member, id string) error {
	if err := s.rdb.ZRem(ctx, s.repairKey(id), outboxMember(member, id)).Err(); err != nil {
		return fmt.Errorf("repair done %s: %w", id, err)
	}
	return nil
}
