package slotpool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier routes the pool's grant messages ("token|grantedMs", published by
// the scripts) to the waiters of this process. It holds one subscription
// while at least one waiter is registered and closes it when the last one
// leaves, so an idle Pool owns no connection and no goroutine.
type notifier struct {
	rdb     redis.UniversalClient
	channel string

	mu      sync.Mutex
	waiters map[string]chan int64
	ps      *redis.PubSub
	done    chan struct{} // closed when the current subscription's reader ends
}

func newNotifier(rdb redis.UniversalClient, channel string) *notifier {
	return &notifier{rdb: rdb, channel: channel, waiters: make(map[string]chan int64)}
}

// register subscribes (if not yet subscribed) and returns the channel on
// which the grant time of token (ms) arrives. Callers must unregister.
func (n *notifier) register(ctx context.Context, token string) (<-chan int64, error) {
	ch := make(chan int64, 1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ps == nil {
		// The subscription outlives the Acquire that opens it.
		ps := n.rdb.Subscribe(context.WithoutCancel(ctx), n.channel)
		if _, err := ps.Receive(ctx); err != nil {
			_ = ps.Close()
			return nil, fmt.Errorf("subscribe %s: %w", n.channel, err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			n.receive(ps)
		}()
		n.ps, n.done = ps, done
	}
	n.waiters[token] = ch
	return ch, nil
}

// unregister forgets token and closes the subscription when no waiter is
// left, waiting for its reader goroutine to end.
func (n *notifier) unregister(token string) {
	n.mu.Lock()
	delete(n.waiters, token)
	var ps *redis.PubSub
	var done chan struct{}
	if len(n.waiters) == 0 && n.ps != nil {
		ps, done = n.ps, n.done
		n.ps, n.done = nil, nil
	}
	n.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
		<-done
	}
}

// receive reads grant messages until ps is closed. It reads the
// subscription itself (no relay goroutine) to keep the handoff short; when
// no message comes for a while it pings, so that a dead connection is
// noticed and re-subscribed. Messages lost meanwhile are covered by the
// waiters' re-checks.
func (n *notifier) receive(ps *redis.PubSub) {
	ctx := context.Background()
	for {
		msg, err := ps.ReceiveTimeout(ctx, idlePing)
		if err == nil {
			if m, ok := msg.(*redis.Message); ok {
				n.wake(m.Payload)
			}
			continue
		}
		if errors.Is(err, redis.ErrClosed) || n.closed(ps) {
			return
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			_ = ps.Ping(ctx)
			continue
		}
		time.Sleep(100 * time.Millisecond) // Redis unreachable: retry
	}
}

// idlePing is how long the grant subscription may stay silent before it
// is pinged.
const idlePing = 30 * time.Second

// closed reports whether ps is no longer the current subscription.
func (n *notifier) closed(ps *redis.PubSub) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ps != ps
}

func (n *notifier) wake(payload string) {
	token, ms, ok := strings.Cut(payload, "|")
	if !ok {
		return
	}
	at, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return
	}
	n.mu.Lock()
	ch := n.waiters[token]
	n.mu.Unlock()
	if ch != nil {
		select {
		case ch <- at:
		default:
		}
	}
}
