package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/errmsg"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/platform/serve"
	"github.com/orderflow/orderflow/pkg/testkit/apptest"
	"github.com/orderflow/orderflow/pkg/testkit/netfault"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// stack is a gateway started in process against the real Redis and
// RabbitMQ, isolated by a unique key prefix and unique queue names.
type stack struct {
	cfg    Config
	addrs  serve.Addrs
	store  *taskstore.Store
	names  jobqueue.Names
	amqp   *amqp.Connection
	prefix string
}

func startGateway(t testing.TB, mutate func(*Config)) *stack {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	cfg, err := config.LoadEnv[Config](map[string]string{config.EnvVar: string(config.Development)}) // the defaults, as a development deployment would start
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ReconcilerAddr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg.JWT.Secret, cfg.DevLogin = config.Secret("test-secret-0123456789"), true
	cfg.RedisPrefix, cfg.AMQPPrefix = prefix, prefix
	cfg.RateLimit, cfg.RateBurst = 1e6, 1e6
	cfg.Redis = redisconn.Config{Addr: testenv.RedisAddr(), DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, PoolSize: 32}
	cfg.AMQP.URL = config.Secret(testenv.AMQPURL())
	cfg.AMQP.DialTimeout, cfg.AMQP.PublishTimeout = 2*time.Second, 2*time.Second
	if mutate != nil {
		mutate(&cfg)
	}
	names := testenv.SplitJobQueues(t, prefix)
	conn, err := amqp.Dial(testenv.AMQPURL())
	if err != nil {
		t.Fatalf("dial rabbitmq: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	// Started after the queues cleanup is registered, so it stops first.
	addrs := apptest.Start(t, Run, cfg)
	return &stack{
		cfg: cfg, addrs: addrs, names: names, amqp: conn, prefix: prefix,
		store: taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: cfg.TaskTTL}),
	}
}

func (s *stack) token(t testing.TB, member string) string {
	t.Helper()
	tok, err := auth.Issue(auth.Config{Secret: []byte(s.cfg.JWT.Secret.Reveal())}, member, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// do sends a REST request and decodes the JSON answer.
func (s *stack) do(t *testing.T, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.addrs.HTTP+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s %s: body %q is not JSON: %v", method, path, b, err)
		}
	}
	return resp.StatusCode, out
}

// queued returns the number of messages waiting in the split queue.
func (s *stack) queued(t *testing.T) int {
	t.Helper()
	ch, err := s.amqp.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(s.names.Queue, true, false, false, false, amqp.Table{
		amqp.QueueTypeArg: amqp.QueueTypeQuorum, "x-delivery-limit": int32(5),
		"x-dead-letter-exchange": s.names.DLX, "x-dead-letter-routing-key": jobqueue.RoutingKey,
	})
	if err != nil {
		t.Fatalf("inspect queue: %v", err)
	}
	return q.Messages
}

// keys returns the Redis keys under the stack's prefix.
// keys lists the gateway's Redis keys apart from the operations page's
// gauge samples, which the gateway writes on a timer whatever it is asked.
func (s *stack) keys(t *testing.T) []string {
	t.Helper()
	rdb := redisconn.New(s.cfg.Redis)
	defer rdb.Close()
	all, err := rdb.Keys(context.Background(), s.prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, k := range all {
		if !strings.HasPrefix(k, s.prefix+":{gauges}:") {
			keys = append(keys, k)
		}
	}
	return keys
}

func reason(body map[string]any) string {
	details, _ := body["details"].([]any)
	for _, d := range details {
		if m, ok := d.(map[string]any); ok && m["reason"] != nil {
			return m["reason"].(string)
		}
	}
	return ""
}

func field(body map[string]any) string {
	details, _ := body["details"].([]any)
	for _, d := range details {
		if m, ok := d.(map[string]any); ok {
			if md, ok := m["metadata"].(map[string]any); ok && md["field"] != nil {
				return md["field"].(string)
			}
		}
	}
	return ""
}

const goodOrder = `{"orderCode":"ORD-1","items":[{"itemCode":"i1","sku":"SKU-1","quantity":2},{"itemCode":"i2","sku":"SKU-2","quantity":1}]}`

func TestSubmitRecordsTaskAndPublishesJob(t *testing.T) {
	s := startGateway(t, nil)
	tok := s.token(t, "alice")
	code, body := s.do(t, "POST", "/v1/order-splits", tok, goodOrder)
	if code != http.StatusOK {
		t.Fatalf("POST /v1/order-splits = %d %v, want 200", code, body)
	}
	id, _ := body["taskId"].(string)
	if !taskstore.ValidID(id) {
		t.Fatalf("taskId = %q, want a 22-character base64url id (128 bits)", id)
	}
	if got := body["status"]; got != "TASK_STATUS_PROCESSING" {
		t.Errorf("status = %v, want TASK_STATUS_PROCESSING", got)
	}
	ttl, err := s.store.Remaining(context.Background(), "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	if ttl < 24*time.Hour-time.Minute || ttl > 24*time.Hour {
		t.Errorf("task TTL = %v, want about 24h", ttl)
	}
	// The job is in the queue and describes the order.
	ch, err := s.amqp.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var d amqp.Delivery
	deadline := time.Now().Add(5 * time.Second)
	for {
		var ok bool
		d, ok, err = ch.Get(s.names.Queue, false)
		if err != nil {
			t.Fatal(err)
		}
		if ok || time.Now().After(deadline) {
			if !ok {
				t.Fatal("no job in the split queue")
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, job, err := jobqueue.Decode(context.Background(), d)
	if err != nil {
		t.Fatalf("Decode(job) = %v", err)
	}
	want := &jobv1.SplitJob{SchemaVersion: 1, TaskId: id, MemberId: "alice", OrderCode: "ORD-1", Items: []*taskv1.OrderItem{
		{ItemCode: "i1", Sku: "SKU-1", Quantity: 2}, {ItemCode: "i2", Sku: "SKU-2", Quantity: 1},
	}, Priority: taskv1.Priority_PRIORITY_NORMAL}
	job.SubmitTime = nil
	if !proto.Equal(job, want) {
		t.Errorf("job = %v, want %v", job, want)
	}
	if member, task := jobqueue.Identify(amqp.Delivery{MessageId: d.MessageId, Headers: d.Headers}, nil); member != "alice" || task != id {
		t.Errorf("job identified by its headers as %q, %q; want alice, task id %q", member, task, id)
	}

	// The member reads it back; nobody else sees it.
	code, got := s.do(t, "GET", "/v1/tasks/"+id, tok, "")
	if code != http.StatusOK || got["taskId"] != id {
		t.Errorf("GET own task = %d %v, want 200 with the task", code, got)
	}
	code, other := s.do(t, "GET", "/v1/tasks/"+id, s.token(t, "mallory"), "")
	if code != http.StatusNotFound || reason(other) != apierr.ReasonTaskNotFound {
		t.Errorf("GET another member's task = %d %v, want 404 TASK_NOT_FOUND", code, other)
	}
	code, missing := s.do(t, "GET", "/v1/tasks/AAAAAAAAAAAAAAAAAAAAAA", tok, "")
	if code != http.StatusNotFound || cmp.Diff(other, missing) != "" {
		t.Errorf("GET unknown task = %d %v, want exactly the answer for another member's task %v", code, missing, other)
	}
}

func TestBadInputIsRejectedAndNothingIsWritten(t *testing.T) {
	s := startGateway(t, nil)
	tok := s.token(t, "alice")
	items := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"itemCode":"i%d","sku":"S","quantity":1}`, i)
		}
		return b.String()
	}
	tests := []struct {
		name      string
		body      string
		wantCode  int
		wantField string
	}{
		{"malformed json", `{"orderCode":"A",`, 400, "body"},
		{"trailing data", `{"orderCode":"A","items":[{"itemCode":"a","sku":"S","quantity":1}]} {"orderCode":"B"}`, 400, "body"},
		{"unknown field", `{"orderCode":"A","itemz":[]}`, 400, "itemz"},
		{"wrong type", `{"orderCode":"A","items":[{"itemCode":"a","sku":"S","quantity":"many"}]}`, 400, "quantity"},
		{"empty order code", `{"orderCode":"","items":[{"itemCode":"a","sku":"S","quantity":1}]}`, 400, "orderCode"},
		{"bad order code", `{"orderCode":"a b","items":[{"itemCode":"a","sku":"S","quantity":1}]}`, 400, "orderCode"},
		{"zero items", `{"orderCode":"A","items":[]}`, 400, "items"},
		{"too many items", `{"orderCode":"A","items":[` + items(201) + `]}`, 400, "items"},
		{"duplicate item codes", `{"orderCode":"A","items":[{"itemCode":"a","sku":"S","quantity":1},{"itemCode":"a","sku":"S","quantity":1}]}`, 400, "items[1].itemCode"},
		{"negative quantity", `{"orderCode":"A","items":[{"itemCode":"a","sku":"S","quantity":-3}]}`, 400, "items[0].quantity"},
		{"zero quantity", `{"orderCode":"A","items":[{"itemCode":"a","sku":"S","quantity":0}]}`, 400, "items[0].quantity"},
		{"empty sku", `{"orderCode":"A","items":[{"itemCode":"a","sku":"","quantity":1}]}`, 400, "items[0].sku"},
		{"oversized body", `{"orderCode":"A","items":[],"requestId":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := s.do(t, "POST", "/v1/order-splits", tok, tt.body)
			if code != tt.wantCode {
				t.Errorf("POST = %d %v, want %d", code, body, tt.wantCode)
			}
			if got := field(body); got != tt.wantField {
				t.Errorf("field = %q (%v), want %q", got, body["message"], tt.wantField)
			}
		})
	}
	if keys := s.keys(t); len(keys) != 0 {
		t.Errorf("Redis keys after bad input = %v, want none", keys)
	}
	if n := s.queued(t); n != 0 {
		t.Errorf("queued jobs after bad input = %d, want 0", n)
	}
}

func TestAuthIsRequiredOnEveryRoute(t *testing.T) {
	s := startGateway(t, nil)
	secret := []byte(s.cfg.JWT.Secret.Reveal())
	expired, _ := auth.Issue(auth.Config{Secret: secret}, "alice", time.Now().Add(-2*time.Hour), time.Hour)
	wrongKey, _ := auth.Issue(auth.Config{Secret: []byte("another-secret-0123456789")}, "alice", time.Now(), time.Hour)
	// alg=none: header {"alg":"none","typ":"JWT"}, payload with sub and exp.
	none := "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + "eyJzdWIiOiJhbGljZSIsImV4cCI6NDEwMjQ0NDgwMH0."
	routes := []struct{ method, path, body string }{
		{"POST", "/v1/order-splits", goodOrder},
		{"GET", "/v1/tasks/AAAAAAAAAAAAAAAAAAAAAA", ""},
		{"GET", "/v1/tasks", ""},
		{"POST", "/v1/tasks/AAAAAAAAAAAAAAAAAAAAAA:cancel", "{}"},
		{"GET", "/v1/tasks/AAAAAAAAAAAAAAAAAAAAAA:watch", ""},
		{"POST", "/v1/payments", `{"orderCode":"PAY-1","amountFen":100}`},
		{"GET", "/v1/payments/PAY-1", ""},
	}
	tokens := map[string]string{"missing": "", "expired": expired, "wrong signature": wrongKey, "alg none": none, "garbage": "abc.def.ghi"}
	for _, r := range routes {
		for name, tok := range tokens {
			t.Run(r.method+" "+r.path+" "+name, func(t *testing.T) {
				code, body := s.do(t, r.method, r.path, tok, r.body)
				if code != http.StatusUnauthorized {
					t.Errorf("%s %s with %s token = %d %v, want 401", r.method, r.path, name, code, body)
				}
			})
		}
	}
	if n := s.queued(t); n != 0 {
		t.Errorf("queued jobs after unauthenticated calls = %d, want 0", n)
	}
}

func TestRepeatedRequestIDReturnsSameTaskAndOneJob(t *testing.T) {
	s := startGateway(t, nil)
	tok := s.token(t, "alice")
	body := `{"orderCode":"ORD-9","requestId":"req-42","items":[{"itemCode":"i1","sku":"S","quantity":1}]}`
	var mu sync.Mutex
	ids := map[string]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, got := s.do(t, "POST", "/v1/order-splits", tok, body)
			if code != http.StatusOK {
				t.Errorf("POST = %d %v, want 200", code, got)
				return
			}
			mu.Lock()
			ids[got["taskId"].(string)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(ids) != 1 {
		t.Errorf("task ids for one request id = %v, want exactly one", ids)
	}
	// Another member may use the same request id for their own task.
	code, bob := s.do(t, "POST", "/v1/order-splits", s.token(t, "bob"), body)
	if code != http.StatusOK || ids[bob["taskId"].(string)] != 0 {
		t.Errorf("bob's POST with alice's request id = %d %v, want a new task", code, bob)
	}
	time.Sleep(200 * time.Millisecond)
	if n := s.queued(t); n != 2 {
		t.Errorf("queued jobs = %d, want 2 (one per member)", n)
	}
}

func TestUnconfirmedPublishLeavesNoTask(t *testing.T) {
	s := startGateway(t, nil)
	tok := s.token(t, "alice")
	// Make the job unroutable: the broker returns it instead of queueing it.
	ch, err := s.amqp.Channel()
	if err != nil {
		t.Fatal(err)
	}
	// Let the gateway declare its topology first.
	if code, body := s.do(t, "GET", "/healthz", "", ""); code != 200 {
		t.Fatalf("healthz = %d %v", code, body)
	}
	if err := ch.QueueUnbind(s.names.Queue, jobqueue.RoutingKey, s.names.Exchange, nil); err != nil {
		t.Fatal(err)
	}
	code, body := s.do(t, "POST", "/v1/order-splits", tok, `{"orderCode":"ORD-2","requestId":"r-1","items":[{"itemCode":"i1","sku":"S","quantity":1}]}`)
	if code != http.StatusServiceUnavailable || reason(body) != apierr.ReasonQueueUnavailable {
		t.Fatalf("POST with the queue unbound = %d %v, want 503 QUEUE_UNAVAILABLE", code, body)
	}
	if keys := s.keys(t); len(keys) != 0 {
		t.Errorf("Redis keys after an unconfirmed publish = %v, want none (task rolled back)", keys)
	}
	code, list := s.do(t, "GET", "/v1/tasks", tok, "")
	if code != 200 || len(list["tasks"].([]any)) != 0 {
		t.Errorf("GET /v1/tasks = %d %v, want no tasks", code, list)
	}
	// Once the queue is back, the same request id creates a task.
	if err := ch.QueueBind(s.names.Queue, jobqueue.RoutingKey, s.names.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	code, body = s.do(t, "POST", "/v1/order-splits", tok, `{"orderCode":"ORD-2","requestId":"r-1","items":[{"itemCode":"i1","sku":"S","quantity":1}]}`)
	if code != http.StatusOK {
		t.Errorf("POST after rebinding = %d %v, want 200", code, body)
	}
}

func TestExpiredAndUnknownTasksAreToldApart(t *testing.T) {
	s := startGateway(t, func(c *Config) { c.TaskTTL = 1500 * time.Millisecond })
	tok := s.token(t, "alice")
	code, body := s.do(t, "POST", "/v1/order-splits", tok, goodOrder)
	if code != 200 {
		t.Fatalf("POST = %d %v", code, body)
	}
	id := body["taskId"].(string)
	time.Sleep(2 * time.Second)
	code, expired := s.do(t, "GET", "/v1/tasks/"+id, tok, "")
	if code != 404 || reason(expired) != apierr.ReasonTaskExpired {
		t.Errorf("GET expired task = %d %v, want 404 TASK_EXPIRED", code, expired)
	}
	code, unknown := s.do(t, "GET", "/v1/tasks/BBBBBBBBBBBBBBBBBBBBBB", tok, "")
	if code != 404 || reason(unknown) != apierr.ReasonTaskNotFound {
		t.Errorf("GET unknown task = %d %v, want 404 TASK_NOT_FOUND", code, unknown)
	}
	if expired["message"] != unknown["message"] {
		t.Errorf("messages differ: %q vs %q; both should say the task does not exist or has expired", expired["message"], unknown["message"])
	}
}

func TestCancelListAndWatch(t *testing.T) {
	s := startGateway(t, nil)
	tok := s.token(t, "alice")
	var ids []string
	for i := range 3 {
		code, body := s.do(t, "POST", "/v1/order-splits", tok, fmt.Sprintf(`{"orderCode":"O-%d","items":[{"itemCode":"i","sku":"S","quantity":1}]}`, i))
		if code != 200 {
			t.Fatalf("POST = %d %v", code, body)
		}
		ids = append(ids, body["taskId"].(string))
		time.Sleep(2 * time.Millisecond)
	}
	// Pages of two, newest first.
	code, page1 := s.do(t, "GET", "/v1/tasks?pageSize=2", tok, "")
	if code != 200 {
		t.Fatalf("list = %d %v", code, page1)
	}
	code, page2 := s.do(t, "GET", "/v1/tasks?pageSize=2&pageToken="+page1["nextPageToken"].(string), tok, "")
	if code != 200 {
		t.Fatalf("list page 2 = %d %v", code, page2)
	}
	var got []string
	for _, p := range []map[string]any{page1, page2} {
		for _, tk := range p["tasks"].([]any) {
			got = append(got, tk.(map[string]any)["taskId"].(string))
		}
	}
	want := []string{ids[2], ids[1], ids[0]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("listed task ids (-want +got):\n%s", diff)
	}
	if page2["nextPageToken"] != "" {
		t.Errorf("last page token = %q, want empty", page2["nextPageToken"])
	}

	// Watch over gRPC sees the cancellation, then the stream ends.
	conn, err := grpc.NewClient(s.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := gatewayv1.NewTaskServiceClient(conn).WatchTask(ctx, &gatewayv1.WatchTaskRequest{TaskId: ids[0]})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || first.GetTask().GetStatus() != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
		t.Fatalf("first watch message = %v, %v; want PROCESSING", first, err)
	}
	code, cancelled := s.do(t, "POST", "/v1/tasks/"+ids[0]+":cancel", tok, "{}")
	if code != 200 || cancelled["status"] != "TASK_STATUS_CANCELLED" {
		t.Fatalf("cancel = %d %v, want 200 CANCELLED", code, cancelled)
	}
	// The one public message of 10007, whoever cancelled.
	if msg := cancelled["errorMsg"]; msg != errmsg.Message(errcodev1.ErrorCode_ERROR_CODE_TASK_CANCELLED) {
		t.Errorf("cancelled errorMsg = %q, want the catalogue's message of 10007", msg)
	}
	second, err := stream.Recv()
	if err != nil || second.GetTask().GetStatus() != taskv1.TaskStatus_TASK_STATUS_CANCELLED ||
		second.GetTask().GetErrorCode() != int32(errcodev1.ErrorCode_ERROR_CODE_TASK_CANCELLED) {
		t.Fatalf("second watch message = %v, %v; want CANCELLED with code 10007", second, err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Errorf("watch after terminal = %v, want io.EOF", err)
	}
	// A finished task cannot be cancelled again; another member cannot cancel.
	code, again := s.do(t, "POST", "/v1/tasks/"+ids[0]+":cancel", tok, "{}")
	if code != 400 || reason(again) != apierr.ReasonTaskFinished {
		t.Errorf("second cancel = %d %v, want 400 TASK_ALREADY_FINISHED", code, again)
	}
	code, other := s.do(t, "POST", "/v1/tasks/"+ids[1]+":cancel", s.token(t, "mallory"), "{}")
	if code != 404 {
		t.Errorf("cancel by another member = %d %v, want 404", code, other)
	}

	// REST watch streams newline-delimited results until terminal.
	req, _ := http.NewRequest("GET", "http://"+s.addrs.HTTP+"/v1/tasks/"+ids[0]+":watch", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(raw, []byte("TASK_STATUS_CANCELLED")) {
		t.Errorf("REST watch of a cancelled task = %d %s, want 200 with the CANCELLED task", resp.StatusCode, raw)
	}
}

func TestGRPCSurface(t *testing.T) {
	s := startGateway(t, nil)
	conn, err := grpc.NewClient(s.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health = %v, %v; want SERVING", hc, err)
	}
	client := gatewayv1.NewOrderSplitServiceClient(conn)
	_, err = client.CreateOrderSplit(context.Background(), &gatewayv1.CreateOrderSplitRequest{OrderCode: "A"})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("CreateOrderSplit without token = %v, want Unauthenticated", err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+s.token(t, "alice"))
	_, err = client.CreateOrderSplit(ctx, &gatewayv1.CreateOrderSplitRequest{OrderCode: "A"})
	if status.Code(err) != codes.InvalidArgument || apierr.Reason(err) != apierr.ReasonInvalidField {
		t.Errorf("CreateOrderSplit without items = %v, want InvalidArgument INVALID_FIELD", err)
	}
	resp, err := client.CreateOrderSplit(ctx, &gatewayv1.CreateOrderSplitRequest{OrderCode: "A", Items: []*taskv1.OrderItem{{ItemCode: "a", Sku: "S", Quantity: 1}}})
	if err != nil || resp.GetTask().GetStatus() != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
		t.Errorf("CreateOrderSplit = %v, %v; want a PROCESSING task", resp, err)
	}
	_, err = gatewayv1.NewPaymentServiceClient(conn).GetPayment(ctx, &gatewayv1.GetPaymentRequest{OrderCode: "A"})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("GetPayment with the reconciler down = %v, want Unavailable", err)
	}
}

func TestProbesWithADependencyDown(t *testing.T) {
	s := startGateway(t, func(c *Config) {
		c.AMQP.URL = config.Secret("amqp://guest:guest@127.0.0.1:1/")
		c.AMQP.DialTimeout = 200 * time.Millisecond
	})
	// The failed dependency is named to an admin (the public sees the
	// status only, TestPublicReadinessHidesDependencies).
	code, body := s.do(t, "GET", "/healthz", s.adminToken(t, "root"), "")
	failed, _ := body["failed"].(map[string]any)
	if code != http.StatusServiceUnavailable || failed["rabbitmq"] == nil || failed["redis"] != nil {
		t.Errorf("healthz with RabbitMQ down = %d %v, want 503 naming rabbitmq only", code, body)
	}
	if code, body := s.do(t, "GET", "/readyz", "", ""); code != http.StatusServiceUnavailable {
		t.Errorf("readyz with RabbitMQ down = %d %v, want 503", code, body)
	}
	// Liveness does not look at dependencies: an outage must not restart
	// the gateway.
	if code, body := s.do(t, "GET", "/livez", "", ""); code != http.StatusOK {
		t.Errorf("livez with RabbitMQ down = %d %v, want 200", code, body)
	}
	code, sub := s.do(t, "POST", "/v1/order-splits", s.token(t, "alice"), goodOrder)
	if code != http.StatusServiceUnavailable {
		t.Errorf("submit with RabbitMQ down = %d %v, want 503", code, sub)
	}
	if keys := s.keys(t); len(keys) != 0 {
		t.Errorf("Redis keys after a failed submit = %v, want none", keys)
	}
}

func TestRateLimitIsPerMember(t *testing.T) {
	s := startGateway(t, func(c *Config) { c.RateLimit, c.RateBurst = 1, 3 })
	alice, bob := s.token(t, "alice"), s.token(t, "bob")
	for i := range 3 {
		if code, body := s.do(t, "GET", "/v1/tasks", alice, ""); code != 200 {
			t.Fatalf("alice's call %d = %d %v, want 200 within the burst", i+1, code, body)
		}
	}
	req, _ := http.NewRequest("GET", "http://"+s.addrs.HTTP+"/v1/tasks", nil)
	req.Header.Set("Authorization", "Bearer "+alice)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("alice over the limit = %d Retry-After %q, want 429 with Retry-After 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code, body := s.do(t, "GET", "/v1/tasks", bob, ""); code != 200 {
		t.Errorf("bob while alice is limited = %d %v, want 200", code, body)
	}
	code, body := s.do(t, "POST", "/v1/order-splits", alice, goodOrder)
	if code != http.StatusTooManyRequests || reason(body) != apierr.ReasonRateLimited {
		t.Errorf("alice's submit over the limit = %d %v, want 429 RATE_LIMITED", code, body)
	}
	if n := s.queued(t); n != 0 {
		t.Errorf("queued jobs after a limited submit = %d, want 0", n)
	}
	time.Sleep(1100 * time.Millisecond)
	if code, body := s.do(t, "GET", "/v1/tasks", alice, ""); code != 200 {
		t.Errorf("alice after a second = %d %v, want 200 (bucket refilled)", code, body)
	}
}

// TestSilentBrokerAnswersWithinTheConfirmWait runs the gateway against
// RabbitMQ nodes that accept connections and answer nothing (a partition
// that drops packets): submissions sent at once must each be answered
// within the confirm wait, with 503 QUEUE_UNAVAILABLE and no task left
// behind (the job was certainly not sent), not wait on the dial timeouts
// of every node in turn.
func TestSilentBrokerAnswersWithinTheConfirmWait(t *testing.T) {
	var urls []string
	for range 2 {
		hole, err := netfault.NewSilent()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(hole.Close)
		urls = append(urls, "amqp://guest:guest@"+hole.Addr()+"/")
	}
	s := startGateway(t, func(c *Config) {
		c.AMQP.URL = config.Secret(strings.Join(urls, ","))
		c.AMQP.DialTimeout, c.AMQP.PublishTimeout, c.ConfirmWait = 5*time.Second, 5*time.Second, time.Second
	})
	tok := s.token(t, "alice")
	// A second for a loaded machine; one dial alone takes five.
	bound := s.cfg.ConfirmWait + time.Second
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			code, body := s.do(t, "POST", "/v1/order-splits", tok, fmt.Sprintf(`{"orderCode":"ORD-%d","items":[{"itemCode":"i1","sku":"S","quantity":1}]}`, i))
			if took := time.Since(start); took > bound {
				t.Errorf("POST %d answered after %v, want within %v", i, took.Round(10*time.Millisecond), bound)
			}
			if code != http.StatusServiceUnavailable || reason(body) != apierr.ReasonQueueUnavailable {
				t.Errorf("POST %d = %d %v, want 503 QUEUE_UNAVAILABLE", i, code, body)
			}
		}()
	}
	wg.Wait()
	if keys := s.keys(t); len(keys) != 0 {
		t.Errorf("Redis keys after the refused submissions = %v, want none (each rolled back)", keys)
	}
}
