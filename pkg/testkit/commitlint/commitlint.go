// Package commitlint checks commit messages against the project's form: a
// subject of at most MaxSubject characters with no trailing period, and a
// blank line between the subject and the body. `make lint` runs it over
// the commits after a base commit (cmd/commitlint).
package commitlint

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"unicode/utf8"
)

// MaxSubject is the longest subject line allowed, in characters.
const MaxSubject = 72

// Problem is one commit whose message breaks the form.
type Problem struct {
	// Commit is the commit's full hash.
	Commit string
	// Subject is the message's first line.
	Subject string
	// Reasons says what is wrong, one entry per rule broken.
	Reasons []string
}

// String formats p as "<short hash> <subject>: <reasons>".
func (p Problem) String() string {
	return fmt.Sprintf("%.10s %q: %s", p.Commit, p.Subject, strings.Join(p.Reasons, "; "))
}

// Check returns what is wrong with the commit message msg, or nil when it
// keeps the form.
func Check(msg string) []string {
	lines := strings.Split(strings.TrimRight(msg, "\n"), "\n")
	subject := lines[0]
	var reasons []string
	if strings.TrimSpace(subject) == "" {
		return []string{"empty subject"}
	}
	if n := utf8.RuneCountInString(subject); n > MaxSubject {
		reasons = append(reasons, fmt.Sprintf("subject is %d characters, at most %d", n, MaxSubject))
	}
	if strings.HasSuffix(strings.TrimSpace(subject), ".") {
		reasons = append(reasons, "subject ends with a period")
	}
	if len(lines) > 1 && strings.TrimSpace(lines[1]) != "" {
		reasons = append(reasons, "no blank line between the subject and the body")
	}
	return reasons
}

// Range checks every commit reachable from head but not from base in the
// git repository at dir, merge commits excepted, and returns the commits
// whose messages break the form, oldest first.
func Range(ctx context.Context, dir, base, head string) ([]Problem, error) {
	if err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "--verify", "--quiet", base+"^{commit}").Run(); err != nil {
		return nil, fmt.Errorf("base commit %s not found in %s (a shallow clone? fetch it or set another base): %w", base, dir, err)
	}
	// Each record: RS, full hash, NUL, raw message.
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "log", "--no-merges", "--reverse",
		"--format=%x1e%H%x00%B", base+".."+head).Output()
	if err != nil {
		return nil, fmt.Errorf("git log %s..%s: %w", base, head, err)
	}
	var problems []Problem
	for rec := range bytes.SplitSeq(out, []byte{0x1e}) {
		hash, msg, ok := bytes.Cut(rec, []byte{0})
		if !ok {
			continue
		}
		if reasons := Check(string(msg)); reasons != nil {
			subject, _, _ := strings.Cut(string(msg), "\n")
			problems = append(problems, Problem{Commit: string(hash), Subject: subject, Reasons: reasons})
		}
	}
	return problems, nil
}
