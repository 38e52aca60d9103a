package auth

import "testing"

func TestCallersIdentify(t *testing.T) {
	callers := Callers{"gateway": "gateway-token-0123456789abcdef0123", "unset": ""}
	tests := []struct {
		tok, want string
	}{
		{"gateway-token-0123456789abcdef0123", "gateway"},
		{"gateway-token-0123456789abcdef012", ""},
		{"gateway-token-0123456789abcdef01234", ""},
		{"", ""}, // matches no caller, not even one whose token is unset
	}
	for _, tt := range tests {
		got, ok := callers.Identify(tt.tok)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("Identify(%q) = %q, %v; want %q", tt.tok, got, ok, tt.want)
		}
	}
}
