package taskstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/clock"
)

// DefaultResync is how often a watch re-reads its task when Hub options
// leave it 0.
const DefaultResync = 15 * time.Second

// watchBuffer is how many change notifications one watch holds before it
// falls back to re-reading the task.
const watchBuffer = 16

// ErrHubStopped means the Hub's Run has ended: no watch can be served.
var ErrHubStopped = errors.New("task watches stopped")

// Hub serves every watch of a process over one Redis pub/sub connection:
// a task's channel is subscribed once, however many watches follow it,
// and unsubscribed when the last one ends. Each change is handed to every
// watch of that task. A change can still be missed (the connection drops
// and is re-established, or a watch falls behind), and a task can end
// without a change being published (its record expires), so every watch
// re-reads its task whenever the subscription is re-established, whenever
// it fell behind, and on a timer.
type Hub struct {
	store  *Store
	resync time.Duration
	ps     *redis.PubSub

	mu      sync.Mutex
	topics  map[string]*topic
	pending map[string]int // SUBSCRIBEs sent and not yet confirmed, by channel
	stopped chan struct{}
}

// topic is one subscribed channel and the watches that follow it.
type topic struct {
	watches map[*watch]struct{}
	// ready is closed once Redis has confirmed the subscription.
	ready chan struct{}
}

// watch is one caller of Hub.Watch.
type watch struct {
	changes chan []byte
	// stale asks the watch to re-read its task (a change may be lost).
	stale chan struct{}
}

func (w *watch) markStale() {
	select {
	case w.stale <- struct{}{}:
	default:
	}
}

// HubOptions configure a Hub.
type HubOptions struct {
	// Resync is how often a watch re-reads its task even when no change
	// arrives (DefaultResync when 0).
	Resync time.Duration
}

// NewHub returns a Hub on the store's Redis; Run must be running for its
// watches to be served.
func (s *Store) NewHub(opts HubOptions) *Hub {
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	return &Hub{
		store: s, resync: opts.Resync,
		// No channel yet: the connection is made by the first Subscribe.
		ps:      s.rdb.Subscribe(context.Background()),
		topics:  map[string]*topic{},
		pending: map[string]int{},
		stopped: make(chan struct{}),
	}
}

// Run receives the subscription's messages and hands them to the watches
// until ctx ends; then it closes the subscription and every open watch
// ends with ErrHubStopped.
func (h *Hub) Run(ctx context.Context) {
	// A full buffer is drained at once: delivering never blocks (a watch
	// that falls behind re-reads its task instead).
	msgs := h.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	defer func() {
		close(h.stopped)
		_ = h.ps.Close()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					h.confirmed(m.Channel)
				}
			case *redis.Message:
				h.deliver(m.Channel, []byte(m.Payload))
			}
		}
	}
}

// confirmed handles Redis's confirmation of a subscription to channel:
// the answer to a SUBSCRIBE sent by join, or, when none is outstanding,
// the resubscription after the connection was re-established, during
// which changes may have been published unseen.
func (h *Hub) confirmed(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.pending[channel]; n > 0 {
		if n == 1 {
			delete(h.pending, channel)
		} else {
			h.pending[channel] = n - 1
		}
		if t := h.topics[channel]; t != nil && n == 1 {
			closeOnce(t.ready)
		}
		return
	}
	if t := h.topics[channel]; t != nil {
		closeOnce(t.ready)
		for w := range t.watches {
			w.markStale()
		}
	}
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// deliver hands a change to every watch of channel; a watch whose buffer
// is full re-reads its task instead.
func (h *Hub) deliver(channel string, payload []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[channel]
	if t == nil {
		return
	}
	for w := range t.watches {
		select {
		case w.changes <- payload:
		default:
			w.markStale()
		}
	}
}

// join adds w to channel's watches, subscribing the channel if it is the
// first, and returns a channel closed once the subscription is confirmed.
func (h *Hub) join(ctx context.Context, channel string, w *watch) (<-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.stopped:
		return nil, ErrHubStopped
	default:
	}
	if t := h.topics[channel]; t != nil {
		t.watches[w] = struct{}{}
		return t.ready, nil
	}
	t := &topic{watches: map[*watch]struct{}{w: {}}, ready: make(chan struct{})}
	h.topics[channel] = t
	h.pending[channel]++
	// On a write error the channel is still recorded by the client and
	// subscribed when the connection is re-established; the watch's timer
	// re-reads meanwhile.
	_ = h.ps.Subscribe(ctx, channel)
	return t.ready, nil
}

// leave removes w from channel's watches and unsubscribes the channel
// after its last watch.
func (h *Hub) leave(channel string, w *watch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[channel]
	if t == nil {
		return
	}
	delete(t.watches, w)
	if len(t.watches) > 0 {
		return
	}
	delete(h.topics, channel)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A failed UNSUBSCRIBE leaves a channel nobody listens to; its
	// messages are dropped by deliver.
	_ = h.ps.Unsubscribe(ctx, channel)
}

// Watch calls fn with member's task as it is now and then with every
// change, until the task is terminal (nil), it expires or disappears
// (ErrExpired, ErrNotFound), fn fails, ctx ends or the Hub stops. A change
// that was not delivered is found by the next re-read, so a watch never
// stays on a state the task has left; fn is not called twice with the
// same state.
func (h *Hub) Watch(ctx context.Context, member, id string, fn func(*taskv1.Task) error) error {
	if !ValidID(id) {
		return ErrNotFound
	}
	channel := h.store.channel(member, id)
	w := &watch{changes: make(chan []byte, watchBuffer), stale: make(chan struct{}, 1)}
	ready, err := h.join(ctx, channel, w)
	if err != nil {
		return err
	}
	defer h.leave(channel, w)

	timer := h.store.clock.NewTimer(h.resync)
	defer timer.Stop()
	if err := h.subscribed(ctx, ready, timer); err != nil {
		return err
	}
	show := (&shown{fn: fn}).show
	t, err := h.store.Get(ctx, member, id)
	if err != nil {
		return err
	}
	if done, err := show(t); done || err != nil {
		return err
	}
	// reread ends the watch when the task has expired or is gone; any
	// other failure (Redis unreachable) is retried by the next re-read.
	reread := func() (bool, error) {
		t, err := h.store.Get(ctx, member, id)
		switch {
		case errors.Is(err, ErrExpired), errors.Is(err, ErrNotFound), ctx.Err() != nil:
			return true, err
		case err != nil:
			return false, nil
		}
		return show(t)
	}
	for {
		var done bool
		var err error
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-h.stopped:
			return ErrHubStopped
		case payload := <-w.changes:
			t, uerr := unmarshal(id, payload)
			if uerr != nil {
				return uerr
			}
			done, err = show(t)
		case <-w.stale:
			done, err = reread()
		case <-timer.C():
			timer.Reset(h.resync)
			done, err = reread()
		}
		if done || err != nil {
			return err
		}
	}
}

// subscribed waits until the watch's subscription is confirmed (ready),
// so that reading the state then misses no change between the read and
// the subscription; should the confirmation not come (Redis unreachable),
// the timer ends the wait anyway.
func (h *Hub) subscribed(ctx context.Context, ready <-chan struct{}, timer clock.Timer) error {
	select {
	case <-ready:
	case <-timer.C():
		timer.Reset(h.resync)
	case <-h.stopped:
		return ErrHubStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// shown is the task state a watch last passed to its fn.
type shown struct {
	fn   func(*taskv1.Task) error
	last *taskv1.Task
}

// show calls fn with t unless it is what fn last saw or older, and
// reports whether the watch is over.
func (s *shown) show(t *taskv1.Task) (bool, error) {
	if s.last != nil && (proto.Equal(t, s.last) || t.GetUpdateTime().AsTime().Before(s.last.GetUpdateTime().AsTime())) {
		return s.last.GetStatus() != taskv1.TaskStatus_TASK_STATUS_PROCESSING, nil
	}
	s.last = t
	if err := s.fn(t); err != nil {
		return true, err
	}
	return t.GetStatus() != taskv1.TaskStatus_TASK_STATUS_PROCESSING, nil
}

// Subscriptions reports how many task channels the Hub is subscribed to.
func (h *Hub) Subscriptions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.topics)
}
