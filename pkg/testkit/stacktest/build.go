package stacktest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// binaries is the one build a test binary makes: the service binaries are
// compiled the first time a stack is started and reused by every later
// stack of the same test binary. It is process-wide on purpose (building
// five services per test would cost far more than the tests).
var binaries struct {
	once  sync.Once
	root  string
	dir   string
	built []string
	err   error
}

// RepoRoot returns the directory holding go.work: GOWORK when it names a
// file, else the nearest parent of the working directory with a go.work.
func RepoRoot() (string, error) {
	if gw := os.Getenv("GOWORK"); gw != "" && gw != "off" {
		return filepath.Dir(gw), nil
	}
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if gw := strings.TrimSpace(string(out)); err == nil && gw != "" && gw != "off" {
		return filepath.Dir(gw), nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repo root: no go.work above the working directory")
		}
		dir = parent
	}
}

// Available returns the services, in start order, whose command directory
// (services/<name>/cmd/<name>) exists in the repository. A branch that does
// not have a service yet simply runs without it.
func Available() ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, name := range Services() {
		if st, err := os.Stat(filepath.Join(root, cmdDir(name))); err == nil && st.IsDir() {
			names = append(names, name)
		}
	}
	return names, nil
}

func cmdDir(name string) string { return filepath.Join("services", name, "cmd", name) }

// build compiles every available service once per test binary into a
// temporary directory and returns it with the names built.
func build() (dir string, built []string, err error) {
	binaries.once.Do(func() {
		binaries.root, binaries.err = RepoRoot()
		if binaries.err != nil {
			return
		}
		binaries.built, binaries.err = Available()
		if binaries.err != nil {
			return
		}
		binaries.dir, binaries.err = os.MkdirTemp("", "orderflow-stacktest-bin-")
		if binaries.err != nil {
			return
		}
		args := []string{"build", "-o", binaries.dir + string(os.PathSeparator)}
		for _, name := range binaries.built {
			args = append(args, "./"+filepath.ToSlash(cmdDir(name)))
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = binaries.root
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			binaries.err = fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out.String())
		}
	})
	return binaries.dir, binaries.built, binaries.err
}

// Main runs the tests of a package that starts stacks and removes the
// built binaries afterwards. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(stacktest.Main(m)) }
func Main(m interface{ Run() int }) int {
	code := m.Run()
	if binaries.dir != "" {
		_ = os.RemoveAll(binaries.dir)
	}
	return code
}

// Binary returns the path of service name's binary, building every
// available service once per test binary. Tests that run a service's real
// binary on their own (for example to watch it refuse to start) use it.
func Binary(t testing.TB, name string) string {
	t.Helper()
	dir, built, err := build()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(built, name) {
		t.Skipf("service %s is not in this repository", name)
	}
	return filepath.Join(dir, name)
}
