package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/testkit/otlptest"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// traced sends a JSON request with a sampled W3C traceparent of a new
// trace and returns the status and the trace id.
func traced(t *testing.T, method, url, token string, body any) (int, string) {
	t.Helper()
	var tid [16]byte
	var sid [8]byte
	_, _ = rand.Read(tid[:])
	_, _ = rand.Read(sid[:])
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(method, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("traceparent", fmt.Sprintf("00-%x-%x-01", tid, sid))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	resp.Body.Close()
	return resp.StatusCode, hex.EncodeToString(tid[:])
}

// TestTracesSpanTheServices points every process at an in-process OTLP
// receiver through the standard OTEL_* variables and follows one sampled
// traceparent through an order split (gateway REST → AMQP publish →
// split-worker consume → fulfilment calls → result) and one through each
// of two payments (gateway REST → gRPC → reconciler → provider; every
// delay-queue check → provider, up to the close; the provider's callback
// → gateway → reconciler), checking span names, kinds and parent links.
func TestTracesSpanTheServices(t *testing.T) {
	recv := otlptest.Start(t)
	env := recv.Env()
	env["OTEL_RESOURCE_ATTRIBUTES"] = "deployment.environment=trace-test"
	s := stacktest.Start(t, stacktest.Options{Env: env})
	gw := s.URL(stacktest.Gateway)
	fulfilment, paysim := s.URL(stacktest.Fulfilment), s.URL(stacktest.PaySim)
	tok := s.DevToken(t, "tracer")
	suffix := fmt.Sprint(time.Now().UnixNano() % 1e9)

	t.Run("order split", func(t *testing.T) {
		st, id := traced(t, "POST", gw+"/v1/order-splits", tok, map[string]any{
			"orderCode": "TRACE-" + suffix,
			"items": []map[string]any{
				{"itemCode": "1", "sku": "SKU-TEA-500G", "quantity": 1},
				{"itemCode": "2", "sku": "SKU-RICE-10KG", "quantity": 1},
			},
		})
		if st != 200 {
			t.Fatalf("POST /v1/order-splits = %d", st)
		}
		// Two warehouses: two shipments created at the fulfilment system,
		// each an HTTP POST under the split-worker's consumer span.
		// Each process exports its spans in batches of its own, so the
		// wait covers every process whose spans are checked below.
		tr, ok := recv.Wait(id, 30*time.Second, func(tr otlptest.Tree) bool {
			return len(tr.Find("splitworker", "process "+s.Prefix()+".split")) == 1 && len(calls(tr, "splitworker", "POST", fulfilment)) >= 2 &&
				len(tr.Find("gateway", "POST /v1/order-splits")) == 1 && len(tr.Find("gateway", "publish "+s.Prefix()+".jobs")) == 1
		})
		if !ok {
			t.Fatalf("trace %s incomplete after 30s:\n%s", id, tr)
		}
		rest := one(t, tr, "gateway", "POST /v1/order-splits", "SERVER")
		if rest.ParentID == "" {
			t.Errorf("REST span has no parent, want the caller's traceparent span")
		}
		publish := one(t, tr, "gateway", "publish "+s.Prefix()+".jobs", "PRODUCER")
		under(t, tr, publish, rest)
		if publish.Attrs["messaging.system"] != "rabbitmq" {
			t.Errorf("publish span attributes %v, want messaging.system=rabbitmq", publish.Attrs)
		}
		consume := one(t, tr, "splitworker", "process "+s.Prefix()+".split", "CONSUMER")
		if p, _ := tr.Parent(consume); p.SpanID != publish.SpanID {
			t.Errorf("consumer span's parent = %s %q, want the publish span (context in the message headers)", p.Service, p.Name)
		}
		for _, c := range calls(tr, "splitworker", "POST", fulfilment) {
			under(t, tr, c, consume)
			named(t, c, "POST /shipments")
		}
		for _, c := range calls(tr, "splitworker", "GET", fulfilment+"/shipments/") {
			named(t, c, "GET /shipments/{jobId}")
		}
		// Every process's resource: its service.version and the
		// attributes of OTEL_RESOURCE_ATTRIBUTES.
		for _, sp := range tr {
			if sp.Resource["service.version"] == "" || sp.Resource["deployment.environment"] != "trace-test" {
				t.Errorf("span %s %q resource = %v, want service.version and deployment.environment=trace-test", sp.Service, sp.Name, sp.Resource)
				break
			}
		}
		// The task's scripts go in the task store's batched pipelines.
		if len(tr.Find("splitworker", "redis.pipeline evalsha")) == 0 {
			t.Errorf("no Redis span of the split-worker in the trace:\n%s", tr)
		}
		if t.Failed() {
			t.Logf("trace %s:\n%s", id, tr)
		}
	})

	t.Run("payment", func(t *testing.T) {
		paid, never := "TRACEPAY-"+suffix, "TRACENEVER-"+suffix
		ids := map[string]string{}
		for _, code := range []string{paid, never} {
			st, id := traced(t, "POST", gw+"/v1/payments", tok, map[string]any{"orderCode": code, "amountFen": 100, "description": "tea"})
			if st != 200 {
				t.Fatalf("POST /v1/payments %s = %d", code, st)
			}
			ids[code] = id
		}
		// The paid order: created, checked once (1 s), then paid with a
		// callback.
		tr, ok := recv.Wait(ids[paid], 30*time.Second, func(tr otlptest.Tree) bool {
			return len(tr.Find("reconciler", "fire "+s.Prefix()+":reconcile")) >= 1 && len(tr.Find("gateway", "POST /v1/payments")) == 1
		})
		if !ok {
			t.Fatalf("no check of %s in its trace after 30s:\n%s", paid, tr)
		}
		if st, body := call(t, "POST", paysim+"/admin/orders/"+wechatpay.OutTradeNo("tracer", paid)+"/pay?notify=true", "", nil); st != 200 {
			t.Fatalf("simulator pay = %d %v", st, body)
		}
		const apply = "orderflow.reconciler.v1.ReconcilerService/ApplyNotification"
		// The gateway's callback span ends after the reconciler's, and
		// the two processes export on their own schedules: wait for both.
		tr, ok = recv.Wait(ids[paid], 30*time.Second, func(tr otlptest.Tree) bool {
			return len(tr.Find("reconciler", apply)) == 1 && len(tr.Find("gateway", "POST /v1/payments/notify")) == 1
		})
		if !ok {
			t.Fatalf("no notification in the trace of %s after 30s:\n%s", paid, tr)
		}
		create := createSpans(t, tr, paysim)
		notify := one(t, tr, "gateway", "POST /v1/payments/notify", "SERVER")
		if p, _ := tr.Parent(notify); p.SpanID != create.SpanID {
			t.Errorf("callback span's parent = %s %q, want the reconciler's order placement call", p.Service, p.Name)
		}
		under(t, tr, one(t, tr, "reconciler", apply, "SERVER"), notify)
		if t.Failed() {
			t.Logf("trace %s:\n%s", ids[paid], tr)
		}

		// The never-paid order: checks at 1 s, 2 s and 3 s, each a firing
		// continuing the one before, each querying the provider; the last
		// closes the order.
		neverNo := wechatpay.OutTradeNo("tracer", never) // the provider's order number
		// The last firing's span ends, and is exported, after its close
		// call's: wait for both.
		fire := "fire " + s.Prefix() + ":reconcile"
		tr, ok = recv.Wait(ids[never], 30*time.Second, func(tr otlptest.Tree) bool {
			return len(calls(tr, "reconciler", "POST", paysim+"/v3/pay/transactions/out-trade-no/"+neverNo+"/close")) == 1 &&
				len(tr.Find("gateway", "POST /v1/payments")) == 1 && len(tr.Find("reconciler", fire)) == 3
		})
		if !ok {
			t.Fatalf("no close and three firings in the trace of %s after 30s:\n%s", never, tr)
		}
		create = createSpans(t, tr, paysim)
		server, _ := tr.Parent(create)
		fires := tr.Find("reconciler", fire)
		if len(fires) != 3 {
			t.Fatalf("%d firings in the trace, want 3 (schedule 1s,2s,3s):\n%s", len(fires), tr)
		}
		for i, f := range fires {
			want := server
			if i > 0 {
				want = fires[i-1]
			}
			if p, _ := tr.Parent(f); p.SpanID != want.SpanID {
				t.Errorf("firing %d's parent = %s %q, want %q", i+1, p.Service, p.Name, want.Name)
			}
			if q := childCalls(tr, f, "GET", paysim+"/v3/pay/transactions/out-trade-no/"+neverNo); len(q) != 1 {
				t.Errorf("firing %d made %d provider queries, want 1", i+1, len(q))
			} else {
				named(t, q[0], "GET /v3/pay/transactions/out-trade-no/{out_trade_no}")
			}
		}
		closeCall := calls(tr, "reconciler", "POST", paysim+"/v3/pay/transactions/out-trade-no/"+neverNo+"/close")[0]
		named(t, closeCall, "POST /v3/pay/transactions/out-trade-no/{out_trade_no}/close")
		if p, _ := tr.Parent(closeCall); p.SpanID != fires[2].SpanID {
			t.Errorf("close call's parent = %s %q, want the last firing", p.Service, p.Name)
		}
		if t.Failed() {
			t.Logf("trace %s:\n%s", ids[never], tr)
		}
	})
}

// one returns the only span of service named name, checking its kind.
func one(t *testing.T, tr otlptest.Tree, service, name, kind string) otlptest.Span {
	t.Helper()
	got := tr.Find(service, name)
	if len(got) != 1 {
		t.Fatalf("%d spans %s %q in the trace, want 1:\n%s", len(got), service, name, tr)
	}
	if got[0].Kind != kind {
		t.Errorf("span %s %q kind = %s, want %s", service, name, got[0].Kind, kind)
	}
	return got[0]
}

// under checks that ancestor is an ancestor of s.
func under(t *testing.T, tr otlptest.Tree, s, ancestor otlptest.Span) {
	t.Helper()
	if _, ok := tr.Ancestor(s, func(p otlptest.Span) bool { return p.SpanID == ancestor.SpanID }); !ok {
		t.Errorf("span %s %q is not under %s %q", s.Service, s.Name, ancestor.Service, ancestor.Name)
	}
}

// named checks an HTTP client span's name: its method and route, never
// the default "HTTP POST" nor an id.
func named(t *testing.T, s otlptest.Span, want string) {
	t.Helper()
	if s.Name != want {
		t.Errorf("HTTP client span for %s %s is named %q, want %q", s.Attrs["http.request.method"], s.Attrs["url.full"], s.Name, want)
	}
}

// calls are the HTTP client spans of service with method whose URL
// starts with prefix.
func calls(tr otlptest.Tree, service, method, prefix string) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range tr {
		if s.Service == service && s.Kind == "CLIENT" && s.Attrs["http.request.method"] == method && strings.HasPrefix(s.Attrs["url.full"], prefix) {
			out = append(out, s)
		}
	}
	return out
}

// childCalls are the HTTP client spans directly under parent with method
// and a URL starting with prefix.
func childCalls(tr otlptest.Tree, parent otlptest.Span, method, prefix string) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range calls(tr, parent.Service, method, prefix) {
		if s.ParentID == parent.SpanID {
			out = append(out, s)
		}
	}
	return out
}

// createSpans checks the payment creation path of a payment's trace —
// gateway REST → gRPC client → reconciler gRPC server → the provider's
// native-order call — and returns the provider call's span.
func createSpans(t *testing.T, tr otlptest.Tree, paysim string) otlptest.Span {
	t.Helper()
	const method = "orderflow.reconciler.v1.ReconcilerService/CreatePayment"
	rest := one(t, tr, "gateway", "POST /v1/payments", "SERVER")
	client := one(t, tr, "gateway", method, "CLIENT")
	server := one(t, tr, "reconciler", method, "SERVER")
	under(t, tr, client, rest)
	if p, _ := tr.Parent(server); p.SpanID != client.SpanID {
		t.Errorf("reconciler's CreatePayment span's parent = %s %q, want the gateway's client span", p.Service, p.Name)
	}
	place := calls(tr, "reconciler", "POST", paysim+"/v3/pay/transactions/native")
	if len(place) != 1 {
		t.Fatalf("%d order placement calls in the trace, want 1:\n%s", len(place), tr)
	}
	if p, _ := tr.Parent(place[0]); p.SpanID != server.SpanID {
		t.Errorf("order placement call's parent = %s %q, want the reconciler's CreatePayment span", p.Service, p.Name)
	}
	named(t, place[0], "POST /v3/pay/transactions/native")
	return place[0]
}

// TestServiceNameFromTheEnvironment: OTEL_SERVICE_NAME names the service
// in the resource of every span a process exports (instead of its own
// name), beside service.version.
func TestServiceNameFromTheEnvironment(t *testing.T) {
	recv := otlptest.Start(t)
	s := stacktest.Start(t, stacktest.Options{
		Services:   []string{stacktest.Gateway},
		Env:        recv.Env(),
		ServiceEnv: map[string]map[string]string{stacktest.Gateway: {"OTEL_SERVICE_NAME": "orderflow-edge-blue"}},
	})
	st, id := traced(t, "GET", s.URL(stacktest.Gateway)+"/v1/tasks", s.DevToken(t, "tracer"), nil)
	if st != 200 {
		t.Fatalf("GET /v1/tasks = %d", st)
	}
	tr, ok := recv.Wait(id, 30*time.Second, func(tr otlptest.Tree) bool {
		return len(tr.Find("orderflow-edge-blue", "GET /v1/tasks")) == 1
	})
	if !ok {
		t.Fatalf("no span of service orderflow-edge-blue in trace %s after 30s:\n%s", id, tr)
	}
	for _, sp := range tr {
		if sp.Service != "orderflow-edge-blue" || sp.Resource["service.version"] == "" {
			t.Errorf("span %q resource = %v, want service.name orderflow-edge-blue and a service.version", sp.Name, sp.Resource)
		}
	}
}
