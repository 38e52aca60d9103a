package slotpool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Snapshot is the pool's state at one instant.
type Snapshot struct {
	// Capacity is N.
	Capacity int `json:"capacity"`
	// Holders are the jobs holding a slot, soonest lease deadline first.
	Holders []Holder `json:"holders"`
	// Pending are the waiting jobs in grant order.
	Pending []Waiter `json:"pending"`
	// Reclaimed counts the leases reclaimed since the pool was created.
	Reclaimed int64 `json:"reclaimed"`
}

// Holder is a job holding a slot.
type Holder struct {
	JobID      string    `json:"jobId"`
	Token      string    `json:"token"`
	Since      time.Time `json:"since"`
	LeaseUntil time.Time `json:"leaseUntil"`
}

// Waiter is a job in the pending queue.
type Waiter struct {
	JobID string    `json:"jobId"`
	Since time.Time `json:"since"`
}

// Finished is a job that gave its slot back (or whose lease was reclaimed).
type Finished struct {
	JobID   string        `json:"jobId"`
	Token   string        `json:"token"`
	Outcome Outcome       `json:"outcome"`
	Detail  string        `json:"detail"`
	Held    time.Duration `json:"heldNanos"`
	Time    time.Time     `json:"time"`
}

// Snapshot reads capacity, holders and pending waiters in one transaction.
func (p *Pool) Snapshot(ctx context.Context) (Snapshot, error) {
	var (
		capCmd     *redis.StringCmd
		holdersCmd *redis.ZSliceCmd
		holdCmd    *redis.MapStringStringCmd
		pendingCmd *redis.StringSliceCmd
		pinfoCmd   *redis.MapStringStringCmd
		reclCmd    *redis.StringCmd
	)
	_, err := p.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		capCmd = pipe.Get(ctx, p.keys[keyCapacity])
		holdersCmd = pipe.ZRangeWithScores(ctx, p.keys[keyHolders], 0, -1)
		holdCmd = pipe.HGetAll(ctx, p.keys[keyHold])
		pendingCmd = pipe.ZRange(ctx, p.keys[keyPending], 0, -1)
		pinfoCmd = pipe.HGetAll(ctx, p.keys[keyPendingInfo])
		reclCmd = pipe.Get(ctx, p.keys[keyReclaimed])
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Snapshot{}, fmt.Errorf("snapshot of %s: %w", p.name, err)
	}
	s := Snapshot{Capacity: p.capacity, Holders: []Holder{}, Pending: []Waiter{}}
	if n, err := capCmd.Int(); err == nil {
		s.Capacity = n
	}
	if n, err := reclCmd.Int64(); err == nil {
		s.Reclaimed = n
	}
	hold := holdCmd.Val()
	for _, z := range holdersCmd.Val() {
		tok, _ := z.Member.(string)
		h := Holder{Token: tok, LeaseUntil: time.UnixMilli(int64(z.Score))}
		if at, _, job, ok := parseRecord(hold[tok]); ok {
			h.JobID, h.Since = job, at
		}
		s.Holders = append(s.Holders, h)
	}
	pinfo := pinfoCmd.Val()
	for _, tok := range pendingCmd.Val() {
		var w Waiter
		if at, _, job, ok := parseRecord(pinfo[tok]); ok {
			w.JobID, w.Since = job, at
		}
		s.Pending = append(s.Pending, w)
	}
	return s, nil
}

// parseRecord splits "ms|leaseMs|jobID" as the scripts write it.
func parseRecord(v string) (at time.Time, lease time.Duration, job string, ok bool) {
	ms, rest, ok1 := strings.Cut(v, "|")
	leaseMs, job, ok2 := strings.Cut(rest, "|")
	a, err1 := strconv.ParseInt(ms, 10, 64)
	l, err2 := strconv.ParseInt(leaseMs, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return time.Time{}, 0, "", false
	}
	return time.UnixMilli(a), time.Duration(l) * time.Millisecond, job, true
}

// Finished returns up to count finished jobs, newest first, from the
// capped finished stream.
func (p *Pool) Finished(ctx context.Context, count int) ([]Finished, error) {
	msgs, err := p.rdb.XRevRangeN(ctx, p.keys[keyFinished], "+", "-", int64(count)).Result()
	if err != nil {
		return nil, fmt.Errorf("finished jobs of %s: %w", p.name, err)
	}
	out := make([]Finished, 0, len(msgs))
	for _, m := range msgs {
		f := Finished{JobID: str(m.Values["job"]), Token: str(m.Values["token"]), Detail: str(m.Values["detail"])}
		if n, err := strconv.Atoi(str(m.Values["outcome"])); err == nil {
			f.Outcome = Outcome(n)
		}
		if n, err := strconv.ParseInt(str(m.Values["held_ms"]), 10, 64); err == nil {
			f.Held = time.Duration(n) * time.Millisecond
		}
		if ms, _, ok := strings.Cut(m.ID, "-"); ok {
			if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
				f.Time = time.UnixMilli(n)
			}
		}
		out = append(out, f)
	}
	return out, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// Handler serves the Snapshot as JSON, with the latest finished jobs
// (?finished=N, default 20, at most 1000) under "finished".
func (p *Pool) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		n := 20
		if v := r.URL.Query().Get("finished"); v != "" {
			k, err := strconv.Atoi(v)
			if err != nil || k < 0 || k > 1000 {
				http.Error(w, "finished: want an integer from 0 to 1000", http.StatusBadRequest)
				return
			}
			n = k
		}
		s, err := p.Snapshot(r.Context())
		if err != nil {
			http.Error(w, "slot pool unavailable", http.StatusServiceUnavailable)
			return
		}
		fin := []Finished{}
		if n > 0 {
			if fin, err = p.Finished(r.Context(), n); err != nil {
				http.Error(w, "slot pool unavailable", http.StatusServiceUnavailable)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Snapshot
			Pool     string     `json:"pool"`
			InUse    int        `json:"inUse"`
			Waiting  int        `json:"waiting"`
			Finished []Finished `json:"finished"`
		}{s, p.name, len(s.Holders), len(s.Pending), fin})
	})
}

// CapacityHandler changes the pool's capacity at run time: PUT with a JSON
// body {"capacity": N} (N ≥ 0) answers 204. Raising N grants waiters at
// once; lowering it lets holders finish and grants nothing until fewer than
// N are held.
func (p *Pool) CapacityHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			w.Header().Set("Allow", "PUT")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		var body struct {
			Capacity *int `json:"capacity"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1024))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil || body.Capacity == nil || *body.Capacity < 0 {
			http.Error(w, "capacity: want a JSON body {\"capacity\": N} with N ≥ 0", http.StatusBadRequest)
			return
		}
		if err := p.SetCapacity(r.Context(), *body.Capacity); err != nil {
			http.Error(w, "slot pool unavailable", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
