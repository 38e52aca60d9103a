package chartcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/yannh/kubeconform/pkg/validator"
	"sigs.k8s.io/yaml"
)

// CRDSchemaDir holds the JSON schemas of the custom resources the chart
// renders, converted from their CustomResourceDefinitions by `make
// crd-schemas`; laid out as <group>/<kind>_<version>.json.
const CRDSchemaDir = "testdata/crd-schemas"

// CustomKinds are the kinds the chart renders that Kubernetes does not
// define; ValidateCustomResources checks each against its schema.
var CustomKinds = map[string]bool{
	"ServiceMonitor":        true,
	"PrometheusRule":        true,
	"ScaledObject":          true,
	"TriggerAuthentication": true,
}

// SchemaFile is one schema converted from a CustomResourceDefinition.
type SchemaFile struct {
	// Path is relative to CRDSchemaDir.
	Path string
	// JSON is the schema.
	JSON []byte
}

// ConvertCRD turns a CustomResourceDefinition into one strict JSON schema
// per served version: every object schema that lists its properties
// refuses any other (as the API server's pruning would silently drop a
// misspelled field), and int-or-string fields accept either type.
func ConvertCRD(data []byte) ([]SchemaFile, error) {
	var crd struct {
		Spec struct {
			Group string `json:"group"`
			Names struct {
				Kind string `json:"kind"`
			} `json:"names"`
			Versions []struct {
				Name   string `json:"name"`
				Served bool   `json:"served"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		return nil, fmt.Errorf("decode CustomResourceDefinition: %w", err)
	}
	if crd.Spec.Group == "" || crd.Spec.Names.Kind == "" {
		return nil, fmt.Errorf("not a CustomResourceDefinition: no spec.group or spec.names.kind")
	}
	var out []SchemaFile
	for _, v := range crd.Spec.Versions {
		if !v.Served || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		strict(v.Schema.OpenAPIV3Schema)
		b, err := json.MarshalIndent(v.Schema.OpenAPIV3Schema, "", " ")
		if err != nil {
			return nil, err
		}
		out = append(out, SchemaFile{
			Path: filepath.Join(crd.Spec.Group, strings.ToLower(crd.Spec.Names.Kind)+"_"+v.Name+".json"),
			JSON: append(b, '\n'),
		})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s.%s: no served version with a schema", crd.Spec.Names.Kind, crd.Spec.Group)
	}
	return out, nil
}

// strict closes every object schema that lists its properties and does not
// preserve unknown fields, and rewrites x-kubernetes-int-or-string.
func strict(s map[string]any) {
	if s["x-kubernetes-int-or-string"] == true {
		s["anyOf"] = []any{map[string]any{"type": "integer"}, map[string]any{"type": "string"}}
	}
	if props, ok := s["properties"].(map[string]any); ok {
		if _, set := s["additionalProperties"]; !set && s["x-kubernetes-preserve-unknown-fields"] != true {
			s["additionalProperties"] = false
		}
		for _, p := range props {
			if m, ok := p.(map[string]any); ok {
				strict(m)
			}
		}
	}
	if m, ok := s["items"].(map[string]any); ok {
		strict(m)
	}
	if m, ok := s["additionalProperties"].(map[string]any); ok {
		strict(m)
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if l, ok := s[k].([]any); ok {
			for _, e := range l {
				if m, ok := e.(map[string]any); ok {
					strict(m)
				}
			}
		}
	}
}

// ValidateCustomResources checks every custom resource of a rendered
// manifest against its committed schema (dir is CRDSchemaDir) with
// kubeconform in strict mode; a kind without a schema is an error. It
// returns how many resources of each kind it validated and what it found.
func ValidateCustomResources(manifest []byte, dir string) (map[string]int, []error, error) {
	v, err := validator.New([]string{filepath.Join(dir, "{{ .Group }}", "{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json")}, validator.Opts{Strict: true})
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconform: %w", err)
	}
	seen := map[string]int{}
	var errs []error
	for _, doc := range splitDocs(manifest) {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil || !CustomKinds[head.Kind] {
			continue
		}
		seen[head.Kind]++
		for _, r := range v.Validate(head.Kind+"/"+head.Metadata.Name, io.NopCloser(bytes.NewReader(doc))) {
			switch r.Status {
			case validator.Valid:
			case validator.Invalid, validator.Error:
				errs = append(errs, fmt.Errorf("%s/%s: %w", head.Kind, head.Metadata.Name, r.Err))
			default:
				errs = append(errs, fmt.Errorf("%s/%s: not validated (no schema?)", head.Kind, head.Metadata.Name))
			}
		}
	}
	return seen, errs, nil
}

// splitDocs splits a multi-document YAML stream on its separators.
func splitDocs(manifest []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(manifest, []byte("\n---")) {
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}
