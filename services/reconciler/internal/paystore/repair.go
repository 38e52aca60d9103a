package paystore

import (
	"context"
	"fmt"
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

// repairKey is a sorted set of order codes being created, scored by the
// time (ms) after which a repair may look at them.
func (s *Store) repairKey() string { return s.prefix + ":{payrepair}" }

// MarkCreating records that the payment of code is being created; a
// repair may look at it from due on.
func (s *Store) MarkCreating(ctx context.Context, code string, due time.Time) error {
	if err := s.rdb.ZAdd(ctx, s.repairKey(), redis.Z{Score: float64(ms(due)), Member: code}).Err(); err != nil {
		return fmt.Errorf("mark payment %s as being created: %w", code, err)
	}
	return nil
}

// DoneCreating removes code from the repair set: its payment's first
// check has run, or it needs none.
func (s *Store) DoneCreating(ctx context.Context, code string) error {
	if err := s.rdb.ZRem(ctx, s.repairKey(), code).Err(); err != nil {
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
local codes = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[3])
local next = tonumber(ARGV[1]) + tonumber(ARGV[2])
for i = 1, #codes do
  redis.call('ZADD', KEYS[1], 'XX', next, codes[i])
end
return codes`)

// ClaimCreating returns up to limit order codes due at now for a repair,
// making them due again after retry in case the repair fails too.
func (s *Store) ClaimCreating(ctx context.Context, now time.Time, retry time.Duration, limit int) ([]string, error) {
	codes, err := claimCreatingScript.Run(ctx, s.rdb, []string{s.repairKey()},
		ms(now), retry.Milliseconds(), strconv.Itoa(limit)).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("claim payments to repair: %w", err)
	}
	return codes, nil
}
