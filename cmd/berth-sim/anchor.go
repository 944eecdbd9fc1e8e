package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// anchorPhase is the floor a run is compared with, measured on the same
// etcd just before the cold start, with bare etcd clients and none of
// berth's code: n clients each connect, grant a lease and put one key bound
// to it (what a join costs at least), then renew their leases with
// KeepAliveOnce at the session's interval for a few seconds; and one client
// puts jobs keys bound to those leases, 127 per transaction, 8 transactions
// at a time (what claiming every job costs at least).
type anchorPhase struct {
	JoinSeconds   float64    `json:"join_s"`   // n clients connected, granted and put
	RenewMillis   [3]float64 `json:"renew_ms"` // renewal round trip p50, p99, max
	RenewFailures int        `json:"renew_failures"`
	PutSeconds    float64    `json:"put_s"` // jobs lease-bound keys put
}

// anchorRenewFor is how long the anchor renews its leases.
const anchorRenewFor = 8 * time.Second

func anchor(ctx context.Context, e *etcdCluster, n, jobs int, ttl time.Duration) (anchorPhase, error) {
	var a anchorPhase
	interval := (ttl - max(time.Second, ttl/5)) / 3 // as cluster.Session renews
	clients := make([]*clientv3.Client, n)
	leases := make([]clientv3.LeaseID, n)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := e.client()
			if err != nil {
				errs[i] = err
				return
			}
			clients[i] = c
			// A long lease: the puts below may outlast the renewals.
			g, err := c.Grant(ctx, int64(max(ttl, 5*time.Minute)/time.Second))
			if err == nil {
				leases[i] = g.ID
				_, err = c.Put(ctx, fmt.Sprintf("/anchor/members/%05d", i), "x", clientv3.WithLease(g.ID))
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	a.JoinSeconds = time.Since(t0).Seconds()
	for _, err := range errs {
		if err != nil {
			return a, fmt.Errorf("anchor join: %w", err)
		}
	}
	var mu sync.Mutex
	var lat []time.Duration
	stop := time.Now().Add(anchorRenewFor)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * interval / time.Duration(n)) // spread, as sessions are
			for time.Now().Before(stop) {
				t := time.Now()
				rctx, cancel := context.WithTimeout(ctx, ttl)
				_, err := clients[i].KeepAliveOnce(rctx, leases[i])
				cancel()
				mu.Lock()
				if err != nil {
					a.RenewFailures++
				} else {
					lat = append(lat, time.Since(t))
				}
				mu.Unlock()
				time.Sleep(time.Until(t.Add(interval)))
			}
		}()
	}
	wg.Wait()
	slices.Sort(lat)
	if len(lat) > 0 {
		q := func(f float64) float64 { return lat[int(f*float64(len(lat)-1))].Seconds() * 1000 }
		a.RenewMillis = [3]float64{q(0.5), q(0.99), q(1)}
	}
	t0 = time.Now()
	const per, parallel = 127, 8
	work := make(chan int)
	var perr error
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for start := range work {
				var ops []clientv3.Op
				for j := start; j < min(start+per, jobs); j++ {
					ops = append(ops, clientv3.OpPut(fmt.Sprintf("/anchor/claims/%07d", j), "agent", clientv3.WithLease(leases[j%n])))
				}
				if _, err := clients[0].Txn(ctx).Then(ops...).Commit(); err != nil {
					mu.Lock()
					perr = err
					mu.Unlock()
				}
			}
		}()
	}
	for start := 0; start < jobs; start += per {
		work <- start
	}
	close(work)
	wg.Wait()
	a.PutSeconds = time.Since(t0).Seconds()
	if perr != nil {
		return a, fmt.Errorf("anchor puts: %w", perr)
	}
	// Leave nothing behind: the simulation starts from an empty store.
	for _, l := range leases {
		if _, err := clients[0].Revoke(ctx, l); err != nil {
			return a, fmt.Errorf("anchor: revoke: %w", err)
		}
	}
	return a, nil
}
