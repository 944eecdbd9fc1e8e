package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// renewAnchor measures bare lease renewals on the simulation's etcd: n
// leases, each renewed with KeepAliveOnce every interval by its own
// client, for d; it prints the latency percentiles.
func renewAnchor(e *etcdCluster, n int, ttl, interval, d time.Duration) error {
	ctx := context.Background()
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	errs := 0
	stop := time.Now().Add(d)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli, err := e.client()
			if err != nil {
				return
			}
			defer cli.Close()
			g, err := cli.Grant(ctx, int64(ttl/time.Second))
			if err != nil {
				mu.Lock()
				errs++
				mu.Unlock()
				return
			}
			time.Sleep(time.Duration(i) * interval / time.Duration(n))
			for time.Now().Before(stop) {
				t := time.Now()
				rctx, cancel := context.WithTimeout(ctx, ttl)
				_, err := cli.KeepAliveOnce(rctx, g.ID)
				cancel()
				mu.Lock()
				if err != nil {
					errs++
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
	p := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(q*float64(len(lat)-1))]
	}
	fmt.Fprintf(os.Stdout, "renewals of %d leases every %s: %d ok, %d failed; p50 %s p99 %s max %s\n",
		n, interval, len(lat), errs, p(0.5), p(0.99), p(1))
	return nil
}

var _ = clientv3.WithPrefix
