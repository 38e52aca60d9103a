package httpapi

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
)

// fixedTasks answers every GetTask with the same task.
type fixedTasks struct {
	gatewayv1.UnimplementedOrderSplitServiceServer
	gatewayv1.UnimplementedTaskServiceServer
	task *taskv1.Task
}

func (f fixedTasks) GetTask(context.Context, *gatewayv1.GetTaskRequest) (*gatewayv1.GetTaskResponse, error) {
	return &gatewayv1.GetTaskResponse{Task: f.task}, nil
}

func testTask() *taskv1.Task {
	now := timestamppb.Now()
	return &taskv1.Task{TaskId: "t-1", OrderCode: "ORD-1", Status: taskv1.TaskStatus_TASK_STATUS_PROCESSING, RequestId: "r-1",
		CreateTime: now, UpdateTime: now, ExpireTime: now}
}

// TestEachRouteIsObservedUnderItsTemplate: requests to different routes,
// each served more than once, are counted and their sampled spans named
// under their own route template, and the answer is the task's JSON.
func TestEachRouteIsObservedUnderItsTemplate(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })

	reg := prometheus.NewRegistry()
	task := testTask()
	qr := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(r.PathValue("orderCode"))) })
	h, err := New(context.Background(), Options{MaxBodyBytes: 1 << 20, Tasks: fixedTasks{task: task}, Registerer: reg,
		Routes: map[string]http.Handler{"GET /v1/payments/{orderCode}/qr": qr}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/tasks/t-1", "/v1/payments/ORD-1/qr", "/v1/tasks/t-2", "/v1/payments/ORD-2/qr", "/v1/nowhere"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		switch path {
		case "/v1/tasks/t-1", "/v1/tasks/t-2":
			if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), want) {
				t.Errorf("GET %s = %d %s, want 200 %s", path, w.Code, w.Body, want)
			}
		case "/v1/nowhere":
			if w.Code != http.StatusNotFound {
				t.Errorf("GET %s = %d, want 404", path, w.Code)
			}
		default:
			if w.Code != http.StatusOK {
				t.Errorf("GET %s = %d, want 200", path, w.Code)
			}
		}
	}
	for _, route := range []string{"/v1/tasks/{task_id}", "/v1/payments/{orderCode}/qr"} {
		if got := requestCount(t, reg, route); got != 2 {
			t.Errorf("orderflow_http_requests_total{route=%q,code=\"200\"} = %v, want 2", route, got)
		}
	}
	names := map[string]int{}
	for _, s := range rec.Ended() {
		names[s.Name()]++
		if s.Name() == "GET /v1/tasks/{task_id}" {
			found := false
			for _, a := range s.Attributes() {
				found = found || (a.Key == "http.route" && a.Value.AsString() == "/v1/tasks/{task_id}")
			}
			if !found {
				t.Errorf("span %s lacks http.route: %v", s.Name(), s.Attributes())
			}
		}
	}
	if names["GET /v1/tasks/{task_id}"] != 2 || names["GET /v1/payments/{orderCode}/qr"] != 2 {
		t.Errorf("span names = %v, want two of each route", names)
	}
}

// requestCount is orderflow_http_requests_total of GET route with code 200.
func requestCount(t *testing.T, reg *prometheus.Registry, route string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "orderflow_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == route && labels["code"] == "200" && labels["method"] == "GET" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestJSONMarshalerWritesWhatJSONPbWrites: the answers' encoder gives the
// same bytes as grpc-gateway's JSONPb for messages, errors with details and
// values that are not messages.
func TestJSONMarshalerWritesWhatJSONPbWrites(t *testing.T) {
	ref := &runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{EmitUnpopulated: true}}
	st, err := status.New(codes.InvalidArgument, "items: empty").WithDetails(&errdetails.ErrorInfo{Reason: "INVALID_FIELD", Metadata: map[string]string{"field": "items"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{testTask(), &gatewayv1.GetTaskResponse{Task: testTask()}, st.Proto(), &taskv1.Task{}, "text", map[string]int{"a": 1}, []string{"x"}} {
		want, wantErr := ref.Marshal(v)
		got, err := jsonPb.Marshal(v)
		if !bytes.Equal(got, want) || (err == nil) != (wantErr == nil) {
			t.Errorf("Marshal(%T) = %s, %v; want %s, %v", v, got, err, want, wantErr)
		}
		if m, ok := v.(proto.Message); ok && len(got) == 0 {
			t.Errorf("Marshal(%T) is empty", m)
		}
	}
}
