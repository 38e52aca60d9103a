// Package npmtest lets Go tests drive npm packages pinned by a lock file:
// it skips a test, saying why, where Node.js or npm is missing, and
// installs a directory's locked packages with npm ci unless the installed
// copy of the package the test needs already has the locked version.
package npmtest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var installs sync.Map // dir → *install

type install struct {
	once sync.Once
	err  error
}

// Install skips t unless node and npm are on PATH, then makes sure the
// packages locked in dir/package-lock.json are installed: npm ci runs
// (once per test binary and directory) unless dir/node_modules holds pkg
// at its locked version.
func Install(t testing.TB, dir, pkg string) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: this test needs Node.js and npm (Debian packages nodejs and npm; make test-deps installs them)", tool)
		}
	}
	v, _ := installs.LoadOrStore(dir, &install{})
	in := v.(*install)
	in.once.Do(func() { in.err = ensure(dir, pkg) })
	if in.err != nil {
		t.Fatal(in.err)
	}
}

func ensure(dir, pkg string) error {
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return err
	}
	var l struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	if err := json.Unmarshal(lock, &l); err != nil {
		return fmt.Errorf("%s/package-lock.json: %w", dir, err)
	}
	want := l.Packages["node_modules/"+pkg].Version
	if want == "" {
		return fmt.Errorf("%s/package-lock.json does not lock %s", dir, pkg)
	}
	installed, _ := os.ReadFile(filepath.Join(dir, "node_modules", pkg, "package.json"))
	var p struct{ Version string }
	if json.Unmarshal(installed, &p) == nil && p.Version == want {
		return nil
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--prefer-offline")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("npm ci in %s: %w\n%s", dir, err, out)
	}
	return nil
}

// Run runs name with args in dir with the extra environment and returns
// its standard output; a failure fails t with both outputs.
func Run(t testing.TB, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr []byte
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	if err != nil {
		t.Fatalf("%s %v in %s: %v\n%s%s", name, args, dir, err, out, stderr)
	}
	return out
}
