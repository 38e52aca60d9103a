package app

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
)

// TestWatchesPerMemberAreCapped: a member holds at most
// ORDERFLOW_GATEWAY_MAX_WATCHES open watches on a replica; one more gets
// RESOURCE_EXHAUSTED, another member is unaffected, and a closed watch
// frees its place.
func TestWatchesPerMemberAreCapped(t *testing.T) {
	s := startGateway(t, func(c *Config) { c.MaxWatches = 2 })
	conn, as := grpcAs(t, s)
	create := func(member string) string {
		resp, err := gatewayv1.NewOrderSplitServiceClient(conn).CreateOrderSplit(as(member), &gatewayv1.CreateOrderSplitRequest{
			OrderCode: "W-1", Items: []*taskv1.OrderItem{{ItemCode: "a", Sku: "S", Quantity: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetTask().GetTaskId()
	}
	tasks := gatewayv1.NewTaskServiceClient(conn)
	// watch opens a watch and waits for its first answer.
	watch := func(member, id string) (context.CancelFunc, error) {
		ctx, cancel := context.WithTimeout(as(member), 20*time.Second)
		stream, err := tasks.WatchTask(ctx, &gatewayv1.WatchTaskRequest{TaskId: id})
		if err == nil {
			_, err = stream.Recv()
		}
		return cancel, err
	}
	alice, bob := create("alice"), create("bob")
	var open []context.CancelFunc
	for i := range 2 {
		cancel, err := watch("alice", alice)
		if err != nil {
			t.Fatalf("watch %d = %v, want the task", i, err)
		}
		open = append(open, cancel)
	}
	if cancel, err := watch("alice", alice); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("third watch = %v, want RESOURCE_EXHAUSTED", err)
	} else {
		cancel()
	}
	if cancel, err := watch("bob", bob); err != nil {
		t.Errorf("bob's watch while alice is at her cap = %v, want the task", err)
	} else {
		cancel()
	}
	open[0]()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cancel, err := watch("alice", alice)
		if err == nil {
			cancel()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch after closing one = %v, want the task", err)
		}
		time.Sleep(20 * time.Millisecond) // the server sees the cancel asynchronously
	}
	open[1]()
}

// TestWatchesPerReplicaAreCapped: a replica holds at most
// ORDERFLOW_GATEWAY_MAX_WATCHES_TOTAL open watches whoever opens them; one
// more, from a member with none open, gets 429 WATCH_CAPACITY with a
// Retry-After header over REST (RESOURCE_EXHAUSTED over gRPC), and a
// closed watch frees its place.
func TestWatchesPerReplicaAreCapped(t *testing.T) {
	s := startGateway(t, func(c *Config) { c.MaxWatches, c.MaxWatchesTotal = 8, 2 })
	conn, as := grpcAs(t, s)
	ids := map[string]string{}
	for _, m := range []string{"alice", "bob", "carol"} {
		resp, err := gatewayv1.NewOrderSplitServiceClient(conn).CreateOrderSplit(as(m), &gatewayv1.CreateOrderSplitRequest{
			OrderCode: "W-1", Items: []*taskv1.OrderItem{{ItemCode: "a", Sku: "S", Quantity: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		ids[m] = resp.GetTask().GetTaskId()
	}
	tasks := gatewayv1.NewTaskServiceClient(conn)
	watch := func(member string) (context.CancelFunc, error) {
		ctx, cancel := context.WithTimeout(as(member), 20*time.Second)
		stream, err := tasks.WatchTask(ctx, &gatewayv1.WatchTaskRequest{TaskId: ids[member]})
		if err == nil {
			_, err = stream.Recv()
		}
		return cancel, err
	}
	closeAlice, err := watch("alice")
	if err != nil {
		t.Fatalf("alice's watch = %v, want the task", err)
	}
	closeBob, err := watch("bob")
	if err != nil {
		t.Fatalf("bob's watch = %v, want the task", err)
	}
	defer closeBob()
	if cancel, err := watch("carol"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("carol's gRPC watch at the replica's cap = %v, want RESOURCE_EXHAUSTED", err)
	} else {
		cancel()
	}
	req, _ := http.NewRequest("GET", "http://"+s.addrs.HTTP+"/v1/tasks/"+ids["carol"]+":watch", nil)
	req.Header.Set("Authorization", "Bearer "+s.token(t, "carol"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Error map[string]any } // a stream's error chunk
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || reason(body.Error) != "WATCH_CAPACITY" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("carol's REST watch at the replica's cap = %d %v Retry-After %q, want 429 WATCH_CAPACITY with Retry-After",
			resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	closeAlice()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cancel, err := watch("carol")
		if err == nil {
			cancel()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("carol's watch after alice closed hers = %v, want the task", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// grpcAs connects to the stack's gRPC port and returns the connection and
// a function giving a context that authenticates as a member.
func grpcAs(t *testing.T, s *stack) (*grpc.ClientConn, func(member string) context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(s.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, func(member string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+s.token(t, member))
	}
}
