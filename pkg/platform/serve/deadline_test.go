package serve_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/serve"
)

// TestBodyDeadline: a client that sends part of its body and stalls gets
// its request ended (the handler's read fails, 408) instead of holding the
// connection; a streamed GET response outlives the deadline.
func TestBodyDeadline(t *testing.T) {
	const d = 200 * time.Millisecond
	mux := http.NewServeMux()
	mux.HandleFunc("POST /upload", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "body too slow", http.StatusRequestTimeout)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		for i := range 5 {
			fmt.Fprintf(w, "event %d\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(d)
		}
	})
	srv := httptest.NewServer(serve.BodyDeadline(mux, d))
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // the test's own bound
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil && !strings.Contains(err.Error(), "reset") && err != io.EOF {
		t.Fatalf("slow body: read = %q, %v; want the server to end the request", line, err)
	}
	if err == nil && !strings.Contains(line, "408") {
		t.Errorf("slow body: status line %q, want 408", line)
	}

	resp, err := http.Get(srv.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || strings.Count(string(body), "event") != 5 {
		t.Errorf("stream = %q, %v; want 5 events past the body deadline", body, err)
	}
}
