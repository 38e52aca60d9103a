package chartcheck

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// RequiredLabels are the OCI annotations every final image carries.
var RequiredLabels = []string{
	"org.opencontainers.image.title",
	"org.opencontainers.image.description",
	"org.opencontainers.image.source",
	"org.opencontainers.image.version",
	"org.opencontainers.image.revision",
}

// CheckDockerfile parses a service's Dockerfile with BuildKit's parser and
// linter and checks that it builds binary in a Go stage (CGO off,
// -trimpath) and ships it in a final stage that runs as a non-root user,
// from base images pinned to a tag other than latest, with the OCI labels.
func CheckDockerfile(data []byte, binary string) []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	res, err := parser.Parse(bytes.NewReader(data))
	if err != nil {
		return []error{fmt.Errorf("parse: %w", err)}
	}
	for _, w := range res.Warnings {
		add("parser: line %d: %s", w.Location.Start.Line, w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		add("lint %s: line %d: %s", rule, line, msg)
	}})
	stages, metaArgs, err := instructions.Parse(res.AST, lint)
	if err != nil {
		return append(errs, fmt.Errorf("instructions: %w", err))
	}
	args := map[string]string{}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			if kv.Value != nil {
				args[kv.Key] = *kv.Value
			}
		}
	}
	if len(stages) < 2 {
		add("%d stage(s), want a build stage and a final stage", len(stages))
		return errs
	}
	names := map[string]bool{}
	for _, s := range stages {
		base := os.Expand(s.BaseName, func(k string) string {
			if v, ok := args[k]; ok {
				return v
			}
			return "${" + k + "}"
		})
		if names[base] || base == "scratch" {
			// FROM an earlier stage (possibly chosen by an argument, as in
			// FROM ${BINARY}), or the empty image.
			if s.Name != "" {
				names[s.Name] = true
			}
			continue
		}
		if err := checkBaseImage(base); err != nil {
			add("FROM %s: %w", s.BaseName, err)
		}
		if s.Name != "" {
			names[s.Name] = true
		}
	}
	build := strings.Join(runLines(stages[:len(stages)-1]), "\n")
	env := envOf(stages[:len(stages)-1])
	if env["CGO_ENABLED"] != "0" && !strings.Contains(build, "CGO_ENABLED=0") {
		add("build stages do not set CGO_ENABLED=0")
	}
	if !strings.Contains(build, "go build -trimpath") || !strings.Contains(build, "./cmd/"+binary) {
		add("build stages do not run `go build -trimpath ... ./cmd/%s`", binary)
	}
	errs = append(errs, checkFinalStage(stages[len(stages)-1], binary)...)
	return errs
}

// checkBaseImage wants an explicit tag other than latest (or a digest).
func checkBaseImage(image string) error {
	if strings.Contains(image, "$") {
		return fmt.Errorf("unresolved argument in %q", image)
	}
	if strings.Contains(image, "@sha256:") {
		return nil
	}
	return checkImage(image)
}

func runLines(stages []instructions.Stage) []string {
	var lines []string
	for _, s := range stages {
		for _, c := range s.Commands {
			if r, ok := c.(*instructions.RunCommand); ok {
				lines = append(lines, strings.Join(r.CmdLine, " "))
			}
		}
	}
	return lines
}

func envOf(stages []instructions.Stage) map[string]string {
	env := map[string]string{}
	for _, s := range stages {
		for _, c := range s.Commands {
			if e, ok := c.(*instructions.EnvCommand); ok {
				for _, kv := range e.Env {
					env[kv.Key] = kv.Value
				}
			}
		}
	}
	return env
}

func checkFinalStage(final instructions.Stage, binary string) []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	user, labels, entrypoint, copied := "", map[string]string{}, []string(nil), false
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.LabelCommand:
			for _, kv := range c.Labels {
				labels[kv.Key] = kv.Value
			}
		case *instructions.EntrypointCommand:
			if c.PrependShell {
				add("ENTRYPOINT is in shell form: use the exec (JSON) form so SIGTERM reaches the service")
			}
			entrypoint = c.CmdLine
		case *instructions.CopyCommand:
			if c.From != "" {
				copied = true
			}
		case *instructions.RunCommand:
			add("final stage runs %q: it must only copy the binary", strings.Join(c.CmdLine, " "))
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	switch uid {
	case "":
		add("final stage has no USER")
	case "0", "root":
		add("final stage runs as root (USER %s)", user)
	}
	for _, l := range RequiredLabels {
		if labels[l] == "" {
			add("final stage has no label %s", l)
		}
	}
	if !copied {
		add("final stage copies nothing from the build stage")
	}
	if len(entrypoint) == 0 || !strings.HasSuffix(entrypoint[0], "/"+binary) {
		add("ENTRYPOINT %q does not run %s", entrypoint, binary)
	}
	return errs
}
