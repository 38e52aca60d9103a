package chartcheck

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func validateCRs(t *testing.T, manifest []byte) (map[string]int, []error) {
	t.Helper()
	seen, errs, err := ValidateCustomResources(manifest, CRDSchemaDir)
	if err != nil {
		t.Fatal(err)
	}
	return seen, errs
}

// TestCustomResourcesMatchTheirSchemas validates every custom resource the
// chart renders with everything switched on against the schema of its
// CustomResourceDefinition.
func TestCustomResourcesMatchTheirSchemas(t *testing.T) {
	out, err := helm(t).Template(ctx(t), chartDir, []string{allOn})
	if err != nil {
		t.Fatal(err)
	}
	seen, errs := validateCRs(t, out)
	for _, e := range errs {
		t.Error(e)
	}
	for _, kind := range []string{"ServiceMonitor", "PrometheusRule", "ScaledObject"} {
		if seen[kind] == 0 {
			t.Errorf("all-on values rendered no %s: nothing checked its schema", kind)
		}
	}
}

// TestCustomResourceSchemasCatchMisspellings shows the check fails on a
// misspelled field, which the API server would otherwise prune silently.
func TestCustomResourceSchemasCatchMisspellings(t *testing.T) {
	out, err := helm(t).Template(ctx(t), chartDir, []string{allOn})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind, from, to string
	}{
		{"PrometheusRule", "    expr: ", "    exprs: "},
		{"ScaledObject", "  scaleTargetRef:", "  scaleTargetReference:"},
		{"ServiceMonitor", "  endpoints:", "  endpoint:"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			docs := splitDocs(out)
			changed := false
			for i, d := range docs {
				if bytes.Contains(d, []byte("\nkind: "+tc.kind+"\n")) && bytes.Contains(d, []byte(tc.from)) {
					docs[i] = bytes.Replace(d, []byte(tc.from), []byte(tc.to), 1)
					changed = true
					break
				}
			}
			if !changed {
				t.Fatalf("no %s with %q in the rendered chart", tc.kind, tc.from)
			}
			_, errs := validateCRs(t, bytes.Join(docs, []byte("\n---")))
			if len(errs) == 0 {
				t.Fatalf("misspelled %s field %q passed the schema check", tc.kind, strings.TrimSpace(tc.to))
			}
			for _, e := range errs {
				if !strings.HasPrefix(e.Error(), tc.kind+"/") {
					t.Errorf("unexpected error on another object: %v", e)
				}
			}
		})
	}
}

func TestConvertCRDClosesObjects(t *testing.T) {
	crd := []byte(`
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
spec:
  group: example.com
  names: {kind: Widget}
  versions:
  - name: v1
    served: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              port: {x-kubernetes-int-or-string: true}
              free: {type: object, x-kubernetes-preserve-unknown-fields: true, properties: {a: {type: string}}}
  - name: v0
    served: false
`)
	files, err := ConvertCRD(crd)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Path != "example.com/widget_v1.json" {
		t.Fatalf("ConvertCRD paths = %v, want one example.com/widget_v1.json", files)
	}
	want := `{
 "additionalProperties": false,
 "properties": {
  "spec": {
   "additionalProperties": false,
   "properties": {
    "free": {
     "properties": {
      "a": {
       "type": "string"
      }
     },
     "type": "object",
     "x-kubernetes-preserve-unknown-fields": true
    },
    "port": {
     "anyOf": [
      {
       "type": "integer"
      },
      {
       "type": "string"
      }
     ],
     "x-kubernetes-int-or-string": true
    }
   },
   "type": "object"
  }
 },
 "type": "object"
}
`
	if diff := cmp.Diff(want, string(files[0].JSON)); diff != "" {
		t.Errorf("ConvertCRD schema (-want +got):\n%s", diff)
	}
}
