// Package configdoc generates docs/configuration.md from the services'
// configuration structs: each service binary prints its fields (the
// struct tags env, envDefault, desc, range, prod and testonly; see
// config.Field) when started with config.ConfigDocArg, and Render merges
// them into one page, the settings read by several services first, then
// each service's own, then the test-only ones apart.
package configdoc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/orderflow/orderflow/pkg/platform/config"
)

// Services are the services whose configuration the page describes, in
// the order of its sections; the simulators last.
var Services = []string{"gateway", "splitworker", "reconciler", "paysim", "fulfilmentsim"}

// simulators stand in for external systems in development and tests.
var simulators = map[string]bool{"paysim": true, "fulfilmentsim": true}

// Outside describes the variables the services read outside their
// configuration structs (they name them as the extra names of
// config.PrintEnvNames).
var Outside = map[string]config.Field{
	"ORDERFLOW_LOG_LEVEL": {
		Type: "string", Default: "info", Range: "debug, info, warn, error",
		Desc: "Lowest level of the JSON log lines written to standard error; an unknown value means info.",
	},
}

// Harness describes the variables the tests and benchmarks read (set on
// the go test or make command line), not the services. Variables a test
// sets for its own child processes are not listed.
var Harness = []config.Field{
	{Name: "ORDERFLOW_REDIS_ADDR", Desc: "Redis the tests use (default 127.0.0.1:6379); each test isolates itself with a fresh key prefix."},
	{Name: "ORDERFLOW_AMQP_URL", Desc: "RabbitMQ the tests use (default amqp://guest:guest@127.0.0.1:5672/); each test isolates itself with a fresh vhost."},
	{Name: "ORDERFLOW_CHAOS", Desc: "full runs every fault-suite row at its full length (make chaos); partition runs only the rows on replicated engines (make partition); unset runs the short rows (make test)."},
	{Name: "ORDERFLOW_CHAOS_RECORD", Desc: "1 records the fault suite's rows into pkg/testkit/chaos/testdata/latest.json, which make docs writes into docs/reliability.md."},
	{Name: "ORDERFLOW_CHAOS_KEEP_LOGS", Desc: "1 keeps the service logs of every fault-suite row, not only of the failed ones."},
	{Name: "ORDERFLOW_CHAOS_MIN_REPLICAS", Desc: "min-replicas-to-write of the Sentinel rows' Redis servers (default 2)."},
	{Name: "ORDERFLOW_CHAOS_MIN_REPLICAS_MAX_LAG", Desc: "min-replicas-max-lag of the Sentinel rows' Redis servers, in seconds (default 1)."},
	{Name: "ORDERFLOW_CHAOS_MIN_REPLICA_ACKS", Desc: "ORDERFLOW_REDIS_MIN_REPLICA_ACKS of the services in the Sentinel rows (default 2; 0 shows what is lost without)."},
	{Name: "ORDERFLOW_CHAOS_CLUSTER_MIN_REPLICAS", Desc: "min-replicas-to-write of the Redis Cluster rows' nodes (default 1)."},
	{Name: "ORDERFLOW_CHAOS_CLUSTER_MIN_REPLICA_ACKS", Desc: "ORDERFLOW_REDIS_MIN_REPLICA_ACKS of the services in the Redis Cluster rows (default 1; 0 shows what is lost without)."},
	{Name: "ORDERFLOW_BENCH_OUT", Desc: "File the benchmarks append their figures to (make bench sets it)."},
	{Name: "ORDERFLOW_BENCH_PIN", Desc: "CLIENT:SERVER CPU lists of the pinned benchmark pass, e.g. 0:1 (make bench sets it)."},
	{Name: "ORDERFLOW_BENCH_PROFILE", Desc: "Directory where a benchmark's serving child process writes CPU and block profiles of its whole life."},
	{Name: "ORDERFLOW_RECONCILE_TEST_ORDERS", Desc: "Orders of the two-replica reconciler test (default 500; make bench runs 10,000)."},
	{Name: "ORDERFLOW_SCREENSHOT_DIR", Desc: "Directory where the browser tests keep their screenshots (default: a temporary one)."},
}

// Service is one service's configuration as its binary prints it.
type Service struct {
	Name   string
	Fields []config.Field
}

// Collect builds every service of Services found under root (the
// directory holding go.work) into a temporary directory and reads each
// one's fields from its ConfigDocArg output.
func Collect(ctx context.Context, root string) ([]Service, error) {
	dir, err := os.MkdirTemp("", "orderflow-configdoc-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var names []string
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	for _, name := range Services {
		cmdDir := filepath.Join("services", name, "cmd", name)
		if _, err := os.Stat(filepath.Join(root, cmdDir)); err != nil {
			continue
		}
		names = append(names, name)
		args = append(args, "./"+filepath.ToSlash(cmdDir))
	}
	build := exec.CommandContext(ctx, "go", args...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	var out []Service
	for _, name := range names {
		cmd := exec.CommandContext(ctx, filepath.Join(dir, name), config.ConfigDocArg)
		cmd.Env = []string{} // the defaults, whatever this shell sets
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		data, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w\n%s", name, config.ConfigDocArg, err, stderr.String())
		}
		s := Service{Name: name}
		if err := json.Unmarshal(data, &s.Fields); err != nil {
			return nil, fmt.Errorf("%s %s: %w", name, config.ConfigDocArg, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// setting is one variable with what each service that reads it says of it.
type setting struct {
	name     string
	readBy   []string
	fields   []config.Field // one per reader, in readBy's order
	testOnly bool
}

// Render returns docs/configuration.md for services. It fails, naming
// them, when a variable has no description.
func Render(services []Service) (string, error) {
	byName := map[string]*setting{}
	missing := map[string][]string{} // variable → services that do not describe it
	for _, s := range services {
		for _, f := range s.Fields {
			if f.Type == "" {
				o, ok := Outside[f.Name]
				if !ok {
					missing[f.Name+" (read outside the config structs: add it to configdoc.Outside)"] = nil
					continue
				}
				o.Name = f.Name
				f = o
			}
			if strings.TrimSpace(f.Desc) == "" {
				missing[f.Name] = append(missing[f.Name], s.Name)
			}
			st := byName[f.Name]
			if st == nil {
				st = &setting{name: f.Name}
				byName[f.Name] = st
			}
			if slices.Contains(st.readBy, s.Name) {
				continue // one struct reads it twice (nested configs)
			}
			st.readBy = append(st.readBy, s.Name)
			st.fields = append(st.fields, f)
			st.testOnly = st.testOnly || f.TestOnly
		}
	}
	if len(missing) > 0 {
		var list []string
		for name, readers := range missing {
			if len(readers) > 0 {
				name += " (" + strings.Join(readers, ", ") + ")"
			}
			list = append(list, name)
		}
		slices.Sort(list)
		return "", fmt.Errorf("settings without a description (tag desc:\"…\" on the field): %s", strings.Join(list, "; "))
	}

	sections := map[string][]*setting{}
	for _, st := range byName {
		key := st.readBy[0]
		switch {
		case st.testOnly:
			key = "testonly"
		case len(st.readBy) > 1:
			key = "shared"
		}
		sections[key] = append(sections[key], st)
	}

	var b strings.Builder
	b.WriteString(header)
	writeSection(&b, "Read by several services", "", sections["shared"])
	for _, name := range Services {
		intro := ""
		if simulators[name] {
			intro = "A simulator for development and tests; it is not deployed in production.\n\n"
		}
		writeSection(&b, name, intro, sections[name])
	}
	writeSection(&b, "Test-only settings", testOnlyIntro, sections["testonly"])
	b.WriteString(harnessIntro)
	for _, f := range Harness {
		fmt.Fprintf(&b, "| `%s` | %s |\n", f.Name, escape(f.Desc))
	}
	return b.String(), nil
}

const header = `# Configuration

<!-- generated from the services' config structs by ` + "`make docs`" + ` (pkg/platform/config/configdoc); do not edit -->

Every service reads its settings from ` + "`ORDERFLOW_*`" + ` environment variables at
start-up, validates them and refuses to start, naming the variable, when one
is wrong. ` + "`ORDERFLOW_ENV`" + ` is ` + "`production`" + ` unless set to ` + "`development`" + `:
production applies each setting's production rule and refuses every
test-only setting. A service started with ` + "`--env-names`" + ` prints the
variables it reads; with ` + "`--config-doc`" + ` it prints this page's source.

Types: a duration is Go's (` + "`1500ms`, `30s`, `24h`" + `); a secret is masked
when the configuration is logged. An empty default means unset.

`

const testOnlyIntro = `Knobs for the fault suite and other tests (a skewed clock, say). They are
not part of the production surface: outside development a service refuses
to start when one is changed from its default.

`

const harnessIntro = `## Test-suite variables

Read by the tests and benchmarks, not by the services; set them on the
` + "`go test` or `make`" + ` command line.

| variable | description |
| --- | --- |
`

// writeSection writes one table of settings, sorted by name.
func writeSection(b *strings.Builder, title, intro string, settings []*setting) {
	if len(settings) == 0 {
		return
	}
	slices.SortFunc(settings, func(x, y *setting) int { return strings.Compare(x.name, y.name) })
	fmt.Fprintf(b, "## %s\n\n%s", title, intro)
	b.WriteString("| variable | type | default | range | read by | production rule | description |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, st := range settings {
		fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s | %s | %s |\n", st.name,
			cell(st, func(f config.Field) string { return f.Type }),
			cell(st, func(f config.Field) string { return code(f.Default) }),
			cell(st, func(f config.Field) string { return f.Range }),
			strings.Join(st.readBy, ", "),
			cell(st, func(f config.Field) string { return f.Prod }),
			cell(st, func(f config.Field) string { return f.Desc }))
	}
	b.WriteString("\n")
}

// cell is one column of a setting: the value when every reader agrees,
// else each distinct value after the readers that give it, one per line.
func cell(st *setting, get func(config.Field) string) string {
	var vals []string
	readers := map[string][]string{}
	for i, f := range st.fields {
		v := get(f)
		if _, ok := readers[v]; !ok {
			vals = append(vals, v)
		}
		readers[v] = append(readers[v], st.readBy[i])
	}
	if len(vals) == 1 {
		return escape(vals[0])
	}
	var parts []string
	for _, v := range vals {
		shown := v
		if shown == "" {
			shown = "–"
		}
		parts = append(parts, strings.Join(readers[v], ", ")+": "+escape(shown))
	}
	return strings.Join(parts, "<br>")
}

func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + s + "`"
}

func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// ErrDrift is returned by Check when the page differs from the code.
var ErrDrift = errors.New("docs/configuration.md differs from the config structs: run make docs")

// Path is the generated page, relative to the repository root.
const Path = "docs/configuration.md"

// Write regenerates root's docs/configuration.md; with check it writes
// nothing and returns ErrDrift when the page differs.
func Write(ctx context.Context, root string, check bool) error {
	services, err := Collect(ctx, root)
	if err != nil {
		return err
	}
	page, err := Render(services)
	if err != nil {
		return err
	}
	path := filepath.Join(root, Path)
	if check {
		old, err := os.ReadFile(path)
		if err != nil || string(old) != page {
			return ErrDrift
		}
		return nil
	}
	return os.WriteFile(path, []byte(page), 0o644)
}
