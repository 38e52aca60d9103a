// Package openapi embeds the gateway's generated OpenAPI v2 document
// (orderflow.swagger.json, written by `make generate` from the protos),
// completes it with the request rules the handlers enforce
// (pkg/platform/rules) and publishes it as OpenAPI 3.1: every error answer
// of each operation with the error body (google.rpc.Status with an
// ErrorInfo) and the business error code catalogue, the security schemes
// (member bearer, the admin role, the provider's signature on the
// payment callback), the callback itself, examples and the body limit.
package openapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/orderflow/orderflow/pkg/platform/rules"
)

// Generated is the OpenAPI v2 document of the gateway's REST API as
// generated from the protos.
//
//go:embed orderflow.swagger.json
var Generated []byte

// Document returns the served OpenAPI 3.1 document: the generated one with
// each rule of tables written into the schema of its field (minLength,
// maxLength and pattern for text, minimum and maximum for integers,
// minItems and maxItems for lists), converted to OpenAPI 3.1. A rule whose
// operation or field the document lacks is an error, as is one field given
// two different bounds.
func Document(tables []rules.Table) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(Generated, &doc); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	for _, t := range tables {
		op, err := operation(doc, t.OperationID())
		if err != nil {
			return nil, err
		}
		for _, r := range t.Rules {
			s, err := fieldSchema(doc, op, r.Field)
			if err != nil {
				return nil, fmt.Errorf("openapi: %s %s: %w", t.OperationID(), r.Field, err)
			}
			if err := apply(s, Keywords(r)); err != nil {
				return nil, fmt.Errorf("openapi: %s %s: %w", t.OperationID(), r.Field, err)
			}
		}
	}
	v31, err := toV31(doc)
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(v31, "", "  ")
}

// Keywords are the JSON Schema keywords stating r.
func Keywords(r *rules.Rule) map[string]any {
	kw := map[string]any{}
	switch r.Kind {
	case rules.Text:
		if r.Min > 0 {
			kw["minLength"] = r.Min
		}
		kw["maxLength"] = r.Max
		if r.Chars != nil {
			kw["pattern"] = r.Chars.Pattern()
		}
	case rules.Int:
		kw["minimum"], kw["maximum"] = r.Min, r.Max
	case rules.List:
		kw["minItems"], kw["maxItems"] = r.Min, r.Max
	}
	return kw
}

func apply(schema map[string]any, kw map[string]any) error {
	for k, v := range kw {
		if old, ok := schema[k]; ok && fmt.Sprint(old) != fmt.Sprint(v) {
			return fmt.Errorf("%s is both %v and %v", k, old, v)
		}
		schema[k] = v
	}
	return nil
}

// operation finds the operation with the given operationId.
func operation(doc map[string]any, id string) (map[string]any, error) {
	paths, _ := doc["paths"].(map[string]any)
	for _, p := range paths {
		methods, _ := p.(map[string]any)
		for _, o := range methods {
			if op, ok := o.(map[string]any); ok && op["operationId"] == id {
				return op, nil
			}
		}
	}
	return nil, fmt.Errorf("openapi: no operation %s", id)
}

// fieldSchema finds the schema of a field path ("orderCode",
// "items[].quantity") of an operation's request: a path or query parameter
// of that name, or a property reached from the body's schema.
func fieldSchema(doc map[string]any, op map[string]any, path string) (map[string]any, error) {
	params, _ := op["parameters"].([]any)
	var body map[string]any
	for _, p := range params {
		pm, _ := p.(map[string]any)
		switch {
		case pm["in"] == "body":
			body, _ = pm["schema"].(map[string]any)
		case pm["name"] == path:
			return pm, nil
		}
	}
	if body == nil {
		return nil, fmt.Errorf("neither a parameter nor a body field")
	}
	s := body
	for _, seg := range strings.Split(path, ".") {
		name, list := strings.CutSuffix(seg, "[]")
		s = resolve(doc, s)
		props, _ := s["properties"].(map[string]any)
		next, ok := props[name].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("no property %s", name)
		}
		s = next
		if list {
			if s, ok = s["items"].(map[string]any); !ok {
				return nil, fmt.Errorf("%s is not an array", name)
			}
		}
	}
	return s, nil
}

// resolve follows a local $ref.
func resolve(doc map[string]any, s map[string]any) map[string]any {
	ref, ok := s["$ref"].(string)
	if !ok {
		return s
	}
	defs, _ := doc["definitions"].(map[string]any)
	d, _ := defs[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
	return d
}
