package taskstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
)

// The operator's indexes. Task keys are addressed by member, so nothing
// else could list the tasks of every member that are in flight or were
// dead-lettered. Both indexes are advisory: a reader checks each entry
// against the task itself and drops entries whose task has moved on.

// Ref names a task of some member in an operator's index.
type Ref struct {
	Member string
	TaskID string
	// Since is when the task was created (processing index) or its job
	// was dead-lettered (dead-letter index).
	Since time.Time
}

func parseRef(m string, score float64) (Ref, bool) {
	member, id, ok := strings.Cut(m, "\n")
	return Ref{Member: member, TaskID: id, Since: time.UnixMilli(int64(score))}, ok
}

// unindex removes member's task id from the processing index. Called after
// a task leaves PROCESSING; an entry left behind by a crash in between is
// dropped by the next reader that finds the task finished. With an index
// cleaner (CleanIndexWith) the removal is batched with others.
func (s *Store) unindex(ctx context.Context, member, id string) {
	if s.indexCleaner != nil {
		_ = s.indexCleaner.Done(ctx, member, id)
		return
	}
	_ = s.rdb.ZRem(ctx, s.processingKey(id), outboxMember(member, id)).Err()
}

// legacyDrainBatch bounds the entries of the single-tag processing index
// one reader moves to their shards.
const legacyDrainBatch = 256

// Processing returns up to limit PROCESSING tasks, oldest first, skipping
// offset, and how many the index holds. Entries older than the TTL are
// trimmed on the way. Every shard is read in one pipeline (the first
// offset+limit entries of each, merged by creation time, then task id),
// so a deep page costs offset+limit entries per shard.
func (s *Store) Processing(ctx context.Context, offset, limit int) ([]Ref, int64, error) {
	cutoff := s.clock.Now().Add(-s.ttl).UnixMilli()
	pipe := s.rdb.Pipeline()
	rngs := make([]*redis.ZSliceCmd, legacyShard+1)
	cards := make([]*redis.IntCmd, legacyShard+1)
	for i := range rngs {
		k := s.processingShardKey(i)
		pipe.ZRemRangeByScore(ctx, k, "-inf", "("+strconv.FormatInt(cutoff, 10))
		rngs[i] = pipe.ZRangeWithScores(ctx, k, 0, int64(offset+limit-1))
		cards[i] = pipe.ZCard(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, 0, fmt.Errorf("list processing tasks: %w", err)
	}
	var total int64
	seen := map[string]bool{}
	var all []redis.Z
	for i, rng := range rngs {
		total += cards[i].Val()
		for _, z := range rng.Val() {
			// An entry moved from the single-tag index by a reader
			// that stopped before removing it is in two sets.
			if m, _ := z.Member.(string); !seen[m] {
				seen[m] = true
				all = append(all, z)
			}
		}
	}
	slices.SortFunc(all, func(a, b redis.Z) int {
		if c := cmp.Compare(a.Score, b.Score); c != 0 {
			return c
		}
		return strings.Compare(a.Member.(string), b.Member.(string))
	})
	all = all[min(offset, len(all)):min(offset+limit, len(all))]
	refs := make([]Ref, 0, len(all))
	for _, z := range all {
		if r, ok := parseRef(z.Member.(string), z.Score); ok {
			refs = append(refs, r)
		}
	}
	// Best effort: a failed move leaves the entries where the next
	// reader finds them.
	_ = s.drainLegacyProcessing(ctx, rngs[legacyShard].Val())
	return refs, total, nil
}

// ProcessingByAge counts the PROCESSING tasks created at least each of the
// given ages ago (counts[i] are the tasks of age ≥ ages[i]), and returns
// the creation time of the oldest (zero when there is none). Every shard
// is counted in one pipeline.
func (s *Store) ProcessingByAge(ctx context.Context, ages []time.Duration) (counts []int64, oldest time.Time, err error) {
	now := s.clock.Now()
	minScore := strconv.FormatInt(now.Add(-s.ttl).UnixMilli(), 10)
	pipe := s.rdb.Pipeline()
	cmds := make([][]*redis.IntCmd, legacyShard+1)
	firsts := make([]*redis.ZSliceCmd, legacyShard+1)
	for i := range cmds {
		k := s.processingShardKey(i)
		cmds[i] = make([]*redis.IntCmd, len(ages))
		for j, a := range ages {
			cmds[i][j] = pipe.ZCount(ctx, k, minScore, strconv.FormatInt(now.Add(-a).UnixMilli(), 10))
		}
		firsts[i] = pipe.ZRangeByScoreWithScores(ctx, k, &redis.ZRangeBy{Min: minScore, Max: "+inf", Count: 1})
	}
	legacy := pipe.ZRangeWithScores(ctx, s.processingShardKey(legacyShard), 0, legacyDrainBatch-1)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, time.Time{}, fmt.Errorf("count processing tasks: %w", err)
	}
	counts = make([]int64, len(ages))
	for i := range cmds {
		for j, c := range cmds[i] {
			counts[j] += c.Val()
		}
		if v := firsts[i].Val(); len(v) > 0 {
			if t := time.UnixMilli(int64(v[0].Score)); oldest.IsZero() || t.Before(oldest) {
				oldest = t
			}
		}
	}
	// Best effort, as in Processing.
	_ = s.drainLegacyProcessing(ctx, legacy.Val())
	return counts, oldest, nil
}

// drainLegacyProcessing moves entries read from the single-tag processing
// index of earlier versions to their shards if their task is still
// PROCESSING, and removes them from it: a task of an earlier version that
// finishes after the move leaves the index through its shard, and one that
// already finished is counted no more. A task finished between its check
// and the move (or by a replica of an earlier version, which removes only
// from the single-tag index) leaves an entry that readers drop when they
// find the task finished, as after a crash.
func (s *Store) drainLegacyProcessing(ctx context.Context, entries []redis.Z) error {
	if len(entries) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	states := make([]*redis.StringCmd, len(entries))
	for i, z := range entries {
		member, id, _ := strings.Cut(z.Member.(string), "\n")
		states[i] = pipe.HGet(ctx, s.TaskKey(member, id), "s")
	}
	_, _ = pipe.Exec(ctx)
	for _, st := range states {
		// A task not read (rather than missing) keeps its entry.
		if err := st.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("drain single-tag processing index: %w", err)
		}
	}
	pipe = s.rdb.Pipeline()
	rem := make([]any, len(entries))
	moved := false
	for i, z := range entries {
		rem[i] = z.Member
		if states[i].Val() == strconv.Itoa(int(taskv1.TaskStatus_TASK_STATUS_PROCESSING)) {
			_, id, _ := strings.Cut(z.Member.(string), "\n")
			pipe.ZAddNX(ctx, s.processingKey(id), z)
			moved = true
		}
	}
	if moved {
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("drain single-tag processing index: %w", err)
		}
	}
	if err := s.rdb.ZRem(ctx, s.processingShardKey(legacyShard), rem...).Err(); err != nil {
		return fmt.Errorf("drain single-tag processing index: %w", err)
	}
	return nil
}

// DropStale removes member's task id from the processing index (its
// shard, and the single-tag index of earlier versions) unless the task is
// still PROCESSING; it reports whether it is.
func (s *Store) DropStale(ctx context.Context, member, id string) (bool, error) {
	st, err := s.Status(ctx, member, id)
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrExpired) {
		return false, err
	}
	if st == taskv1.TaskStatus_TASK_STATUS_PROCESSING {
		return true, nil
	}
	m := outboxMember(member, id)
	pipe := s.rdb.Pipeline()
	pipe.ZRem(ctx, s.processingKey(id), m)
	pipe.ZRem(ctx, s.processingShardKey(legacyShard), m)
	_, _ = pipe.Exec(ctx)
	return false, nil
}

// DeadLetter is a task whose job RabbitMQ dead-lettered, as the dead-letter
// consumer recorded it.
type DeadLetter struct {
	Member string `json:"member"`
	TaskID string `json:"taskId"`
	// Reason is RabbitMQ's ("delivery_limit", "rejected", ...).
	Reason string `json:"reason"`
	// Deliveries is how often the job was delivered before it died.
	Deliveries int64     `json:"deliveries"`
	Time       time.Time `json:"time"`
	// ErrorCode is the code the task was failed with.
	ErrorCode int32 `json:"errorCode"`
	// Job is the dead message's body, republished on replay.
	Job []byte `json:"job"`
}

// recordDeadScript adds a dead letter and trims the index to its newest
// ARGV[4] entries.
// KEYS[1] dead index, KEYS[2] dead info; ARGV[1] "member\nid", ARGV[2] time
// ms, ARGV[3] DeadLetter JSON, ARGV[4] cap. Returns 1 when the task had no
// dead letter, 0 when its record was replaced.
var recordDeadScript = redis.NewScript(`
-- KEYS dead, dead info | ARGV member\nid, ms, record, cap | returns 1 added, 0 replaced
local deadKey, deadInfoKey = KEYS[1], KEYS[2]
local added = redis.call('ZADD', deadKey, ARGV[2], ARGV[1])
redis.call('HSET', deadInfoKey, ARGV[1], ARGV[3])
local over = redis.call('ZCARD', deadKey) - tonumber(ARGV[4])
if over > 0 then
  local old = redis.call('ZRANGE', deadKey, 0, over - 1)
  redis.call('ZREMRANGEBYRANK', deadKey, 0, over - 1)
  redis.call('HDEL', deadInfoKey, unpack(old))
end
return added`)

// DeadLetterCap bounds the dead-letter index; the oldest entries go first.
const DeadLetterCap = 10000

// RecordDead records a dead-lettered job so an operator can list, inspect
// and replay it. d.Time is set to now when zero. It reports whether the
// task had no dead letter recorded (a repeat replaces the record).
func (s *Store) RecordDead(ctx context.Context, d DeadLetter) (added bool, err error) {
	if d.Time.IsZero() {
		d.Time = s.clock.Now()
	}
	b, err := json.Marshal(d)
	if err != nil {
		return false, fmt.Errorf("encode dead letter %s: %w", d.TaskID, err)
	}
	n, err := recordDeadScript.Run(ctx, s.rdb, []string{s.deadKey(), s.deadInfoKey()},
		outboxMember(d.Member, d.TaskID), d.Time.UnixMilli(), b, DeadLetterCap).Int()
	if err != nil {
		return false, fmt.Errorf("record dead letter %s: %w", d.TaskID, err)
	}
	return n == 1, nil
}

// DeadLetters returns up to limit dead letters, newest first, skipping
// offset, and how many there are.
func (s *Store) DeadLetters(ctx context.Context, offset, limit int) ([]DeadLetter, int64, error) {
	pipe := s.rdb.Pipeline()
	rng := pipe.ZRevRange(ctx, s.deadKey(), int64(offset), int64(offset+limit-1))
	card := pipe.ZCard(ctx, s.deadKey())
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, 0, fmt.Errorf("list dead letters: %w", err)
	}
	if len(rng.Val()) == 0 {
		return nil, card.Val(), nil
	}
	vals, err := s.rdb.HMGet(ctx, s.deadInfoKey(), rng.Val()...).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("list dead letters: %w", err)
	}
	out := make([]DeadLetter, 0, len(vals))
	for _, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue
		}
		var d DeadLetter
		if err := json.Unmarshal([]byte(str), &d); err != nil {
			return nil, 0, fmt.Errorf("decode dead letter: %w", err)
		}
		out = append(out, d)
	}
	return out, card.Val(), nil
}

// Dead returns member's dead letter for task id, or ErrNotFound.
func (s *Store) Dead(ctx context.Context, member, id string) (DeadLetter, error) {
	var d DeadLetter
	str, err := s.rdb.HGet(ctx, s.deadInfoKey(), outboxMember(member, id)).Result()
	if errors.Is(err, redis.Nil) {
		return d, ErrNotFound
	}
	if err != nil {
		return d, fmt.Errorf("get dead letter %s: %w", id, err)
	}
	if err := json.Unmarshal([]byte(str), &d); err != nil {
		return d, fmt.Errorf("decode dead letter %s: %w", id, err)
	}
	return d, nil
}

// forgetDeadScript removes a dead letter.
// KEYS[1] dead index, KEYS[2] dead info; ARGV[1] "member\nid".
// Returns 1 when it was there, else 0.
var forgetDeadScript = redis.NewScript(`
-- KEYS dead, dead info | ARGV member\nid | returns 1 removed, 0 missing
local deadKey, deadInfoKey = KEYS[1], KEYS[2]
redis.call('ZREM', deadKey, ARGV[1])
return redis.call('HDEL', deadInfoKey, ARGV[1])`)

// ForgetDead removes member's dead letter for task id; it reports whether
// there was one.
func (s *Store) ForgetDead(ctx context.Context, member, id string) (bool, error) {
	n, err := forgetDeadScript.Run(ctx, s.rdb, []string{s.deadKey(), s.deadInfoKey()}, outboxMember(member, id)).Int()
	if err != nil {
		return false, fmt.Errorf("forget dead letter %s: %w", id, err)
	}
	return n == 1, nil
}

// reopenScript moves a FAILED task back to PROCESSING with its job, keeping
// the TTL, and takes the member's claim of the task's order code, expiring
// at the task's deadline, in the same step; the repair count starts again. A
// task whose order code another task holds stays FAILED.
// KEYS[1] task, KEYS[2] order claim (unused without an order code);
// ARGV[1] task bytes, ARGV[2] job bytes, ARGV[3] channel, ARGV[4] task id,
// ARGV[5] "1" to take the order claim.
// Returns {1, ""} reopened, {0, ""} not FAILED, {-1, ""} missing, {-2,
// holder} when another task holds the order code.
var reopenScript = redis.NewScript(`
-- KEYS task, order | ARGV task, job, channel, id, claim | returns {1|0|-1|-2, holder}
local taskKey, orderKey = KEYS[1], KEYS[2]
local s = redis.call('HGET', taskKey, 's')
if not s then return {-1, ''} end
if s ~= '3' then return {0, ''} end
if ARGV[5] == '1' then
  local holder = redis.call('GET', orderKey)
  if holder and holder ~= ARGV[4] then return {-2, holder} end
  local at = redis.call('PEXPIRETIME', taskKey)
  if at <= 0 then return {-1, ''} end
  redis.call('SET', orderKey, ARGV[4], 'PXAT', at)
end
redis.call('HSET', taskKey, 's', '1', 'd', ARGV[1], 'j', ARGV[2])
redis.call('HDEL', taskKey, 'r')
redis.call('PUBLISH', ARGV[3], ARGV[1])
return {1, ''}`)

// ErrNotFailed means a task to reopen is not FAILED.
var ErrNotFailed = errors.New("task is not failed")

// Reopen moves member's FAILED task back to PROCESSING (error and result
// cleared, remaining TTL kept) with job stored for republishing, and puts
// it back in the processing index. In the same step it takes the member's
// claim of the task's order code, so the task runs holding it as a new one
// does; when another task holds the code (the order was submitted again)
// the task stays FAILED and Reopen returns a *ClaimedError
// (ErrOrderClaimed). The caller publishes the job; record it in the outbox
// first (OutboxAdd) so a crash before the publish is repaired by the
// sweeper.
func (s *Store) Reopen(ctx context.Context, member, id string, job []byte) (*taskv1.Task, error) {
	t, err := s.Get(ctx, member, id)
	if err != nil {
		return nil, err
	}
	if t.GetStatus() != taskv1.TaskStatus_TASK_STATUS_FAILED {
		return t, ErrNotFailed
	}
	failedTask := proto.Clone(t).(*taskv1.Task)
	t.Status = taskv1.TaskStatus_TASK_STATUS_PROCESSING
	t.ErrorCode, t.ErrorMsg, t.Result = 0, "", nil
	t.UpdateTime = timestamppb.New(s.clock.Now())
	data, err := proto.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("marshal task %s: %w", id, err)
	}
	claim, orderKey := "1", s.OrderKey(member, t.GetOrderCode())
	if t.GetOrderCode() == "" {
		claim, orderKey = "0", s.OrderKey(member, "-")
	}
	res, err := reopenScript.Run(ctx, s.rdb, []string{s.TaskKey(member, id), orderKey},
		data, job, s.channel(member, id), id, claim).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return nil, fmt.Errorf("reopen task %s: %w", id, err)
	}
	switch n, _ := res[0].(int64); n {
	case 1:
	case 0:
		cur, err := s.Get(ctx, member, id)
		if err != nil {
			return nil, err
		}
		return cur, ErrNotFailed
	case -2:
		holder, _ := res[1].(string)
		return failedTask, &ClaimedError{OrderCode: t.GetOrderCode(), Holder: holder}
	default:
		return nil, s.missing(ctx, member, id)
	}
	if err := s.rdb.ZAdd(ctx, s.processingKey(id), redis.Z{Score: float64(t.GetCreateTime().AsTime().UnixMilli()), Member: outboxMember(member, id)}).Err(); err != nil {
		return t, fmt.Errorf("index reopened task %s: %w", id, err)
	}
	return t, nil
}

// FindByID looks for task id under every member (a SCAN over the keyspace,
// on every primary of a cluster: its cost grows with the number of keys,
// so give the member when it is known). It returns the members found.
func (s *Store) FindByID(ctx context.Context, id string) ([]string, error) {
	if !ValidID(id) {
		return nil, nil
	}
	keys, err := s.scan(ctx, s.taskKeyPattern(id), 10)
	if err != nil {
		return nil, err
	}
	members := make([]string, 0, len(keys))
	for _, k := range keys {
		if m, ok := s.memberOf(k); ok {
			members = append(members, m)
		}
	}
	return members, nil
}

// FindByOrderCode returns, for every member with a task that claimed
// orderCode (the split-worker's claim, made when it plans the task), the
// member and task id. Like FindByID it scans the keyspace.
func (s *Store) FindByOrderCode(ctx context.Context, orderCode string, limit int) ([]Ref, error) {
	// Any member: the member's place (NUL, before the code) becomes "*".
	pattern := strings.Replace(escapeGlob(s.OrderKey("\x00", orderCode)), "\x00", "*", 1)
	keys, err := s.scan(ctx, pattern, limit)
	if err != nil {
		return nil, err
	}
	var refs []Ref
	for _, k := range keys {
		m, ok := s.memberOf(k)
		if !ok {
			continue
		}
		id, err := s.rdb.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read order claim: %w", err)
		}
		refs = append(refs, Ref{Member: m, TaskID: id})
	}
	return refs, nil
}

// scan returns up to limit keys matching pattern, from every primary.
func (s *Store) scan(ctx context.Context, pattern string, limit int) ([]string, error) {
	var out []string
	one := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) && len(out) < limit {
			out = append(out, it.Val())
		}
		return it.Err()
	}
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		// ForEachMaster calls concurrently: collect under a lock.
		var mu sync.Mutex
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			var part []string
			it := n.Scan(ctx, 0, pattern, 1000).Iterator()
			for it.Next(ctx) && len(part) < limit {
				part = append(part, it.Val())
			}
			mu.Lock()
			out = append(out, part...)
			mu.Unlock()
			return it.Err()
		})
	case *redis.Client:
		err = one(ctx, c)
	default:
		err = fmt.Errorf("scan: unsupported client %T", s.rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", pattern, err)
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// escapeGlob quotes the characters SCAN MATCH treats specially.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// DeadLetterCount returns how many dead letters are recorded.
func (s *Store) DeadLetterCount(ctx context.Context) (int64, error) {
	n, err := s.rdb.ZCard(ctx, s.deadKey()).Result()
	if err != nil {
		return 0, fmt.Errorf("count dead letters: %w", err)
	}
	return n, nil
}

// InOutbox reports whether member's task id waits in the outbox (its
// publication not yet confirmed): in its shard, or in the single-tag
// outbox of earlier versions.
func (s *Store) InOutbox(ctx context.Context, member, id string) (bool, error) {
	m := outboxMember(member, id)
	pipe := s.rdb.Pipeline()
	cmds := []*redis.FloatCmd{pipe.ZScore(ctx, s.outboxKey(id), m), pipe.ZScore(ctx, s.outboxShardKey(legacyShard), m)}
	_, _ = pipe.Exec(ctx)
	found := false
	for _, c := range cmds {
		if err := c.Err(); err == nil {
			found = true
		} else if !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("outbox lookup %s: %w", id, err)
		}
	}
	return found, nil
}

// OrderOwner returns the id of member's task that claimed orderCode, or ""
// when none did.
func (s *Store) OrderOwner(ctx context.Context, member, orderCode string) (string, error) {
	id, err := s.rdb.Get(ctx, s.OrderKey(member, orderCode)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read order claim %s: %w", orderCode, err)
	}
	return id, nil
}

// LeaseHolder returns the token of the worker lease on member's task id
// and its time left ("" when no worker holds it).
func (s *Store) LeaseHolder(ctx context.Context, member, id string) (string, time.Duration, error) {
	pipe := s.rdb.Pipeline()
	tok := pipe.Get(ctx, s.LeaseKey(member, id))
	ttl := pipe.PTTL(ctx, s.LeaseKey(member, id))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", 0, fmt.Errorf("read lease of task %s: %w", id, err)
	}
	return tok.Val(), max(ttl.Val(), 0), nil
}

// Attempts returns the delivery of member's task id's job that a worker
// last took the task's lease with (see AcquireLeaseStatus): 1 the first
// delivery, 2 after one redelivery; 0 when no worker has taken it.
func (s *Store) Attempts(ctx context.Context, member, id string) (int64, error) {
	n, err := s.rdb.HGet(ctx, s.TaskKey(member, id), "a").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read attempts of task %s: %w", id, err)
	}
	return n, nil
}
