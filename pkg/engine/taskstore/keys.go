package taskstore

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// The store's key layout, all built here. Every key starts with the
// store's prefix <p>; the part in braces is the Redis Cluster hash tag, so
// the keys one script touches always share a slot.
//
// Per member, hash tag {m:<member>}:
//
//	<p>:{m:<member>}:task:<id>      hash    s status, d Task protobuf, j job, a lease delivery, r repairs (TaskKey)
//	<p>:{m:<member>}:seen:<id>      string  "1" for twice the TTL: the task existed (seenKey)
//	<p>:{m:<member>}:tasks          zset    task id -> creation ms (indexKey)
//	<p>:{m:<member>}:req:<request>  string  the task id a request id created (requestKey)
//	<p>:{m:<member>}:lease:<id>     string  the worker lease's token (LeaseKey)
//	<p>:{m:<member>}:plan:<id>      hash    plan, s:<shipment> outcomes (PlanKey)
//	<p>:{m:<member>}:order:<code>   string  the task id that claimed the order code (OrderKey)
//	<p>:{m:<member>}:events:<id>    channel the task's changes, for watchers (channel)
//
// Per shard n = FNV-1a(task id) mod OutboxShards, hash tag {outbox:<n>} or
// {processing:<n>} (the tag without a number is an earlier version's,
// legacyShard):
//
//	<p>:{outbox:<n>}                zset    "member\nid" -> Redis ms after which to republish (outboxKey)
//	<p>:{outbox:<n>}:repair         zset    "member\nid" -> Redis ms after which to repair (repairKey)
//	<p>:{processing:<n>}            zset    "member\nid" of PROCESSING tasks -> creation ms (processingKey)
//
// Dead letters, hash tag {dead}:
//
//	<p>:{dead}                      zset    "member\nid" -> dead-lettered ms (deadKey)
//	<p>:{dead}:info                 hash    "member\nid" -> DeadLetter JSON (deadInfoKey)

// memberTag starts every key of member: its hash tag {m:<member>}.
func (s *Store) memberTag(member string) string { return s.prefix + ":{m:" + member + "}" }

// memberOf returns the member of a key built by memberTag.
func (s *Store) memberOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix+":{m:")
	if !ok {
		return "", false
	}
	m, _, ok := strings.Cut(rest, "}")
	return m, ok
}

// TaskKey is the hash holding a task: s = status number, d = Task protobuf,
// j = the job message to (re)publish while the task is PROCESSING, a = the
// delivery of its job a worker last took its lease with (see
// AcquireLeaseStatus).
func (s *Store) TaskKey(member, id string) string { return s.memberTag(member) + ":task:" + id }

// taskKeyPattern is the SCAN pattern of task id's hash under every member.
func (s *Store) taskKeyPattern(id string) string {
	return escapeGlob(s.prefix) + ":{m:*}:task:" + escapeGlob(id)
}

// seenKey marks an id as having existed for twice the TTL, so an expired
// task is told apart from one that never existed.
func (s *Store) seenKey(member, id string) string { return s.memberTag(member) + ":seen:" + id }

// indexKey is the member's sorted set of task ids scored by creation time
// in milliseconds.
func (s *Store) indexKey(member string) string { return s.memberTag(member) + ":tasks" }

// requestKey maps a member's request id to the task it created.
func (s *Store) requestKey(member, requestID string) string {
	return s.memberTag(member) + ":req:" + requestID
}

// LeaseKey is the key of the worker lease on a task; it shares the task's
// slot so that a write can be fenced by the lease in one script.
func (s *Store) LeaseKey(member, id string) string { return s.memberTag(member) + ":lease:" + id }

// PlanKey is the hash holding task id's plan: field "plan" is the plan,
// field "s:<shipment key>" the outcome of each finished shipment.
func (s *Store) PlanKey(member, id string) string { return s.memberTag(member) + ":plan:" + id }

// OrderKey holds the id of the task that owns member's order code.
func (s *Store) OrderKey(member, orderCode string) string {
	return s.memberTag(member) + ":order:" + orderCode
}

// channel carries the task's changes for watchers.
func (s *Store) channel(member, id string) string { return s.memberTag(member) + ":events:" + id }

// OutboxShards is the number of outbox (and repair set) shards. Every
// replica must agree on where an entry lives, so it is fixed in the code,
// not configured: changing it strands the entries of the shards that go.
const OutboxShards = 16

// legacyShard is the index of the single-tag outbox and repair set ("{outbox}")
// of earlier versions: sweeps still claim from them, so entries left there
// by a replica of an earlier version (a rolling upgrade) are handled; they
// take no new entries.
const legacyShard = OutboxShards

// outboxShard is the shard of task id: FNV-1a of the id, modulo
// OutboxShards.
func outboxShard(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % OutboxShards)
}

// outboxKey is a sorted set of "member\ntask id" scored by the Redis
// server time (ms) after which a sweeper may republish the entry. Scores are
// stamped and compared with Redis TIME inside scripts, never with a
// replica's clock: a gateway whose clock runs ahead would otherwise
// republish submissions still in flight.
//
// The outbox is OutboxShards sorted sets, each under a hash tag of its own
// ("{outbox:<shard>}"), so on a Redis Cluster the entries spread over the
// masters instead of bounding every submission by one master's core. A
// task's shard is a hash of its id (outboxShard); its repair entry is in
// the same shard, under the same tag.
func (s *Store) outboxKey(id string) string { return s.outboxShardKey(outboxShard(id)) }

// outboxShardKey is the outbox of shard i, or the single-tag outbox of
// earlier versions for legacyShard.
func (s *Store) outboxShardKey(i int) string {
	if i == legacyShard {
		return s.prefix + ":{outbox}"
	}
	return s.prefix + ":{outbox:" + strconv.Itoa(i) + "}"
}

// repairKey is a sorted set of "member\ntask id" scored by the Redis
// server time (ms) after which a repair looks at the task. It is sharded
// as the outbox is, and a task's repair entry shares its outbox entry's
// hash tag, so both entries are added by one script.
func (s *Store) repairKey(id string) string { return s.repairShardKey(outboxShard(id)) }

// repairShardKey is the repair set of shard i, or the single-tag repair
// set of earlier versions for legacyShard.
func (s *Store) repairShardKey(i int) string { return s.outboxShardKey(i) + ":repair" }

// outboxMember is the entry of member's task id in the outbox, repair,
// processing and dead-letter sets.
func outboxMember(member, id string) string { return member + "\n" + id }

// processingKey is the processing index entry's set for task id: a
// sorted set of "member\ntask id" of PROCESSING tasks scored by their
// creation time (ms). Create adds to it in the same round trip as the
// task; Finish and Rollback remove from it afterwards.
//
// The index is OutboxShards sorted sets, each under a hash tag of its own
// ("{processing:<shard>}", the shard of a task id as for the outbox), so
// on a Redis Cluster the adds and removals of every task spread over the
// masters instead of bounding them by one master's core. Each write
// touches one set, so sharding costs nothing on one Redis either: the
// index is sharded on every deployment. Readers (Processing,
// ProcessingByAge) read every shard in one pipeline, one round trip per
// master.
func (s *Store) processingKey(id string) string { return s.processingShardKey(outboxShard(id)) }

// processingShardKey is the processing index of shard i, or the
// single-tag index of earlier versions ("{processing}") for legacyShard.
// Readers still read that one as one more shard and move the entries of
// tasks still PROCESSING to their shards (drainLegacyProcessing), so the
// tasks an earlier version created are listed and counted across an
// upgrade and leave the index when they finish.
func (s *Store) processingShardKey(i int) string {
	if i == legacyShard {
		return s.prefix + ":{processing}"
	}
	return s.prefix + ":{processing:" + strconv.Itoa(i) + "}"
}

// deadKey is a sorted set of "member\ntask id" of tasks whose job was
// dead-lettered, scored by when (ms); deadInfoKey holds each one's
// DeadLetter as JSON. They share the hash tag {dead}.
func (s *Store) deadKey() string { return s.prefix + ":{dead}" }

// deadInfoKey is the hash of dead-letter records (see deadKey).
func (s *Store) deadInfoKey() string { return s.prefix + ":{dead}:info" }
