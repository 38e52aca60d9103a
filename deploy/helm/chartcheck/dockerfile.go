package chartcheck

import (
	"fmt"
	"os"
	"regexp"
	"strings"
)

// RequiredLabels are the OCI annotations every final image carries.
var RequiredLabels = []string{
	"org.opencontainers.image.title",
	"org.opencontainers.image.description",
	"org.opencontainers.image.source",
	"org.opencontainers.image.version",
	"org.opencontainers.image.revision",
}

// CheckDockerfile parses a service's Dockerfile (dockerparse.go) and
// checks that it builds binary in a Go stage (CGO off, -trimpath) and
// ships it in a final stage that runs as a non-root user, from base images
// pinned by digest, with the OCI labels.
func CheckDockerfile(data []byte, binary string) []error {
	df, errs := parseDockerfile(data)
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	stages := df.stages
	if len(stages) < 2 {
		add("%d stage(s), want a build stage and a final stage", len(stages))
		return errs
	}
	errs = append(errs, checkBases(df)...)
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

// CheckBaseImages checks that every FROM of a Dockerfile or Containerfile
// that is not scratch or an earlier stage, and a # syntax= frontend,
// names an image pinned by digest.
func CheckBaseImages(data []byte) []error {
	df, errs := parseDockerfile(data)
	return append(errs, checkBases(df)...)
}

func checkBases(df dockerfile) []error {
	var errs []error
	if df.syntax != "" {
		if err := checkBaseImage(df.syntax); err != nil {
			errs = append(errs, fmt.Errorf("# syntax=%s (a frontend image BuildKit pulls): %w", df.syntax, err))
		}
	}
	names := map[string]bool{}
	for _, s := range df.stages {
		base := os.Expand(s.base, func(k string) string {
			if v, ok := df.metaArgs[k]; ok {
				return v
			}
			return "${" + k + "}"
		})
		// FROM an earlier stage (possibly chosen by an argument, as in
		// FROM ${BINARY}) or the empty image needs no pin.
		if !names[base] && base != "scratch" {
			if err := checkBaseImage(base); err != nil {
				errs = append(errs, fmt.Errorf("line %d: FROM %s: %w", s.from.line, s.base, err))
			}
		}
		if s.name != "" {
			names[s.name] = true
		}
	}
	return errs
}

// digestRef is an image reference that ends in a sha256 digest.
var digestRef = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)

// checkBaseImage wants a tag other than latest, for the reader, and a
// digest, which decides which image is pulled.
func checkBaseImage(image string) error {
	if strings.Contains(image, "$") {
		return fmt.Errorf("unresolved argument in %q", image)
	}
	name, _, _ := strings.Cut(image, "@")
	if err := checkImage(name); err != nil {
		return err
	}
	if !digestRef.MatchString(image) {
		return fmt.Errorf("image %q is not pinned by digest (name:tag@sha256:<64 hex digits>)", image)
	}
	return nil
}

func runLines(stages []stage) []string {
	var lines []string
	for _, s := range stages {
		for _, c := range s.commands {
			if c.cmd == "RUN" {
				if argv, ok := execForm(c.args); ok {
					lines = append(lines, strings.Join(argv, " "))
				} else {
					lines = append(lines, c.args)
				}
			}
		}
	}
	return lines
}

func envOf(stages []stage) map[string]string {
	env := map[string]string{}
	for _, s := range stages {
		for _, c := range s.commands {
			if c.cmd == "ENV" {
				for k, v := range keyValues(c.args) {
					env[k] = v
				}
			}
		}
	}
	return env
}

func checkFinalStage(final stage, binary string) []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	user, labels, entrypoint, copied := "", map[string]string{}, []string(nil), false
	for _, c := range final.commands {
		switch c.cmd {
		case "USER":
			user = c.args
		case "LABEL":
			for k, v := range keyValues(c.args) {
				labels[k] = v
			}
		case "ENTRYPOINT":
			argv, ok := execForm(c.args)
			if !ok {
				add("ENTRYPOINT is in shell form: use the exec (JSON) form so SIGTERM reaches the service")
				argv = words(c.args)
			}
			entrypoint = argv
		case "COPY":
			if c.flags["from"] != "" {
				copied = true
			}
		case "RUN":
			add("final stage runs %q: it must only copy the binary", c.args)
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
