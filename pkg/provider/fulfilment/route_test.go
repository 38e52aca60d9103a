package fulfilment

import "testing"

func TestRouteNamesTheCallWithoutItsIDs(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/shipments", "/shipments"},
		{"/shipments/job-123", "/shipments/{jobId}"},
		{"/wms/shipments/job-123", "/wms/shipments/{jobId}"},
		{"/members/m-1", "/members/{memberId}"},
		{"/catalogue", "/catalogue"},
		{"/admin/config", "/admin/config"},
	} {
		if got := route(tc.path); got != tc.want {
			t.Errorf("route(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}
