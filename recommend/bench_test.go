package recommend

import (
	"fmt"
	"testing"
	"time"

	"github.com/berthd/berth/limits"
)

// benchJobs is the number of jobs the benchmarks' model holds, as an
// agent at 1,000 jobs.
const benchJobs = 1000

// benchModel is a model of benchJobs jobs, each with an hour of samples.
func benchModel(b *testing.B) (*Model, []string) {
	m, err := New(DefaultParams())
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, benchJobs)
	for j := range ids {
		ids[j] = fmt.Sprintf("connector-%d", j)
		usage := 0.0
		for i := range 3600 {
			at := t0.Add(time.Duration(i) * time.Second)
			usage += 0.05 + 0.01*float64((i*7+j)%31)
			m.ObserveCPU(ids[j], CPUSample{Time: at, UsageSeconds: usage})
			if i%15 == 0 {
				m.ObserveMemory(ids[j], MemorySample{Time: at, CurrentBytes: uint64(100+j%50+i%7) << 20, PeakBytes: uint64(110+j%50+i%11) << 20, Peak: PeakSinceLastSample})
			}
		}
	}
	return m, ids
}

// One CPU sample of one job, as the sampler takes it every second for
// every job: lock, map lookup, histogram update.
func BenchmarkObserveCPU(b *testing.B) {
	m, ids := benchModel(b)
	at, usage := t0.Add(time.Hour), 1000.0
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%benchJobs == 0 {
			at = at.Add(time.Second)
			usage += 0.3
		}
		m.ObserveCPU(ids[i%benchJobs], CPUSample{Time: at, UsageSeconds: usage + float64(i%benchJobs)})
		i++
	}
}

// One memory sample of one job.
func BenchmarkObserveMemory(b *testing.B) {
	m, ids := benchModel(b)
	at := t0.Add(time.Hour)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%benchJobs == 0 {
			at = at.Add(15 * time.Second)
		}
		m.ObserveMemory(ids[i%benchJobs], MemorySample{Time: at, CurrentBytes: 120 << 20, PeakBytes: uint64(120+i%13) << 20, Peak: PeakSinceLastSample})
		i++
	}
}

// One job's recommendation (GET /v1/recommendations for one job).
func BenchmarkRecommend(b *testing.B) {
	m, ids := benchModel(b)
	now := t0.Add(time.Hour)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m.Recommend(ids[i%benchJobs], now, limits.Limits{}, Host{CPUs: 2})
		i++
	}
}

// Encoding every job's history for the file (Save without the write),
// per job; and the bytes per job in the agent and in the file.
func BenchmarkEncode(b *testing.B) {
	m, ids := benchModel(b)
	size := 0
	for b.Loop() {
		size = len(m.Encode())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchJobs, "ns/job")
	b.ReportMetric(float64(size)/benchJobs, "file-B/job")
	total := 0
	for _, id := range ids {
		total += m.Bytes(id)
	}
	b.ReportMetric(float64(total)/benchJobs, "B/job")
}
