package amqpbus

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// settler settles one consumer channel's deliveries with as few frames as
// it safely can. The broker numbers a channel's deliveries 1, 2, 3, …;
// once every delivery up to an acknowledged one is settled, one ack with
// "multiple" set settles them all. An ack that cannot go that way yet (a
// lower delivery is still being handled) is held, at most maxHeld of
// them and for at most maxHold, then sent on its own: a delivery held
// here still counts against the channel's prefetch, and a consumer that
// dies holding it has it delivered again (handlers tolerate that, as
// they tolerate an ack lost on its way). Requeues and rejections go at
// once.
type settler struct {
	ch      *amqp.Channel
	maxHeld int
	maxHold time.Duration
	frames  *atomic.Int64 // frames sent

	mu     sync.Mutex
	floor  uint64              // every delivery up to floor is settled
	held   map[uint64]struct{} // acks above floor not sent yet
	sent   []span              // settled deliveries above floor, in order
	timer  *time.Timer
	closed bool
}

// span is a run of delivery tags, lo to hi inclusive.
type span struct{ lo, hi uint64 }

func newSettler(ch *amqp.Channel, prefetch int, maxHold time.Duration, frames *atomic.Int64) *settler {
	return &settler{ch: ch, maxHeld: prefetch / 4, maxHold: maxHold, frames: frames,
		held: make(map[uint64]struct{})}
}

// settle records the handler's outcome for delivery tag.
func (s *settler) settle(tag uint64, o Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return // the channel is gone: the broker delivers it again
	}
	switch o {
	case Ack:
		s.held[tag] = struct{}{}
	case Requeue:
		_ = s.ch.Nack(tag, false, true)
	default:
		_ = s.ch.Reject(tag, false)
	}
	if o != Ack {
		s.frames.Add(1)
		s.markSent(tag)
	}
	s.advance()
	switch {
	case len(s.held) > s.maxHeld:
		s.flushHeld()
	case len(s.held) > 0 && s.timer == nil:
		var t *time.Timer
		t = time.AfterFunc(s.maxHold, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.timer == t && !s.closed {
				s.flushHeld()
			}
		})
		s.timer = t
	}
}

// advance moves floor over the settled deliveries right above it and
// acks the held ones among them in one frame.
func (s *settler) advance() {
	var top uint64
	for {
		if _, ok := s.held[s.floor+1]; ok {
			delete(s.held, s.floor+1)
			s.floor++
			top = s.floor
			continue
		}
		if len(s.sent) > 0 && s.sent[0].lo == s.floor+1 {
			s.floor = s.sent[0].hi
			s.sent = s.sent[1:]
			continue
		}
		break
	}
	if top != 0 {
		// Everything up to top is settled and top itself is not yet, so
		// the broker knows the tag and acks exactly the held ones.
		_ = s.ch.Ack(top, true)
		s.frames.Add(1)
	}
	if len(s.held) == 0 && s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// flushHeld sends every held ack on its own.
func (s *settler) flushHeld() {
	for tag := range s.held {
		_ = s.ch.Ack(tag, false)
		s.frames.Add(1)
		s.markSent(tag)
	}
	clear(s.held)
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// markSent records tag (above floor) as settled at the broker.
func (s *settler) markSent(tag uint64) {
	i, _ := slices.BinarySearchFunc(s.sent, tag, func(sp span, t uint64) int {
		switch {
		case sp.hi < t:
			return -1
		case sp.lo > t:
			return 1
		}
		return 0
	})
	joinsPrev := i > 0 && s.sent[i-1].hi+1 == tag
	joinsNext := i < len(s.sent) && s.sent[i].lo == tag+1
	switch {
	case joinsPrev && joinsNext:
		s.sent[i-1].hi = s.sent[i].hi
		s.sent = slices.Delete(s.sent, i, i+1)
	case joinsPrev:
		s.sent[i-1].hi = tag
	case joinsNext:
		s.sent[i].lo = tag
	default:
		s.sent = slices.Insert(s.sent, i, span{tag, tag})
	}
}

// close sends the held acks (every handler has returned, so they
// normally go as one) and stops the settler.
func (s *settler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	s.flushHeld()
	s.closed = true
}
