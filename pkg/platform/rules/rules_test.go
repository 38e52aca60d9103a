package rules_test

import (
	"regexp"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/rules"
)

// field returns the ErrorInfo metadata "field" of err, checking that the
// BadRequest violation names the same field.
func field(t *testing.T, err error) string {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || apierr.Reason(err) != apierr.ReasonInvalidField {
		t.Fatalf("error %v is not INVALID_ARGUMENT INVALID_FIELD", err)
	}
	var info, violation string
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d.GetMetadata()["field"]
		case *errdetails.BadRequest:
			violation = d.GetFieldViolations()[0].GetField()
		}
	}
	if info != violation {
		t.Fatalf("ErrorInfo names %q, BadRequest %q", info, violation)
	}
	return info
}

func TestCharsetAgreesWithItsPattern(t *testing.T) {
	re := regexp.MustCompile(rules.Code.Pattern())
	for b := 0; b < 256; b++ {
		s := string([]byte{byte(b)})
		if got, want := rules.Code.Has(s), re.MatchString(s); got != want {
			t.Errorf("Code.Has(%q) = %v, pattern %s says %v", s, got, re.String(), want)
		}
	}
	for _, s := range []string{"", "A-z_09", "a b", "é", "ORD-1\n", "x/y"} {
		if got, want := rules.Code.Has(s), re.MatchString(s); got != want {
			t.Errorf("Code.Has(%q) = %v, pattern says %v", s, got, want)
		}
	}
}

func TestNewCharsetRefusesWhatItCannotRead(t *testing.T) {
	for _, class := range []string{`a\d`, "z-a", "[a]", "^a", "é"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewCharset(%q) did not panic", class)
				}
			}()
			rules.NewCharset(class, "x")
		}()
	}
}

// TestRules: each kind of rule at and beyond its bounds, with the field
// path and message of each refusal.
func TestRules(t *testing.T) {
	split := rules.NewOrderSplit(3, 50)
	p := &rules.Payment
	type check func() error
	tests := []struct {
		name      string
		check     check
		wantField string // "" accepts
		wantMsg   string
	}{
		{"code at max", func() error { return split.OrderCode.CheckText(strings.Repeat("a", 64)) }, "", ""},
		{"code empty", func() error { return split.OrderCode.CheckText("") }, "orderCode", "must not be empty"},
		{"code too long", func() error { return split.OrderCode.CheckText(strings.Repeat("a", 65)) }, "orderCode", "must be 1 to 64 characters of letters, digits, '_' or '-'"},
		{"code bad char", func() error { return split.OrderCode.CheckText("a.b") }, "orderCode", "must be 1 to 64 characters of letters, digits, '_' or '-'"},
		{"optional empty", func() error { return split.RequestID.CheckText("") }, "", ""},
		{"optional too long", func() error { return split.RequestID.CheckText(strings.Repeat("r", 65)) }, "requestId", "must be at most 64 characters of letters, digits, '_' or '-'"},
		{"entry field", func() error { return split.SKU.CheckTextAt(2, "") }, "items[2].sku", "must not be empty"},
		{"entry int low", func() error { return split.Quantity.CheckIntAt(0, 0) }, "items[0].quantity", "must be between 1 and 50"},
		{"entry int high", func() error { return split.Quantity.CheckIntAt(7, 51) }, "items[7].quantity", "must be between 1 and 50"},
		{"entry int at max", func() error { return split.Quantity.CheckIntAt(7, 50) }, "", ""},
		{"list empty", func() error { return split.Items.CheckCount(0) }, "items", "must contain at least one of the items"},
		{"list at max", func() error { return split.Items.CheckCount(3) }, "", ""},
		{"list too long", func() error { return split.Items.CheckCount(4) }, "items", "must contain 1 to 3 items"},
		{"int with unit", func() error { return p.AmountFen.CheckInt(100_000_001) }, "amountFen", "must be between 1 and 100000000 fen"},
		{"int at min", func() error { return p.AmountFen.CheckInt(1) }, "", ""},
		{"characters, not bytes", func() error { return p.Description.CheckText(strings.Repeat("茶", 127)) }, "", ""},
		{"characters over", func() error { return p.Description.CheckText(strings.Repeat("茶", 128)) }, "description", "must be at most 127 characters"},
		{"ascii over", func() error { return p.Description.CheckText(strings.Repeat("x", 128)) }, "description", "must be at most 127 characters"},
		{"zero allowed", func() error { return rules.Tasks.PageSize.CheckInt(0) }, "", ""},
		{"negative", func() error { return rules.Tasks.PageSize.CheckInt(-1) }, "pageSize", "must be between 0 and 100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.check()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("= %v, want accepted", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want a refusal naming %s", tt.wantField)
			}
			if got := field(t, err); got != tt.wantField {
				t.Errorf("field = %q, want %q", got, tt.wantField)
			}
			if got := status.Convert(err).Message(); got != tt.wantField+": "+tt.wantMsg {
				t.Errorf("message = %q, want %q", got, tt.wantField+": "+tt.wantMsg)
			}
		})
	}
}

// TestAcceptingAllocatesNothing: checking a valid field costs no
// allocation (the handlers check every request).
func TestAcceptingAllocatesNothing(t *testing.T) {
	split := rules.NewOrderSplit(200, 10000)
	p := &rules.Payment
	allocs := testing.AllocsPerRun(100, func() {
		_ = split.OrderCode.CheckText("ORD-1")
		_ = split.SKU.CheckTextAt(3, "SKU-1")
		_ = split.Quantity.CheckIntAt(3, 5)
		_ = split.Items.CheckCount(3)
		_ = p.Description.CheckText("绿茶 tea")
	})
	if allocs != 0 {
		t.Errorf("valid checks allocate %v times, want 0", allocs)
	}
}

// TestTablesNameRealFields: every rule of every table names, by its JSON
// path, a field of its method's request message of the rule's kind.
func TestTablesNameRealFields(t *testing.T) {
	tables := append(rules.Gateway(rules.NewOrderSplit(200, 10000)), rules.Reconciler()...)
	for _, tab := range tables {
		svc, method, _ := strings.Cut(strings.TrimPrefix(tab.Method, "/"), "/")
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
		if err != nil {
			t.Errorf("%s: %v", tab.Method, err)
			continue
		}
		m := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(method))
		if m == nil {
			t.Errorf("%s: no such method", tab.Method)
			continue
		}
		if len(tab.Rules) == 0 {
			t.Errorf("%s: a table without rules", tab.Method)
		}
		for _, r := range tab.Rules {
			fd := lookup(m.Input(), r.Field)
			if fd == nil {
				t.Errorf("%s: %s is no field of %s", tab.Method, r.Field, m.Input().FullName())
				continue
			}
			var ok bool
			switch r.Kind {
			case rules.Text:
				ok = fd.Kind() == protoreflect.StringKind && !fd.IsList()
			case rules.Int:
				ok = !fd.IsList() && (fd.Kind() == protoreflect.Int32Kind || fd.Kind() == protoreflect.Int64Kind)
			case rules.List:
				ok = fd.IsList()
			}
			if !ok || r.Min > r.Max {
				t.Errorf("%s: rule %+v does not fit field %s", tab.Method, *r, fd.FullName())
			}
		}
	}
}

// lookup walks a JSON path ("items[].quantity") through message fields.
func lookup(md protoreflect.MessageDescriptor, path string) protoreflect.FieldDescriptor {
	var fd protoreflect.FieldDescriptor
	for i, seg := range strings.Split(path, ".") {
		if i > 0 {
			if fd.Message() == nil {
				return nil
			}
			md = fd.Message()
		}
		name, list := strings.CutSuffix(seg, "[]")
		fd = md.Fields().ByJSONName(name)
		if fd == nil || fd.IsList() != list && i < strings.Count(path, ".") {
			return nil
		}
	}
	return fd
}
