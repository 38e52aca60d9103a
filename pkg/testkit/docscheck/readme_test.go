package docscheck_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// maxREADMELines keeps the README something a newcomer reads in minutes;
// the rest belongs in docs/.
const maxREADMELines = 300

var docLink = regexp.MustCompile(`\]\((docs/[^)#\s]+\.md)(#[^)]*)?\)`)

func TestREADMEIsShortAndLinksEveryDocsPage(t *testing.T) {
	root, err := stacktest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > maxREADMELines {
		t.Errorf("README.md has %d lines, want at most %d: move the detail into docs/", n, maxREADMELines)
	}
	linked := map[string]bool{}
	for _, m := range docLink.FindAllStringSubmatch(string(readme), -1) {
		linked[m[1]] = true
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("README.md links %s, which does not exist", m[1])
		}
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md found")
	}
	for _, p := range pages {
		if rel := "docs/" + filepath.Base(p); !linked[rel] {
			t.Errorf("README.md does not link %s", rel)
		}
	}
}
