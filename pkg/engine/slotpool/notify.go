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

	"github.com/orderflow/orderflow/pkg/platform/backoff"
)

// notifier routes the pool's grant messages ("token|grantedMs", published by
// the scripts) to the waiters of this process, and hands grants that a
// script of this process made (a release, a reclaim) straight to their
// waiter when it is local: the scripts publish those grants nowhere.
//
// Each replica has a grant channel of its own, so a grant wakes only the
// replica of its waiter. The subscription also covers the shared channel
// on which older versions of the scripts publish every grant, so a
// rolling upgrade wakes waiters as before.
//
// It also keeps, for the slots this process holds, the standby the pool
// lined up for each (learnt from a script's answer or a "standby|holder|
// standby" message), so that a release can start a standby waiting here
// at once (handOff).
//
// It holds one subscription while waiters are registered and keeps it warm
// for linger after the last one leaves: a waiter that finds it warm
// registers before it enqueues and needs no re-check after. An idle Pool
// closes the subscription and owns no connection and no goroutine.
type notifier struct {
	rdb     redis.UniversalClient
	legacy  string // the shared grant channel of older script versions
	channel string // this replica's grant channel
	linger  time.Duration

	mu       sync.Mutex
	waiters  map[string]*waiter
	held     map[string]string // token of a slot held here -> its standby ("" none known)
	ps       *redis.PubSub
	done     chan struct{} // closed when the current subscription's reader ends
	lastUsed time.Time     // when the last waiter left (or registered)
}

func newNotifier(rdb redis.UniversalClient, legacy, channel string, linger time.Duration) *notifier {
	return &notifier{rdb: rdb, legacy: legacy, channel: channel, linger: linger,
		waiters: make(map[string]*waiter), held: make(map[string]string)}
}

// waiter is an Acquire waiting in this process.
type waiter struct {
	token string
	job   string
	class Class
	ch    chan grant
	state waiterState
	x     *transfer // set when handed
}

type waiterState int

const (
	waiting   waiterState = iota
	granted               // a grant was delivered
	handed                // a release of this process started it (handOff)
	abandoned             // its Acquire gave up
)

// grant is what wakes a waiter: the grant time (ms) of a grant the pool
// made, or the transfer of a release that started it as its holder's
// standby.
type grant struct {
	ms int64
	x  *transfer
}

// transfer is the release that started a standby, as the standby's Slot
// sees it: ready closes when the release's answer has come; then ok says
// whether the standby holds the slot in Redis and err is the release's
// error (the outcome is then unknown).
type transfer struct {
	until time.Time // the holder's lease lasts at least until then (pool clock)
	ready chan struct{}
	ok    bool
	err   error
}

func (x *transfer) finish(ok bool, err error) {
	x.ok, x.err = ok, err
	close(x.ready)
}

// warm registers token when the subscription is already open and returns
// its wake channel; it returns nil (and registers nothing) when it is not.
// A grant published after warm returns reaches the channel unless the
// subscription's connection breaks (the waiter's re-check covers that).
func (n *notifier) warm(token, job string, c Class) <-chan grant {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ps == nil {
		return nil
	}
	w := &waiter{token: token, job: job, class: c, ch: make(chan grant, 1)}
	n.waiters[token] = w
	n.lastUsed = time.Now()
	return w.ch
}

// register subscribes (if not yet subscribed) and returns the channel on
// which token's grant arrives. Callers must unregister.
func (n *notifier) register(ctx context.Context, token, job string, c Class) (<-chan grant, error) {
	w := &waiter{token: token, job: job, class: c, ch: make(chan grant, 1)}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ps == nil {
		// The subscription outlives the Acquire that opens it.
		ps := n.rdb.Subscribe(context.WithoutCancel(ctx), n.legacy, n.channel)
		// Both confirmations come before any message: once they are read,
		// every grant published later reaches the reader.
		for range 2 {
			if _, err := ps.Receive(ctx); err != nil {
				_ = ps.Close()
				return nil, fmt.Errorf("subscribe %s: %w", n.channel, err)
			}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			n.receive(ps)
		}()
		n.ps, n.done = ps, done
	}
	n.waiters[token] = w
	n.lastUsed = time.Now()
	return w.ch, nil
}

// unregister forgets token. The subscription stays open for linger.
func (n *notifier) unregister(token string) {
	n.mu.Lock()
	delete(n.waiters, token)
	n.lastUsed = time.Now()
	n.mu.Unlock()
}

// receive reads grant messages until ps is closed or has been idle (no
// waiter) for linger. It reads the subscription itself (no relay
// goroutine) to keep the handoff short; when no message comes for a while
// it pings, so that a dead connection is noticed and re-subscribed.
// Messages lost meanwhile are covered by the waiters' re-checks.
func (n *notifier) receive(ps *redis.PubSub) {
	ctx := context.Background()
	for {
		wait, stop := n.retire(ps)
		if stop {
			return
		}
		msg, err := ps.ReceiveTimeout(ctx, wait)
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
		// Redis unreachable: retry after 50 to 100 ms, drawn so the
		// replicas do not resubscribe in lockstep when it is back.
		time.Sleep(backoff.Jitter(100 * time.Millisecond))
	}
}

// idlePing is how long the grant subscription may stay silent before it
// is pinged.
const idlePing = 30 * time.Second

// retire closes ps when no waiter has been registered for linger and
// reports whether the reader should end; otherwise it returns how long the
// reader may wait for a message before it looks again: until the linger
// ends when nobody waits (so the subscription closes on time), at most
// idlePing.
func (n *notifier) retire(ps *redis.PubSub) (wait time.Duration, stop bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ps != ps {
		return 0, true
	}
	if len(n.waiters) > 0 {
		return min(idlePing, n.linger), false
	}
	if left := n.linger - time.Since(n.lastUsed); left > 0 {
		return min(idlePing, left), false
	}
	n.ps, n.done = nil, nil
	_ = ps.Close()
	return 0, true
}

// closed reports whether ps is no longer the current subscription.
func (n *notifier) closed(ps *redis.PubSub) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ps != ps
}

// wake delivers a published grant message, or notes a standby.
func (n *notifier) wake(payload string) {
	if rest, ok := strings.CutPrefix(payload, "standby|"); ok {
		if h, s, ok := strings.Cut(rest, "|"); ok {
			n.lineUp(h, s)
		}
		return
	}
	token, ms, ok := strings.Cut(payload, "|")
	if !ok {
		return
	}
	at, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return
	}
	n.deliver(token, at)
}

// deliver wakes token's waiter, if it is registered here, with the grant
// time at (ms). A second delivery of the same grant (the local hand-off and
// then the published message) is dropped.
func (n *notifier) deliver(token string, at int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w := n.waiters[token]
	if w == nil || w.state != waiting {
		return
	}
	w.state = granted
	n.held[token] = ""
	w.ch <- grant{ms: at} // buffered, and the only send to it
}

// claim notes that the answer to token's own call granted it (it was not
// woken), so that no release of this process starts it from now on, and
// returns the transfer of a release that started it first: that release
// names it as the standby it started, so its slot must wait for that
// release's answer.
func (n *notifier) claim(token string) *transfer {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leave(token, granted)
}

// leave moves the waiter of token from waiting to state, unless a grant
// or a release reached it first, and returns the transfer a release handed
// it, if any. n.mu is held.
func (n *notifier) leave(token string, state waiterState) *transfer {
	w := n.waiters[token]
	if w == nil {
		return nil
	}
	if w.state == waiting {
		w.state = state
	}
	return w.x
}

// hold notes that this process holds the slot of token.
func (n *notifier) hold(token string) {
	n.mu.Lock()
	if _, ok := n.held[token]; !ok {
		n.held[token] = ""
	}
	n.mu.Unlock()
}

// forget drops what is kept for the slot of token (released or lost).
func (n *notifier) forget(token string) {
	n.mu.Lock()
	delete(n.held, token)
	n.mu.Unlock()
}

// lineUp notes that the pool lined up the waiter s as the standby of the
// slot h, when h is held here.
func (n *notifier) lineUp(h, s string) {
	n.mu.Lock()
	if _, ok := n.held[h]; ok {
		n.held[h] = s
	}
	n.mu.Unlock()
}

// handOff starts the standby of the slot h when it waits in this process:
// it hands the standby x (its Slot then waits for x before its own round
// trips) and returns the standby, or nil when h has none waiting here.
func (n *notifier) handOff(h string, x *transfer) *waiter {
	n.mu.Lock()
	defer n.mu.Unlock()
	w := n.waiters[n.held[h]]
	if w == nil || w.state != waiting {
		return nil
	}
	w.state, w.x = handed, x
	n.held[w.token] = ""
	w.ch <- grant{x: x}
	return w
}

// withdraw marks the waiter of token as given up and returns the transfer
// it was handed, if a release started it first (the caller then frees the
// slot once the transfer is known).
func (n *notifier) withdraw(token string) *transfer {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.held, token)
	return n.leave(token, abandoned)
}
