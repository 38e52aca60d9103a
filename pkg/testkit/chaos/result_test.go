package chaos_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/chaos/faultreport"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// result is one scenario's accounting.
type result struct {
	name     string
	faultFor time.Duration

	accepted, terminal int // 2xx submissions and payments; of them terminal
	lost               int // accepted and no record of it, or paid and not PAID
	stuck              int // PROCESSING tasks and UNPAID payments left after settling
	orphaned           int // shipments created at the fulfilment system that no task reports
	overN              int // fulfilment jobs refused for capacity, plus peak concurrency above N
	dupShipments       int // shipments reported by more than one task
	dupPayments        int // paid orders closed (or closed orders marked paid)
	leftover           int // tasks whose client was never told their id, even retrying with the request id
	deliveryLimit      int // accepted tasks that ended FAILED 10009 (delivery limit, or job lost)
	early              int // reconciliation calls before their time in the schedule
	errors, noAnswer   int // HTTP error answers; refused or unanswered requests
	slowestError       time.Duration
	firstOK            time.Duration // fault end → first accepted submission (-1: none)
	allTerminal        time.Duration // fault end → every accepted one terminal (-1: never)
	before, after      gauges
	procs              int
	notes              []string
}

// terminalTradeStates are the provider's trade states (not error codes).
var tradeStates = map[string]bool{
	"SUCCESS": true, "REFUND": true, "NOTPAY": true, "CLOSED": true, "REVOKED": true, "USERPAYING": true, "PAYERROR": true,
}

// settle waits (up to settleDeadline) until every accepted submission and
// payment is terminal, then does the accounting.
func (res *result) settle(r *run) {
	l := r.l
	l.mu.Lock()
	subs, pays := l.subs, l.pays
	l.mu.Unlock()
	res.firstOK, res.allTerminal = -1, -1
	for _, s := range subs {
		res.count(s.kind, s.done.Sub(s.sent))
		if s.kind == kindOK && !s.sent.Before(r.faultEnd) && (res.firstOK < 0 || s.done.Sub(r.faultEnd) < res.firstOK) {
			res.firstOK = s.done.Sub(r.faultEnd)
		}
	}
	for _, p := range pays {
		res.count(p.kind, p.done.Sub(p.sent))
	}

	views := map[string]paymentView{}
	var tasks map[string]task
	deadline := time.Now().Add(settleDeadline)
	for {
		var err error
		if tasks, err = l.tasks(); err != nil {
			r.t.Logf("list tasks: %v", err)
		}
		done := err == nil
		for _, s := range subs {
			t, ok := tasks[s.requestID]
			if ((s.kind == kindOK || s.retryKind == kindOK) && !ok) || (ok && !t.terminal()) {
				done = false
			}
		}
		for _, p := range pays {
			if p.kind != kindOK || views[p.code].terminal() {
				continue
			}
			v, err := l.payment(p)
			if err != nil {
				r.t.Logf("get payment %s: %v", p.code, err)
			}
			views[p.code] = v
			if !v.terminal() {
				done = false
			}
		}
		if done {
			res.allTerminal = time.Since(r.faultEnd)
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Tasks: every accepted one terminal; a created one of an unanswered
	// or error-answered request too; none whose client was never told its
	// id, even after retrying with the request id.
	byReq := map[string]*submission{}
	retried, told := 0, 0
	for _, s := range subs {
		byReq[s.requestID] = s
		if s.retries > 0 {
			retried++
			if s.retryKind == kindOK {
				told++
			}
		}
	}
	if retried > 0 {
		r.note("%d submissions answered with an error sent again with their request id: %d answered with their task", retried, told)
	}
	shipments := map[string]int{}
	for req, t := range tasks {
		s, ours := byReq[req]
		switch {
		case !ours || leftBehind(s, t):
			res.leftover++
			r.note("task %s of request %q (%v, retried %d times: %s) was never told to its client", t.TaskID, req, kindOf(s), retriesOf(s), retryKindOf(s))
		case (s.kind == kindUnknown || s.kind == kindError) && !t.terminal():
			res.stuck++
			r.note("task %s of %s request %q is %s after settling", t.TaskID, s.kind, req, t.Status)
		}
		for _, sh := range t.Result.Shipments {
			shipments[sh.ShipmentID]++
		}
	}
	for _, s := range subs {
		if s.kind == kindError && s.retryKind == kindOK {
			if _, ok := tasks[s.requestID]; !ok {
				res.lost++
				r.note("task %s told to the retry of request %q does not exist", s.retryTaskID, s.requestID)
			}
		}
		if s.kind != kindOK {
			continue
		}
		res.accepted++
		switch t, ok := tasks[s.requestID]; {
		case !ok:
			res.lost++
			r.note("task of accepted request %q does not exist", s.requestID)
		case t.terminal():
			res.terminal++
			if t.Status == "TASK_STATUS_FAILED" && t.ErrorCode == 10009 {
				res.deliveryLimit++
			}
		default:
			res.stuck++
			r.note("task %s of accepted request %q is %s after settling", t.TaskID, s.requestID, t.Status)
		}
	}
	var stats struct {
		Created              int `json:"created"`
		MaxConcurrent        int `json:"maxConcurrent"`
		RejectedOverCapacity int `json:"rejectedOverCapacity"`
	}
	if err := l.get(l.s.URL(stacktest.Fulfilment), "/stats", "", &stats); err != nil {
		r.t.Errorf("fulfilment stats: %v", err)
	}
	res.orphaned = max(0, stats.Created-len(shipments))
	res.overN = stats.RejectedOverCapacity + max(0, stats.MaxConcurrent-slotsN(r))
	if res.overN > 0 {
		r.note("fulfilment: %d refused for capacity, peak %d running, N = %d", stats.RejectedOverCapacity, stats.MaxConcurrent, slotsN(r))
	}
	for id, n := range shipments {
		if n > 1 {
			res.dupShipments += n - 1
			r.note("shipment %s appears in %d tasks", id, n)
		}
	}

	// Payments: terminal; a paid one PAID; none both paid and closed; no
	// query or close before its time.
	var provider struct {
		ClosedAfterPaid int `json:"closedAfterPaid"`
	}
	if err := l.get(l.s.URL(stacktest.PaySim), "/stats", "", &provider); err != nil {
		r.t.Errorf("payment provider stats: %v", err)
	}
	res.dupPayments = provider.ClosedAfterPaid
	for _, p := range pays {
		if p.kind != kindOK {
			continue
		}
		res.accepted++
		v := views[p.code]
		if v.terminal() {
			res.terminal++
		} else {
			res.stuck++
			r.note("payment %s (%s) is %q after %s", p.code, p.plan, v.Status, settleDeadline)
		}
		state, err := l.providerState(p.member, p.code)
		if err != nil {
			r.t.Errorf("provider state of %s: %v", p.code, err)
		}
		switch {
		case v.Status == "PAYMENT_STATUS_CLOSED" && state == "SUCCESS",
			v.Status == "PAYMENT_STATUS_PAID" && state == "CLOSED":
			res.dupPayments++
			r.note("payment %s is %s here and %s at the provider", p.code, v.Status, state)
		case p.paid && v.terminal() && v.Status != "PAYMENT_STATUS_PAID":
			res.lost++
			r.note("payment %s was paid but is %s", p.code, v.Status)
		}
		res.early += earlyCalls(r, p, v)
	}
}

// earlyCalls counts the payment's reconciliation calls made before their
// time: the k-th answered query no sooner than creation + schedule[k],
// the close no sooner than creation + the last offset. Creation is the
// reconciler's recorded time and, as a second witness, the moment the
// suite sent the request (times are stored to the millisecond).
func earlyCalls(r *run, p *payment, v paymentView) int {
	const slack = 2 * time.Millisecond
	early, k := 0, 0
	for _, a := range v.Attempts {
		var offset time.Duration
		switch {
		case a.Action == "QUERY" && tradeStates[a.TradeState] && k < len(schedule):
			offset = schedule[k]
			k++
		case a.Action == "CLOSE":
			offset = schedule[len(schedule)-1]
		default:
			continue
		}
		for _, created := range []time.Time{v.CreateTime, p.sent} {
			if a.Time.Add(slack).Before(created.Add(offset)) {
				early++
				r.note("payment %s: %s #%d at %s, due %s after creation %s", p.code, a.Action, k,
					a.Time.Format("15:04:05.000"), offset, created.Format("15:04:05.000"))
				break
			}
		}
		if a.Action == "CLOSE" {
			break
		}
	}
	return early
}

func kindOf(s *submission) string {
	if s == nil {
		return "not ours"
	}
	return s.kind
}

func retriesOf(s *submission) int {
	if s == nil {
		return 0
	}
	return s.retries
}

func retryKindOf(s *submission) string {
	if s == nil || s.retryKind == "" {
		return "-"
	}
	return s.retryKind
}

func (res *result) count(kind string, d time.Duration) {
	switch kind {
	case kindError:
		res.errors++
		res.slowestError = max(res.slowestError, d)
	case kindRefused, kindUnknown:
		res.noAnswer++
	}
}

// assert fails the scenario when a property does not hold.
func (res *result) assert(t *testing.T) {
	t.Helper()
	for _, n := range res.notes {
		t.Log(n)
	}
	checks := []struct {
		ok   bool
		what string
	}{
		{res.accepted > 0, "no submission was accepted"},
		{res.lost == 0, fmt.Sprintf("lost = %d, want 0", res.lost)},
		{res.stuck == 0, fmt.Sprintf("stuck = %d, want 0", res.stuck)},
		{res.orphaned == 0, fmt.Sprintf("orphaned shipments = %d, want 0", res.orphaned)},
		{res.overN == 0, fmt.Sprintf("over N = %d, want 0", res.overN)},
		{res.dupShipments == 0, fmt.Sprintf("duplicated shipments = %d, want 0", res.dupShipments)},
		{res.dupPayments == 0, fmt.Sprintf("paid and closed payments = %d, want 0", res.dupPayments)},
		{res.leftover == 0, fmt.Sprintf("tasks left behind (client never told their id) = %d, want 0", res.leftover)},
		{res.early == 0, fmt.Sprintf("early reconciliation calls = %d, want 0", res.early)},
		{res.slowestError < clientTimeout/3, fmt.Sprintf("slowest error answer %s, want under %s", res.slowestError, clientTimeout/3)},
		{res.allTerminal >= 0, fmt.Sprintf("not all terminal %s after the load stopped", settleDeadline)},
		{res.after.goroutines <= res.before.goroutines+30,
			fmt.Sprintf("gateway goroutines %d after, %d before: leak?", res.after.goroutines, res.before.goroutines)},
		// Pools grow with the recovery's burst, up to their cap; beyond
		// it, or a subscription more, is a leak.
		{res.after.redisClients <= res.procs*poolSize+res.after.subscribers,
			fmt.Sprintf("redis connections %d after (%d before), more than %d pools of %d: leak", res.after.redisClients, res.before.redisClients, res.procs, poolSize)},
		{res.after.subscribers <= res.before.subscribers,
			fmt.Sprintf("redis subscriber connections %d after, %d before: leak (before: %q; after: %q)", res.after.subscribers, res.before.subscribers, res.before.subs, res.after.subs)},
	}
	for _, c := range checks {
		if !c.ok {
			t.Error(c.what)
		}
	}
}

func formatTable(rows []result) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "scenario\tfault\taccepted\tterminal\tlost\tstuck\torphaned\tover N\tduplicated\tpaid+closed\tleft behind\tearly\terrors\tno answer\tslowest error\tfirst ok\tall terminal\tgoroutines\tredis conns (subscribed)\t")
	d := func(x time.Duration) string {
		if x < 0 {
			return "never"
		}
		return x.Round(10 * time.Millisecond).String()
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%d→%d\t%d→%d (%d→%d)\t\n",
			r.name, d(r.faultFor), r.accepted, r.terminal, r.lost, r.stuck, r.orphaned, r.overN, r.dupShipments, r.dupPayments, r.leftover, r.early,
			r.errors, r.noAnswer, d(r.slowestError), d(r.firstOK), d(r.allTerminal),
			r.before.goroutines, r.after.goroutines, r.before.redisClients, r.after.redisClients,
			r.before.subscribers, r.after.subscribers)
	}
	_ = w.Flush()
	for _, r := range rows {
		for _, n := range r.notes {
			if !strings.HasPrefix(n, "payment ") && !strings.HasPrefix(n, "task ") && !strings.HasPrefix(n, "shipment ") {
				fmt.Fprintf(&b, "%s: %s\n", r.name, n)
			}
		}
	}
	return b.String()
}

// slotsN is N, the split-workers' fulfilment slot count in the run.
func slotsN(r *run) int {
	if v := r.s.Env(stacktest.SplitWorker, "ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS"); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return 4
}

// row is res as docs/reliability.md's generated table shows it.
func (res *result) row(failed bool) faultreport.Row {
	d := func(x time.Duration) string {
		if x < 0 {
			return "never"
		}
		return x.Round(10 * time.Millisecond).String()
	}
	suite := "short"
	switch {
	case partitionOnly:
		suite = "partition"
	case isFull:
		suite = "full"
	}
	return faultreport.Row{
		Scenario: res.name, Suite: suite, Time: time.Now().UTC().Truncate(time.Second), Passed: !failed,
		FaultFor: d(res.faultFor), Accepted: res.accepted, Terminal: res.terminal, Lost: res.lost, Stuck: res.stuck,
		Orphaned: res.orphaned, OverN: res.overN, Duplicated: res.dupShipments, PaidAndClosed: res.dupPayments,
		LeftBehind: res.leftover, Early: res.early, Errors: res.errors, NoAnswer: res.noAnswer,
		SlowestError: d(res.slowestError), FirstOK: d(res.firstOK), AllTerminal: d(res.allTerminal),
	}
}

// record merges rows into testdata/latest.json (ORDERFLOW_CHAOS_RECORD=1);
// `make docs` writes them into docs/reliability.md.
func record(t *testing.T, rows []faultreport.Row) {
	t.Helper()
	if out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		for i := range rows {
			rows[i].Commit = strings.TrimSpace(string(out))
		}
	}
	path := filepath.Join("testdata", "latest.json")
	res, err := faultreport.Load(path)
	if err != nil {
		t.Fatalf("record the rows: %v", err)
	}
	res.Merge(rows)
	if err := res.Save(path); err != nil {
		t.Fatalf("record the rows: %v", err)
	}
	t.Logf("recorded %d rows into %s; run make docs", len(rows), path)
}
