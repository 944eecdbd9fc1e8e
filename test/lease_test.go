package test

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
)

// GET /v1/agent and /metrics tell when the agent's lease was last renewed
// and its local fencing deadline: deadline = last renewal + TTL − max(1 s,
// TTL/5), both moving forward while the agent renews.
func TestLeaseTimesExposed(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("1s") + `
[cluster]
session_ttl = "2s"

[static]
`)
	e.start()
	base := "http://" + e.addr
	var first api.Agent
	var asked time.Time // when the answer checked was asked for
	testutil.Eventually(t, 20*time.Second, "/v1/agent with lease times", func() bool {
		asked = time.Now()
		return getJSON(t, base+"/v1/agent", &first) == http.StatusOK && first.State == "member" && first.LastRenewal != nil
	})
	if first.LeaseDeadline == nil {
		t.Fatalf("/v1/agent has last_renewal but no lease_deadline: %+v", first)
	}
	// TTL 2 s: margin max(1 s, 0.4 s) = 1 s.
	if d := first.LeaseDeadline.Sub(*first.LastRenewal); d != time.Second {
		t.Errorf("lease_deadline - last_renewal = %s, want 1s (TTL 2s - margin 1s)", d)
	}
	if age := asked.Sub(*first.LastRenewal); first.LastRenewal.After(time.Now()) || age > 2*time.Second {
		t.Errorf("last_renewal %s is %s old, want within the 2s TTL", first.LastRenewal.Format(time.RFC3339Nano), age)
	}
	testutil.Eventually(t, 10*time.Second, "a later renewal", func() bool {
		var again api.Agent
		return getJSON(t, base+"/v1/agent", &again) == http.StatusOK && again.LastRenewal != nil && again.LastRenewal.After(*first.LastRenewal)
	})
	asked = time.Now()
	m := e.metrics()
	last, ok1 := m["berth_lease_last_renewal_timestamp_seconds"]
	deadline, ok2 := m["berth_lease_deadline_timestamp_seconds"]
	if !ok1 || !ok2 {
		t.Fatalf("metrics lack the lease series (last renewal %v, deadline %v)", ok1, ok2)
	}
	if math.Abs(deadline-last-1) > 1e-6 {
		t.Errorf("berth_lease_deadline_timestamp_seconds - berth_lease_last_renewal_timestamp_seconds = %v, want 1", deadline-last)
	}
	if got := time.Unix(0, int64(last*1e9)); got.Before(*first.LastRenewal) || asked.Sub(got) > 2*time.Second {
		t.Errorf("berth_lease_last_renewal_timestamp_seconds = %s, want after %s and within the TTL of now",
			got.Format(time.RFC3339Nano), first.LastRenewal.Format(time.RFC3339Nano))
	}
}
