package slotpool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Snapshot is the pool's state at one instant.
type Snapshot struct {
	// Capacity is N.
	Capacity int `json:"capacity"`
	// GroupCap is K, the most slots one group may hold (0: no cap).
	GroupCap int `json:"groupCap"`
	// StarveAfter is the most high-priority grants made in a row while a
	// normal waiter is eligible.
	StarveAfter int `json:"starveAfter"`
	// Holders are the jobs holding a slot, soonest lease deadline first.
	Holders []Holder `json:"holders"`
	// Orphaned are the slots whose lease expired while their job may
	// still run downstream (see Options.JobLimit): each stays counted
	// against N until its Until, soonest first.
	Orphaned []Orphan `json:"orphaned"`
	// Pending are the waiting jobs in arrival order (grants follow the
	// fair-queuing rule, FIFO within a group and priority).
	Pending []Waiter `json:"pending"`
	// Groups summarises, per fairness group with waiters, holders or a
	// weight set, what it holds and what waits.
	Groups []GroupState `json:"groups"`
	// Reclaimed counts the leases reclaimed since the pool was created.
	Reclaimed int64 `json:"reclaimed"`
	// Shards are the counts of each shard of a Sharded pool of more than
	// one shard; empty otherwise.
	Shards []ShardState `json:"shards,omitempty"`
	// Origin says who set N, the fairness limits and the weights: the
	// configuration or an operator (the latest over the shards).
	Origin Origins `json:"origin"`
}

// ShardState is one shard of a Sharded pool in a Snapshot.
type ShardState struct {
	Shard    int    `json:"shard"`
	Pool     string `json:"pool"`
	Capacity int    `json:"capacity"`
	InUse    int    `json:"inUse"`
	Waiting  int    `json:"waiting"`
}

// Holder is a job holding a slot.
type Holder struct {
	JobID      string    `json:"jobId"`
	Token      string    `json:"token"`
	Group      string    `json:"group"`
	Priority   Priority  `json:"priority"`
	Since      time.Time `json:"since"`
	LeaseUntil time.Time `json:"leaseUntil"`
	// Replica is the replica holding it (Options.Replica; "" when unnamed).
	Replica string `json:"replica"`
}

// Orphan is a slot whose holder's lease expired while its job may still
// run at the downstream: it is still counted against N.
type Orphan struct {
	JobID string    `json:"jobId"`
	Token string    `json:"token"`
	Group string    `json:"group"`
	Since time.Time `json:"since"`
	// Until is when the slot frees (its reclaim plus the job limit).
	Until time.Time `json:"until"`
	// Replica is the replica that held it (Options.Replica; "" when unnamed).
	Replica string `json:"replica"`
}

// Waiter is a job in the pending queue.
type Waiter struct {
	JobID    string    `json:"jobId"`
	Group    string    `json:"group"`
	Priority Priority  `json:"priority"`
	Since    time.Time `json:"since"`
	// Replica is the replica waiting (Options.Replica; "" when unnamed).
	Replica string `json:"replica"`
}

// GroupState is one fairness group in a Snapshot.
type GroupState struct {
	Group  string `json:"group"`
	Weight int    `json:"weight"`
	// Holding is the number of slots the group holds.
	Holding int `json:"holding"`
	// Waiting and WaitingHigh count its waiters (all, and high priority).
	Waiting     int `json:"waiting"`
	WaitingHigh int `json:"waitingHigh"`
	// OldestWait is how long its oldest waiter has waited, in Redis time.
	OldestWait time.Duration `json:"oldestWaitNanos"`
}

// Finished is a job that gave its slot back (or whose lease was reclaimed).
type Finished struct {
	JobID   string        `json:"jobId"`
	Group   string        `json:"group"`
	Token   string        `json:"token"`
	Outcome Outcome       `json:"outcome"`
	Detail  string        `json:"detail"`
	Held    time.Duration `json:"heldNanos"`
	Time    time.Time     `json:"time"`
}

// Snapshot reads capacity, holders and pending waiters in one transaction.
func (p *Pool) Snapshot(ctx context.Context) (Snapshot, error) {
	c, err := p.readSnapshot(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	s := Snapshot{Capacity: p.capacity, GroupCap: p.groupCap, StarveAfter: p.starve,
		Holders: []Holder{}, Orphaned: []Orphan{}, Pending: []Waiter{}, Groups: []GroupState{}, Origin: readOrigins(c.origin.Val())}
	settings := c.settings.Val()
	if n, err := strconv.Atoi(settings["groupcap"]); err == nil {
		s.GroupCap = n
	}
	if n, err := strconv.Atoi(settings["starve"]); err == nil {
		s.StarveAfter = n
	}
	now := c.time.Val()
	groups := groupIndex{}
	for g, w := range c.weights.Val() {
		if n, err := strconv.Atoi(w); err == nil {
			groups.get(g).Weight = n
		}
	}
	if n, err := c.capacity.Int(); err == nil {
		s.Capacity = n
	}
	if n, err := c.reclaimed.Int64(); err == nil {
		s.Reclaimed = n
	}
	s.addHolders(c, now, groups)
	s.addPending(c, now, groups)
	for _, gs := range groups {
		s.Groups = append(s.Groups, *gs)
	}
	slices.SortFunc(s.Groups, func(a, b GroupState) int { return strings.Compare(a.Group, b.Group) })
	return s, nil
}

// snapshotCmds are the reads of one Snapshot transaction.
type snapshotCmds struct {
	capacity, reclaimed                                  *redis.StringCmd
	holders, orphans                                     *redis.ZSliceCmd
	pending                                              *redis.StringSliceCmd
	hold, pinfo, pmeta, hmeta, weights, settings, origin *redis.MapStringStringCmd
	time                                                 *redis.TimeCmd
}

// readSnapshot sends the reads of a Snapshot in one transaction.
func (p *Pool) readSnapshot(ctx context.Context) (snapshotCmds, error) {
	var c snapshotCmds
	_, err := p.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		c.capacity = pipe.Get(ctx, p.keys[keyCapacity])
		c.holders = pipe.ZRangeWithScores(ctx, p.keys[keyHolders], 0, -1)
		c.hold = pipe.HGetAll(ctx, p.keys[keyHold])
		c.orphans = pipe.ZRangeWithScores(ctx, p.keys[keyOrphans], 0, -1)
		c.pending = pipe.ZRange(ctx, p.keys[keyPending], 0, -1)
		c.pinfo = pipe.HGetAll(ctx, p.keys[keyPendingInfo])
		c.reclaimed = pipe.Get(ctx, p.keys[keyReclaimed])
		c.pmeta = pipe.HGetAll(ctx, p.keys[keyPendingMeta])
		c.hmeta = pipe.HGetAll(ctx, p.keys[keyHoldMeta])
		c.weights = pipe.HGetAll(ctx, p.keys[keyWeights])
		c.settings = pipe.HGetAll(ctx, p.keys[keySettings])
		c.origin = pipe.HGetAll(ctx, p.keys[keyOrigin])
		c.time = pipe.Time(ctx)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return c, fmt.Errorf("snapshot of %s: %w", p.name, err)
	}
	return c, nil
}

// groupIndex collects a Snapshot's groups by name.
type groupIndex map[string]*GroupState

// get returns group g's state, adding it (weight 1) when new.
func (gi groupIndex) get(g string) *GroupState {
	if gs, ok := gi[g]; ok {
		return gs
	}
	gs := &GroupState{Group: g, Weight: 1}
	gi[g] = gs
	return gs
}

// addHolders adds the holders and the orphans still counted at now, and
// counts the holders of each group.
func (s *Snapshot) addHolders(c snapshotCmds, now time.Time, groups groupIndex) {
	hold, hmeta := c.hold.Val(), c.hmeta.Val()
	for _, z := range c.holders.Val() {
		tok, _ := z.Member.(string)
		h := Holder{Token: tok, LeaseUntil: time.UnixMilli(int64(z.Score)), Replica: replicaOf(tok)}
		if at, _, job, ok := parseRecord(hold[tok]); ok {
			h.JobID, h.Since = job, at
		}
		h.Group, h.Priority = parseMember(hmeta[tok])
		groups.get(h.Group).Holding++
		s.Holders = append(s.Holders, h)
	}
	for _, z := range c.orphans.Val() {
		m, _ := z.Member.(string)
		if o, ok := parseOrphan(m); ok && (now.IsZero() || int64(z.Score) > now.UnixMilli()) {
			o.Until = time.UnixMilli(int64(z.Score))
			s.Orphaned = append(s.Orphaned, o)
		}
	}
}

// addPending adds the waiters and counts each group's waiters and oldest
// wait at now.
func (s *Snapshot) addPending(c snapshotCmds, now time.Time, groups groupIndex) {
	pinfo, pmeta := c.pinfo.Val(), c.pmeta.Val()
	for _, tok := range c.pending.Val() {
		w := Waiter{Replica: replicaOf(tok)}
		if at, _, job, ok := parseRecord(pinfo[tok]); ok {
			w.JobID, w.Since = job, at
		}
		w.Group, w.Priority = parseMember(pmeta[tok])
		gs := groups.get(w.Group)
		gs.Waiting++
		if w.Priority == High {
			gs.WaitingHigh++
		}
		if !w.Since.IsZero() && !now.IsZero() {
			gs.OldestWait = max(gs.OldestWait, now.Sub(w.Since))
		}
		s.Pending = append(s.Pending, w)
	}
}

// parseMember reads the group and priority from a queue member
// (tier, group, NUL, sequence, NUL, token) as the scripts write it.
func parseMember(m string) (group string, prio Priority) {
	if len(m) < 2 {
		return "", Normal
	}
	if m[0] == '1' {
		prio = High
	}
	group, _, _ = strings.Cut(m[1:], "\x00")
	return group, prio
}

// parseOrphan splits an orphan's member (token, grant ms, group, job id,
// separated by NUL) as the scripts write it.
func parseOrphan(m string) (Orphan, bool) {
	tok, rest, ok1 := strings.Cut(m, "\x00")
	ms, rest, ok2 := strings.Cut(rest, "\x00")
	group, job, ok3 := strings.Cut(rest, "\x00")
	at, err := strconv.ParseInt(ms, 10, 64)
	if !ok1 || !ok2 || !ok3 || err != nil {
		return Orphan{}, false
	}
	return Orphan{JobID: job, Token: tok, Group: group, Since: time.UnixMilli(at), Replica: replicaOf(tok)}, true
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
		f := Finished{JobID: str(m.Values["job"]), Group: str(m.Values["group"]), Token: str(m.Values["token"]), Detail: str(m.Values["detail"])}
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

// poolView is what the HTTP handlers need of a Pool or a Sharded pool.
type poolView interface {
	Name() string
	Snapshot(ctx context.Context) (Snapshot, error)
	Finished(ctx context.Context, count int) ([]Finished, error)
	SetCapacity(ctx context.Context, n int) error
	SetWeight(ctx context.Context, group string, weight int) error
	SetFairness(ctx context.Context, groupCap, starveAfter int) error
}

// Handler serves the Snapshot as JSON, with the latest finished jobs
// (?finished=N, default 20, at most 1000) under "finished".
func (p *Pool) Handler() http.Handler { return snapshotHandler(p) }

func snapshotHandler(p poolView) http.Handler {
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
		}{s, p.Name(), len(s.Holders) + len(s.Orphaned), len(s.Pending), fin})
	})
}

// CapacityHandler changes the pool's capacity at run time: PUT with a JSON
// body {"capacity": N} (N ≥ 0) answers 204. Raising N grants waiters at
// once; lowering it lets holders finish and grants nothing until fewer than
// N are held.
func (p *Pool) CapacityHandler() http.Handler { return capacityHandler(p) }

func capacityHandler(p poolView) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Capacity *int `json:"capacity"`
		}
		const usage = "capacity: want a JSON body {\"capacity\": N} with N ≥ 0"
		if !decodePut(w, r, &body, usage) {
			return
		}
		if body.Capacity == nil || *body.Capacity < 0 {
			http.Error(w, usage, http.StatusBadRequest)
			return
		}
		if err := p.SetCapacity(r.Context(), *body.Capacity); err != nil {
			http.Error(w, "slot pool unavailable", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// WeightHandler sets a fairness group's weight at run time: PUT with a
// JSON body {"group": "m-1", "weight": W} (1 ≤ W ≤ MaxWeight) answers 204.
func (p *Pool) WeightHandler() http.Handler { return weightHandler(p) }

func weightHandler(p poolView) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Group  *string `json:"group"`
			Weight *int    `json:"weight"`
		}
		if !decodePut(w, r, &body, "body: want JSON {\"group\": G, \"weight\": W}") {
			return
		}
		switch {
		case body.Group == nil || len(*body.Group) > MaxGroupLen || strings.ContainsRune(*body.Group, 0):
			http.Error(w, fmt.Sprintf("group: want a string of at most %d bytes", MaxGroupLen), http.StatusBadRequest)
			return
		case body.Weight == nil || *body.Weight < 1 || *body.Weight > MaxWeight:
			http.Error(w, fmt.Sprintf("weight: want an integer from 1 to %d", MaxWeight), http.StatusBadRequest)
			return
		}
		if err := p.SetWeight(r.Context(), *body.Group, *body.Weight); err != nil {
			http.Error(w, "slot pool unavailable", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// FairnessHandler changes the group cap and the anti-starvation bound at
// run time: PUT with a JSON body {"groupCap": K, "starveAfter": S} (either
// may be left out; K ≥ 0, 0 for no cap; S ≥ 1) answers 204.
func (p *Pool) FairnessHandler() http.Handler { return fairnessHandler(p) }

func fairnessHandler(p poolView) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			GroupCap    *int `json:"groupCap"`
			StarveAfter *int `json:"starveAfter"`
		}
		const usage = "body: want JSON {\"groupCap\": K, \"starveAfter\": S}"
		if !decodePut(w, r, &body, usage) {
			return
		}
		if body.GroupCap == nil && body.StarveAfter == nil {
			http.Error(w, usage, http.StatusBadRequest)
			return
		}
		k, s := -1, -1
		if body.GroupCap != nil {
			if k = *body.GroupCap; k < 0 {
				http.Error(w, "groupCap: want an integer ≥ 0", http.StatusBadRequest)
				return
			}
		}
		if body.StarveAfter != nil {
			if s = *body.StarveAfter; s < 1 {
				http.Error(w, "starveAfter: want an integer ≥ 1", http.StatusBadRequest)
				return
			}
		}
		if err := p.SetFairness(r.Context(), k, s); err != nil {
			http.Error(w, "slot pool unavailable", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// decodePut checks that r is a PUT and decodes its JSON body (at most
// 4 KiB, no unknown fields) into dst. On failure it answers 405 or 400
// with usage and returns false.
func decodePut(w http.ResponseWriter, r *http.Request, dst any, usage string) bool {
	if r.Method != http.MethodPut {
		w.Header().Set("Allow", "PUT")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		http.Error(w, usage, http.StatusBadRequest)
		return false
	}
	return true
}
