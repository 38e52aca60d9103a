package slotpool

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

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
		ps := n.rdb.Subscribe(ctx, n.channel)
		if _, err := ps.Receive(ctx); err != nil {
			_ = ps.Close()
			return nil, fmt.Errorf("subscribe %s: %w", n.channel, err)
		}
		msgs := ps.Channel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			for m := range msgs {
				n.wake(m.Payload)
			}
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
