// Package paystore keeps payment orders and their reconciliation records in
// Redis. A payment is keyed by its out_trade_no (wechatpay.OutTradeNo of
// the member and the order code, so equal order codes of two members are
// two payments): it owns the keys <prefix>:pay:{<out_trade_no>} (a hash)
// and <prefix>:pay:{<out_trade_no>}:attempts (a list), hash-tagged so that
// each script touches one Redis Cluster slot, and the repair set
// <prefix>:{payrepair:<shard>} of payments being created (see
// MarkCreating, repairKey). Every
// function taking a "code" takes the out_trade_no.
//
// Every change is a Lua script that only moves a payment forward: UNPAID to
// PAID or UNPAID to CLOSED, never out of PAID or CLOSED, so a payment is
// never both paid and closed, and marking a paid payment paid again changes
// nothing.
package paystore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Status is a payment's local state.
type Status string

// Payment states.
const (
	StatusUnpaid Status = "UNPAID"
	StatusPaid   Status = "PAID"
	StatusClosed Status = "CLOSED"
)

// Attempt actions.
const (
	ActionQuery  = "QUERY"
	ActionClose  = "CLOSE"
	ActionNotify = "NOTIFY"
)

// MaxAttempts bounds the attempts kept per payment (the oldest go first).
const MaxAttempts = 500

var (
	// ErrNotFound means there is no payment for the out_trade_no.
	ErrNotFound = errors.New("payment does not exist")
	// ErrExists means the order code already has a payment.
	ErrExists = errors.New("payment already exists")
)

// Outcome is what a transition script did.
type Outcome string

// Outcomes of the transition scripts.
const (
	// Applied: the change was made.
	Applied Outcome = "OK"
	// AlreadyPaid and AlreadyClosed: the payment was terminal; nothing
	// changed.
	AlreadyPaid   Outcome = "PAID"
	AlreadyClosed Outcome = "CLOSED"
	// Untracked: reconciliation was stopped; nothing changed.
	Untracked Outcome = "UNTRACKED"
	// Stale: another run already moved past this schedule slot.
	Stale Outcome = "STALE"
	// Missing: the payment does not exist.
	Missing Outcome = "NOTFOUND"
)

// Attempt is one call made to the provider (or one notification).
type Attempt struct {
	Time       time.Time
	Action     string
	TradeState string
}

// Payment is a stored payment.
type Payment struct {
	// TradeNo is the out_trade_no the order is placed under, the key.
	TradeNo string
	// OrderCode is the member's order code.
	OrderCode     string
	Member        string
	AmountFen     int64
	Description   string
	CodeURL       string
	Status        Status
	TransactionID string
	// Tracking is false once reconciliation was cancelled.
	Tracking bool
	// Slot is the index of the next scheduled query; len(schedule) means
	// the order is due to be closed.
	Slot int
	// Retries counts consecutive uncertain answers.
	Retries    int
	CreateTime time.Time
	// NextCheck is when the next query or close is due (zero once
	// terminal or untracked).
	NextCheck  time.Time
	PaidTime   time.Time
	ClosedTime time.Time
	// DoneTime is when the payment became PAID or CLOSED here (the day
	// it is counted on); zero while UNPAID.
	DoneTime time.Time
	// Listed reports whether the payment may be on the stuck list: an
	// uncertain answer or a cancelled tracking listed it at some point.
	// Only such a payment is removed from the list when it ends.
	Listed   bool
	Attempts []Attempt
}

// Store is the Redis payment store.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// New returns a Store whose keys start with prefix and live for ttl after
// the payment is created.
func New(rdb redis.UniversalClient, prefix string, ttl time.Duration) *Store {
	return &Store{rdb: rdb, prefix: prefix, ttl: ttl}
}

func (s *Store) keys(code string) []string {
	k := s.prefix + ":pay:{" + code + "}"
	return []string{k, k + ":attempts"}
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v string) time.Time {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}

func attemptArgs(a Attempt) string {
	return strconv.FormatInt(ms(a.Time), 10) + "|" + a.Action + "|" + a.TradeState
}

// createScript stores a new UNPAID payment unless the order code has one.
// KEYS[1] payment hash, KEYS[2] attempts list
// ARGV[1] member, ARGV[2] amount, ARGV[3] description, ARGV[4] code_url,
// ARGV[5] create ms, ARGV[6] next check ms, ARGV[7] ttl ms, ARGV[8] order
// code
// Returns 1 when created, 0 when the out_trade_no already has a payment.
var createScript = redis.NewScript(`
-- KEYS payment, attempts | ARGV member, amount, desc, code_url, create ms, next ms, ttl ms, order code | returns 1 created, 0 exists
local paymentKey, attemptsKey = KEYS[1], KEYS[2]
if redis.call('EXISTS', paymentKey) == 1 then return 0 end
redis.call('HSET', paymentKey, 'member', ARGV[1], 'amount', ARGV[2], 'desc', ARGV[3], 'code_url', ARGV[4],
  'status', 'UNPAID', 'tracking', '1', 'slot', '0', 'retries', '0', 'created', ARGV[5], 'next', ARGV[6], 'code', ARGV[8])
redis.call('PEXPIRE', paymentKey, ARGV[7])
redis.call('DEL', attemptsKey)
return 1
`)

// Create stores a new UNPAID payment due for its first check at next; it
// returns ErrExists when its out_trade_no already has one.
func (s *Store) Create(ctx context.Context, p Payment) error {
	n, err := createScript.Run(ctx, s.rdb, s.keys(p.TradeNo),
		p.Member, p.AmountFen, p.Description, p.CodeURL, ms(p.CreateTime), ms(p.NextCheck), s.ttl.Milliseconds(), p.OrderCode).Int()
	if err != nil {
		return fmt.Errorf("create payment %s: %w", p.TradeNo, err)
	}
	if n == 0 {
		return ErrExists
	}
	return nil
}

// Get returns a payment with its attempts.
func (s *Store) Get(ctx context.Context, code string) (Payment, error) {
	k := s.keys(code)
	pipe := s.rdb.Pipeline()
	h := pipe.HGetAll(ctx, k[0])
	l := pipe.LRange(ctx, k[1], 0, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return Payment{}, fmt.Errorf("get payment %s: %w", code, err)
	}
	f := h.Val()
	if len(f) == 0 {
		return Payment{}, ErrNotFound
	}
	p := Payment{
		TradeNo: code, OrderCode: f["code"], Member: f["member"], Description: f["desc"], CodeURL: f["code_url"],
		Status: Status(f["status"]), TransactionID: f["txid"], Tracking: f["tracking"] == "1",
		CreateTime: fromMS(f["created"]), NextCheck: fromMS(f["next"]), PaidTime: fromMS(f["paid"]), ClosedTime: fromMS(f["closed"]),
		DoneTime: fromMS(f["done"]),
	}
	if p.DoneTime.IsZero() {
		// Recorded before the field existed.
		p.DoneTime = p.ClosedTime
		if p.Status == StatusPaid {
			p.DoneTime = p.PaidTime
		}
	}
	p.AmountFen, _ = strconv.ParseInt(f["amount"], 10, 64)
	p.Slot, _ = strconv.Atoi(f["slot"])
	p.Retries, _ = strconv.Atoi(f["retries"])
	// Payments recorded before the field existed: listed while uncertain
	// or untracked.
	p.Listed = f["listed"] == "1" || f["tracking"] != "1" || p.Retries > 0
	for _, v := range l.Val() {
		parts := strings.SplitN(v, "|", 3)
		if len(parts) != 3 {
			continue
		}
		p.Attempts = append(p.Attempts, Attempt{Time: fromMS(parts[0]), Action: parts[1], TradeState: parts[2]})
	}
	return p, nil
}

// stepScript records an attempt of a tracked UNPAID payment and moves it to
// its next check. A step with uncertain retries marks the payment listed
// (its caller lists it as stuck next; see Payment.Listed).
// KEYS[1] payment hash, KEYS[2] attempts list
// ARGV[1] expected slot, ARGV[2] attempt "ms|action|state", ARGV[3] new
// slot, ARGV[4] next check ms, ARGV[5] retries, ARGV[6] max attempts
// Returns OK, PAID, CLOSED, UNTRACKED, STALE (slot moved on) or NOTFOUND.
var stepScript = redis.NewScript(`
-- KEYS payment, attempts | ARGV expected slot, attempt, new slot, next ms, retries, max attempts | returns OK, PAID, CLOSED, UNTRACKED, STALE or NOTFOUND
local paymentKey, attemptsKey = KEYS[1], KEYS[2]
local f = redis.call('HMGET', paymentKey, 'status', 'tracking', 'slot')
if not f[1] then return 'NOTFOUND' end
if f[1] ~= 'UNPAID' then return f[1] end
if f[2] ~= '1' then return 'UNTRACKED' end
if f[3] ~= ARGV[1] then return 'STALE' end
redis.call('HSET', paymentKey, 'slot', ARGV[3], 'next', ARGV[4], 'retries', ARGV[5])
if ARGV[5] ~= '0' then redis.call('HSET', paymentKey, 'listed', '1') end
redis.call('RPUSH', attemptsKey, ARGV[2])
redis.call('LTRIM', attemptsKey, -tonumber(ARGV[6]), -1)
redis.call('PEXPIREAT', attemptsKey, redis.call('PEXPIRETIME', paymentKey))
return 'OK'
`)

// Step records attempt a of the tracked UNPAID payment whose next check is
// slot expect, and sets its next slot, next check time and uncertain-retry
// count.
func (s *Store) Step(ctx context.Context, code string, expect int, a Attempt, slot int, next time.Time, retries int) (Outcome, error) {
	return s.run(ctx, stepScript, code, expect, attemptArgs(a), slot, ms(next), retries, MaxAttempts)
}

// paidScript marks an UNPAID payment PAID (tracked or not).
// KEYS[1] payment hash, KEYS[2] attempts list
// ARGV[1] transaction id, ARGV[2] paid ms, ARGV[3] attempt, ARGV[4] max
// attempts, ARGV[5] transition ms
// Returns {outcome, listed}: outcome OK, PAID (already paid: nothing
// changes), CLOSED or NOTFOUND; listed 1 when the payment may be on the
// stuck list (see Payment.Listed), else 0.
var paidScript = redis.NewScript(`
-- KEYS payment, attempts | ARGV transaction id, paid ms, attempt, max attempts, transition ms | returns {OK, PAID, CLOSED or NOTFOUND, listed}
local paymentKey, attemptsKey = KEYS[1], KEYS[2]
local f = redis.call('HMGET', paymentKey, 'status', 'tracking', 'retries', 'listed')
if not f[1] then return {'NOTFOUND', 0} end
if f[1] ~= 'UNPAID' then return {f[1], 0} end
redis.call('HSET', paymentKey, 'status', 'PAID', 'txid', ARGV[1], 'paid', ARGV[2], 'done', ARGV[5])
redis.call('HDEL', paymentKey, 'next')
redis.call('RPUSH', attemptsKey, ARGV[3])
redis.call('LTRIM', attemptsKey, -tonumber(ARGV[4]), -1)
redis.call('PEXPIREAT', attemptsKey, redis.call('PEXPIRETIME', paymentKey))
if f[4] == '1' or f[2] ~= '1' or (f[3] and f[3] ~= '0') then return {'OK', 1} end
return {'OK', 0}
`)

// MarkPaid moves an UNPAID payment to PAID, recording attempt a (whose
// time is the transition's, the payment's DoneTime), and reports whether
// it may be on the stuck list (see Payment.Listed). A paid payment
// answers AlreadyPaid and is left alone; a closed one answers
// AlreadyClosed.
func (s *Store) MarkPaid(ctx context.Context, code, transactionID string, paid time.Time, a Attempt) (Outcome, bool, error) {
	return s.runEnd(ctx, paidScript, code, transactionID, ms(paid), attemptArgs(a), MaxAttempts, ms(a.Time))
}

// closedScript marks an UNPAID payment CLOSED (tracked or not).
// KEYS[1] payment hash, KEYS[2] attempts list
// ARGV[1] closed ms, ARGV[2] attempt, ARGV[3] max attempts
// Returns {outcome, listed}: outcome OK, PAID, CLOSED (already closed:
// nothing changes) or NOTFOUND; listed 1 when the payment may be on the
// stuck list (see Payment.Listed), else 0.
var closedScript = redis.NewScript(`
-- KEYS payment, attempts | ARGV closed ms, attempt, max attempts | returns {OK, PAID, CLOSED or NOTFOUND, listed}
local paymentKey, attemptsKey = KEYS[1], KEYS[2]
local f = redis.call('HMGET', paymentKey, 'status', 'tracking', 'retries', 'listed')
if not f[1] then return {'NOTFOUND', 0} end
if f[1] ~= 'UNPAID' then return {f[1], 0} end
redis.call('HSET', paymentKey, 'status', 'CLOSED', 'closed', ARGV[1], 'done', ARGV[1])
redis.call('HDEL', paymentKey, 'next')
redis.call('RPUSH', attemptsKey, ARGV[2])
redis.call('LTRIM', attemptsKey, -tonumber(ARGV[3]), -1)
redis.call('PEXPIREAT', attemptsKey, redis.call('PEXPIRETIME', paymentKey))
if f[4] == '1' or f[2] ~= '1' or (f[3] and f[3] ~= '0') then return {'OK', 1} end
return {'OK', 0}
`)

// MarkClosed moves an UNPAID payment to CLOSED, recording attempt a, and
// reports whether it may be on the stuck list (see Payment.Listed). A
// paid payment answers AlreadyPaid and is never closed.
func (s *Store) MarkClosed(ctx context.Context, code string, closed time.Time, a Attempt) (Outcome, bool, error) {
	return s.runEnd(ctx, closedScript, code, ms(closed), attemptArgs(a), MaxAttempts)
}

// untrackScript stops reconciling an UNPAID payment and marks it listed
// (its caller lists it as stuck next; see Payment.Listed).
// KEYS[1] payment hash
// ARGV none
// Returns OK, UNTRACKED (already stopped), PAID, CLOSED or NOTFOUND.
var untrackScript = redis.NewScript(`
-- KEYS payment | ARGV none | returns OK, UNTRACKED, PAID, CLOSED or NOTFOUND
local paymentKey = KEYS[1]
local f = redis.call('HMGET', paymentKey, 'status', 'tracking')
if not f[1] then return 'NOTFOUND' end
if f[1] ~= 'UNPAID' then return f[1] end
if f[2] ~= '1' then return 'UNTRACKED' end
redis.call('HSET', paymentKey, 'tracking', '0', 'listed', '1')
redis.call('HDEL', paymentKey, 'next')
return 'OK'
`)

// StopTracking stops reconciling an UNPAID payment.
func (s *Store) StopTracking(ctx context.Context, code string) (Outcome, error) {
	return s.run(ctx, untrackScript, code)
}

func (s *Store) run(ctx context.Context, script *redis.Script, code string, args ...any) (Outcome, error) {
	out, err := script.Run(ctx, s.rdb, s.keys(code), args...).Text()
	if err != nil {
		return "", fmt.Errorf("update payment %s: %w", code, err)
	}
	return Outcome(out), nil
}

// runEnd runs paidScript or closedScript: the outcome and whether the
// payment may be on the stuck list.
func (s *Store) runEnd(ctx context.Context, script *redis.Script, code string, args ...any) (Outcome, bool, error) {
	v, err := script.Run(ctx, s.rdb, s.keys(code), args...).Slice()
	if err != nil {
		return "", false, fmt.Errorf("update payment %s: %w", code, err)
	}
	out, _ := v[0].(string)
	listed, _ := v[1].(int64)
	return Outcome(out), listed == 1, nil
}
