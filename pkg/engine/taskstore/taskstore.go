// Package taskstore keeps asynchronous tasks in Redis: created PROCESSING
// with a TTL (1 day by default), updated only while PROCESSING (a terminal
// status is never overwritten) and always keeping the remaining TTL, listed
// per member newest first, and followed through change notifications.
//
// Every key of a member carries the hash tag {m:<member>}, so each multi-key
// script touches one Redis Cluster slot. A task is addressed by member and
// id together: another member's task is simply not found.
package taskstore

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orderflow/orderflow/pkg/engine/lease"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/clock"
)

var (
	// ErrNotFound means the task never existed (or belongs to another member).
	ErrNotFound = errors.New("task does not exist")
	// ErrExpired means the task existed but its record has expired.
	ErrExpired = errors.New("task has expired")
	// ErrTerminal means the task already has a terminal status.
	ErrTerminal = errors.New("task already finished")
	// ErrFenced means the writer's lease is no longer the current one.
	ErrFenced = errors.New("stale lease: write refused")
)

// Options configure a Store.
type Options struct {
	// Prefix starts every key ("orderflow" in production).
	Prefix string
	// TTL is a task's lifetime from creation.
	TTL time.Duration
	// Clock supplies timestamps; the wall clock when nil.
	Clock clock.Clock
	// RepairGrace is how long a task queued by CreateQueued may stay
	// PROCESSING without a live lease before RepairClaim hands it out
	// (DefaultRepairGrace when zero).
	RepairGrace time.Duration
	// Replica names this process in the worker leases it takes (see
	// lease.NewToken), so operators see which replica works on a task.
	Replica string
}

// DefaultRepairGrace is the default Options.RepairGrace.
const DefaultRepairGrace = 10 * time.Minute

// Store is the Redis task store.
type Store struct {
	rdb         redis.UniversalClient
	prefix      string
	ttl         time.Duration
	clock       clock.Clock
	repairGrace time.Duration
	replica     string
	// batch carries the creates of concurrent requests, reads their reads,
	// work the scripts of a task's work (taking it, marking shipments
	// requested, recording outcomes, finishing it).
	batch, reads, work *batcher
	// indexCleaner, when set, batches the processing index's removals.
	indexCleaner *Cleaner
}

// maxPipelines and maxReadPipelines bound the batched pipelines of
// creates and of reads a Store has in flight; the creates (reads) that
// arrive while they are all out go together in the next one. Reads are
// small and many: with two in flight they gather into larger batches, and
// a gateway on one core serves about a fifth more status reads at 16
// clients than with eight (GET /v1/tasks/{id}, 15,900-17,000 against
// 19,300-19,800 reads/s in three alternating 15 s runs). Creates showed no
// clear gain from fewer in flight, so they keep eight.
//
// maxWorkPipelines bounds those of the split-workers' task work (taking a
// task, marking a shipment requested, recording an outcome, finishing):
// with two in flight, a split-worker draining a backlog of one-item orders
// costs Redis about a sixth less CPU per order (0.233-0.272 against
// 0.196-0.224 CPU s per 1,000 orders in alternating runs; 20-item orders
// 0.369-0.494 against 0.286-0.345), its own CPU and its rate unchanged
// within the runs' spread.
const (
	maxPipelines     = 8
	maxReadPipelines = 2
	maxWorkPipelines = 2
)

// New returns a Store on rdb.
func New(rdb redis.UniversalClient, opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = "orderflow"
	}
	if opts.TTL <= 0 {
		opts.TTL = 24 * time.Hour
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.RepairGrace <= 0 {
		opts.RepairGrace = DefaultRepairGrace
	}
	return &Store{rdb: rdb, prefix: opts.Prefix, ttl: opts.TTL, clock: opts.Clock, repairGrace: opts.RepairGrace,
		replica: opts.Replica, batch: newBatcher(rdb, maxPipelines), reads: newBatcher(rdb, maxReadPipelines),
		work: newBatcher(rdb, maxWorkPipelines)}
}

// AcquireLease takes the worker lease on member's task id for ttl (see
// package lease; lease.ErrHeld when another holder has it). Its key and
// token make the Fence of the holder's writes.
func (s *Store) AcquireLease(ctx context.Context, member, id string, ttl time.Duration) (*lease.Lease, error) {
	return lease.AcquireAs(ctx, s.rdb, s.LeaseKey(member, id), s.replica, ttl)
}

// leaseStatusScript takes a task's lease if it is free and reads the
// task's status and, when it took the lease of a task that exists, the
// task's plan hash (see Plan), in one round trip; a lease taken on a
// PROCESSING task records the delivery it was taken with (the task's
// attempts, see Attempts) and stores an offered plan with store_plan
// (see storePlanLua), as SavePlan does, when the task has none (see Offer).
// KEYS[1] lease, KEYS[2] task, KEYS[3] seen, KEYS[4] plan hash, KEYS[5]
// order claim (unused without a claim)
// ARGV[1] owner token, ARGV[2] lease ttl in ms, ARGV[3] delivery number
// (1 the first delivery; 0 records nothing), ARGV[4] offered plan ("":
// none), ARGV[5] task id, ARGV[6] "1" to claim the order code
// Returns {taken (1 or 0), status (-1 when the task is missing), seen (1 or
// 0), the task record ("" unless taken), what became of the offer (see
// Offered), the order code's owner when claimed by another task, the plan
// hash's fields and values (HGETALL; none unless taken, none when the
// offered plan was stored)}.
var leaseStatusScript = redis.NewScript(storePlanLua + `
-- KEYS lease, task, seen, plan, order | ARGV token, ttl ms, delivery, offered plan, id, claim | returns {taken, status or -1, seen, record, offer, owner, plan fields...}
local leaseKey, taskKey, seenKey, planKey, orderKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local taken = 0
if redis.call('SET', leaseKey, ARGV[1], 'NX', 'PX', ARGV[2]) then taken = 1 end
local task = redis.call('HMGET', taskKey, 's', 'd')
local st = task[1]
if not st then return {taken, -1, redis.call('EXISTS', seenKey), '', 0, ''} end
local res = {taken, tonumber(st), 1, '', 0, ''}
if taken == 0 then return res end
res[4] = task[2] or ''
if st == '1' then
  if tonumber(ARGV[3]) > 0 then redis.call('HSET', taskKey, 'a', ARGV[3]) end
  if ARGV[4] ~= '' then
    local code, owner = store_plan(planKey, orderKey, taskKey, ARGV[4], ARGV[5], ARGV[6])
    -- A plan stored now is the hash's only field: the caller has it.
    if code == 1 then res[5] = 1; return res end
    if code == 0 then res[5], res[6] = 2, owner end
  end
end
for _, v in ipairs(redis.call('HGETALL', planKey)) do res[#res + 1] = v end
return res`)

// statusScript reads a task's status.
// KEYS[1] task, KEYS[2] seen
// Returns {status (-1 when the task is missing), seen (1 or 0)}.
var statusScript = redis.NewScript(`
-- KEYS task, seen | reads only | returns {status or -1, seen}
local taskKey, seenKey = KEYS[1], KEYS[2]
local st = redis.call('HGET', taskKey, 's')
if not st then return {-1, redis.call('EXISTS', seenKey)} end
return {tonumber(st), 1}`)

// Claim is what AcquireLeaseStatus found.
type Claim struct {
	// Lease is the task's lease, nil when LeaseErr is set (lease.ErrHeld
	// when another owner holds it).
	Lease    *lease.Lease
	LeaseErr error
	// Status and StatusErr are what Status returns.
	Status    taskv1.TaskStatus
	StatusErr error
	// Plan and Outcomes are what Plan returns, read under the lease: set
	// only when Lease is, and the task exists.
	Plan     []byte
	Outcomes map[string][]byte
	// Record is the task's record (see Get), read under the lease: set
	// only when Lease is, and the task exists. Finish writes from it
	// (Fence.Record) instead of reading it again.
	Record []byte
	// Offered says what became of the plan offered to TakeTask.
	Offered Offered
	// Holder is the task that owns the order code when Offered is
	// OfferClaimed.
	Holder string
}

// Offer is a plan offered to TakeTask: stored as SavePlan would, with the
// task's claim of OrderCode (none when empty), when the lease is taken on
// a PROCESSING task that has no plan yet.
type Offer struct {
	Plan      []byte
	OrderCode string
}

// Offered is what became of an Offer.
type Offered int

const (
	// OfferNotStored: no plan was offered, the lease was not taken, the
	// task is not PROCESSING, or a plan was stored before (Claim.Plan).
	OfferNotStored Offered = iota
	// OfferStored: the plan and the claim were stored (Claim.Plan is it).
	OfferStored
	// OfferClaimed: another task owns the order code (Claim.Holder);
	// nothing was stored.
	OfferClaimed
)

// AcquireLeaseStatus is AcquireLease, then Status and, when the lease was
// taken and the task exists, Plan, in one round trip (one script): the
// status and plan are read after the lease was taken (or found held), so
// what is read under a taken lease is what no other holder can change.
// A lease taken on a PROCESSING task records delivery (the delivery of the
// task's job being worked: 1 the first, 2 after one redelivery; 0 records
// nothing) as the task's attempts, read by Attempts.
// When the script fails, LeaseErr and StatusErr are its error.
func (s *Store) AcquireLeaseStatus(ctx context.Context, member, id string, ttl time.Duration, delivery int64) Claim {
	return s.TakeTask(ctx, member, id, ttl, delivery, Offer{})
}

// TakeTask is AcquireLeaseStatus that also stores offer.Plan, in the same
// round trip, when the lease is taken on a PROCESSING task without a plan
// (see Offer and Claim.Offered): a worker that builds its plan before
// taking the task saves SavePlan's round trip.
func (s *Store) TakeTask(ctx context.Context, member, id string, ttl time.Duration, delivery int64, offer Offer) Claim {
	token, err := lease.NewToken(s.replica)
	if err != nil {
		return Claim{LeaseErr: err, StatusErr: err}
	}
	key := s.LeaseKey(member, id)
	claim, orderKey := "1", s.OrderKey(member, offer.OrderCode)
	if offer.OrderCode == "" {
		claim, orderKey = "0", s.OrderKey(member, "-")
	}
	res, err := s.runScript(ctx, s.work, leaseStatusScript, []string{key, s.TaskKey(member, id), s.seenKey(member, id), s.PlanKey(member, id), orderKey},
		token, ttl.Milliseconds(), max(delivery, 0), offer.Plan, id, claim).Slice()
	if err == nil && len(res) < 6 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		err = fmt.Errorf("acquire lease %s and read task status: %w", key, err)
		return Claim{LeaseErr: err, StatusErr: err}
	}
	var c Claim
	taken, _ := res[0].(int64)
	st, _ := res[1].(int64)
	seen, _ := res[2].(int64)
	if taken == 1 {
		c.Lease = lease.Taken(s.rdb, key, token, ttl)
	} else {
		c.LeaseErr = lease.ErrHeld
	}
	c.Status, c.StatusErr = statusOf(st, seen)
	if c.Lease != nil && c.StatusErr == nil {
		if d, _ := res[3].(string); d != "" {
			c.Record = []byte(d)
		}
		offered, _ := res[4].(int64)
		c.Offered = Offered(offered)
		c.Holder, _ = res[5].(string)
		if c.Offered == OfferStored {
			// Not sent back: the plan hash holds the offer alone.
			c.Plan, c.Outcomes = offer.Plan, make(map[string][]byte)
			return c
		}
		fields := make(map[string]string, (len(res)-6)/2)
		for i := 6; i+1 < len(res); i += 2 {
			f, _ := res[i].(string)
			v, _ := res[i+1].(string)
			fields[f] = v
		}
		c.Plan, c.Outcomes = planOf(fields)
	}
	return c
}

// statusOf turns a script's status and seen flag into Status's answer.
func statusOf(st, seen int64) (taskv1.TaskStatus, error) {
	switch {
	case st >= 0:
		return taskv1.TaskStatus(st), nil
	case seen == 1:
		return 0, ErrExpired
	default:
		return 0, ErrNotFound
	}
}

// NewID returns a task id of 128 random bits, base64url-encoded.
func NewID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("task id: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// ValidID reports whether id has the shape NewID produces.
func ValidID(id string) bool {
	if len(id) != 22 {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(id)
	return err == nil
}

// createDedupe and createWrite are the parts of the create scripts:
// createDedupe returns early for a request id already used, createWrite
// records the task. They use the key names taskKey, seenKey, indexKey and
// requestKey and the create ARGV below.
const createDedupe = `
if ARGV[8] == '1' then
  local existing = redis.call('GET', requestKey)
  if existing == ARGV[1] then return {1, ARGV[1]} end
  if existing then return {0, existing} end
  redis.call('SET', requestKey, ARGV[1], 'PX', ARGV[5])
end
`

const createWrite = `
redis.call('HSET', taskKey, 's', ARGV[2], 'd', ARGV[3], 'j', ARGV[4])
redis.call('PEXPIRE', taskKey, ARGV[5])
redis.call('SET', seenKey, '1', 'PX', ARGV[7])
redis.call('ZADD', indexKey, ARGV[6], ARGV[1])
redis.call('ZREMRANGEBYSCORE', indexKey, '-inf', '(' .. (tonumber(ARGV[6]) - tonumber(ARGV[5])))
redis.call('PEXPIRE', indexKey, ARGV[5])
`

// createScript records a new PROCESSING task, unless the request id was
// already used.
// KEYS[1] task, KEYS[2] seen, KEYS[3] index, KEYS[4] request (may be unused)
// ARGV[1] task id, ARGV[2] status, ARGV[3] task bytes, ARGV[4] job bytes,
// ARGV[5] ttl ms, ARGV[6] now ms, ARGV[7] seen ttl ms, ARGV[8] "1" to dedupe
// by request id.
// Returns {1, id} when created, {0, existing id} for a repeated request id.
// The request id naming this very task id is this create run again (a
// client's retry after a lost reply): created, and left as it is.
var createScript = redis.NewScript(`
-- KEYS task, seen, index, request | ARGV id, status, task, job, ttl ms, now ms, seen ttl ms, dedupe | returns {1 created or 0, id}
local taskKey, seenKey, indexKey, requestKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
` + createDedupe + createWrite + `return {1, ARGV[1]}`)

// createEntriesScript is createScript writing, with the task, its entry in
// the processing index and, when ARGV[10] is not empty, outboxAddScript's
// entries: what a create runs where all its keys are on one server (a
// single Redis, or one behind Sentinel). A repeated request id writes
// nothing.
// KEYS[1..4] as createScript, KEYS[5] processing index, KEYS[6] outbox,
// KEYS[7] repair set
// ARGV[1..8] as createScript, ARGV[9] the entries' member, ARGV[10] outbox
// grace ms or "" for no outbox entry, ARGV[11] repair grace ms or "" for
// no repair entry.
// Returns as createScript.
var createEntriesScript = redis.NewScript(`
-- KEYS task, seen, index, request, processing, outbox, repair | ARGV as create, member, grace ms, repair grace ms | returns {1 created or 0, id}
local taskKey, seenKey, indexKey, requestKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local processingKey, outboxKey, repairKey = KEYS[5], KEYS[6], KEYS[7]
local member, grace, repairGrace = ARGV[9], ARGV[10], ARGV[11]
` + createDedupe + `
redis.call('ZADD', processingKey, ARGV[6], member)
if grace ~= '' then
` + outboxWrite + `
end
` + createWrite + `return {1, ARGV[1]}`)

// Create records t as a new PROCESSING task of member, with the job message
// that will carry it. When t.RequestId repeats a request id of the member's
// that is still remembered, nothing is written and the earlier task is
// returned with created false.
func (s *Store) Create(ctx context.Context, member string, t *taskv1.Task, job []byte) (task *taskv1.Task, created bool, err error) {
	return s.create(ctx, member, t, job, -1)
}

// CreateQueued is Create plus, in the same round trip, an outbox entry that
// lets a sweeper republish the job after grace unless OutboxDone removes
// it first (see OutboxAdd), and a repair entry that lets a repair find the
// task if it is still PROCESSING without a worker after the repair grace
// (see RepairClaim). Use it when the job is about to be published.
func (s *Store) CreateQueued(ctx context.Context, member string, t *taskv1.Task, job []byte, grace time.Duration) (task *taskv1.Task, created bool, err error) {
	return s.create(ctx, member, t, job, grace)
}

// create writes the task and its processing-index entry; grace ≥ 0 also
// records the outbox entry. The entries exist whenever the task does: on
// one server one script writes them all; on a Redis Cluster they are
// written before the task.
func (s *Store) create(ctx context.Context, member string, t *taskv1.Task, job []byte, grace time.Duration) (*taskv1.Task, bool, error) {
	now := s.clock.Now()
	t.Status = taskv1.TaskStatus_TASK_STATUS_PROCESSING
	t.CreateTime = timestamppb.New(now)
	t.UpdateTime = t.CreateTime
	t.ExpireTime = timestamppb.New(now.Add(s.ttl))
	data, err := proto.Marshal(t)
	if err != nil {
		return nil, false, fmt.Errorf("marshal task %s: %w", t.GetTaskId(), err)
	}
	keys, dedupe := s.createKeys(member, t)
	args := []any{t.GetTaskId(), int(taskv1.TaskStatus_TASK_STATUS_PROCESSING), data, job,
		s.ttl.Milliseconds(), now.UnixMilli(), 2 * s.ttl.Milliseconds(), dedupe}
	var res []any
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster {
		res, err = s.createOnCluster(ctx, member, t.GetTaskId(), now, grace, keys, args)
	} else {
		keys = append(keys, s.processingKey(t.GetTaskId()), s.outboxKey(t.GetTaskId()), s.repairKey(t.GetTaskId()))
		outboxGrace := ""
		if grace >= 0 {
			outboxGrace = strconv.FormatInt(grace.Milliseconds(), 10)
		}
		args = append(args, outboxMember(member, t.GetTaskId()), outboxGrace, s.repairGrace.Milliseconds())
		var cmd *redis.Cmd
		err = s.batch.do(ctx, func(pipe redis.Pipeliner) { cmd = createEntriesScript.EvalSha(ctx, pipe, keys, args...) })
		if err == nil {
			// After a Redis restart the script cache is empty: a script
			// that was not found did not run, so load and run it.
			res, err = s.orRun(ctx, cmd, createEntriesScript, keys, args...).Slice()
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("create task %s: %w", t.GetTaskId(), err)
	}
	if res[0].(int64) == 1 {
		return t, true, nil
	}
	existing, err := s.Get(ctx, member, res[1].(string))
	if err != nil {
		return nil, false, fmt.Errorf("load task of repeated request %s: %w", t.GetRequestId(), err)
	}
	return existing, false, nil
}

// createOnCluster writes the task's entries, then the task (keys and args
// of createScript). On a Redis Cluster the entries live on other masters
// than the task, and a pipeline's commands for different masters run at
// once, in no order: with the outbox's master down the task could be
// stored without the entries that let the outbox and the repair find it.
// A repeated request id takes the entries out again.
func (s *Store) createOnCluster(ctx context.Context, member, id string, now time.Time, grace time.Duration, keys []string, args []any) ([]any, error) {
	var add *redis.Cmd
	var index *redis.IntCmd
	outboxKeys := []string{s.outboxKey(id), s.repairKey(id)}
	outboxArgs := []any{grace.Milliseconds(), outboxMember(member, id), s.repairGrace.Milliseconds()}
	err := s.batch.do(ctx, func(pipe redis.Pipeliner) {
		index = pipe.ZAdd(ctx, s.processingKey(id), redis.Z{Score: float64(now.UnixMilli()), Member: outboxMember(member, id)})
		if grace >= 0 {
			add = outboxAddScript.EvalSha(ctx, pipe, outboxKeys, outboxArgs...)
		}
	})
	if err == nil {
		err = index.Err()
	}
	if err == nil && add != nil {
		err = s.orRun(ctx, add, outboxAddScript, outboxKeys, outboxArgs...).Err()
	}
	if err != nil {
		return nil, err
	}
	var cmd *redis.Cmd
	if err := s.batch.do(ctx, func(pipe redis.Pipeliner) { cmd = createScript.EvalSha(ctx, pipe, keys, args...) }); err != nil {
		return nil, err
	}
	res, err := s.orRun(ctx, cmd, createScript, keys, args...).Slice()
	if err == nil && res[0].(int64) != 1 {
		s.unindex(ctx, member, id)
		if grace >= 0 {
			// Left behind on failure, the entries find no task and go.
			_ = s.Forget(ctx, member, id)
		}
	}
	return res, err
}

// createKeys returns the keys Create and Rollback touch (task, seen,
// index, request) and "1" when the task has a request id to dedupe on.
func (s *Store) createKeys(member string, t *taskv1.Task) ([]string, string) {
	dedupe, reqKey := "0", s.requestKey(member, "-")
	if t.GetRequestId() != "" {
		dedupe, reqKey = "1", s.requestKey(member, t.GetRequestId())
	}
	return []string{s.TaskKey(member, t.GetTaskId()), s.seenKey(member, t.GetTaskId()), s.indexKey(member), reqKey}, dedupe
}

// rollbackScript removes every trace of a task whose job could not be
// queued.
// KEYS[1] task, KEYS[2] seen, KEYS[3] index, KEYS[4] request (may be unused)
// ARGV[1] task id, ARGV[2] "1" when KEYS[4] is the task's request key.
// Returns 1.
var rollbackScript = redis.NewScript(`
-- KEYS task, seen, index, request | ARGV id, own request | deletes them, returns 1
local taskKey, seenKey, indexKey, requestKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
redis.call('DEL', taskKey, seenKey)
redis.call('ZREM', indexKey, ARGV[1])
if ARGV[2] == '1' and redis.call('GET', requestKey) == ARGV[1] then
  redis.call('DEL', requestKey)
end
return 1`)

// Rollback removes a task created by Create whose job was not queued, as
// if it had never been submitted.
func (s *Store) Rollback(ctx context.Context, member string, t *taskv1.Task) error {
	keys, dedupe := s.createKeys(member, t)
	if err := rollbackScript.Run(ctx, s.rdb, keys, t.GetTaskId(), dedupe).Err(); err != nil {
		return fmt.Errorf("roll back task %s: %w", t.GetTaskId(), err)
	}
	s.unindex(ctx, member, t.GetTaskId())
	return nil
}

// Get returns member's task id, ErrExpired if it existed but expired, or
// ErrNotFound.
func (s *Store) Get(ctx context.Context, member, id string) (*taskv1.Task, error) {
	if !ValidID(id) {
		return nil, ErrNotFound
	}
	// The task and its "seen" marker are read in the same round trip, so a
	// missing task costs no second one to tell expired from never created.
	var cmd *redis.StringCmd
	var seen *redis.IntCmd
	if err := s.reads.do(ctx, func(pipe redis.Pipeliner) {
		cmd = pipe.HGet(ctx, s.TaskKey(member, id), "d")
		seen = pipe.Exists(ctx, s.seenKey(member, id))
	}); err != nil {
		return nil, fmt.Errorf("get task %s: %w", id, err)
	}
	data, err := cmd.Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, missingErr(id, seen)
	}
	if err != nil {
		return nil, fmt.Errorf("get task %s: %w", id, err)
	}
	return unmarshal(id, data)
}

func (s *Store) missing(ctx context.Context, member, id string) error {
	return missingErr(id, s.rdb.Exists(ctx, s.seenKey(member, id)))
}

// missingErr is ErrExpired when seen (an EXISTS of the task's "seen"
// marker) found it, else ErrNotFound.
func missingErr(id string, seen *redis.IntCmd) error {
	n, err := seen.Result()
	if err != nil {
		return fmt.Errorf("check task %s: %w", id, err)
	}
	if n == 1 {
		return ErrExpired
	}
	return ErrNotFound
}

func unmarshal(id string, data []byte) (*taskv1.Task, error) {
	var t taskv1.Task
	if err := proto.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("decode task %s: %w", id, err)
	}
	return &t, nil
}

// Job returns the job message stored with a PROCESSING task.
func (s *Store) Job(ctx context.Context, member, id string) ([]byte, error) {
	b, err := s.rdb.HGet(ctx, s.TaskKey(member, id), "j").Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get job of task %s: %w", id, err)
	}
	return b, nil
}

// finishScript moves a PROCESSING task to its final state, keeping the TTL.
// A task that ends without success also gives up its order-code claim (if
// it still owns it), so the shopper can submit the order again.
// KEYS[1] task, KEYS[2] lease (may be unused), KEYS[3] order claim (may be
// unused), KEYS[4] plan hash; ARGV[1] new status, ARGV[2] task bytes, ARGV[3] lease token or
// "" for an unfenced write, ARGV[4] channel, ARGV[5] the PROCESSING status,
// ARGV[6] task id, ARGV[7] "1" to release the order claim, ARGV[8] the
// SHA-1 of the record the write was made from ("" unchecked), ARGV[9] "1"
// to delete the lease with the write, then shipment outcome fields and
// values to write into the plan hash with the result.
// Returns 1 written, 0 already terminal, -1 missing, -2 fenced, -3 the
// record changed since it was read.
var finishScript = redis.NewScript(`
-- KEYS task, lease, order, plan | ARGV status, task, token, channel, PROCESSING, id, release, record SHA-1, drop lease, outcome field, value... | returns 1, 0, -1, -2, -3
local taskKey, leaseKey, orderKey, planKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local task = redis.call('HMGET', taskKey, 's', 'd')
local s = task[1]
if not s then return -1 end
if s ~= ARGV[5] then return 0 end
if ARGV[3] ~= '' and redis.call('GET', leaseKey) ~= ARGV[3] then return -2 end
if ARGV[8] ~= '' and redis.sha1hex(task[2] or '') ~= ARGV[8] then return -3 end
redis.call('HSET', taskKey, 's', ARGV[1], 'd', ARGV[2])
redis.call('HDEL', taskKey, 'j')
if ARGV[7] == '1' and redis.call('GET', orderKey) == ARGV[6] then
  redis.call('DEL', orderKey)
end
if ARGV[9] == '1' then redis.call('DEL', leaseKey) end
if #ARGV >= 11 then
  for i = 10, #ARGV - 1, 2 do redis.call('HSET', planKey, ARGV[i], ARGV[i + 1]) end
  local at = redis.call('PEXPIRETIME', taskKey)
  if at > 0 then redis.call('PEXPIREAT', planKey, at) end
end
redis.call('PUBLISH', ARGV[4], ARGV[2])
return 1`)

// Fence guards a write with a lease: the write happens only while the
// lease key still holds the token.
type Fence struct {
	Key   string
	Token string
	// Record, when set, is the task's record as read under the lease
	// (Claim.Record): Finish updates it instead of reading the task
	// again, and writes only if the stored record is still the same
	// (else it reads the task and tries once more).
	Record []byte
	// Release makes a successful Finish delete the lease in the same
	// round trip; Released then reports true and the holder has nothing
	// left to release.
	Release  bool
	released bool
}

// Released reports whether a Finish under the fence deleted its lease.
func (f *Fence) Released() bool { return f != nil && f.released }

// Finish loads member's PROCESSING task, lets update set its terminal
// status and outcome, and stores it atomically unless the task has become
// terminal meanwhile (ErrTerminal) or the fence's lease was lost
// (ErrFenced). The remaining TTL is kept. A task that ends other than
// SUCCEEDED releases its claim of its order code. With a fence's Record
// and Release, the whole of it is one round trip.
func (s *Store) Finish(ctx context.Context, member, id string, fence *Fence, update func(t *taskv1.Task)) (*taskv1.Task, error) {
	return s.FinishRecording(ctx, member, id, fence, nil, update)
}

// FinishRecording is Finish that also records shipment outcomes (by
// shipment key, as RecordOutcome) in the same write: a shipment's outcome
// and the result that reports it cost one round trip.
func (s *Store) FinishRecording(ctx context.Context, member, id string, fence *Fence, outcomes map[string][]byte, update func(t *taskv1.Task)) (*taskv1.Task, error) {
	var record []byte
	if fence != nil {
		record = fence.Record
	}
	for {
		t, n, err := s.finish(ctx, member, id, fence, record, outcomes, update)
		if err != nil || n != -3 {
			return t, err
		}
		// The record changed since it was read: read it again.
		record = nil
	}
}

// finish is one attempt of Finish, from record when it is set (else read
// here); it returns the script's answer.
func (s *Store) finish(ctx context.Context, member, id string, fence *Fence, record []byte, outcomes map[string][]byte, update func(t *taskv1.Task)) (*taskv1.Task, int, error) {
	var t *taskv1.Task
	var err error
	check := ""
	if record != nil {
		t, err = unmarshal(id, record)
		sum := sha1.Sum(record)
		check = hex.EncodeToString(sum[:])
	} else {
		t, err = s.Get(ctx, member, id)
	}
	if err != nil {
		return nil, 0, err
	}
	if t.GetStatus() != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
		return t, 0, ErrTerminal
	}
	update(t)
	if t.GetStatus() == taskv1.TaskStatus_TASK_STATUS_PROCESSING {
		return nil, 0, fmt.Errorf("finish task %s: update left it PROCESSING", id)
	}
	t.UpdateTime = timestamppb.New(s.clock.Now())
	data, err := proto.Marshal(t)
	if err != nil {
		return nil, 0, fmt.Errorf("marshal task %s: %w", id, err)
	}
	leaseKey, token, drop := s.LeaseKey(member, id), "", "0"
	if fence != nil {
		leaseKey, token = fence.Key, fence.Token
		if fence.Release {
			drop = "1"
		}
	}
	release, orderKey := "0", s.OrderKey(member, "-")
	if t.GetOrderCode() != "" && t.GetStatus() != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED {
		release, orderKey = "1", s.OrderKey(member, t.GetOrderCode())
	}
	args := []any{int(t.GetStatus()), data, token, s.channel(member, id), int(taskv1.TaskStatus_TASK_STATUS_PROCESSING),
		id, release, check, drop}
	for key, o := range outcomes {
		args = append(args, outcomePrefix+key, o)
	}
	n, err := s.runScript(ctx, s.work, finishScript, []string{s.TaskKey(member, id), leaseKey, orderKey, s.PlanKey(member, id)}, args...).Int()
	if err != nil {
		return nil, 0, fmt.Errorf("finish task %s: %w", id, err)
	}
	switch n {
	case 1:
		if fence != nil && fence.Release {
			fence.released = true
		}
		s.unindex(ctx, member, id)
		return t, n, nil
	case 0:
		s.unindex(ctx, member, id)
		cur, err := s.Get(ctx, member, id)
		if err != nil {
			return nil, n, err
		}
		return cur, n, ErrTerminal
	case -2:
		return nil, n, ErrFenced
	case -3:
		return nil, n, nil
	default:
		return nil, n, s.missing(ctx, member, id)
	}
}

// Cancel moves member's PROCESSING task to CANCELLED with the given code
// and message.
func (s *Store) Cancel(ctx context.Context, member, id string, code int32, msg string) (*taskv1.Task, error) {
	return s.Finish(ctx, member, id, nil, func(t *taskv1.Task) {
		t.Status = taskv1.TaskStatus_TASK_STATUS_CANCELLED
		t.ErrorCode = code
		t.ErrorMsg = msg
	})
}

// Status returns the status of member's task without decoding it.
func (s *Store) Status(ctx context.Context, member, id string) (taskv1.TaskStatus, error) {
	// One round trip, like Get: the "seen" marker comes with the status
	// (a script, so that an unreachable Redis fails it as fast as a
	// single command).
	res, err := statusScript.Run(ctx, s.rdb, []string{s.TaskKey(member, id), s.seenKey(member, id)}).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("task status %s: %w", id, err)
	}
	return statusOf(res[0], res[1])
}

// Remaining returns the time to live left on member's task.
func (s *Store) Remaining(ctx context.Context, member, id string) (time.Duration, error) {
	d, err := s.rdb.PTTL(ctx, s.TaskKey(member, id)).Result()
	if err != nil {
		return 0, fmt.Errorf("ttl of task %s: %w", id, err)
	}
	return d, nil
}

// List returns up to pageSize of member's tasks, newest first, starting
// after pageToken, and the token of the next page ("" on the last).
func (s *Store) List(ctx context.Context, member string, pageSize int, pageToken string) ([]*taskv1.Task, string, error) {
	maxScore, afterID := "+inf", ""
	if pageToken != "" {
		score, id, ok := strings.Cut(pageToken, ".")
		if _, err := strconv.ParseInt(score, 10, 64); !ok || err != nil {
			return nil, "", fmt.Errorf("%w: page token", ErrBadToken)
		}
		maxScore, afterID = score, id
	}
	// Fetch one page plus ties at the boundary score, skipping entries up
	// to and including the token's id (equal scores come in reverse id
	// order).
	entries, err := s.rdb.ZRevRangeByScoreWithScores(ctx, s.indexKey(member), &redis.ZRangeBy{
		Max: maxScore, Min: "-inf", Count: int64(pageSize) + 64,
	}).Result()
	if err != nil {
		return nil, "", fmt.Errorf("list tasks: %w", err)
	}
	if afterID != "" {
		for len(entries) > 0 {
			e := entries[0]
			if strconv.FormatInt(int64(e.Score), 10) == maxScore && e.Member.(string) >= afterID {
				entries = entries[1:]
				continue
			}
			break
		}
	}
	more := len(entries) > pageSize
	if more {
		entries = entries[:pageSize]
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(entries))
	for i, e := range entries {
		cmds[i] = pipe.HGet(ctx, s.TaskKey(member, e.Member.(string)), "d")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, "", fmt.Errorf("list tasks: %w", err)
	}
	tasks := make([]*taskv1.Task, 0, len(entries))
	for i, cmd := range cmds {
		data, err := cmd.Bytes()
		if errors.Is(err, redis.Nil) {
			continue // expired since it was indexed
		}
		if err != nil {
			return nil, "", fmt.Errorf("list tasks: %w", err)
		}
		t, err := unmarshal(entries[i].Member.(string), data)
		if err != nil {
			return nil, "", err
		}
		tasks = append(tasks, t)
	}
	next := ""
	if more && len(entries) > 0 {
		last := entries[len(entries)-1]
		next = strconv.FormatInt(int64(last.Score), 10) + "." + last.Member.(string)
	}
	return tasks, next, nil
}

// ErrBadToken means a page token was not one List produced.
var ErrBadToken = errors.New("invalid page token")
