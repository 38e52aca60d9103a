package paystore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Operators' views of the payments, kept beside the payments because a
// payment's key and these keys live in different Redis Cluster slots:
//
//	<prefix>:{paystuck}                ZSET order code -> since (ms): payments
//	                                   whose reconciliation may be stuck
//	<prefix>:{paydone}:<status>:<day>  SET out_trade_nos of the payments that
//	                                   became <status> (PAID, CLOSED) on <day>
//	                                   (UTC, YYYYMMDD)
//
// Both are updated after the payment's own transition. The stuck list is
// checked against each payment when read (and entries that no longer
// apply are dropped). A day's set is exact: adding a payment again changes
// nothing, and a process that stops between the transition and the add
// leaves the payment's check (or the provider's callback) to be run again,
// which finds the payment PAID or CLOSED and adds it then (see Finished).

// statsTTL keeps a day's counters a day longer than the day.
const statsTTL = 48 * time.Hour

func (s *Store) stuckKey() string { return s.prefix + ":{paystuck}" }

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

func (s *Store) statsKey(st Status, day time.Time) string {
	return s.prefix + ":{paydone}:" + string(st) + ":" + day.UTC().Format("20060102")
}

// MarkStuck lists the payment of code as possibly stuck since since,
// unless it is listed already.
func (s *Store) MarkStuck(ctx context.Context, code string, since time.Time) error {
	if err := s.rdb.ZAddNX(ctx, s.stuckKey(), redis.Z{Score: float64(ms(since)), Member: code}).Err(); err != nil {
		return fmt.Errorf("list payment %s as stuck: %w", code, err)
	}
	return nil
}

// ClearStuck removes the payment of code from the stuck list.
func (s *Store) ClearStuck(ctx context.Context, code string) error {
	if err := s.rdb.ZRem(ctx, s.stuckKey(), code).Err(); err != nil {
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
// first, and the list's length.
func (s *Store) Stuck(ctx context.Context, off, n int) ([]StuckRef, int64, error) {
	pipe := s.rdb.Pipeline()
	r := pipe.ZRangeWithScores(ctx, s.stuckKey(), int64(off), int64(off+n-1))
	c := pipe.ZCard(ctx, s.stuckKey())
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, 0, fmt.Errorf("list stuck payments: %w", err)
	}
	out := make([]StuckRef, 0, len(r.Val()))
	for _, z := range r.Val() {
		code, _ := z.Member.(string)
		out = append(out, StuckRef{TradeNo: code, Since: time.UnixMilli(int64(z.Score)).UTC()})
	}
	return out, c.Val(), nil
}

// StuckCount returns the stuck list's length.
func (s *Store) StuckCount(ctx context.Context) (int64, error) {
	n, err := s.rdb.ZCard(ctx, s.stuckKey()).Result()
	if err != nil {
		return 0, fmt.Errorf("count stuck payments: %w", err)
	}
	return n, nil
}

// Finished records that the payment of code became st (PAID or CLOSED)
// at at (its DoneTime): it adds it to the day's set and removes it from
// the stuck list, in one round trip. Recording a payment again changes
// nothing, so callers record it whenever they find it PAID or CLOSED.
func (s *Store) Finished(ctx context.Context, code string, st Status, at time.Time) error {
	k := s.statsKey(st, at)
	pipe := s.rdb.Pipeline()
	pipe.SAdd(ctx, k, code)
	pipe.Expire(ctx, k, statsTTL)
	pipe.ZRem(ctx, s.stuckKey(), code)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("record %s payment %s: %w", st, code, err)
	}
	return nil
}

// TransitionsOn returns how many payments became PAID and CLOSED on the
// UTC day of day.
func (s *Store) TransitionsOn(ctx context.Context, day time.Time) (paid, closed int64, err error) {
	pipe := s.rdb.Pipeline()
	p := pipe.SCard(ctx, s.statsKey(StatusPaid, day))
	c := pipe.SCard(ctx, s.statsKey(StatusClosed, day))
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, 0, fmt.Errorf("read payment counts: %w", err)
	}
	return p.Val(), c.Val(), nil
}

// nextScript moves the next check of a tracked UNPAID payment.
// KEYS[1] payment hash
// ARGV[1] next check ms
// Returns OK, PAID, CLOSED, UNTRACKED or NOTFOUND.
var nextScript = redis.NewScript(`
local f = redis.call('HMGET', KEYS[1], 'status', 'tracking')
if not f[1] then return 'NOTFOUND' end
if f[1] ~= 'UNPAID' then return f[1] end
if f[2] ~= '1' then return 'UNTRACKED' end
redis.call('HSET', KEYS[1], 'next', ARGV[1])
return 'OK'
`)

// SetNextCheck moves the next check of a tracked UNPAID payment to next,
// keeping its schedule step and uncertain-retry count.
func (s *Store) SetNextCheck(ctx context.Context, code string, next time.Time) (Outcome, error) {
	return s.run(ctx, nextScript, code, ms(next))
}
