package config

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"
)

// Field describes one environment variable a configuration reads, from
// the struct tags of its field:
//
//	env:"ORDERFLOW_X"       the variable (github.com/caarlos0/env)
//	envDefault:"…"          its default
//	desc:"…"                what it sets, in a sentence (required)
//	range:"…"               the values accepted, when narrower than the type's
//	prod:"…"                the rule production applies to it
//	testonly:"true"         a knob for tests only (a skewed clock, a hook):
//	                        refused at start-up outside development
//
// docs/configuration.md is generated from them (configdoc).
type Field struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Default  string `json:"default,omitempty"`
	Desc     string `json:"desc,omitempty"`
	Range    string `json:"range,omitempty"`
	Prod     string `json:"prod,omitempty"`
	TestOnly bool   `json:"testOnly,omitempty"`

	index []int
}

// Fields returns the variables a T reads, in the order of its fields,
// nested structs (without an env tag) walked in place.
func Fields[T any]() []Field {
	var out []Field
	walkFields(reflect.TypeFor[T](), nil, &out)
	return out
}

func walkFields(t reflect.Type, index []int, out *[]Field) {
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		idx := append(append([]int(nil), index...), i)
		key, _, _ := strings.Cut(sf.Tag.Get("env"), ",")
		if key == "" {
			if sf.Type.Kind() == reflect.Struct {
				walkFields(sf.Type, idx, out)
			}
			continue
		}
		*out = append(*out, Field{
			Name:     key,
			Type:     typeName(sf.Type),
			Default:  sf.Tag.Get("envDefault"),
			Desc:     sf.Tag.Get("desc"),
			Range:    sf.Tag.Get("range"),
			Prod:     sf.Tag.Get("prod"),
			TestOnly: sf.Tag.Get("testonly") == "true",
			index:    idx,
		})
	}
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	secretType   = reflect.TypeFor[Secret]()
	envType      = reflect.TypeFor[Env]()
)

// typeName is a variable's type as an operator writes it.
func typeName(t reflect.Type) string {
	switch t {
	case durationType:
		return "duration"
	case secretType:
		return "secret"
	case envType:
		return "production | development"
	}
	switch t.Kind() {
	case reflect.Slice:
		return "comma-separated " + typeName(t.Elem()) + "s"
	case reflect.Map:
		return "comma-separated " + typeName(t.Key()) + "=" + typeName(t.Elem())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Bool:
		return "bool"
	}
	return "string"
}

// refuseTestOnly refuses, outside development, every test-only setting of
// cfg whose value is not the one it has without the environment's
// test-only variables (baseline).
func refuseTestOnly[T any](cfg, baseline *T, environ map[string]string) error {
	var e Env
	if err := e.UnmarshalText([]byte(environ[EnvVar])); err != nil {
		return nil // the parse of cfg has refused it already
	}
	got, def := reflect.ValueOf(cfg).Elem(), reflect.ValueOf(baseline).Elem()
	var errs []string
	for _, f := range Fields[T]() {
		if !f.TestOnly {
			continue
		}
		set := !reflect.DeepEqual(got.FieldByIndex(f.index).Interface(), def.FieldByIndex(f.index).Interface())
		if err := e.TestOnly(f.Name, set); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid configuration: %s", strings.Join(errs, "; "))
	}
	return nil
}

// ConfigDocArg is the command-line argument with which a service prints
// the Fields of its configuration as JSON and exits without starting;
// configdoc builds docs/configuration.md from it.
const ConfigDocArg = "--config-doc"

// printFields writes the Fields of T and the extra variables read outside
// it (described in configdoc) as a JSON array.
func printFields[T any](w io.Writer, extra []string) error {
	fields := Fields[T]()
	for _, name := range extra {
		fields = append(fields, Field{Name: name})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(fields)
}
