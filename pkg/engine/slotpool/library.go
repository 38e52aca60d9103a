package slotpool

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// op is one function of a library: its body runs after begin, on the
// call's keys and arguments (see scripts.go).
type op struct {
	name string
	body string
}

// library is a Redis function library of the pool's functions. Its name
// carries a digest of its code, so that replicas of two versions, each
// calling its own functions, share a Redis during a rolling update.
type library struct {
	name   string
	code   string         // FUNCTION LOAD's argument
	fns    map[*op]string // each op's function name: <library>_<op>
	number map[*op]int    // the number batchOp calls an op by (from 1)
}

// newLibrary builds the library of ops on the shared code (the state, the
// helpers and begin); batchable lists, in order, the ops batchOp runs.
func newLibrary(prefix, shared string, batchable []*op, ops ...*op) *library {
	var b strings.Builder
	b.WriteString(shared)
	b.WriteString("local batchable = {}\n")
	for _, o := range ops {
		fmt.Fprintf(&b, "local function op_%s()\n%s\nend\n", o.name, o.body)
	}
	l := &library{fns: map[*op]string{}, number: map[*op]int{}}
	for i, o := range batchable {
		fmt.Fprintf(&b, "batchable[%d] = op_%s\n", i+1, o.name)
		l.number[o] = i + 1
	}
	sum := sha1.Sum([]byte(b.String()))
	l.name = prefix + "_" + hex.EncodeToString(sum[:6])
	for _, o := range ops {
		l.fns[o] = l.name + "_" + o.name
		fmt.Fprintf(&b, "redis.register_function('%s', function(keys, args) begin(keys, args) return op_%s() end)\n", l.fns[o], o.name)
	}
	l.code = "#!lua name=" + l.name + "\n" + b.String()
	return l
}

// call runs the function of o with keys and argv. A Redis that lacks the
// library (a new or restarted node, a flushed one) gets it loaded, and
// the call is made again.
func (l *library) call(ctx context.Context, rdb redis.UniversalClient, o *op, keys []string, argv []any) (any, error) {
	fn, ok := l.fns[o]
	if !ok {
		return nil, fmt.Errorf("slotpool: library %s has no function %s", l.name, o.name)
	}
	v, err := rdb.FCall(ctx, fn, keys, argv...).Result()
	if !redis.HasErrorPrefix(err, "Function not found") {
		return v, err
	}
	if err := l.load(ctx, rdb); err != nil {
		return nil, err
	}
	return rdb.FCall(ctx, fn, keys, argv...).Result()
}

// load loads the library on rdb: on every primary of a Redis Cluster,
// since a call goes to its keys' node. A node that has it already keeps it.
func (l *library) load(ctx context.Context, rdb redis.UniversalClient) error {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return l.loadOn(ctx, node)
		})
	}
	return l.loadOn(ctx, rdb)
}

func (l *library) loadOn(ctx context.Context, c redis.Cmdable) error {
	err := c.FunctionLoad(ctx, l.code).Err()
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("slotpool: load function library %s: %w", l.name, err)
	}
	return nil
}
