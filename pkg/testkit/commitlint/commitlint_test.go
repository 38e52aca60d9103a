package commitlint_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/orderflow/orderflow/pkg/testkit/commitlint"
)

func TestCheck(t *testing.T) {
	long := "Refuse " + strings.Repeat("x", 66) // 73 characters
	tests := []struct {
		name string
		msg  string
		want []string
	}{
		{"subject only", "Refuse a split body without items\n", nil},
		{"subject and body", "Refuse a split body without items\n\nThe why.\nMore why.\n", nil},
		{"72 characters", "Refuse " + strings.Repeat("x", 65) + "\n", nil},
		{"72 characters not bytes", "Describe the café " + strings.Repeat("é", 54) + "\n", nil},
		{"73 characters", long + "\n", []string{"subject is 73 characters, at most 72"}},
		{"trailing period", "Refuse a split body without items.\n", []string{"subject ends with a period"}},
		{"no blank line", "Refuse a split body without items\nThe why.\n", []string{"no blank line between the subject and the body"}},
		{"all three", long + ".\nThe why.\n", []string{
			"subject is 74 characters, at most 72", "subject ends with a period", "no blank line between the subject and the body",
		}},
		{"empty", "\n", []string{"empty subject"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, commitlint.Check(tt.msg)); diff != "" {
				t.Errorf("Check(%q) (-want +got):\n%s", tt.msg, diff)
			}
		})
	}
}
