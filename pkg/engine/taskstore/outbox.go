package taskstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The outbox makes submission crash-safe. A submitter records the task in
// the outbox before creating it and removes it once the broker confirmed
// the job. If the submitter dies in between, the entry stays, and a sweeper
// (any gateway replica) republishes the job stored with the task. The worker
// tolerates the rare duplicate job.

// outboxAddScript adds an entry due grace after the Redis server time, and
// optionally the same entry to the repair set (same slot) due after the
// repair grace.
// KEYS[1] outbox, KEYS[2] repair set; ARGV[1] grace ms, ARGV[2] member,
// ARGV[3] repair grace ms or "" for no repair entry. Returns 1.
var outboxAddScript = redis.NewScript(`
-- KEYS outbox, repair | ARGV grace ms, member, repair grace ms | writes both, returns 1
local outboxKey, repairKey = KEYS[1], KEYS[2]
local grace, member, repairGrace = ARGV[1], ARGV[2], ARGV[3]
` + outboxWrite + `
return 1`)

// outboxWrite adds member to outboxKey due grace ms after the Redis server
// time and, unless repairGrace is empty, to repairKey due repairGrace ms
// after it.
const outboxWrite = `
do
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', outboxKey, now + tonumber(grace), member)
  if repairGrace ~= '' then
    redis.call('ZADD', repairKey, now + tonumber(repairGrace), member)
  end
end
`

// OutboxAdd records that member's task id is about to be published; a
// sweeper may republish it after grace (in Redis server time).
func (s *Store) OutboxAdd(ctx context.Context, member, id string, grace time.Duration) error {
	if err := outboxAddScript.Run(ctx, s.rdb, []string{s.outboxKey(id), s.repairKey(id)}, grace.Milliseconds(), outboxMember(member, id), "").Err(); err != nil {
		return fmt.Errorf("outbox add %s: %w", id, err)
	}
	return nil
}

// OutboxDone removes member's task id from the outbox.
func (s *Store) OutboxDone(ctx context.Context, member, id string) error {
	if err := s.rdb.ZRem(ctx, s.outboxKey(id), outboxMember(member, id)).Err(); err != nil {
		return fmt.Errorf("outbox done %s: %w", id, err)
	}
	return nil
}

// claimScript takes the entries due by the Redis server time for one
// sweeper by pushing their time forward, so replicas do not handle the
// same entry together. A claimed entry's score ends in .5 ms (entries are
// added on whole milliseconds): OutboxWithdraw tells by it that a
// sweeper has taken the entry.
// KEYS[1] outbox or repair set; ARGV[1] retry ms, ARGV[2] limit.
// Returns the claimed members.
var claimScript = redis.NewScript(`
-- KEYS outbox or repair set | ARGV retry ms, limit | pushes the due entries back, returns them
local dueKey = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGE', dueKey, '-inf', now, 'BYSCORE', 'LIMIT', 0, ARGV[2])
for _, m in ipairs(due) do
  redis.call('ZADD', dueKey, 'XX', now + tonumber(ARGV[1]) + 0.5, m)
end
return due`)

// withdrawScript removes an outbox entry that no sweeper has taken: it
// exists, was never claimed (whole-millisecond score) and is not due by
// the Redis server time.
// KEYS[1] outbox; ARGV[1] member. Returns 1 when removed, 0 otherwise.
var withdrawScript = redis.NewScript(`
-- KEYS outbox | ARGV member | returns 1 removed, 0 claimed or missing
local outboxKey = KEYS[1]
local s = redis.call('ZSCORE', outboxKey, ARGV[1])
if not s then return 0 end
s = tonumber(s)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if s ~= math.floor(s) or s <= now then return 0 end
redis.call('ZREM', outboxKey, ARGV[1])
return 1`)

// OutboxWithdraw removes member's task id from the outbox if no sweeper
// can have republished its job: the entry was never claimed and is not
// due. It reports whether it did; when it did not, a sweeper may have
// published the job (or may still), so the task must not be rolled back.
func (s *Store) OutboxWithdraw(ctx context.Context, member, id string) (bool, error) {
	n, err := withdrawScript.Run(ctx, s.rdb, []string{s.outboxKey(id)}, outboxMember(member, id)).Int()
	if err != nil {
		return false, fmt.Errorf("outbox withdraw %s: %w", id, err)
	}
	return n == 1, nil
}

// OutboxEntry is a task whose publication was not confirmed in time.
type OutboxEntry struct {
	Member string
	TaskID string
	// Job is the message body to republish.
	Job []byte
}

// OutboxClaim returns up to limit overdue entries of each shard whose
// task is still PROCESSING, pushing their next attempt retry later.
// Entries whose task is gone or already finished are removed.
func (s *Store) OutboxClaim(ctx context.Context, limit int, retry time.Duration) ([]OutboxEntry, error) {
	claimed, err := s.claimShards(ctx, s.outboxShardKey, limit, retry)
	if err != nil {
		return nil, fmt.Errorf("outbox claim: %w", err)
	}
	var out []OutboxEntry
	for _, c := range claimed {
		member, id, ok := strings.Cut(c.member, "\n")
		if !ok {
			_ = s.rdb.ZRem(ctx, c.key, c.member).Err()
			continue
		}
		job, err := s.Job(ctx, member, id)
		if errors.Is(err, ErrNotFound) {
			// Rolled back, finished or expired: nothing to publish.
			if err := s.OutboxDone(ctx, member, id); err != nil {
				return out, err
			}
			continue
		}
		if err != nil {
			return out, err
		}
		out = append(out, OutboxEntry{Member: member, TaskID: id, Job: job})
	}
	return out, nil
}

// claimedEntry is a member claimed from the sorted set key.
type claimedEntry struct{ key, member string }

// claimShards claims up to limit due entries of every shard of a family
// (the outbox or the repair set; key names shard i's set, legacyShard
// included) in one pipeline, so an idle sweep costs one round trip per
// master, not one per shard. The entries claimed from the single-tag set
// of earlier versions are moved to their shard, claimed there with the
// same score, so everything returned lives in its task's shard.
func (s *Store) claimShards(ctx context.Context, key func(int) string, limit int, retry time.Duration) ([]claimedEntry, error) {
	args := []any{retry.Milliseconds(), strconv.Itoa(limit)}
	cmds := make([]*redis.Cmd, OutboxShards+1)
	pipe := s.rdb.Pipeline()
	for i := range cmds {
		cmds[i] = claimScript.EvalSha(ctx, pipe, []string{key(i)}, args...)
	}
	_, _ = pipe.Exec(ctx)
	var out []claimedEntry
	var legacy []string
	for i, cmd := range cmds {
		members, err := s.orRun(ctx, cmd, claimScript, []string{key(i)}, args...).StringSlice()
		if err != nil {
			return out, fmt.Errorf("%s: %w", key(i), err)
		}
		if i == legacyShard {
			legacy = members
			continue
		}
		for _, m := range members {
			out = append(out, claimedEntry{key: key(i), member: m})
		}
	}
	if len(legacy) == 0 {
		return out, nil
	}
	moved, err := s.moveLegacy(ctx, key, legacy)
	return append(out, moved...), err
}

// moveLegacy moves members claimed from the single-tag set key(legacyShard)
// to their shards with their claimed scores and returns them. A crash
// between the add and the removal leaves an entry in both, which only
// means a second look at its task.
func (s *Store) moveLegacy(ctx context.Context, key func(int) string, members []string) ([]claimedEntry, error) {
	old := key(legacyShard)
	scores, err := s.rdb.ZMScore(ctx, old, members...).Result()
	if err != nil {
		return nil, fmt.Errorf("read entries of %s: %w", old, err)
	}
	pipe := s.rdb.Pipeline()
	var moved []claimedEntry
	for i, m := range members {
		_, id, _ := strings.Cut(m, "\n")
		if scores[i] == 0 {
			continue // removed since the claim
		}
		k := key(outboxShard(id))
		pipe.ZAddNX(ctx, k, redis.Z{Score: scores[i], Member: m})
		moved = append(moved, claimedEntry{key: k, member: m})
	}
	if len(moved) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("move entries of %s to their shards: %w", old, err)
	}
	rem := make([]any, len(moved))
	for i, m := range moved {
		rem[i] = m.member
	}
	if err := s.rdb.ZRem(ctx, old, rem...).Err(); err != nil {
		return moved, fmt.Errorf("remove moved entries of %s: %w", old, err)
	}
	return moved, nil
}

// A Cleaner removes entries of a sharded index (the outbox, the
// processing index) in batches, off the caller's critical path: one
// pipeline with one ZREM per shard serves every removal queued meanwhile.
// An entry whose removal is lost (the process dies first) is harmless:
// the outbox sweeper finds its task published and the processing index's
// readers find its task finished, and drop it.
type Cleaner struct {
	store *Store
	what  string
	key   func(shard int) string
	now   func(ctx context.Context, member, id string) error
	queue chan string
	// linger is how long a batch waits for more removals after its first
	// (0: it goes out with what is queued at once).
	linger time.Duration
}

// indexLinger is how long a finished task may stay in the processing
// index before its batched removal: readers of the index (the operations
// page) may list it as processing that long.
const indexLinger = 200 * time.Millisecond

// NewOutboxCleaner returns a cleaner of confirmed submissions from the
// outbox holding up to size pending removals; run it with Run.
func (s *Store) NewOutboxCleaner(size int) *Cleaner {
	return &Cleaner{store: s, what: "outbox", key: s.outboxShardKey, now: s.OutboxDone, queue: make(chan string, size)}
}

// NewIndexCleaner returns a cleaner of finished tasks from the processing
// index holding up to size pending removals. Once passed to
// CleanIndexWith, the store's writes that finish a task queue their
// removal to it; run it with Run.
func (s *Store) NewIndexCleaner(size int) *Cleaner {
	now := func(ctx context.Context, member, id string) error {
		return s.rdb.ZRem(ctx, s.processingKey(id), outboxMember(member, id)).Err()
	}
	return &Cleaner{store: s, what: "processing index", key: s.processingShardKey, now: now, queue: make(chan string, size), linger: indexLinger}
}

// CleanIndexWith makes the store remove finished tasks from the processing
// index through c (see NewIndexCleaner) instead of one round trip each.
// Call it before the store is used.
func (s *Store) CleanIndexWith(c *Cleaner) { s.indexCleaner = c }

// Done schedules the removal of member's task id; when the queue is full
// it removes the entry at once.
func (c *Cleaner) Done(ctx context.Context, member, id string) error {
	select {
	case c.queue <- outboxMember(member, id):
		return nil
	default:
		return c.now(ctx, member, id)
	}
}

// Run removes queued entries in batches until ctx ends, then flushes what
// is left.
func (c *Cleaner) Run(ctx context.Context) error {
	batch := make([]any, 0, 256)
	// A flush outlives ctx: removals queued before a shutdown still go out.
	flush := func(ctx context.Context) error {
		if len(batch) == 0 {
			return nil
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		// One ZREM per shard, all in one pipeline.
		shards := make(map[int][]any)
		for _, m := range batch {
			_, id, _ := strings.Cut(m.(string), "\n")
			i := outboxShard(id)
			shards[i] = append(shards[i], m)
		}
		pipe := c.store.rdb.Pipeline()
		for i, ms := range shards {
			pipe.ZRem(fctx, c.key(i), ms...)
		}
		_, err := pipe.Exec(fctx)
		batch = batch[:0]
		if err != nil {
			return fmt.Errorf("%s cleanup: %w", c.what, err)
		}
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case m := <-c.queue:
					batch = append(batch, m)
				default:
					return flush(ctx)
				}
			}
		case m := <-c.queue:
			batch = append(batch, m)
			c.fill(ctx, &batch)
			// A failed removal leaves entries a reader will find
			// finished and drop; keep going.
			_ = flush(ctx)
		}
	}
}

// fill adds queued removals to batch until it is full, the queue is empty
// and the linger after its first one has passed, or ctx ends.
func (c *Cleaner) fill(ctx context.Context, batch *[]any) {
	var deadline <-chan time.Time
	if c.linger > 0 {
		t := time.NewTimer(c.linger)
		defer t.Stop()
		deadline = t.C
	}
	for len(*batch) < cap(*batch) {
		select {
		case m := <-c.queue:
			*batch = append(*batch, m)
			continue
		default:
		}
		if deadline == nil {
			return
		}
		select {
		case m := <-c.queue:
			*batch = append(*batch, m)
		case <-deadline:
			return
		case <-ctx.Done():
			return
		}
	}
}
