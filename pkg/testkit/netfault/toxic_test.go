package netfault_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/netfault"
)

// serve starts a TCP server on a free loopback port that runs handle on
// each connection, and returns its address.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return lis.Addr().String()
}

// echo starts an echo server and returns its address.
func echo(t *testing.T) string {
	return serve(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

// roundTrip sends a line on c and reads it back within wait.
func roundTrip(c net.Conn, r *bufio.Reader, wait time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := c.SetDeadline(start.Add(wait)); err != nil {
		return 0, err
	}
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "ping\n" {
		return 0, errors.New("echo answered " + line)
	}
	return time.Since(start), nil
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func TestToxicLatencyBlackholeHeal(t *testing.T) {
	tx, err := netfault.NewToxic(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	c, r := dial(t, tx.Addr())
	if d, err := roundTrip(c, r, 2*time.Second); err != nil || d > 150*time.Millisecond {
		t.Fatalf("round trip before any fault = %v, %v; want < 150ms, nil", d, err)
	}

	if err := tx.Latency(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d, err := roundTrip(c, r, 2*time.Second); err != nil || d < 300*time.Millisecond {
		t.Fatalf("round trip with 300ms latency on an open connection = %v, %v; want ≥ 300ms, nil", d, err)
	}
	tx.Heal()
	if d, err := roundTrip(c, r, 2*time.Second); err != nil || d > 150*time.Millisecond {
		t.Fatalf("round trip after Heal = %v, %v; want < 150ms, nil", d, err)
	}

	if err := tx.Blackhole(); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c, r, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("round trip through a blackhole: err = %v, want a time-out (no answer, no reset)", err)
	}
	fresh, fr := dial(t, tx.Addr())
	if _, err := roundTrip(fresh, fr, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection through a blackhole: err = %v, want a time-out", err)
	}
	tx.Heal()
	again, ar := dial(t, tx.Addr())
	if _, err := roundTrip(again, ar, 2*time.Second); err != nil {
		t.Fatalf("new connection after Heal: %v", err)
	}
}

func TestToxicCutRestoreRetarget(t *testing.T) {
	tx, err := netfault.NewToxic(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	c, r := dial(t, tx.Addr())
	if _, err := roundTrip(c, r, 2*time.Second); err != nil {
		t.Fatal(err)
	}

	tx.Cut()
	if _, err := roundTrip(c, r, 2*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("open connection after Cut: err = %v, want it closed", err)
	}
	if c, err := net.DialTimeout("tcp", tx.Addr(), time.Second); err == nil {
		_ = c.Close()
		t.Fatal("dial after Cut succeeded, want refused")
	}

	if err := tx.Restore(); err != nil {
		t.Fatal(err)
	}
	c, r = dial(t, tx.Addr())
	if _, err := roundTrip(c, r, 2*time.Second); err != nil {
		t.Fatalf("after Restore: %v", err)
	}

	// A target that answers "PONG" tells which one a connection reached.
	other := serve(t, func(c net.Conn) {
		line, _ := bufio.NewReader(c).ReadString('\n')
		_, _ = c.Write([]byte("PONG " + line))
	})
	addr := tx.Addr()
	if err := tx.Retarget(other); err != nil {
		t.Fatal(err)
	}
	if tx.Addr() != addr {
		t.Fatalf("Addr after Retarget = %s, want %s", tx.Addr(), addr)
	}
	if _, err := roundTrip(c, r, 2*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection to the old target after Retarget: err = %v, want it closed", err)
	}
	nc, nr := dial(t, tx.Addr())
	if _, err := roundTrip(nc, nr, 2*time.Second); err == nil || err.Error() != "echo answered PONG ping\n" {
		t.Fatalf("new connection after Retarget: err = %v, want the new target's answer", err)
	}
}
