// Package httpapi assembles the gateway's HTTP surface: the REST API
// (grpc-gateway, strict JSON decoding, body caps, google.rpc.Status
// errors), probes, the OpenAPI document and any extra handlers
// (the web page, the payment callback, the dev login).
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	opsv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/ops/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/probe"
	"github.com/orderflow/orderflow/services/gateway/internal/ratelimit"
)

// Options configure the handler.
type Options struct {
	// MaxBodyBytes caps request bodies; larger ones get 413.
	MaxBodyBytes int64
	// Tasks serves OrderSplitService and TaskService in process.
	Tasks interface {
		gatewayv1.OrderSplitServiceServer
		gatewayv1.TaskServiceServer
	}
	// Payments serves PaymentService in process (optional).
	Payments gatewayv1.PaymentServiceServer
	// Ops serves the operations API under /v1/ops in process (optional).
	Ops opsv1.OpsServiceServer
	// Loopback is a connection to the gateway's own gRPC server, used for
	// the server-streaming watch, which grpc-gateway cannot call in process.
	Loopback grpc.ClientConnInterface
	// Probes serve /livez, /readyz and /healthz.
	Probes *probe.Probes
	// OpenAPI is the OpenAPI document served at /openapi.json.
	OpenAPI []byte
	// Routes are extra REST routes on the API mux ("METHOD /path" → handler),
	// e.g. the provider's payment callback; a handler reads the path's
	// {name} segments with r.PathValue.
	Routes map[string]http.Handler
	// Pages are extra handlers on the outer mux (pattern → handler), e.g.
	// the web page at "/".
	Pages map[string]http.Handler
	// Registerer receives the REST metrics (orderflow_http_…); none when nil.
	Registerer prometheus.Registerer
	// Logger writes the access log and panics; discarded when nil.
	Logger *slog.Logger
}

var jsonPb = jsonMarshaler{&runtime.JSONPb{
	MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true},
	UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
}}

// jsonMarshaler is grpc-gateway's JSONPb, except that Marshal returns
// protojson's encoding of a message as it is: JSONPb.Marshal copies it into
// a second buffer on every answer. The bytes are the same.
type jsonMarshaler struct{ *runtime.JSONPb }

// Marshal encodes v as JSONPb does.
func (m jsonMarshaler) Marshal(v any) ([]byte, error) {
	if p, ok := v.(proto.Message); ok && m.Indent == "" {
		return m.MarshalOptions.Marshal(p)
	}
	return m.JSONPb.Marshal(v)
}

// New builds the gateway's HTTP handler.
func New(ctx context.Context, opts Options) (http.Handler, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, jsonPb),
		runtime.WithErrorHandler(errorHandler),
		runtime.WithIncomingHeaderMatcher(noHeaders),
		runtime.WithStreamErrorHandler(streamErrorHandler),
		runtime.WithMiddlewares(observe(newRESTMetrics(opts.Registerer), log), retryAfterOnStreams),
	)
	if err := gatewayv1.RegisterOrderSplitServiceHandlerServer(ctx, gw, opts.Tasks); err != nil {
		return nil, fmt.Errorf("register order-split routes: %w", err)
	}
	tc := taskClient{srv: opts.Tasks, loop: gatewayv1.NewTaskServiceClient(opts.Loopback)}
	if err := gatewayv1.RegisterTaskServiceHandlerClient(ctx, gw, tc); err != nil {
		return nil, fmt.Errorf("register task routes: %w", err)
	}
	if opts.Payments != nil {
		if err := gatewayv1.RegisterPaymentServiceHandlerServer(ctx, gw, opts.Payments); err != nil {
			return nil, fmt.Errorf("register payment routes: %w", err)
		}
	}
	if opts.Ops != nil {
		if err := opsv1.RegisterOpsServiceHandlerServer(ctx, gw, opts.Ops); err != nil {
			return nil, fmt.Errorf("register operations routes: %w", err)
		}
	}
	for route, h := range opts.Routes {
		method, path, ok := strings.Cut(route, " ")
		if !ok {
			return nil, fmt.Errorf("route %q: want \"METHOD /path\"", route)
		}
		h := h
		if err := gw.HandlePath(method, path, func(w http.ResponseWriter, r *http.Request, params map[string]string) {
			for k, v := range params { // the route's {name} segments, for r.PathValue
				r.SetPathValue(k, v)
			}
			h.ServeHTTP(w, r)
		}); err != nil {
			return nil, fmt.Errorf("route %q: %w", route, err)
		}
	}
	var api http.Handler = gw

	mux := http.NewServeMux()
	// Every REST call gets a server span (a trace id for the logs and the
	// job's headers), continuing the caller's traceparent when it sends
	// one; observe renames it after the matched route.
	mux.Handle("/v1/", serverSpan(limitBody(opts.MaxBodyBytes, api)))
	if opts.Probes != nil {
		opts.Probes.Register(mux)
	}
	if opts.OpenAPI != nil {
		mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(opts.OpenAPI)
		})
	}
	for pattern, h := range opts.Pages {
		mux.Handle(pattern, h)
	}
	return mux, nil
}

// noHeaders forwards none of a REST request's headers as metadata to the
// in-process servers. The only metadata they read is "authorization",
// which grpc-gateway forwards from the Authorization header whatever the
// matcher says (with x-forwarded-host and x-forwarded-for, which it always
// sets). Its default matcher also copied every standard header (the user
// agent, cookies, accept…) under a "grpcgateway-" prefix on every call,
// for nobody to read.
func noHeaders(string) (string, bool) { return "", false }

// limitBody answers 413 to a declared oversized body and caps streamed
// ones (the error handler turns the cap's error into 413).
func limitBody(max int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if max > 0 && r.ContentLength > max {
			writeStatus(w, http.StatusRequestEntityTooLarge, tooLarge(max))
			return
		}
		// A request without a body (a GET) has nothing to cap: wrapping
		// its http.NoBody cost an allocation here, and made the tracing
		// middleware wrap the body again.
		if max > 0 && r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, max)
		}
		next.ServeHTTP(w, r)
	})
}

func tooLarge(max int64) error {
	return apierr.New(codes.InvalidArgument, apierr.ReasonBodyTooLarge,
		bodyTooLargeMsg(max), "field", "body")
}

func bodyTooLargeMsg(max int64) string {
	if max <= 0 {
		return "body: too large"
	}
	return fmt.Sprintf("body: larger than %d bytes", max)
}

// writeStatus writes err as a google.rpc.Status JSON body with httpCode.
func writeStatus(w http.ResponseWriter, httpCode int, err error) {
	st, _ := status.FromError(err)
	b, mErr := jsonPb.Marshal(st.Proto())
	if mErr != nil {
		http.Error(w, st.Message(), httpCode)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	_, _ = w.Write(b)
}

var (
	unknownField = regexp.MustCompile(`unknown field "([^"]+)"`)
	badField     = regexp.MustCompile(`field ([A-Za-z0-9_.]+)`)
)

// errorHandler is grpc-gateway's default, except that body decoding errors
// get an ErrorInfo naming the field (when one is known) and an oversized
// body gets 413.
func errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	var maxErr *http.MaxBytesError
	if errors.As(err, &maxErr) {
		writeStatus(w, http.StatusRequestEntityTooLarge, tooLarge(maxErr.Limit))
		return
	}
	if strings.Contains(err.Error(), "request body too large") {
		writeStatus(w, http.StatusRequestEntityTooLarge, tooLarge(0))
		return
	}
	if secs := ratelimit.RetryAfter(err); secs != "" {
		w.Header().Set("Retry-After", secs)
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument && len(st.Details()) == 0 {
		field := "body"
		if mm := unknownField.FindStringSubmatch(st.Message()); mm != nil {
			field = mm[1]
		} else if mm := badField.FindStringSubmatch(st.Message()); mm != nil {
			field = mm[1]
		}
		err = apierr.New(codes.InvalidArgument, apierr.ReasonInvalidField,
			field+": "+strings.TrimPrefix(st.Message(), "proto: "), "field", field)
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// taskClient lets grpc-gateway call the task server in process for unary
// methods and over the loopback connection for the server-streaming watch.
type taskClient struct {
	srv  gatewayv1.TaskServiceServer
	loop gatewayv1.TaskServiceClient
}

// incoming turns the metadata grpc-gateway prepared for an outgoing call
// into the incoming metadata the server reads.
func incoming(ctx context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	return metadata.NewIncomingContext(ctx, md)
}

func (c taskClient) GetTask(ctx context.Context, in *gatewayv1.GetTaskRequest, _ ...grpc.CallOption) (*gatewayv1.GetTaskResponse, error) {
	return c.srv.GetTask(incoming(ctx), in)
}

func (c taskClient) ListTasks(ctx context.Context, in *gatewayv1.ListTasksRequest, _ ...grpc.CallOption) (*gatewayv1.ListTasksResponse, error) {
	return c.srv.ListTasks(incoming(ctx), in)
}

func (c taskClient) CancelTask(ctx context.Context, in *gatewayv1.CancelTaskRequest, _ ...grpc.CallOption) (*gatewayv1.CancelTaskResponse, error) {
	return c.srv.CancelTask(incoming(ctx), in)
}

func (c taskClient) WatchTask(ctx context.Context, in *gatewayv1.WatchTaskRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[gatewayv1.WatchTaskResponse], error) {
	return c.loop.WatchTask(ctx, in, opts...)
}

// retryAfterKey holds, in a request's context, the retry delay in seconds
// of a streaming call's error, for retryAfterWriter.
type retryAfterKey struct{}

// retryAfterOnStreams lets a server-streaming call's error (which
// grpc-gateway answers without the error handler) set Retry-After: the
// stream error handler records the delay and the writer adds the header
// when the status is written.
func retryAfterOnStreams(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		secs := new(string)
		r = r.WithContext(context.WithValue(r.Context(), retryAfterKey{}, secs))
		next(&retryAfterWriter{ResponseWriter: w, secs: secs}, r, params)
	}
}

// streamErrorHandler is grpc-gateway's default, recording the retry delay
// a RESOURCE_EXHAUSTED error carries for retryAfterOnStreams.
func streamErrorHandler(ctx context.Context, err error) *status.Status {
	if secs, ok := ctx.Value(retryAfterKey{}).(*string); ok {
		*secs = ratelimit.RetryAfter(err)
	}
	return runtime.DefaultStreamErrorHandler(ctx, err)
}

// retryAfterWriter adds Retry-After to a 429 when a retry delay was
// recorded.
type retryAfterWriter struct {
	http.ResponseWriter
	secs *string
}

func (w *retryAfterWriter) WriteHeader(code int) {
	if code == http.StatusTooManyRequests && *w.secs != "" && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", *w.secs)
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap gives http.ResponseController the underlying writer (flushes of
// streamed answers).
func (w *retryAfterWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
