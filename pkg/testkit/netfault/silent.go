package netfault

import (
	"fmt"
	"net"
	"sync"
)

// Silent is a loopback listener that accepts every connection and never
// sends a byte: what a client sees of a server behind a partition that
// drops packets once its connection is made (no reset, no refusal, no
// answer).
type Silent struct {
	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

// NewSilent listens on a free loopback port.
func NewSilent() (*Silent, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s := &Silent{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		}
	}()
	return s, nil
}

// Addr is the listen address (host:port).
func (s *Silent) Addr() string { return s.ln.Addr().String() }

// Close stops listening and closes the connections it holds.
func (s *Silent) Close() {
	_ = s.ln.Close()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
}
