package delayq

// Storage layout of one shard (every key starts with the shard's hash tag
// "{<Name>:s<i>}", or "{<Name>}" for the single-tag layout of earlier
// versions, written P below, so all of a shard's keys live in one Redis
// Cluster slot and every script touches one tag):
//
//	P:top      ZSET  bucket -> earliest due time (ms) in that bucket
//	P:z:<b>    ZSET  job id -> due time (ms), jobs of bucket b
//	P:h:<b>    HASH  job id -> "<gen>:<attempt>:<payload>", jobs of bucket b
//	                 (payload may start with the Schedule call's trace
//	                 context, see wrapTrace)
//	P:run      ZSET  job id -> lease deadline (ms) of the running attempt
//	P:own      HASH  job id -> "<fence>:<gen>:<bucket>:<due>:<deferred due>"
//	P:n        STRING number of firings waiting in the P:z:<b> sets
//	P:seq      STRING counter handing out generations and fences
//	P:wake     pub/sub channel: a due time (ms) that became the earliest
//
// A job id belongs to shard fnv32a(id) mod 16 and to bucket fnv32a(id)
// mod 32768 of it. With a million jobs a
// bucket holds about 30, so P:z:<b> and P:h:<b> stay in Redis' compact
// listpack encoding (zset-max-listpack-entries 128, hash 512, values up to
// 64 bytes): about 100 bytes per pending job, against ~250 for one big ZSET
// plus one big HASH. P:top orders the buckets, so the earliest job overall
// is the first member of the bucket first in P:top.
//
// Every script declares every key it touches in KEYS, so Redis Cluster
// (and anything else that routes by KEYS) sees all of them. The claim,
// which finds its buckets through P:top, is handed the buckets the
// previous claim saw due first and asks for another round when the
// bucket it comes to was not among them.
//
// A generation (gen) is taken from P:seq by every Schedule; a claim records
// the gen it ran in P:own, so when the attempt ends a different gen in the
// job's record means "rescheduled while running" and the new schedule is
// kept. A fence is taken from P:seq by every claim; only the attempt holding
// the current fence may renew, finish or retry the job.
//
// The builders below name every key; the scripts bind the keys they are
// given to the same names.

// key is the shard's key named s.
func (q *shard) key(s string) string { return q.tag + ":" + s }

// topKey is P:top, the buckets by their earliest due time.
func (q *shard) topKey() string { return q.key("top") }

// dueKey is P:z:<b>, bucket b's jobs by due time.
func (q *shard) dueKey(b string) string { return q.key("z:" + b) }

// jobsKey is P:h:<b>, bucket b's job records.
func (q *shard) jobsKey(b string) string { return q.key("h:" + b) }

// runKey is P:run, the running attempts by lease deadline.
func (q *shard) runKey() string { return q.key("run") }

// ownKey is P:own, the running attempts' fences.
func (q *shard) ownKey() string { return q.key("own") }

// countKey is P:n, the number of firings waiting.
func (q *shard) countKey() string { return q.key("n") }

// seqKey is P:seq, the generation and fence counter.
func (q *shard) seqKey() string { return q.key("seq") }

// chanName is P:wake, the channel of a due time that became the earliest.
func (q *shard) chanName() string { return q.key("wake") }
