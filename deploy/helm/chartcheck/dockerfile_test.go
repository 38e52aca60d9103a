package chartcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// services maps each service folder to its binary (cmd/<binary>).
var services = []string{"gateway", "splitworker", "reconciler", "paysim", "fulfilmentsim"}

func TestDockerfiles(t *testing.T) {
	for _, s := range services {
		t.Run(s, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(repoRoot, "services", s, "Dockerfile"))
			if err != nil {
				t.Fatal(err)
			}
			for _, err := range CheckDockerfile(data, s) {
				t.Error(err)
			}
		})
	}
}

// TestEveryServiceHasADockerfile keeps the list above in step with the
// services folder.
func TestEveryServiceHasADockerfile(t *testing.T) {
	dirs, err := os.ReadDir(filepath.Join(repoRoot, "services"))
	if err != nil {
		t.Fatal(err)
	}
	known := strings.Join(services, " ")
	for _, d := range dirs {
		if d.IsDir() && !strings.Contains(" "+known+" ", " "+d.Name()+" ") {
			t.Errorf("services/%s is not checked: add it to services", d.Name())
		}
	}
}

func TestDockerfileChecksCatchMistakes(t *testing.T) {
	good := `# syntax=docker/dockerfile:1@sha256:` + digest + `
ARG GO_IMAGE=golang:1.26.8-bookworm@sha256:` + digest + `
FROM ${GO_IMAGE} AS build
ENV CGO_ENABLED=0
RUN go build -trimpath -o /out/x ./cmd/x
FROM gcr.io/distroless/static-debian12:nonroot@sha256:` + digest + `
LABEL org.opencontainers.image.title=x org.opencontainers.image.description=x \
      org.opencontainers.image.source=x org.opencontainers.image.version=1 org.opencontainers.image.revision=r
COPY --from=build /out/x /usr/local/bin/x
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/x"]
`
	if errs := CheckDockerfile([]byte(good), "x"); len(errs) != 0 {
		t.Fatalf("CheckDockerfile(good) = %v, want no errors", errs)
	}
	tests := []struct {
		name, from, to, want string
	}{
		{"single stage", "FROM ${GO_IMAGE} AS build\nENV CGO_ENABLED=0\nRUN go build -trimpath -o /out/x ./cmd/x\n", "", "stage(s)"},
		{"root user", "USER 65532:65532", "USER root", "runs as root"},
		{"no user", "USER 65532:65532\n", "", "no USER"},
		{"latest base", "static-debian12:nonroot", "static-debian12:latest", "must be pinned"},
		{"untagged base", "gcr.io/distroless/static-debian12:nonroot@", "scratch-like/base@", "has no tag"},
		{"base by tag only", "nonroot@sha256:" + digest, "nonroot", "not pinned by digest"},
		{"build image by tag only", "bookworm@sha256:" + digest, "bookworm", "not pinned by digest"},
		{"short digest", "nonroot@sha256:" + digest, "nonroot@sha256:" + digest[:12], "not pinned by digest"},
		{"frontend by tag only", "dockerfile:1@sha256:" + digest, "dockerfile:1", "frontend image"},
		{"cgo on", "ENV CGO_ENABLED=0\n", "", "CGO_ENABLED=0"},
		{"no trimpath", "go build -trimpath", "go build", "-trimpath"},
		{"shell entrypoint", `ENTRYPOINT ["/usr/local/bin/x"]`, "ENTRYPOINT /usr/local/bin/x", "shell form"},
		{"missing label", "org.opencontainers.image.revision=r", "", "org.opencontainers.image.revision"},
		{"undefined arg", "ARG GO_IMAGE=golang:1.26.8-bookworm@sha256:" + digest + "\n", "", "unresolved argument"},
		{"unknown instruction", "USER 65532:65532", "USR 65532:65532", "unknown instruction"},
		{"run in final stage", "USER 65532:65532", "RUN --mount=type=cache,target=/c rm -rf /tmp\nUSER 65532:65532", "must only copy"},
		{"lint: casing", "AS build", "as build", "lint FromAsCasing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(good, tc.from) {
				t.Fatalf("test case does not apply: %q not in the Dockerfile", tc.from)
			}
			bad := strings.Replace(good, tc.from, tc.to, 1)
			var msgs []string
			for _, err := range CheckDockerfile([]byte(bad), "x") {
				msgs = append(msgs, err.Error())
			}
			if !strings.Contains(strings.Join(msgs, "\n"), tc.want) {
				t.Errorf("CheckDockerfile(%s) = %q, want an error containing %q", tc.name, msgs, tc.want)
			}
		})
	}
}

// digest is a well-formed sha256 digest for the cases above.
const digest = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestBaseImagesPinnedByDigest checks every Dockerfile and Containerfile
// of the repository: each FROM is scratch, an earlier stage or an image
// pinned by digest.
func TestBaseImagesPinnedByDigest(t *testing.T) {
	var files []string
	for _, pattern := range []string{"services/*/Dockerfile", "deploy/images/*/Dockerfile", "deploy/images/*/Containerfile"} {
		m, err := filepath.Glob(filepath.Join(repoRoot, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < len(services)+2 {
		t.Fatalf("found %d Dockerfiles and Containerfiles, want the services' and deploy/images' (at least %d)", len(files), len(services)+2)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, err := range CheckBaseImages(data) {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestServiceModulesResolveAlone: the images build each service module on
// its own (GOWORK=off, -mod=readonly), so its go.mod and go.sum must be
// complete without the workspace; a dependency added to pkg needs `go mod
// tidy` in every service.
func TestServiceModulesResolveAlone(t *testing.T) {
	for _, s := range services {
		t.Run(s, func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", "./...")
			cmd.Dir = filepath.Join(repoRoot, "services", s)
			cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("GOWORK=off go list -deps ./... in services/%s: %v\n%s", s, err, out)
			}
		})
	}
}
