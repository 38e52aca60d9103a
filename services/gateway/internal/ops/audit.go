package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/timestamppb"

	opsv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/ops/v1"
)

// AuditMaxLen caps the audit stream (approximately: XADD MAXLEN ~).
const AuditMaxLen = 100000

// Audit is the capped Redis stream of operator mutations. It owns the key
// "<prefix>:{ops}:audit".
type Audit struct {
	rdb redis.UniversalClient
	key string
	max int64
}

// NewAudit returns the audit stream under prefix; maxLen ≤ 0 means
// AuditMaxLen.
func NewAudit(rdb redis.UniversalClient, prefix string, maxLen int64) *Audit {
	if maxLen <= 0 {
		maxLen = AuditMaxLen
	}
	return &Audit{rdb: rdb, key: prefix + ":{ops}:audit", max: maxLen}
}

// Record appends an event.
func (a *Audit) Record(ctx context.Context, e *opsv1.AuditEvent) error {
	err := a.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: a.key, MaxLen: a.max, Approx: true,
		Values: []any{
			"t", e.GetTime().AsTime().UnixMilli(), "actor", e.GetActor(), "action", e.GetAction(),
			"target", e.GetTarget(), "detail", e.GetDetail(), "result", e.GetResult(),
		},
	}).Err()
	if err != nil {
		return fmt.Errorf("record audit event: %w", err)
	}
	return nil
}

// List returns up to n events older than the entry id before ("" for the
// newest), newest first, and the id to continue from ("" at the end).
func (a *Audit) List(ctx context.Context, n int, before string) ([]*opsv1.AuditEvent, string, error) {
	end := "+"
	if before != "" {
		if !validStreamID(before) {
			return nil, "", errBadToken
		}
		end = "(" + before
	}
	msgs, err := a.rdb.XRevRangeN(ctx, a.key, end, "-", int64(n)+1).Result()
	if err != nil {
		return nil, "", fmt.Errorf("list audit events: %w", err)
	}
	next := ""
	if len(msgs) > n {
		msgs = msgs[:n]
		next = msgs[n-1].ID
	}
	out := make([]*opsv1.AuditEvent, 0, len(msgs))
	for _, m := range msgs {
		e := &opsv1.AuditEvent{Id: m.ID}
		if ms, ok := m.Values["t"].(string); ok {
			var v int64
			if _, err := fmt.Sscan(ms, &v); err == nil {
				e.Time = timestamppb.New(time.UnixMilli(v))
			}
		}
		e.Actor, _ = m.Values["actor"].(string)
		e.Action, _ = m.Values["action"].(string)
		e.Target, _ = m.Values["target"].(string)
		e.Detail, _ = m.Values["detail"].(string)
		e.Result, _ = m.Values["result"].(string)
		out = append(out, e)
	}
	return out, next, nil
}

var errBadToken = errors.New("invalid page token")

// validStreamID reports whether id looks like "<ms>-<seq>".
func validStreamID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	return ok && digits(ms) && digits(seq)
}

func digits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ListAuditEvents pages through the audit stream, newest first.
func (s *Server) ListAuditEvents(ctx context.Context, req *opsv1.ListAuditEventsRequest) (*opsv1.ListAuditEventsResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), 50, 200)
	if err != nil {
		return nil, err
	}
	events, next, err := s.o.Audit.List(ctx, size, req.GetPageToken())
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	return &opsv1.ListAuditEventsResponse{Events: events, NextPageToken: next}, nil
}
