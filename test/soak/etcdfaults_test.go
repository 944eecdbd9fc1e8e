//go:build soak

package soak

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
)

// TestSoakEtcdLeaderKilled SIGKILLs the etcd leader three times, each time
// starting it again once the other two have elected a new leader and the
// agents run their jobs. Right is, whatever the TTL: a new leader; no two
// workers of one job ever alive at once; an agent whose session did not
// survive the election killed its workers before last renewal + TTL; every
// agent runs its own jobs again; the killed member rejoins (it follows the
// leader). With the default TTL (10 s), which outlasts an election, also:
// no session lost, every job keeps its worker. With the smallest (2 s) an
// election takes longer than the fencing deadline (last renewal + 1 s):
// sessions are lost, safely.
func TestSoakEtcdLeaderKilled(t *testing.T) {
	for _, ttl := range []time.Duration{2 * time.Second, 10 * time.Second} {
		t.Run("ttl="+ttl.String(), func(t *testing.T) { leaderKills(t, ttl) })
	}
}

func leaderKills(t *testing.T, ttl time.Duration) {
	w := newWorld(t, ttl)
	before := w.workers()
	var elected, settled []time.Duration
	for i := 0; i < 3; i++ {
		l := w.etcd.waitLeader(30 * time.Second)
		killAt := time.Now()
		l.kill()
		nl := w.etcd.waitLeader(60 * time.Second)
		elected = append(elected, time.Since(killAt))
		if nl == l {
			t.Fatalf("round %d: the killed member %s is still the leader", i, l.name)
		}
		w.settle(2 * time.Minute)
		settled = append(settled, time.Since(killAt))
		l.start()
		w.etcd.waitLeader(60 * time.Second)
		w.settle(2 * time.Minute)
	}
	after := w.workers()
	w.stop()
	v := w.judge()
	if ttl >= 10*time.Second {
		if v.losses > 0 {
			t.Errorf("%d sessions lost to leader elections with a %s TTL", v.losses, ttl)
		}
		if n := changed(before, after); n > 0 {
			t.Errorf("%d jobs changed worker across leader elections with a %s TTL", n, ttl)
		}
	}
	writeFigures(t, "etcd leader killed, session TTL "+ttl.String(), append([][2]string{
		{"leader kills (each member restarted after)", "3"},
		{"new leader after the kill (max)", percentile(elected, 100).Round(time.Millisecond).String()},
		{"every agent running its own jobs again after the kill (max)", percentile(settled, 100).Round(time.Millisecond).String()},
		{"jobs whose worker changed", fmt.Sprint(changed(before, after))},
	}, v.rows()...))
}

// TestSoakEtcdMemberLost SIGKILLs one etcd follower and keeps it down for
// 10 s, then starts it again. Right is: the other two keep a quorum, so
// nothing happens to the agents — no session lost, every job keeps the
// worker it had (same PIDs) — and the member rejoins.
func TestSoakEtcdMemberLost(t *testing.T) {
	w := newWorld(t, 2*time.Second)
	before := w.workers()
	l := w.etcd.waitLeader(30 * time.Second)
	var f *etcdMember
	for _, m := range w.etcd.members {
		if m != l {
			f = m
			break
		}
	}
	lostAt := time.Now()
	f.kill()
	// 10 s without it, the agents polled all along.
	testutil.Eventually(t, 30*time.Second, "10 s with a member lost", func() bool {
		return time.Since(lostAt) >= 10*time.Second
	})
	f.start()
	w.etcd.waitLeader(60 * time.Second)
	w.settle(time.Minute)
	after := w.workers()
	for job, pid := range before {
		if after[job] != pid {
			t.Errorf("job %s: worker pid %d before the member was lost, %d after: it moved or restarted", job, pid, after[job])
		}
	}
	w.stop()
	v := w.judge()
	if v.losses > 0 {
		t.Errorf("%d sessions lost while two of three etcd members served", v.losses)
	}
	writeFigures(t, "one etcd member lost", append([][2]string{
		{"member down", "10 s (a follower, SIGKILL), then started again"},
		{"jobs whose worker changed", fmt.Sprint(changed(before, after))},
	}, v.rows()...))
}

// TestSoakEtcdRestartAll SIGKILLs every etcd member, keeps them down for
// 2 × TTL + 1 s, then starts them all again. Right is: every agent loses
// its session and kills its workers before last renewal + TTL (nothing
// runs without a store to prove its claim), says so in its log, and once
// the store is back every agent rejoins and runs its own jobs, with no two
// workers of one job at once.
func TestSoakEtcdRestartAll(t *testing.T) {
	w := newWorld(t, 2*time.Second)
	downAt := time.Now()
	for _, m := range w.etcd.members {
		m.kill()
	}
	testutil.Eventually(t, 30*time.Second, "every agent fenced", func() bool {
		for _, m := range w.agents {
			var a api.Agent
			if err := get(m.addr, "/v1/agent", &a); err != nil || a.State != "fenced" {
				return false
			}
		}
		return time.Since(downAt) >= 2*w.ttl+time.Second
	})
	upAt := time.Now()
	for _, m := range w.etcd.members {
		m.start()
	}
	w.etcd.waitLeader(60 * time.Second)
	back := w.settle(2 * time.Minute)
	w.stop()
	v := w.judge()
	var logged []string
	for _, m := range w.agents {
		n := len(m.fencings())
		logged = append(logged, fmt.Sprintf("%s %d", m.id, n))
		if n == 0 {
			t.Errorf("agent %s: no \"session lost\" line in its log", m.id)
		}
	}
	writeFigures(t, "every etcd member restarted", append([][2]string{
		{"store down", fmt.Sprintf("%s (all %d members SIGKILLed, then started)", upAt.Sub(downAt).Round(time.Millisecond), len(w.etcd.members))},
		{"\"session lost\" lines per agent", strings.Join(logged, ", ")},
		{"every agent running its own jobs again after the start", back.Round(time.Millisecond).String()},
	}, v.rows()...))
}

// workers maps every job to the PID of its worker, over every agent.
func (w *world) workers() map[string]int {
	out := map[string]int{}
	for _, m := range w.agents {
		js, err := jobsOf(m.addr)
		if err != nil {
			w.t.Fatalf("agent %s: %v", m.id, err)
		}
		for id, j := range js {
			out[id] = j.PID
		}
	}
	return out
}

func changed(before, after map[string]int) int {
	n := 0
	for job, pid := range before {
		if after[job] != pid {
			n++
		}
	}
	return n
}
