package benchrec

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Result is one timed run of an operation from concurrent clients.
type Result struct {
	Ops     int64
	Errors  int64
	Elapsed time.Duration
	// Latencies of the successful operations, sorted.
	Latencies []time.Duration
	// SliceRates are the operations per second of each of the equal
	// slices the run was cut into: the noise of Rate.
	SliceRates []float64
	// FirstError is the first error an operation returned.
	FirstError error `json:"-"`
}

// Rate is operations per second over the whole run.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Quantile of the latencies (q = 1 is the maximum).
func (r Result) Quantile(q float64) time.Duration { return At(r.Latencies, q) }

// Slices is how many slices Measure cuts a run into for SliceRates.
const Slices = 8

// Measure runs op from conc goroutines for d (worker is 0..conc-1) and
// records every latency and the rate of each of Slices slices of d.
func Measure(conc int, d time.Duration, op func(worker int) error) Result {
	var ops, errs atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, conc)
	ends := make([][]time.Duration, conc) // completion offsets from start
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range conc {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := op(w); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				t1 := time.Now()
				lat[w] = append(lat[w], t1.Sub(t0))
				ends[w] = append(ends[w], t1.Sub(start))
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	r := Result{Ops: ops.Load(), Errors: errs.Load(), Elapsed: time.Since(start)}
	if e, ok := firstErr.Load().(error); ok {
		r.FirstError = e
	}
	r.Latencies = slices.Concat(lat...)
	slices.Sort(r.Latencies)
	counts := make([]int, Slices)
	slice := d / Slices
	for _, es := range ends {
		for _, e := range es {
			counts[min(Slices-1, int(e/slice))]++
		}
	}
	for _, c := range counts {
		r.SliceRates = append(r.SliceRates, float64(c)/slice.Seconds())
	}
	return r
}

// At returns the q-quantile of sorted durations (q = 1 is the
// maximum); 0 when there are none.
func At(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// DistQuantiles are the points Dist keeps of a distribution.
var DistQuantiles = []float64{0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1}

// Dist summarises durations (sorted or not) as quantiles in unit ("ms",
// "µs" or "s").
func Dist(ds []time.Duration, unit string) []Quantile {
	if len(ds) == 0 {
		return nil
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	out := make([]Quantile, 0, len(DistQuantiles))
	for _, q := range DistQuantiles {
		out = append(out, Quantile{Q: q, V: In(At(s, q), unit)})
	}
	return out
}

// In converts d to unit: "s", "ms", "µs" (or "us") or "ns".
func In(d time.Duration, unit string) float64 {
	switch unit {
	case "s":
		return d.Seconds()
	case "ms":
		return float64(d) / float64(time.Millisecond)
	case "µs", "us":
		return float64(d) / float64(time.Microsecond)
	case "ns":
		return float64(d)
	}
	panic(fmt.Sprintf("benchrec: unknown duration unit %q", unit))
}

// Pin is the core assignment of the pinned pass: taskset CPU lists for
// the load generator and for the server under test (and its baseline).
type Pin struct {
	Client string
	Server string
}

// Pinning returns the pinned pass's cores when ORDERFLOW_BENCH_PIN asks
// for one ("0:1": client on CPU 0, server on CPU 1).
func Pinning() (Pin, bool) {
	v := os.Getenv(EnvPin)
	if v == "" {
		return Pin{}, false
	}
	c, s, ok := strings.Cut(v, ":")
	if !ok || c == "" || s == "" {
		return Pin{}, false
	}
	return Pin{Client: c, Server: s}, true
}

// PinProcess sets the CPU affinity of every thread of process pid to cpus
// (a taskset CPU list); threads it starts later inherit it.
func PinProcess(pid int, cpus string) error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset -a -p -c %s %d: %v: %s", cpus, pid, err, out)
	}
	return nil
}

// Affinity returns the CPU list process pid may run on, as taskset prints
// it ("0", "0,1", "0-3").
func Affinity(pid int) (string, error) {
	out, err := exec.Command("taskset", "-p", "-c", strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("taskset -p -c %d: %v: %s", pid, err, out)
	}
	_, list, ok := strings.Cut(strings.TrimSpace(string(out)), ": ")
	if !ok {
		return "", fmt.Errorf("taskset -p -c %d: unexpected output %q", pid, out)
	}
	return list, nil
}
