package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

const (
	// pollEvery is the page's rule: the next status read 2 s after the
	// previous answer, until the task is terminal.
	pollEvery = 2 * time.Second
	// pollGoal is the p99 a status read must stay under.
	pollGoal = 20 * time.Millisecond
	// pollRamp staggers the browsers' first reads over one period; then
	// pollWindow is measured.
	pollRamp   = pollEvery
	pollWindow = 4 * time.Second
	// pollTasks are the tasks (one member each) the browsers poll.
	pollTasks = 64
)

// pollResult is one load level.
type pollResult struct {
	browsers  int
	latencies []time.Duration
	errors    int64
	reads     float64 // per second
	clientCPU float64 // share of one core the load generator used
}

func (r pollResult) p99() time.Duration { return benchrec.At(r.latencies, 0.99) }

func (r pollResult) ok() bool { return r.errors == 0 && len(r.latencies) > 0 && r.p99() < pollGoal }

// BenchmarkPollingCapacity finds how many browsers following the page's
// rule (a status read every 2 s while the task is processing) one gateway
// replica serves with a read p99 under 20 ms, the gateway and its own
// redis-server pinned to one core and the browsers on another. It runs in
// the pinned pass only.
func BenchmarkPollingCapacity(b *testing.B) {
	pin, pinned := benchrec.Pinning()
	if !pinned {
		b.Skip("runs in the pinned pass (ORDERFLOW_BENCH_PIN): the figure is for one gateway on one core")
	}
	rs := testenv.StartRedis(b, false)
	if err := benchrec.PinProcess(rs.Pid(), pin.Server); err != nil {
		b.Fatal(err)
	}
	s := startBenchGateway(b, gatewayArgs{Redis: rs.Addr})
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096}}
	urls, toks := make([]string, pollTasks), make([]string, pollTasks)
	for i := range pollTasks {
		toks[i] = s.token(b, fmt.Sprintf("browser-%d", i))
		urls[i] = "http://" + s.addrs.HTTP + "/v1/tasks/" + createTask(b, hc, s.addrs.HTTP, toks[i], fmt.Sprintf("ORD-P%d", i))
	}
	read := func(i int) error {
		req, _ := http.NewRequest("GET", urls[i%pollTasks], nil)
		req.Header.Set("Authorization", "Bearer "+toks[i%pollTasks])
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}

	fmt.Printf("\nPolling capacity: browsers reading every %v, one gateway + its redis-server on CPU %s, browsers on CPU %s\n", pollEvery, pin.Server, pin.Client)
	var levels []pollResult
	run := func(n int) pollResult {
		r := pollLevel(n, read)
		levels = append(levels, r)
		fmt.Printf("  %6d browsers: %7.0f reads/s  p50 %-9v p99 %-9v errors %d  load generator %.0f %% of a core\n",
			n, r.reads, benchrec.At(r.latencies, 0.5).Round(time.Microsecond), r.p99().Round(time.Microsecond), r.errors, r.clientCPU*100)
		return r
	}
	// Double until the goal breaks, then bisect.
	good, bad := 0, 0
	for n := 250; n <= 64000; n *= 2 {
		if run(n).ok() {
			good = n
			continue
		}
		bad = n
		break
	}
	for bad > 0 && bad-good > max(good/10, 50) {
		mid := (good + bad) / 2
		if run(mid).ok() {
			good = mid
		} else {
			bad = mid
		}
	}
	slices.SortFunc(levels, func(a, b pollResult) int { return a.browsers - b.browsers })
	for _, r := range levels {
		benchrec.Record(b, benchrec.Figure{Group: "polling capacity", Name: "status read p99 at a load of browsers",
			Params: fmt.Sprintf("%d browsers", r.browsers), Value: benchrec.In(r.p99(), "ms"), Unit: "ms", Better: benchrec.Lower, Pinned: true,
			Curve: &benchrec.Point{Series: "status read p99, one gateway on one core", X: float64(r.browsers), XLabel: "concurrent browsers (a read every 2 s)"},
			Dist:  benchrec.Dist(r.latencies, "ms"),
			Note:  fmt.Sprintf("%.0f reads/s, %d errors, load generator %.0f %% of a core", r.reads, r.errors, r.clientCPU*100)})
	}
	note := fmt.Sprintf("p99 < %v; the next level (%d) broke it", pollGoal, bad)
	if bad == 0 {
		note = "the goal held at every level tried (the load generator, not the gateway, is the limit)"
	}
	benchrec.Record(b, benchrec.Figure{Group: "polling capacity", Name: "concurrent browsers one gateway replica serves at a status read p99 < 20 ms",
		Params: "gateway + its Redis on one core", Value: float64(good), Unit: "browsers", Pinned: true, Note: note})
}

// pollLevel runs n browsers for one ramp and one measured window: each
// reads, waits pollEvery after the answer, reads again. It returns the
// reads answered within the window.
func pollLevel(n int, read func(browser int) error) pollResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	from, until := start.Add(pollRamp), start.Add(pollRamp+pollWindow)
	var mu sync.Mutex
	var lat []time.Duration
	var errs atomic.Int64
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	for i := range n {
		wg.Go(func() {
			// Stagger the first reads over one period.
			timer := time.NewTimer(time.Duration(i) * pollEvery / time.Duration(n))
			defer timer.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
				t0 := time.Now()
				if t0.After(until) {
					return
				}
				err := read(i)
				d := time.Since(t0)
				if !t0.Before(from) {
					if err != nil {
						errs.Add(1)
					} else {
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
					}
				}
				timer.Reset(pollEvery)
			}
		})
	}
	time.Sleep(time.Until(until))
	cpu, elapsed := cpuTime()-cpu0, time.Since(start)
	cancel()
	wg.Wait()
	slices.Sort(lat)
	return pollResult{browsers: n, latencies: lat, errors: errs.Load(),
		reads: float64(len(lat)) / pollWindow.Seconds(), clientCPU: cpu.Seconds() / elapsed.Seconds()}
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
