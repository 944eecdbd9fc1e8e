package metrics

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// parallelChunk is how many jobs one worker takes at a time.
const parallelChunk = 16

// parallel runs f(i) for every i in [0, n) on up to GOMAXPROCS goroutines
// and returns once every call has returned: a collector's reads of its
// jobs' files spread over the cores, each job read by one goroutine.
func parallel(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), (n+parallelChunk-1)/parallelChunk)
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := int(next.Add(parallelChunk)) - parallelChunk
				if start >= n {
					return
				}
				for i := start; i < min(start+parallelChunk, n); i++ {
					f(i)
				}
			}
		}()
	}
	wg.Wait()
}
