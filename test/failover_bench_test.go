package test

import (
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// BenchmarkFailover measures the time from a member's loss (SIGKILL of the
// agent: no goodbye, its lease must expire) to its job running on the
// standby, with session_ttl = 2s and rebalance_delay = 0s. One op is one
// loss; the agent is started again, and gets its job back, outside the
// timer. Expect about one TTL: the lease must expire on the server before
// the leader reassigns and before the job's claim is free.
func BenchmarkFailover(b *testing.B) {
	testutil.NeedRoot(b)
	eps := embeddedEtcd(b)
	c := clusterSpec{name: clusterName(), endpoints: eps}
	body := sleeperConnector("fo", 0)
	a, s := newAgent(b, "a"), newAgent(b, "s")
	a.configure(c, staticTable([]string{"fo"}, nil)+body)
	s.configure(c, staticTable(nil, nil)+body)
	s.start()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		a.start()
		a.waitExactly(30*time.Second, "fo")
		s.waitExactly(30 * time.Second)
		b.StartTimer()
		if err := a.stop(syscall.SIGKILL); err == nil {
			b.Fatal("SIGKILL of the agent reported success")
		}
		s.waitExactly(30*time.Second, "fo")
	}
	b.StopTimer()
}
