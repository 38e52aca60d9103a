package paystore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Operators' views of the payments, kept beside the payments because a
// payment's key and these keys live in different Redis Cluster slots:
//
//	<prefix>:{paystuck:<shard>}                ZSET order code -> since (ms):
//	                                           payments whose reconciliation
//	                                           may be stuck
//	<prefix>:{paydone:<shard>}:<status>:<day>  SET out_trade_nos of the
//	                                           payments that became <status>
//	                                           (PAID, CLOSED) on <day> (UTC,
//	                                           YYYYMMDD)
//
// Both are Shards keys (per status and day for the day sets), each under a
// hash tag of its own, the shard of the out_trade_no (see shard), so on a
// Redis Cluster the day set's add of every payment that ends, and the
// stuck list's removal of one that was listed, spread over the masters
// instead of bounding them by one master's core. Each write touches one shard; readers read every
// shard, and the single-tag key of earlier versions ("{paystuck}",
// "{paydone}:<status>:<day>"), in one pipeline.
//
// Both are updated after the payment's own transition. The stuck list is
// checked against each payment when read (and entries that no longer
// apply are dropped). A day's set is exact: adding a payment again changes
// nothing, and a process that stops between the transition and the add
// leaves the payment's check (or the provider's callback) to be run again,
// which finds the payment PAID or CLOSED and adds it then (see Finished).

// statsTTL keeps a day's counters a day longer than the day.
const statsTTL = 48 * time.Hour

// stuckKey is the stuck list's shard that holds code.
func (s *Store) stuckKey(code string) string { return s.stuckShardKey(shard(code)) }

// stuckShardKey is the stuck list's shard i, or the single-tag list of
// earlier versions for legacyShard.
func (s *Store) stuckShardKey(i int) string {
	if i == legacyShard {
		return s.prefix + ":{paystuck}"
	}
	return s.prefix + ":{paystuck:" + strconv.Itoa(i) + "}"
}

// codeKey is the set of members with a payment under an order code, for
// operators, who look payments up by order code alone.
func (s *Store) codeKey(code string) string { return s.prefix + ":paycode:{" + code + "}" }

// IndexCode records that member has a payment under the order code; the
// entry lives as long as payments do.
func (s *Store) IndexCode(ctx context.Context, code, member string) error {
	pipe := s.rdb.TxPipeline()
	pipe.SAdd(ctx, s.codeKey(code), member)
	pipe.PExpire(ctx, s.codeKey(code), s.ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("index order code %s: %w", code, err)
	}
	return nil
}

// CodeMembers returns the members with a payment under the order code.
func (s *Store) CodeMembers(ctx context.Context, code string) ([]string, error) {
	m, err := s.rdb.SMembers(ctx, s.codeKey(code)).Result()
	if err != nil {
		return nil, fmt.Errorf("read order code %s: %w", code, err)
	}
	return m, nil
}

// statsKey is the set of day's payments that became st that holds code.
func (s *Store) statsKey(st Status, day time.Time, code string) string {
	return s.statsShardKey(st, day, shard(code))
}

// statsShardKey is shard i of the set of day's payments that became st,
// or the single-tag set of earlier versions for legacyShard.
func (s *Store) statsShardKey(st Status, day time.Time, i int) string {
	tag := "{paydone}"
	if i != legacyShard {
		tag = "{paydone:" + strconv.Itoa(i) + "}"
	}
	return s.prefix + ":" + tag + ":" + string(st) + ":" + day.UTC().Format("20060102")
}

// MarkStuck lists the payment of code as possibly stuck since since,
// unless it is listed already.
func (s *Store) MarkStuck(ctx context.Context, code string, since time.Time) error {
	if err := s.rdb.ZAddNX(ctx, s.stuckKey(code), redis.Z{Score: float64(ms(since)), Member: code}).Err(); err != nil {
		return fmt.Errorf("list payment %s as stuck: %w", code, err)
	}
	return nil
}

// ClearStuck removes the payment of code from the stuck list.
func (s *Store) ClearStuck(ctx context.Context, code string) error {
	if err := s.rdb.ZRem(ctx, s.stuckKey(code), code).Err(); err != nil {
		return fmt.Errorf("unlist stuck payment %s: %w", code, err)
	}
	return nil
}

// StuckRef is an entry of the stuck list.
type StuckRef struct {
	// TradeNo is the payment's out_trade_no.
	TradeNo string
	Since   time.Time
}

// Stuck returns up to n entries of the stuck list from offset off, oldest
// first (equal times by out_trade_no, as in one sorted set), and the
// list's length. It reads the first off+n entries of every shard in one
// pipeline and merges them. Entries of the single-tag list of earlier
// versions are first moved to their shards (see moveLegacyStuck), so each
// payment is listed and counted once.
func (s *Store) Stuck(ctx context.Context, off, n int) ([]StuckRef, int64, error) {
	if off < 0 {
		off = 0
	}
	for moved := false; ; moved = true {
		pipe := s.rdb.Pipeline()
		ranges := make([]*redis.ZSliceCmd, legacyShard+1)
		cards := make([]*redis.IntCmd, legacyShard+1)
		for i := range cards {
			if n > 0 {
				ranges[i] = pipe.ZRangeWithScores(ctx, s.stuckShardKey(i), 0, int64(off+n-1))
			}
			cards[i] = pipe.ZCard(ctx, s.stuckShardKey(i))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, 0, fmt.Errorf("list stuck payments: %w", err)
		}
		if cards[legacyShard].Val() > 0 && !moved {
			if err := s.moveLegacyStuck(ctx); err != nil {
				return nil, 0, err
			}
			continue
		}
		var total int64
		var all []StuckRef
		for i, c := range cards {
			total += c.Val()
			if ranges[i] == nil {
				continue
			}
			for _, z := range ranges[i].Val() {
				code, _ := z.Member.(string)
				all = append(all, StuckRef{TradeNo: code, Since: time.UnixMilli(int64(z.Score)).UTC()})
			}
		}
		slices.SortFunc(all, func(a, b StuckRef) int {
			if c := a.Since.Compare(b.Since); c != 0 {
				return c
			}
			return strings.Compare(a.TradeNo, b.TradeNo)
		})
		if off >= len(all) {
			return []StuckRef{}, total, nil
		}
		return all[off:min(off+n, len(all))], total, nil
	}
}

// StuckCount returns the stuck list's length: the sizes of every shard,
// read in one pipeline. Entries of the single-tag list of earlier versions
// are first moved to their shards (see moveLegacyStuck).
func (s *Store) StuckCount(ctx context.Context) (int64, error) {
	for moved := false; ; moved = true {
		pipe := s.rdb.Pipeline()
		cards := make([]*redis.IntCmd, legacyShard+1)
		for i := range cards {
			cards[i] = pipe.ZCard(ctx, s.stuckShardKey(i))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, fmt.Errorf("count stuck payments: %w", err)
		}
		if cards[legacyShard].Val() > 0 && !moved {
			if err := s.moveLegacyStuck(ctx); err != nil {
				return 0, err
			}
			continue
		}
		var total int64
		for _, c := range cards {
			total += c.Val()
		}
		return total, nil
	}
}

// legacyStuckBatch bounds the entries moveLegacyStuck moves per round trip.
const legacyStuckBatch = 1000

// moveLegacyStuck moves the entries of the single-tag stuck list of
// earlier versions (a rolling upgrade) to their shards, where ClearStuck
// and Finished remove them. A payment listed in both keeps its earlier
// time. A replica of an earlier version that removes an entry while it is
// moved can leave it listed in its shard for a payment that moved on:
// readers of the list drop it when they check it, as after a crash.
func (s *Store) moveLegacyStuck(ctx context.Context) error {
	legacy := s.stuckShardKey(legacyShard)
	for {
		entries, err := s.rdb.ZRangeWithScores(ctx, legacy, 0, legacyStuckBatch-1).Result()
		if err != nil {
			return fmt.Errorf("read single-tag stuck list: %w", err)
		}
		if len(entries) == 0 {
			return nil
		}
		pipe := s.rdb.Pipeline()
		rem := make([]any, len(entries))
		for i, z := range entries {
			code, _ := z.Member.(string)
			pipe.ZAddLT(ctx, s.stuckKey(code), z)
			rem[i] = code
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("move stuck payments to their shards: %w", err)
		}
		if err := s.rdb.ZRem(ctx, legacy, rem...).Err(); err != nil {
			return fmt.Errorf("remove moved stuck payments: %w", err)
		}
		if len(entries) < legacyStuckBatch {
			return nil
		}
	}
}

// Finished records that the payment of code became st (PAID or CLOSED)
// at at (its DoneTime): it adds it to its shard of the day's set and, when
// listed (the payment may be on the stuck list, see Payment.Listed),
// removes it from its shard of the stuck list, in one round trip (one per
// master on a Redis Cluster). Most payments are never listed, so most
// finish with no write to the stuck list. Recording a payment again
// changes nothing, so callers record it whenever they find it PAID or
// CLOSED.
func (s *Store) Finished(ctx context.Context, code string, st Status, at time.Time, listed bool) error {
	k := s.statsKey(st, at, code)
	pipe := s.rdb.Pipeline()
	pipe.SAdd(ctx, k, code)
	pipe.Expire(ctx, k, statsTTL)
	if listed {
		pipe.ZRem(ctx, s.stuckKey(code), code)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("record %s payment %s: %w", st, code, err)
	}
	return nil
}

// TransitionsOn returns how many payments became PAID and CLOSED on the
// UTC day of day: the sizes of every shard of the day's two sets and of
// the single-tag sets of earlier versions, read in one pipeline. A payment
// recorded by an earlier version and again by this one (a rolling
// upgrade) counts twice that day; the single-tag sets expire 48 hours
// after their last add.
func (s *Store) TransitionsOn(ctx context.Context, day time.Time) (paid, closed int64, err error) {
	pipe := s.rdb.Pipeline()
	p := make([]*redis.IntCmd, legacyShard+1)
	c := make([]*redis.IntCmd, legacyShard+1)
	for i := range p {
		p[i] = pipe.SCard(ctx, s.statsShardKey(StatusPaid, day, i))
		c[i] = pipe.SCard(ctx, s.statsShardKey(StatusClosed, day, i))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, 0, fmt.Errorf("read payment counts: %w", err)
	}
	for i := range p {
		paid += p[i].Val()
		closed += c[i].Val()
	}
	return paid, closed, nil
}

// nextScript moves the next check of a tracked UNPAID payment.
// KEYS[1] payment hash
// ARGV[1] next check ms
// Returns OK, PAID, CLOSED, UNTRACKED or NOTFOUND.
var nextScript = redis.NewScript(`
-- KEYS payment | ARGV next ms | returns OK, PAID, CLOSED, UNTRACKED or NOTFOUND
local paymentKey = KEYS[1]
local f = redis.call('HMGET', paymentKey, 'status', 'tracking')
if not f[1] then return 'NOTFOUND' end
if f[1] ~= 'UNPAID' then return f[1] end
if f[2] ~= '1' then return 'UNTRACKED' end
redis.call('HSET', paymentKey, 'next', ARGV[1])
return 'OK'
`)

// SetNextCheck moves the next check of a tracked UNPAID payment to next,
// keeping its schedule step and uncertain-retry count.
func (s *Store) SetNextCheck(ctx context.Context, code string, next time.Time) (Outcome, error) {
	return s.run(ctx, nextScript, code, ms(next))
}
