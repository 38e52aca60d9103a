// Package cost counts what each step of an order spends on the engines
// and the outside systems: Redis round trips, commands, script calls and
// bytes sent; RabbitMQ publishes and settlements (acks, requeues,
// rejects); HTTP calls by peer. A request's or delivery's context names
// the step it serves (WithStep); work under a context without a step —
// background loops, start-up — is not counted, so the counts of a quiet
// process divided by the orders it served are what one order costs,
// whatever the machine's speed.
//
// The counts are process-wide and exported as Prometheus counters
// labelled by step (Collector); `make test` compares them per order with
// the committed budget (bench/cost-budget.json).
package cost

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The steps of an order's path.
const (
	Submit = "submit" // the gateway accepting an order (CreateOrderSplit)
	Status = "status" // the gateway answering a task's status (GetTask)
	Split  = "split"  // the split-worker handling a job's delivery
	// Batched is the writes that orders share, flushed on a timer: the
	// gateway's outbox clean-up, the split-worker's processing-index
	// removals and error-rate counts. Their share of one order depends on
	// how many orders a flush serves (about none under load), so they are
	// not counted in the step that caused them.
	Batched = "batched"
)

// What is counted, the suffix of each counter's name.
const (
	RedisRoundTrips = "redis_round_trips"
	RedisCommands   = "redis_commands"
	RedisScripts    = "redis_script_calls"
	RedisBytes      = "redis_bytes_sent"
	AMQPPublishes   = "amqp_publishes"
	AMQPSettles     = "amqp_settlements"
	HTTPCalls       = "http_calls"
)

// Kinds lists every kind counted, in the order figures print.
var Kinds = []string{RedisRoundTrips, RedisCommands, RedisScripts, RedisBytes, AMQPPublishes, AMQPSettles, HTTPCalls}

type stepKey struct{}

// WithStep returns ctx naming step as the one its work serves.
func WithStep(ctx context.Context, step string) context.Context {
	return context.WithValue(ctx, stepKey{}, step)
}

// StepOf returns the step ctx serves, or "" when none.
func StepOf(ctx context.Context) string {
	s, _ := ctx.Value(stepKey{}).(string)
	return s
}

// counts holds a step's counters; peers the HTTP calls by peer.
type counts struct {
	n     [6]atomic.Int64 // by kindIndex
	peers sync.Map        // peer → *atomic.Int64
}

var kindIndex = map[string]int{RedisRoundTrips: 0, RedisCommands: 1, RedisScripts: 2, RedisBytes: 3, AMQPPublishes: 4, AMQPSettles: 5}

var steps sync.Map // step → *counts

func of(step string) *counts {
	if c, ok := steps.Load(step); ok {
		return c.(*counts)
	}
	c, _ := steps.LoadOrStore(step, new(counts))
	return c.(*counts)
}

// Add counts n of kind (not HTTPCalls) for the step ctx serves, if any.
func Add(ctx context.Context, kind string, n int64) {
	if step := StepOf(ctx); step != "" {
		of(step).n[kindIndex[kind]].Add(n)
	}
}

// addCall counts an HTTP call to peer for the step ctx serves, if any.
func addCall(ctx context.Context, peer string) {
	step := StepOf(ctx)
	if step == "" {
		return
	}
	c := of(step)
	v, ok := c.peers.Load(peer)
	if !ok {
		v, _ = c.peers.LoadOrStore(peer, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

// AddRedis counts one round trip of commands Redis commands, scripts of
// them script calls, sending bytes bytes, for the step ctx serves, if any
// (redisconn's hook calls it for every command and pipeline).
func AddRedis(ctx context.Context, commands, scripts int, bytes int64) {
	if step := StepOf(ctx); step != "" {
		c := of(step)
		c.n[0].Add(1)
		c.n[1].Add(int64(commands))
		c.n[2].Add(int64(scripts))
		c.n[3].Add(bytes)
	}
}

// Transport wraps base to count each request as an HTTP call to peer for
// the step of the request's context.
func Transport(base http.RoundTripper, peer string) http.RoundTripper {
	return roundTripper{base: base, peer: peer}
}

type roundTripper struct {
	base http.RoundTripper
	peer string
}

func (t roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	addCall(r.Context(), t.peer)
	return t.base.RoundTrip(r)
}

// Collector exports the counts as orderflow_step_<kind>_total{step} and
// orderflow_step_http_calls_total{step,peer}. Every registry may register
// it; it reads the process-wide counts.
func Collector() prometheus.Collector { return collector{} }

type collector struct{}

var descs = func() map[string]*prometheus.Desc {
	m := make(map[string]*prometheus.Desc, len(Kinds))
	for _, k := range Kinds {
		labels := []string{"step"}
		if k == HTTPCalls {
			labels = append(labels, "peer")
		}
		m[k] = prometheus.NewDesc("orderflow_step_"+k+"_total",
			"What the order path's steps spent: "+strings.ReplaceAll(k, "_", " ")+" (counted under a step's context only).", labels, nil)
	}
	return m
}()

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
}

func (collector) Collect(ch chan<- prometheus.Metric) {
	steps.Range(func(k, v any) bool {
		step, c := k.(string), v.(*counts)
		for kind, i := range kindIndex {
			ch <- prometheus.MustNewConstMetric(descs[kind], prometheus.CounterValue, float64(c.n[i].Load()), step)
		}
		c.peers.Range(func(p, n any) bool {
			ch <- prometheus.MustNewConstMetric(descs[HTTPCalls], prometheus.CounterValue, float64(n.(*atomic.Int64).Load()), step, p.(string))
			return true
		})
		return true
	})
}

// Read returns what step has spent so far, by kind; HTTP calls are under
// "http_calls:<peer>".
func Read(step string) map[string]int64 {
	c := of(step)
	m := make(map[string]int64, len(kindIndex)+1)
	for kind, i := range kindIndex {
		m[kind] = c.n[i].Load()
	}
	c.peers.Range(func(p, n any) bool {
		m[HTTPCalls+":"+p.(string)] = n.(*atomic.Int64).Load()
		return true
	})
	return m
}

// During returns what step spent while f ran (other work under the same
// step in the meantime included), by kind as Read names them.
func During(step string, f func()) map[string]int64 {
	before := Read(step)
	f()
	after := Read(step)
	for k, v := range before {
		after[k] -= v
	}
	return after
}
