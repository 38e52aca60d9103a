// Package otlptest is an in-process OTLP trace receiver for tests: an HTTP
// server speaking OTLP/HTTP with protobuf bodies (POST /v1/traces, the
// protocol OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf selects) that keeps
// every span it is sent, so a test can point real processes at it through
// the standard OTEL_* variables and assert on the spans they export.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	// Service is the resource's service.name.
	Service string
	// Name is the span's name.
	Name string
	// Kind is SERVER, CLIENT, PRODUCER, CONSUMER or INTERNAL.
	Kind string
	// TraceID, SpanID and ParentID are lower-case hex; ParentID is empty
	// for a root span.
	TraceID, SpanID, ParentID string
	// Attrs are the span's attributes, rendered as strings.
	Attrs map[string]string
	// Resource are the resource's attributes, rendered as strings.
	Resource map[string]string
	// Start is when the span started.
	Start time.Time
}

// Receiver collects the spans exported to it.
type Receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []Span
}

// Start starts a receiver that stops when the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.export)
	r.srv = httptest.NewServer(mux)
	t.Cleanup(r.srv.Close)
	return r
}

// Endpoint is the receiver's base URL, for OTEL_EXPORTER_OTLP_ENDPOINT.
func (r *Receiver) Endpoint() string { return r.srv.URL }

// Env returns the OTEL_* settings that make a process export every span
// it records to this receiver promptly (a 100 ms batch delay).
func (r *Receiver) Env() map[string]string {
	return map[string]string{
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT": r.Endpoint(),
		"OTEL_BSP_SCHEDULE_DELAY":     "100",
	}
}

func (r *Receiver) export(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range msg.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, Span{
					Service: res["service.name"], Name: s.GetName(),
					Kind:    strings.TrimPrefix(s.GetKind().String(), "SPAN_KIND_"),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()),
					Attrs:    attrs(s.GetAttributes()), Resource: res,
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())),
				})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			out[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			out[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			out[kv.GetKey()] = v.String()
		}
	}
	return out
}

// Trace returns the spans received so far of trace id (hex), in start order.
func (r *Receiver) Trace(id string) Tree {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, s := range r.spans {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return Tree(out)
}

// Wait polls Trace(id) until done accepts it or d passes, and returns the
// last tree seen and whether done accepted it.
func (r *Receiver) Wait(id string, d time.Duration, done func(Tree) bool) (Tree, bool) {
	deadline := time.Now().Add(d)
	for {
		tr := r.Trace(id)
		if done(tr) {
			return tr, true
		}
		if time.Now().After(deadline) {
			return tr, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Tree is the spans of one trace.
type Tree []Span

// Find returns the spans of service named name.
func (tr Tree) Find(service, name string) []Span {
	var out []Span
	for _, s := range tr {
		if s.Service == service && s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Parent returns s's parent span, if it was received.
func (tr Tree) Parent(s Span) (Span, bool) {
	for _, p := range tr {
		if p.SpanID == s.ParentID && s.ParentID != "" {
			return p, true
		}
	}
	return Span{}, false
}

// Ancestor returns the nearest ancestor of s (s excluded) that match
// accepts, walking parent links through received spans only.
func (tr Tree) Ancestor(s Span, match func(Span) bool) (Span, bool) {
	seen := map[string]bool{}
	for {
		p, ok := tr.Parent(s)
		if !ok || seen[p.SpanID] {
			return Span{}, false
		}
		if match(p) {
			return p, true
		}
		seen[p.SpanID] = true
		s = p
	}
}

// Named matches a span by service and name.
func Named(service, name string) func(Span) bool {
	return func(s Span) bool { return s.Service == service && s.Name == name }
}

// String renders the tree indented by parent links (for failure
// messages); spans whose parent was not received are roots.
func (tr Tree) String() string {
	children := map[string][]Span{}
	ids := map[string]bool{}
	for _, s := range tr {
		ids[s.SpanID] = true
	}
	var roots []Span
	for _, s := range tr {
		if s.ParentID == "" || !ids[s.ParentID] {
			roots = append(roots, s)
			continue
		}
		children[s.ParentID] = append(children[s.ParentID], s)
	}
	var b strings.Builder
	var walk func(s Span, depth int)
	walk = func(s Span, depth int) {
		fmt.Fprintf(&b, "%s%s: %s (%s)", strings.Repeat("  ", depth), s.Service, s.Name, s.Kind)
		if s.ParentID != "" && !ids[s.ParentID] {
			fmt.Fprintf(&b, " parent %s not received", s.ParentID)
		}
		b.WriteByte('\n')
		for _, c := range children[s.SpanID] {
			walk(c, depth+1)
		}
	}
	for _, s := range roots {
		walk(s, 0)
	}
	return b.String()
}

// Services lists the services that sent spans of the tree.
func (tr Tree) Services() []string {
	var out []string
	for _, s := range tr {
		if !slices.Contains(out, s.Service) {
			out = append(out, s.Service)
		}
	}
	slices.Sort(out)
	return out
}
