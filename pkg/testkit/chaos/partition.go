// Package chaos holds the fault suite (see chaos_test.go) and its fault
// injectors that need the host: network namespaces with iptables
// partitions (Net, Host, Partition) and a packet delay on an NFQUEUE
// queue (PacketDelay). The TCP-level injectors the services' own tests
// use too live in package netfault.
package chaos

import (
	"errors"
	"sync"
)

// Partition is a set of iptables rules that drop the packets of a
// network split (see Host.Cut), each tagged with a comment of the
// partition's own; Heal removes exactly them.
type Partition struct {
	tag   string
	mu    sync.Mutex
	rules []nsRule
}

// nsRule is one iptables rule (chain first) in the network namespace ns.
type nsRule struct {
	ns   string
	rule []string
}

// Heal removes the partition's rules; it may be called more than once.
func (p *Partition) Heal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, r := range p.rules {
		errs = append(errs, iptablesIn(r.ns, append([]string{"-D"}, r.rule...)...))
	}
	p.rules = nil
	return errors.Join(errs...)
}
