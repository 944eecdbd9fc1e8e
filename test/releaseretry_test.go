package test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/worker"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A claim whose release the store refused is released again once the
// store takes it: the member the job moved to does not wait for it as long
// as the old member's session lives (what the long fencing soak's round
// 890 showed: a declarer back from a host stall kept two tasks waiting
// for 2 minutes; its log was lost, so which store call failed there is
// not known). Standby x runs alpha and alpha-0
// while their declarer y is away; etcd then refuses x writes to
// alpha-0's claim (its role loses write permission on that key alone), y
// joins, and x stops both jobs: alpha's claim is released and y runs it,
// alpha-0's release is refused and y waits for it, held by x. Once the
// permission is back, x releases it (a retry with backoff, up to 2 s
// apart) and y runs alpha-0; x runs nothing. Real etcd (TLS, users by
// certificate common name), real agents.
func TestClusterReleaseRetriedAfterRefusal(t *testing.T) {
	e := startSecureEtcd(t)
	name := clusterName()
	prefix := "/berth/" + name + "/"
	e.user(t, "berth-x", "", prefix)
	e.user(t, "berth-y", "", prefix)

	x, y := newAgent(t, "x"), newAgent(t, "y")
	write := func(a *agent, cn, static string) {
		a.configure(clusterSpec{name: name, endpoints: []string{e.endpoint}}, e.tlsTable(cn)+"\n"+static+sleeperConnector("alpha", 1))
	}
	write(x, "berth-x", staticTable(nil, nil))
	write(y, "berth-y", staticTable([]string{"alpha"}, []string{"alpha-0"}))
	x.start()
	x.waitExactly(settle, "alpha", "alpha-0")

	claim := prefix + "claims/alpha-0"
	e.refuseWrite(t, "berth-x", prefix, claim)
	y.start()
	// y runs alpha; alpha-0 waits on x's claim, which x no longer runs.
	testutil.Eventually(t, settle, "y runs alpha and waits for alpha-0 held by x; x runs nothing", func() bool {
		yj, err := y.tryJobs()
		if err != nil {
			return false
		}
		xj, err := x.tryJobs()
		return err == nil && len(xj) == 0 && yj["alpha"].State == worker.Running &&
			yj["alpha-0"].State == worker.Waiting && strings.Contains(yj["alpha-0"].Reason, "held by x")
	})
	if !strings.Contains(x.out.String(), "release claim") {
		t.Fatalf("x's log does not say its release of alpha-0 failed:\n%s", x.out)
	}
	e.allowWrite(t, "berth-x", prefix, claim)
	y.waitExactly(settle, "alpha", "alpha-0")
	x.waitExactly(time.Second)

	for _, a := range []*agent{y, x} {
		if err := a.stop(syscall.SIGTERM); err != nil {
			t.Errorf("agent %s stop: %v\n%s", a.id, err, a.out)
		}
	}
}

// refuseWrite makes role (the user's, as user adds it) read-only on key
// and keep read and write on the rest of prefix: every write of key by
// the role's user is refused with "permission denied" from now on.
func (e *secureEtcd) refuseWrite(t *testing.T, role, prefix, key string) {
	t.Helper()
	end := clientv3.GetPrefixRangeEnd(prefix)
	e.rolePerms(t, role, func(ctx context.Context, root *clientv3.Client) error {
		if _, err := root.RoleRevokePermission(ctx, role, prefix, end); err != nil {
			return err
		}
		for _, p := range []struct {
			from, to string
			perm     clientv3.PermissionType
		}{
			{prefix, end, clientv3.PermissionType(clientv3.PermRead)},
			{prefix, key, clientv3.PermissionType(clientv3.PermReadWrite)},
			{key + "\x00", end, clientv3.PermissionType(clientv3.PermReadWrite)},
		} {
			if _, err := root.RoleGrantPermission(ctx, role, p.from, p.to, p.perm); err != nil {
				return err
			}
		}
		return nil
	})
}

// allowWrite undoes refuseWrite: role reads and writes all of prefix
// again.
func (e *secureEtcd) allowWrite(t *testing.T, role, prefix, key string) {
	t.Helper()
	end := clientv3.GetPrefixRangeEnd(prefix)
	e.rolePerms(t, role, func(ctx context.Context, root *clientv3.Client) error {
		for _, r := range [][2]string{{prefix, end}, {prefix, key}, {key + "\x00", end}} {
			if _, err := root.RoleRevokePermission(ctx, role, r[0], r[1]); err != nil {
				return err
			}
		}
		_, err := root.RoleGrantPermission(ctx, role, prefix, end, clientv3.PermissionType(clientv3.PermReadWrite))
		return err
	})
}

// rolePerms runs change as etcd's root user, failing the test on its
// error.
func (e *secureEtcd) rolePerms(t *testing.T, role string, change func(ctx context.Context, root *clientv3.Client) error) {
	t.Helper()
	root, err := e.client(t, "root", "")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	if err := change(ctx, root); err != nil {
		t.Fatalf("change the permissions of etcd role %s: %v", role, err)
	}
}
