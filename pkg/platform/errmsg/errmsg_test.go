package errmsg_test

import (
	"testing"

	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	"github.com/orderflow/orderflow/pkg/platform/errmsg"
)

// TestEveryCodeHasItsOwnMessage: each code of the catalogue (but the
// unspecified zero) has a message of its own, distinct from the others.
func TestEveryCodeHasItsOwnMessage(t *testing.T) {
	seen := map[string]errcodev1.ErrorCode{}
	for n := range errcodev1.ErrorCode_name {
		c := errcodev1.ErrorCode(n)
		if c == errcodev1.ErrorCode_ERROR_CODE_UNSPECIFIED {
			continue
		}
		m := errmsg.Message(c)
		if c != errcodev1.ErrorCode_ERROR_CODE_GENERIC && m == errmsg.Message(errcodev1.ErrorCode_ERROR_CODE_GENERIC) {
			t.Errorf("Message(%v) = %q, the generic message: the code has no message of its own", c, m)
		}
		if other, ok := seen[m]; ok {
			t.Errorf("Message(%v) = %q, the same as Message(%v)", c, m, other)
		}
		seen[m] = c
	}
}
