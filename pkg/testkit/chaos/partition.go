package chaos

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
)

// Partition drops every packet between two groups of loopback addresses
// with iptables rules on the INPUT chain (loopback traffic passes it),
// each tagged with a comment of the partition's own so that Heal removes
// exactly them. TCP connections across the cut hang as on a real network
// split: no reset, no refusal. Addresses outside the two groups (the
// clients on 127.0.0.1, say) are untouched.
type Partition struct {
	tag   string
	mu    sync.Mutex
	rules [][]string
}

// Split cuts every address of a off from every address of b. tag must be
// unique to the caller (it names the rules).
func Split(tag string, a, b []string) (*Partition, error) {
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("iptables not installed (run `make deps`): %w", err)
	}
	p := &Partition{tag: "orderflow-" + tag}
	for _, x := range a {
		for _, y := range b {
			for _, pair := range [][2]string{{x, y}, {y, x}} {
				rule := []string{"INPUT", "-s", pair[0], "-d", pair[1], "-m", "comment", "--comment", p.tag, "-j", "DROP"}
				if err := iptables(append([]string{"-I"}, rule...)...); err != nil {
					return p, errors.Join(err, p.Heal())
				}
				p.mu.Lock()
				p.rules = append(p.rules, rule)
				p.mu.Unlock()
			}
		}
	}
	return p, nil
}

// Heal removes the partition's rules; it may be called more than once.
func (p *Partition) Heal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, rule := range p.rules {
		errs = append(errs, iptables(append([]string{"-D"}, rule...)...))
	}
	p.rules = nil
	return errors.Join(errs...)
}

func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
