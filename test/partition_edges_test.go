package test

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Edges of the partition test (found by review): each cuts agent a from
// etcd at a moment when it is busy with something else, and checks from
// the workers' own timestamps that the job never ran twice.

// checkNoOverlap fails the test for every moment two workers of the job
// whose stamps are in file ran at once.
func checkNoOverlap(t *testing.T, file string, cut time.Time, agents ...*agent) {
	t.Helper()
	ivs := stampIntervals(t, file)
	for _, iv := range ivs {
		t.Logf("worker on %s: first +%s, last +%s after the cut", owner(iv.Worker, agents...),
			time.Duration(iv.First-cut.UnixNano()), time.Duration(iv.Last-cut.UnixNano()))
	}
	for _, o := range testutil.Overlaps(ivs) {
		t.Errorf("two workers at once: %s and %s, overlapping %s", owner(o[0].Worker, agents...), owner(o[1].Worker, agents...),
			time.Duration(o[0].Last-o[1].First))
	}
}

// A job that waits for a claim held elsewhere keeps claim calls in flight;
// a cut must still fence the agent's running jobs before its lease can
// expire (the claim call is bounded by the session, and fencing kills
// before it waits for a start in progress).
func TestPartitionWhileWaitingForAClaim(t *testing.T) {
	eps := embeddedEtcd(t)
	px := testutil.StartProxy(t, eps[0])
	name := clusterName()
	stamps := t.TempDir()
	workload := fmt.Sprintf("[[connector]]\nname = \"p\"\n  [connector.run]\n  command = %[1]s\n"+
		"[[connector]]\nname = \"q\"\n  [connector.run]\n  command = %[1]s\n", stampCommand(stamps, 5))
	// A foreign claim on q, under a lease of the test's own.
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: testutil.Deadline(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	g, err := cli.Grant(context.Background(), 600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(context.Background(), "/berth/"+name+"/claims/q", "zz", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	a, b := newAgent(t, "a"), newAgent(t, "b")
	a.configure(clusterSpec{name: name, endpoints: []string{px.Endpoint()}}, staticTable([]string{"p", "q"}, nil)+workload)
	b.configure(clusterSpec{name: name, endpoints: eps}, staticTable(nil, nil)+workload)
	a.start()
	var ja map[string]api.Job
	testutil.Eventually(t, settle, "a runs p and waits for q's claim", func() bool {
		var err error
		ja, err = a.tryJobs()
		return err == nil && ja["p"].State == "running" && ja["q"].State == "waiting"
	})
	b.start()
	b.waitMember(settle)
	waitStamped(t, stamps, map[string]api.Job{"p": ja["p"]})
	cut := time.Now()
	px.Partition(testutil.Stall)
	testutil.Eventually(t, settle, "a fenced", func() bool { ai, err := a.info(); return err == nil && ai.State == "fenced" })
	var jb map[string]api.Job
	testutil.Eventually(t, settle, "b runs p", func() bool {
		var err error
		jb, err = b.tryJobs()
		return err == nil && jb["p"].State == "running"
	})
	waitStamped(t, stamps, map[string]api.Job{"p": jb["p"]})
	checkNoOverlap(t, filepath.Join(stamps, "p.log"), cut, a, b)
	px.Heal()
}

// SIGTERM while cut: the agent stops its jobs with grace, but the lease
// runs out meanwhile; fencing must still kill them before it can expire.
func TestPartitionThenStop(t *testing.T) {
	eps := embeddedEtcd(t)
	px := testutil.StartProxy(t, eps[0])
	name := clusterName()
	stamps := t.TempDir()
	// The job stamps for ~8 s after SIGTERM; stop_timeout is 5 s.
	workload := fmt.Sprintf("[[connector]]\nname = \"p\"\n  [connector.run]\n  command = %s\n", stampCommand(stamps, 400))
	a, b := newAgent(t, "a"), newAgent(t, "b")
	a.configure(clusterSpec{name: name, endpoints: []string{px.Endpoint()}}, staticTable([]string{"p"}, nil)+workload)
	b.configure(clusterSpec{name: name, endpoints: eps}, staticTable(nil, nil)+workload)
	a.start()
	ja := a.waitExactly(settle, "p")
	b.start()
	b.waitMember(settle)
	waitStamped(t, stamps, ja)
	cut := time.Now()
	px.Partition(testutil.Stall)
	done := make(chan error, 1)
	go func() { done <- a.stop(syscall.SIGTERM) }()
	var jb map[string]api.Job
	testutil.Eventually(t, settle, "b runs p", func() bool {
		var err error
		jb, err = b.tryJobs()
		return err == nil && jb["p"].State == "running"
	})
	if err := <-done; err != nil {
		t.Errorf("agent stopped while cut: %v", err)
	}
	t.Logf("a exited %s after the cut", time.Since(cut).Round(time.Millisecond))
	waitStamped(t, stamps, map[string]api.Job{"p": jb["p"]})
	checkNoOverlap(t, filepath.Join(stamps, "p.log"), cut, a, b)
	px.Heal()
}

// SIGHUP while cut, then SIGTERM: the reload is refused within its bound
// and the agent stops promptly (it does not wait for the store to return).
func TestPartitionReloadThenStop(t *testing.T) {
	eps := embeddedEtcd(t)
	px := testutil.StartProxy(t, eps[0])
	stamps := t.TempDir()
	workload := fmt.Sprintf("[[connector]]\nname = \"p\"\n  [connector.run]\n  command = %s\n", stampCommand(stamps, 5))
	a := newAgent(t, "a")
	a.configure(clusterSpec{name: clusterName(), endpoints: []string{px.Endpoint()}}, staticTable([]string{"p"}, nil)+workload)
	a.start()
	a.waitExactly(settle, "p")
	px.Partition(testutil.Stall)
	cut := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.waited:
		a.waited <- err
		if err != nil {
			t.Errorf("agent exit: %v", err)
		}
		t.Logf("a exited %s after the cut", time.Since(cut).Round(time.Millisecond))
	case <-time.After(testutil.Deadline(30 * time.Second)):
		t.Errorf("agent did not exit within 30 s of SIGTERM while cut with a reload pending")
	}
	px.Heal()
}
