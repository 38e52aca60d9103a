package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestRunScriptPrintsAWorkingAdminToken runs `make run`'s script
// (deploy/local/run.sh) on the built services, on free ports and a prefix
// of its own, and checks what it prints: the operations page's URL serves
// the page, the admin token printed is accepted by the operations API, the
// member token printed is refused it (403) and works on the member API.
// Ctrl-C (SIGINT) stops the script with status 0.
func TestRunScriptPrintsAWorkingAdminToken(t *testing.T) {
	root, err := stacktest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The script runs bin/<service> from the directory two levels above
	// it: a copy of it in a tree whose bin holds the built services.
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "deploy", "local"), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(root, "deploy", "local", "run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "deploy", "local", "run.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range stacktest.Services() {
		if err := os.Symlink(stacktest.Binary(t, name), filepath.Join(dir, "bin", name)); err != nil {
			t.Fatal(err)
		}
	}

	_, prefix := testenv.Redis(t)
	testenv.SplitJobQueues(t, prefix)
	port := func() string { return fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) }
	gw, pay, ful, recGRPC := port(), port(), port(), port()
	env := map[string]string{
		"ORDERFLOW_REDIS_ADDR": testenv.RedisAddr(), "ORDERFLOW_REDIS_PREFIX": prefix,
		"ORDERFLOW_AMQP_URL": testenv.AMQPURL(), "ORDERFLOW_AMQP_PREFIX": prefix,
		"ORDERFLOW_GATEWAY_HTTP_ADDR": gw, "ORDERFLOW_GATEWAY_GRPC_ADDR": port(), "ORDERFLOW_GATEWAY_ADMIN_ADDR": port(),
		"ORDERFLOW_GATEWAY_RECONCILER_ADDR": recGRPC, "ORDERFLOW_RECONCILER_GRPC_ADDR": recGRPC,
		"ORDERFLOW_RECONCILER_HTTP_ADDR": port(), "ORDERFLOW_SPLITWORKER_HTTP_ADDR": port(),
		"ORDERFLOW_PAYSIM_ADDR": pay, "ORDERFLOW_PAY_BASE_URL": "http://" + pay,
		"ORDERFLOW_PAY_NOTIFY_URL": "http://" + gw + "/v1/payments/notify", "ORDERFLOW_PAYSIM_NOTIFY_URL": "http://" + gw + "/v1/payments/notify",
		"ORDERFLOW_FULFILMENT_ADDR": ful, "ORDERFLOW_SPLITWORKER_FULFILMENT_URL": "http://" + ful,
		"ORDERFLOW_LOG_LEVEL": "warn",
	}
	cmd := exec.Command("bash", filepath.Join(dir, "deploy", "local", "run.sh"))
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Its own process group, so that whatever it leaves running is ended
	// with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})

	// Read the banner (the services' log lines come first and between).
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	var banner []string
	deadline := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("run.sh ended before its banner:\n%s", strings.Join(banner, "\n"))
			}
			banner = append(banner, l)
			done = strings.Contains(l, "Ctrl-C stops everything")
		case <-deadline:
			t.Fatalf("no banner from run.sh after 30s:\n%s", strings.Join(banner, "\n"))
		}
	}
	go func() {
		for range lines {
		}
		exited <- cmd.Wait()
	}()
	text := strings.Join(banner, "\n")
	after := func(label string) string {
		m := regexp.MustCompile(regexp.QuoteMeta(label) + `[^\n]*\n\s*(\S+)`).FindStringSubmatch(text)
		if m == nil || m[1] == "" {
			t.Fatalf("run.sh printed no %q line with a token below it:\n%s", label, text)
		}
		return m[1]
	}
	admin, member := after("admin token"), after("dev token")
	if want := "operations: http://" + gw + "/ops"; !strings.Contains(text, want) {
		t.Errorf("run.sh banner lacks %q:\n%s", want, text)
	}

	for _, tc := range []struct {
		name, path, token string
		want              int
	}{
		{"ops page", "/ops", "", http.StatusOK},
		{"overview with the admin token", "/v1/ops/overview", admin, http.StatusOK},
		{"overview with the dev token", "/v1/ops/overview", member, http.StatusForbidden},
		{"tasks with the dev token", "/v1/tasks", member, http.StatusOK},
	} {
		if got, _ := call(t, "GET", "http://"+gw+tc.path, tc.token, nil); got != tc.want {
			t.Errorf("%s: GET %s = %d, want %d", tc.name, tc.path, got, tc.want)
		}
	}

	// Ctrl-C in a terminal signals the whole foreground process group.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("run.sh after Ctrl-C: %v, want exit status 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("run.sh still running 20s after Ctrl-C")
	}
}
