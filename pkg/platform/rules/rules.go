// Package rules declares the rules of the API's request fields once:
// whether a field is required, its length in characters and character set,
// its numeric range, or how many entries a list may have. Handlers check a
// request by reading each field and asking its rule (no reflection, no
// allocation unless the request is refused); a refusal is INVALID_ARGUMENT
// naming the field's JSON path (`items[2].quantity`). The gateway writes the
// same rules into the OpenAPI document it serves (minLength, maxLength,
// pattern, minimum, maximum, minItems, maxItems), so what the document says
// is what the handlers enforce.
package rules

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/orderflow/orderflow/pkg/platform/apierr"
)

// Kind is what a rule bounds.
type Kind uint8

// Kinds of rule.
const (
	// Text bounds a string's length in characters (Unicode code points, as
	// JSON Schema counts them) and, with Chars, the characters it may use.
	Text Kind = iota + 1
	// Int bounds an integer's value.
	Int
	// List bounds how many entries a repeated field has.
	List
)

// Charset is a set of ASCII characters, declared as the body of a
// regular-expression character class ("A-Za-z0-9_-"): the handlers test
// membership in a table built from it and the OpenAPI document shows it
// as a pattern.
type Charset struct {
	class string
	words string
	in    [256]bool
}

// NewCharset returns the characters of class (single characters and
// ranges such as "a-z"; a '-' first or last stands for itself), described
// in messages as words. It panics on a class it cannot read, as charsets
// are declared once at package level.
func NewCharset(class, words string) *Charset {
	c := &Charset{class: class, words: words}
	for i := 0; i < len(class); i++ {
		lo := class[i]
		if lo == '\\' || lo == '[' || lo == ']' || lo == '^' || lo >= utf8.RuneSelf {
			panic(fmt.Sprintf("rules: charset %q: %q is not supported", class, lo))
		}
		hi := lo
		if i+2 < len(class) && class[i+1] == '-' {
			hi = class[i+2]
			if hi < lo || hi >= utf8.RuneSelf {
				panic(fmt.Sprintf("rules: charset %q: bad range %c-%c", class, lo, hi))
			}
			i += 2
		}
		for b := int(lo); b <= int(hi); b++ {
			c.in[b] = true
		}
	}
	return c
}

// Has reports whether every byte of s is in the set.
func (c *Charset) Has(s string) bool {
	for i := 0; i < len(s); i++ {
		if !c.in[s[i]] {
			return false
		}
	}
	return true
}

// Pattern is the set as an anchored regular expression matching any
// string of its characters (the empty string too: lengths are the rule's).
func (c *Charset) Pattern() string { return "^[" + c.class + "]*$" }

// Rule bounds one field. Build it with NewText, NewInt or NewList.
type Rule struct {
	// Field is the field's JSON path as clients send it: "orderCode",
	// or "items[].quantity" for a field of each entry of a list.
	Field string
	// Kind is what the rule bounds; Min and Max are inclusive bounds of
	// the length, the value or the entry count.
	Kind     Kind
	Min, Max int64
	// Chars, for Text, is the set the characters must come from (nil: any).
	Chars *Charset

	msg, empty string
}

// NewText returns the rule of a string field of min to max characters,
// from chars when it is not nil. A min above 0 makes the field required.
func NewText(field string, min, max int64, chars *Charset) Rule {
	r := Rule{Field: field, Kind: Text, Min: min, Max: max, Chars: chars, empty: "must not be empty"}
	switch {
	case min > 0:
		r.msg = fmt.Sprintf("must be %d to %d characters", min, max)
	default:
		r.msg = fmt.Sprintf("must be at most %d characters", max)
	}
	if chars != nil {
		r.msg += " of " + chars.words
	}
	return r
}

// NewInt returns the rule of an integer field between min and max; unit,
// when not empty, follows the bounds in the message ("fen").
func NewInt(field string, min, max int64, unit string) Rule {
	r := Rule{Field: field, Kind: Int, Min: min, Max: max}
	r.msg = fmt.Sprintf("must be between %d and %d", min, max)
	if unit != "" {
		r.msg += " " + unit
	}
	return r
}

// NewList returns the rule of a repeated field of min to max entries,
// named noun in the message ("items").
func NewList(field string, min, max int64, noun string) Rule {
	r := Rule{Field: field, Kind: List, Min: min, Max: max}
	r.msg = fmt.Sprintf("must contain %d to %d %s", min, max, noun)
	if min > 0 {
		r.empty = "must contain at least one of the " + noun
	}
	return r
}

// Message is what a refusal says after the field's path.
func (r *Rule) Message() string { return r.msg }

// CheckText checks a Text field.
func (r *Rule) CheckText(s string) error {
	if m := r.text(s); m != "" {
		return apierr.Field(r.Field, m)
	}
	return nil
}

// CheckTextAt checks a Text field of the i-th entry of its list.
func (r *Rule) CheckTextAt(i int, s string) error {
	if m := r.text(s); m != "" {
		return r.FieldError(i, m)
	}
	return nil
}

// CheckInt checks an Int field.
func (r *Rule) CheckInt(v int64) error {
	if v < r.Min || v > r.Max {
		return apierr.Field(r.Field, r.msg)
	}
	return nil
}

// CheckIntAt checks an Int field of the i-th entry of its list.
func (r *Rule) CheckIntAt(i int, v int64) error {
	if v < r.Min || v > r.Max {
		return r.FieldError(i, r.msg)
	}
	return nil
}

// CheckCount checks the number of entries of a List field.
func (r *Rule) CheckCount(n int) error {
	switch {
	case n == 0 && r.empty != "":
		return apierr.Field(r.Field, r.empty)
	case int64(n) < r.Min || int64(n) > r.Max:
		return apierr.Field(r.Field, r.msg)
	}
	return nil
}

// FieldError is the refusal of the field in the i-th entry of its list
// (i < 0: the field itself), saying msg: for checks a rule cannot make
// alone, such as item codes unique within an order.
func (r *Rule) FieldError(i int, msg string) error {
	return apierr.Field(r.Path(i), msg)
}

// Path is the field's path in the i-th entry of its list ("items[2].sku");
// with i < 0, or for a field outside a list, the path as declared.
func (r *Rule) Path(i int) string {
	if i < 0 {
		return r.Field
	}
	return strings.Replace(r.Field, "[]", "["+strconv.Itoa(i)+"]", 1)
}

func (r *Rule) text(s string) string {
	if s == "" {
		if r.Min > 0 {
			return r.empty
		}
		return ""
	}
	if r.Chars != nil {
		// ASCII only: bytes are characters.
		if !r.Chars.Has(s) || int64(len(s)) < r.Min || int64(len(s)) > r.Max {
			return r.msg
		}
		return ""
	}
	if int64(len(s)) <= r.Max && int64(len(s)) >= r.Min && r.Min <= 1 {
		return "" // at most as many characters as bytes, and not empty
	}
	if n := int64(utf8.RuneCountInString(s)); n < r.Min || n > r.Max {
		return r.msg
	}
	return ""
}

// Table is the rules of one API method's request, in field order.
type Table struct {
	// Method is the full gRPC method name,
	// "/orderflow.gateway.v1.OrderSplitService/CreateOrderSplit".
	Method string
	Rules  []*Rule
}

// OperationID is the method's OpenAPI operation id, as grpc-gateway names
// it ("OrderSplitService_CreateOrderSplit").
func (t Table) OperationID() string {
	svc, method, _ := strings.Cut(strings.TrimPrefix(t.Method, "/"), "/")
	if i := strings.LastIndexByte(svc, '.'); i >= 0 {
		svc = svc[i+1:]
	}
	return svc + "_" + method
}
