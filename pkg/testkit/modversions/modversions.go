// Package modversions finds dependencies whose packages the project's Go
// modules build at different versions. Each service image builds its module on
// its own (GOWORK=off), with the versions its go.mod selects, while the
// tests build the workspace, where the highest requirement wins: a
// dependency at two versions means an image runs code the tests did not.
// It also finds test-only modules that a runtime module needs
// (CheckTestOnly).
package modversions

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// BuildList is a module's selected dependency versions, by module path.
type BuildList map[string]string

// Mismatch is a dependency built at more than one version: the version
// each module (by directory) selects.
type Mismatch struct {
	Path     string
	Versions map[string]string
}

func (m Mismatch) String() string {
	dirs := make([]string, 0, len(m.Versions))
	for d := range m.Versions {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	parts := make([]string, len(dirs))
	for i, d := range dirs {
		parts[i] = d + " " + m.Versions[d]
	}
	return m.Path + ": " + strings.Join(parts, ", ")
}

// Compare returns, sorted by path, the dependencies whose version differs
// between the build lists (by module directory). A dependency only some
// modules use is not a mismatch.
func Compare(lists map[string]BuildList) []Mismatch {
	seen := map[string]map[string]string{}
	for dir, list := range lists {
		for path, v := range list {
			if seen[path] == nil {
				seen[path] = map[string]string{}
			}
			seen[path][dir] = v
		}
	}
	var out []Mismatch
	for path, byDir := range seen {
		first := ""
		for _, v := range byDir {
			if first == "" {
				first = v
			} else if v != first {
				out = append(out, Mismatch{Path: path, Versions: byDir})
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b Mismatch) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Load returns the versions of the modules whose packages the module in
// directory dir builds (`go list -deps ./...`) as its image builds them,
// with the workspace off; with patterns, the versions the workspace in dir
// builds for patterns, their tests included, as `make test` does. The
// workspace's own modules (no version, or replaced by a directory) are
// left out.
func Load(ctx context.Context, dir string, patterns ...string) (BuildList, error) {
	args := []string{"list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{with .Replace}} {{.Path}}{{end}}{{end}}"}
	if len(patterns) > 0 {
		args = append(append(args, "-test"), patterns...)
	} else {
		args = append(args, "./...")
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	if len(patterns) == 0 {
		cmd.Env = append(cmd.Environ(), "GOWORK=off")
	}
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return nil, fmt.Errorf("go list -deps in %s: %w: %s", dir, err, ee.Stderr)
		}
		return nil, fmt.Errorf("go list -deps in %s: %w", dir, err)
	}
	list := BuildList{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue // a main module has no version
		}
		if len(f) == 3 && (strings.HasPrefix(f[2], ".") || filepath.IsAbs(f[2])) {
			continue // a workspace module replaced by its directory
		}
		list[f[0]] = f[1]
	}
	return list, sc.Err()
}
