// Package apierr builds the gRPC status errors orderflow returns at its
// transport edges: google.rpc.Status with an ErrorInfo whose reason names
// the condition (and, for bad input, a BadRequest naming the field). REST
// clients get the same errors through grpc-gateway.
package apierr

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of every orderflow error.
const Domain = "orderflow"

// Reasons (ErrorInfo.reason) are part of the public contract.
const (
	ReasonInvalidField     = "INVALID_FIELD"
	ReasonUnauthenticated  = "UNAUTHENTICATED"
	ReasonPermissionDenied = "PERMISSION_DENIED"
	ReasonTaskNotFound     = "TASK_NOT_FOUND"
	ReasonTaskExpired      = "TASK_EXPIRED"
	ReasonTaskFinished     = "TASK_ALREADY_FINISHED"
	ReasonOrderCodeClaimed = "ORDER_CODE_CLAIMED"
	ReasonQueueUnavailable = "QUEUE_UNAVAILABLE"
	ReasonStoreUnavailable = "STORE_UNAVAILABLE"
	ReasonRateLimited      = "RATE_LIMITED"
	ReasonBodyTooLarge     = "BODY_TOO_LARGE"
	ReasonPaymentNotFound  = "PAYMENT_NOT_FOUND"
	ReasonUpstream         = "UPSTREAM_UNAVAILABLE"
)

// New returns an error with code, message and an ErrorInfo carrying reason
// and metadata (key, value pairs).
func New(code codes.Code, reason, msg string, kv ...string) error {
	return with(status.New(code, msg), reason, kv).Err()
}

// Field returns an INVALID_ARGUMENT error naming the offending field, with
// a BadRequest field violation and an ErrorInfo whose metadata has "field".
func Field(field, msg string) error {
	st := status.New(codes.InvalidArgument, field+": "+msg)
	st = with(st, ReasonInvalidField, []string{"field", field})
	if d, err := st.WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: msg}},
	}); err == nil {
		st = d
	}
	return st.Err()
}

// FieldDenied returns a PERMISSION_DENIED error naming the field whose
// value the caller is not entitled to, with an ErrorInfo whose metadata
// has "field".
func FieldDenied(field, msg string) error {
	return New(codes.PermissionDenied, ReasonPermissionDenied, field+": "+msg, "field", field)
}

func with(st *status.Status, reason string, kv []string) *status.Status {
	md := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		md[kv[i]] = kv[i+1]
	}
	d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: md})
	if err != nil {
		return st
	}
	return d
}

// Reason returns the ErrorInfo reason of err, or "".
func Reason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}
