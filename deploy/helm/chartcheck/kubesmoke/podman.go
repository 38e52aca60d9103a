package kubesmoke

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Podman runs the podman CLI with the project's containers.conf.
type Podman struct {
	// Path is the podman binary ("podman" looks it up in PATH).
	Path string
	// ContainersConf is passed as CONTAINERS_CONF (runtime and ulimits that
	// work in a container sandbox), so the host's settings stay untouched.
	ContainersConf string
}

// Run runs podman with args and returns its standard output; a failure
// carries the standard error.
func (p Podman) Run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, p.Path, args...)
	cmd.Env = os.Environ()
	if p.ContainersConf != "" {
		cmd.Env = append(cmd.Env, "CONTAINERS_CONF="+p.ContainersConf)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, podmanErrors(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// podmanErrors drops podman 4.3's complaints about the missing systemd
// (it cannot schedule healthcheck timers without it; probes are run by the
// smoke instead).
func podmanErrors(stderr string) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if !strings.Contains(l, "systemd") && l != "" {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// EnvNames runs image with --env-names (no network, read-only root) and
// returns the variables its binary reads.
func (p Podman) EnvNames(ctx context.Context, image string) ([]string, error) {
	out, err := p.Run(ctx, "run", "--rm", "--pull", "never", "--network", "none", "--read-only", image, "--env-names")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// Container is one container as `podman ps --format json` lists it.
type Container struct {
	ID       string   `json:"Id"`
	Names    []string `json:"Names"`
	PodName  string   `json:"PodName"`
	State    string   `json:"State"`
	ExitCode int      `json:"ExitCode"`
	IsInfra  bool     `json:"IsInfra"`
}

// Name is the container's first name.
func (c Container) Name() string {
	if len(c.Names) == 0 {
		return c.ID
	}
	return c.Names[0]
}

// Containers lists every container (running or not) of pods whose name
// starts with podPrefix, infra containers left out.
func (p Podman) Containers(ctx context.Context, podPrefix string) ([]Container, error) {
	out, err := p.Run(ctx, "ps", "-a", "--pod", "--format", "json")
	if err != nil {
		return nil, err
	}
	var all []Container
	if err := json.Unmarshal(out, &all); err != nil {
		return nil, fmt.Errorf("decode podman ps: %w", err)
	}
	var cs []Container
	for _, c := range all {
		if !c.IsInfra && c.PodName != "" && strings.HasPrefix(c.PodName, podPrefix) {
			cs = append(cs, c)
		}
	}
	return cs, nil
}

// RestartCount is how often podman restarted the container under its
// restart policy.
func (p Podman) RestartCount(ctx context.Context, id string) (int, error) {
	out, err := p.Run(ctx, "inspect", "--format", "{{.RestartCount}}", id)
	if err != nil {
		return 0, err
	}
	var n int
	_, err = fmt.Sscan(string(out), &n)
	return n, err
}

// Pid is the host PID of the container's main process.
func (p Podman) Pid(ctx context.Context, id string) (int, error) {
	out, err := p.Run(ctx, "inspect", "--format", "{{.State.Pid}}", id)
	if err != nil {
		return 0, err
	}
	var pid int
	if _, err := fmt.Sscan(string(out), &pid); err != nil || pid <= 0 {
		return 0, fmt.Errorf("container %s has no running process (pid %q)", id, strings.TrimSpace(string(out)))
	}
	return pid, nil
}

// Logs returns the last lines of a container's output.
func (p Podman) Logs(ctx context.Context, id string, lines int) string {
	cmd := exec.CommandContext(ctx, p.Path, "logs", "--tail", fmt.Sprint(lines), id)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+p.ContainersConf)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(podman logs: %v) %s", err, out)
	}
	return string(out)
}
