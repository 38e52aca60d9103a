// Package e2e tests orderflow across real processes: the gateway, the
// split-worker, the payment reconciler and both simulators, started by
// pkg/stacktest against the real Redis and RabbitMQ.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

func TestMain(m *testing.M) { os.Exit(stacktest.Main(m)) }

// call sends a JSON request to the gateway and decodes the answer.
func call(t testing.TB, method, url, token string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

// until polls get until done returns true or the deadline passes.
func until(t testing.TB, what string, d time.Duration, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if done() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", d, what)
}

func TestPaymentsAcrossProcesses(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	gw := s.URL(stacktest.Gateway)
	sim := s.URL(stacktest.PaySim)
	tok := s.DevToken(t, "shopper")
	suffix := fmt.Sprint(time.Now().UnixNano() % 1e9)
	paid, never := "PAID-"+suffix, "NEVER-"+suffix

	for _, code := range []string{paid, never} {
		st, body := call(t, "POST", gw+"/v1/payments", tok, map[string]any{"orderCode": code, "amountFen": 1999, "description": "tea"})
		if st != 200 || body["status"] != "PAYMENT_STATUS_UNPAID" || body["codeUrl"] == "" {
			t.Fatalf("POST /v1/payments %s = %d %v, want 200 UNPAID with a codeUrl", code, st, body)
		}
	}
	// The shopper pays and the provider's signed callback reaches the gateway.
	// The provider knows the order by its out_trade_no, the member's and
	// the code's (wechatpay.OutTradeNo).
	if st, body := call(t, "POST", sim+"/admin/orders/"+wechatpay.OutTradeNo("shopper", paid)+"/pay?notify=true", "", nil); st != 200 {
		t.Fatalf("simulator pay = %d %v", st, body)
	}
	var p map[string]any
	until(t, "the callback to mark the order PAID", 10*time.Second, func() bool {
		_, p = call(t, "GET", gw+"/v1/payments/"+paid, tok, nil)
		return p["status"] == "PAYMENT_STATUS_PAID"
	})
	if attempts, _ := p["attempts"].([]any); len(attempts) == 0 || attempts[0].(map[string]any)["action"] != "NOTIFY" {
		t.Errorf("attempts of the paid order = %v, want the NOTIFY first", p["attempts"])
	}
	// Another member cannot see it: the answer is the one for a code
	// nobody used (no oracle).
	other := s.DevToken(t, "someone-else")
	st, seen := call(t, "GET", gw+"/v1/payments/"+paid, other, nil)
	_, unused := call(t, "GET", gw+"/v1/payments/UNUSED-"+suffix, other, nil)
	if st != 404 || fmt.Sprint(seen) != fmt.Sprint(unused) {
		t.Errorf("another member's GET = %d %v, want 404 exactly as for an unused code (%v)", st, seen, unused)
	}
	// Nor can they take the code: placing it makes their own payment, and
	// the shopper's stays PAID.
	if st, body := call(t, "POST", gw+"/v1/payments", other, map[string]any{"orderCode": paid, "amountFen": 1, "description": "squat"}); st != 200 || body["status"] != "PAYMENT_STATUS_UNPAID" || body["amountFen"] != "1" {
		t.Errorf("another member's POST of a used code = %d %v, want 200 with their own UNPAID payment of 1 fen", st, body)
	}
	if _, p := call(t, "GET", gw+"/v1/payments/"+paid, tok, nil); p["status"] != "PAYMENT_STATUS_PAID" || p["amountFen"] != "1999" {
		t.Errorf("the shopper's payment after another member used its code = %v, want PAID 1999", p)
	}
	// The order never paid is queried on the (compressed) schedule, then
	// closed at the provider and locally.
	until(t, "the unpaid order to be CLOSED", 30*time.Second, func() bool {
		_, p = call(t, "GET", gw+"/v1/payments/"+never, tok, nil)
		return p["status"] == "PAYMENT_STATUS_CLOSED"
	})
	var queries, closes int
	for _, a := range p["attempts"].([]any) {
		switch a.(map[string]any)["action"] {
		case "QUERY":
			queries++
		case "CLOSE":
			closes++
		}
	}
	if queries != 3 || closes != 1 {
		t.Errorf("attempts of the never-paid order: %d queries, %d closes; want 3 and 1 (schedule 1s,2s,3s)", queries, closes)
	}
	_, stats := call(t, "GET", sim+"/stats", "", nil)
	if stats["closedAfterPaid"] != float64(0) {
		t.Errorf("simulator closedAfterPaid = %v, want 0", stats["closedAfterPaid"])
	}
}

// TestReflectionReachesEveryMethod is an internal caller with no
// generated code, as grpcurl is: it lists each server's services by
// reflection, reads their descriptors from the server, and calls every
// method with an empty request and the right token. Each answers with its
// own status (not Unimplemented): every method is reachable.
func TestReflectionReachesEveryMethod(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{Services: []string{stacktest.Gateway, stacktest.Reconciler}})
	for _, tc := range []struct {
		addr, token string
		want        []string
	}{
		{s.GRPCAddr(stacktest.Gateway), s.AdminToken(t, "grpc-operator"), []string{"grpc.health.v1.Health", "orderflow.gateway.v1.OrderSplitService",
			"orderflow.gateway.v1.PaymentService", "orderflow.gateway.v1.TaskService", "orderflow.ops.v1.OpsService"}},
		{s.GRPCAddr(stacktest.Reconciler), stacktest.GatewayReconcilerToken, []string{"grpc.health.v1.Health", "orderflow.reconciler.v1.ReconcilerService"}},
	} {
		conn, err := grpc.NewClient(tc.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stream, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ask := func(req *rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
			t.Helper()
			if err := stream.Send(req); err != nil {
				t.Fatal(err)
			}
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("reflection on %s: %v", tc.addr, err)
			}
			return resp
		}
		var got []string
		for _, svc := range ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}).GetListServicesResponse().GetService() {
			got = append(got, svc.GetName())
		}
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("reflection on %s lists %v, missing %s", tc.addr, got, w)
			}
		}
		// The descriptors come with their imports, in no set order:
		// collect them all, then link them.
		set, seenFile := new(descriptorpb.FileDescriptorSet), map[string]bool{}
		for _, name := range tc.want {
			resp := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: name}})
			for _, raw := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
				fdp := new(descriptorpb.FileDescriptorProto)
				if err := proto.Unmarshal(raw, fdp); err != nil {
					t.Fatal(err)
				}
				if !seenFile[fdp.GetName()] {
					seenFile[fdp.GetName()] = true
					set.File = append(set.File, fdp)
				}
			}
		}
		files, err := protodesc.NewFiles(set)
		if err != nil {
			t.Fatalf("descriptors from %s: %v", tc.addr, err)
		}
		methods := 0
		for _, name := range tc.want {
			d, err := files.FindDescriptorByName(protoreflect.FullName(name))
			if err != nil {
				t.Fatalf("%s: not in the descriptors reflection served: %v", name, err)
			}
			sd := d.(protoreflect.ServiceDescriptor)
			for i := range sd.Methods().Len() {
				md := sd.Methods().Get(i)
				methods++
				full := "/" + string(sd.FullName()) + "/" + string(md.Name())
				cctx, ccancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tc.token), 5*time.Second)
				err := callEmpty(cctx, conn, full, md)
				ccancel()
				if code := status.Code(err); code == codes.Unimplemented || code == codes.Unauthenticated || code == codes.PermissionDenied {
					t.Errorf("%s on %s: %v, want the method to run", full, tc.addr, err)
				}
			}
		}
		t.Logf("%s: %d methods reached through reflection", tc.addr, methods)
	}
}

// callEmpty calls method with an empty request built from its descriptor
// and reads the first answer.
func callEmpty(ctx context.Context, conn *grpc.ClientConn, method string, md protoreflect.MethodDescriptor) error {
	in := dynamicpb.NewMessage(md.Input())
	out := dynamicpb.NewMessage(md.Output())
	if !md.IsStreamingServer() && !md.IsStreamingClient() {
		return conn.Invoke(ctx, method, in, out)
	}
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: md.IsStreamingServer(), ClientStreams: md.IsStreamingClient()}, method)
	if err != nil {
		return err
	}
	if err := st.SendMsg(in); err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	return st.RecvMsg(out)
}

// TestPaymentsResumeSoonAfterTheReconcilerReturns: while the reconciler is
// down the gateway's connection backs off between attempts; once it is
// back, payment calls succeed again within a few seconds, not after a
// backoff grown over the outage.
func TestPaymentsResumeSoonAfterTheReconcilerReturns(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	gw := s.URL(stacktest.Gateway)
	tok := s.DevToken(t, "shopper")
	suffix := fmt.Sprint(time.Now().UnixNano() % 1e9)
	pay := func(code string) (int, map[string]any) {
		return call(t, "POST", gw+"/v1/payments", tok, map[string]any{"orderCode": code, "amountFen": 100, "description": "tea"})
	}

	s.Stop(stacktest.Reconciler)
	// Calls during the outage fail, and the connection's backoff grows.
	for i := range 10 {
		st, body := pay(fmt.Sprintf("DOWN-%s-%d", suffix, i))
		if msg, _ := body["message"].(string); st != http.StatusServiceUnavailable || strings.Contains(msg, "dial") || strings.Contains(msg, "127.0.0.1") {
			t.Fatalf("payment while the reconciler is down = %d %v, want 503 naming no internal address", st, body)
		}
		time.Sleep(time.Second)
	}
	s.Start(stacktest.Reconciler)
	back := time.Now()
	for {
		st, body := pay("BACK-" + suffix)
		if st == http.StatusOK {
			t.Logf("payments succeeded again %v after the reconciler was back", time.Since(back).Round(10*time.Millisecond))
			return
		}
		if time.Since(back) > 3*time.Second {
			t.Fatalf("payment 3 s after the reconciler was back = %d %v, want 200", st, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
