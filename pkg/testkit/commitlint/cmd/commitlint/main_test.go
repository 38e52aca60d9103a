package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
)

// repo makes a git repository with a first commit and returns its folder
// and a function that commits (or, with merge set, merges branch side
// with) a message.
func repo(t *testing.T) (string, func(msg string)) {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "-b", "main")
	git("commit", "-q", "--allow-empty", "-m", "Start")
	return dir, func(msg string) {
		if side, ok := strings.CutPrefix(msg, "merge:"); ok {
			git("checkout", "-q", "-b", "side")
			git("commit", "-q", "--allow-empty", "-m", "Add a side change")
			git("checkout", "-q", "main")
			git("merge", "-q", "--no-ff", "-m", side, "side")
			return
		}
		git("commit", "-q", "--allow-empty", "--cleanup=verbatim", "-m", msg)
	}
}

func TestRun(t *testing.T) {
	long := "Refuse a split body whose items name a product the catalogue does not know"
	tests := []struct {
		name    string
		commits []string
		wantErr bool
		wantOut string
	}{
		{"in form", []string{"Refuse an empty split body", "Add a body\n\nThe why, and the figures."}, false, "in form"},
		{"long subject fails", []string{"Refuse an empty split body", long}, true, "subject is 74 characters, at most 72"},
		{"trailing period fails", []string{"Refuse an empty split body."}, true, "subject ends with a period"},
		{"no blank line fails", []string{"Refuse an empty split body\nThe why."}, true, "no blank line"},
		{"merge commits skipped", []string{"merge:" + long}, false, "in form"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, commit := repo(t)
			base, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tt.commits {
				commit(m)
			}
			var out bytes.Buffer
			err = run(context.Background(), []string{"-C", dir, "-base", strings.TrimSpace(string(base))}, &out)
			if (err != nil) != tt.wantErr {
				t.Fatalf("run() = %v, want error %v; output:\n%s", err, tt.wantErr, out.String())
			}
			if !strings.Contains(out.String(), tt.wantOut) {
				t.Errorf("run() printed %q, want it to contain %q", out.String(), tt.wantOut)
			}
		})
	}
}

func TestRunWithoutBaseCommit(t *testing.T) {
	dir, _ := repo(t)
	err := run(context.Background(), []string{"-C", dir, "-base", "0123456789abcdef0123456789abcdef01234567"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "base commit") {
		t.Errorf("run() with an unknown base = %v, want an error naming the base commit", err)
	}
}
