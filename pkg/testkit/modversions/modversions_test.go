package modversions_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/orderflow/orderflow/pkg/testkit/modversions"
)

func TestCompareFindsADependencyAtTwoVersions(t *testing.T) {
	got := modversions.Compare(map[string]modversions.BuildList{
		"go.work":      {"golang.org/x/sync": "v0.25.0", "github.com/a/b": "v1.0.0"},
		"./pkg":        {"golang.org/x/sync": "v0.24.0", "github.com/a/b": "v1.0.0"},
		"./services/x": {"golang.org/x/sync": "v0.25.0", "github.com/only/here": "v0.1.0"},
	})
	want := []modversions.Mismatch{{Path: "golang.org/x/sync", Versions: map[string]string{
		"go.work": "v0.25.0", "./pkg": "v0.24.0", "./services/x": "v0.25.0"}}}
	if !cmp.Equal(got, want) {
		t.Errorf("Compare = %v, want %v", got, want)
	}
	if s := got[0].String(); s != "golang.org/x/sync: ./pkg v0.24.0, ./services/x v0.25.0, go.work v0.25.0" {
		t.Errorf("String() = %q", s)
	}
	if got := modversions.Compare(map[string]modversions.BuildList{
		"go.work": {"golang.org/x/sync": "v0.25.0"}, "./pkg": {"golang.org/x/sync": "v0.25.0"},
	}); len(got) != 0 {
		t.Errorf("Compare(one version) = %v, want none", got)
	}
}
