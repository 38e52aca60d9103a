package app

import (
	"context"
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
	conn, err := grpc.NewClient(s.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	as := func(member string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+s.token(t, member))
	}
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
