package replay

import (
	"fmt"
	"math"
	"time"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/recommend"
)

// Config is one replay.
type Config struct {
	// Duration is how long the observed run lasts; the re-run lasts as
	// long.
	Duration time.Duration
	// CPUEvery and MemoryEvery are the sample periods (the agent's: 1 s
	// and 15 s). Each must be a multiple of Period.
	CPUEvery, MemoryEvery time.Duration
	// Params are the model's.
	Params recommend.Params
	// Host is the host the recommendation is for.
	Host recommend.Host
	// Start is the observed run's start.
	Start time.Time
	// Seed is the observed run's; the re-run takes Seed+1.
	Seed uint64
}

// Result is a replay's outcome.
type Result struct {
	// Shape is the shape's name.
	Shape string
	// Rec is the recommendation after the observed run.
	Rec recommend.Recommendation
	// Peak is the most memory the observed run held, bytes: what the
	// kernel's watermark saw.
	Peak int64
	// Slack is Rec.Memory over Peak, less 1.
	Slack float64
	// Rerun is the re-run under Rec's limits, VPARerun under VPA's.
	Rerun, VPARerun Rerun
}

// Rerun is a run of the shape under limits.
type Rerun struct {
	// CPU and Memory are the limits, cores and bytes.
	CPU    float64
	Memory int64
	// Peak is the most memory the run held, bytes.
	Peak int64
	// OOMKill is true when the run needed more memory than Memory.
	OOMKill bool
	// Periods counts the CFS periods in which the job had work, Throttled
	// those in which its work exceeded the quota.
	Periods, Throttled int
}

// ThrottledShare is Throttled over Periods.
func (r Rerun) ThrottledShare() float64 {
	if r.Periods == 0 {
		return 0
	}
	return float64(r.Throttled) / float64(r.Periods)
}

// job is the ID the replayed job has in the model.
const job = "replay"

// Run replays the shape name: its observed run sampled into a model as
// the agent samples a job (CPU counters every CPUEvery, the memory and
// its watermark, reset at each read, every MemoryEvery), the
// recommendation, and two re-runs with another seed, under the
// recommendation's limits and under VPA's (without its floors, which
// would hide the rule for small jobs).
//
// The runs are fluid models at the CFS period's resolution: the job's
// demand in a period is work; under a quota the work left over waits for
// the next period (as a real job's does: test/shapejob catches up), and a
// period whose work, with what waited, exceeds the quota is throttled.
// Memory above the limit is an OOM kill.
//
// Errors: an unknown shape, sample periods that are not multiples of
// Period, or Params out of bounds.
func Run(name string, c Config) (Result, error) {
	if c.CPUEvery%Period != 0 || c.MemoryEvery%Period != 0 || c.CPUEvery <= 0 || c.MemoryEvery <= 0 {
		return Result{}, fmt.Errorf("replay: sample periods %v, %v are not multiples of %v", c.CPUEvery, c.MemoryEvery, Period)
	}
	s, err := New(name, c.Duration, c.Seed)
	if err != nil {
		return Result{}, err
	}
	m, err := recommend.New(c.Params)
	if err != nil {
		return Result{}, err
	}
	observe(m, job, s, c)
	end := c.Start.Add(c.Duration)
	rec, _ := m.Recommend(job, end, limits.Limits{}, c.Host)
	res := Result{Shape: name, Rec: rec, Peak: s.MaxMemory(c.Duration)}
	if rec.Memory > 0 && res.Peak > 0 {
		res.Slack = float64(rec.Memory)/float64(res.Peak) - 1
	}
	again, _ := New(name, c.Duration, c.Seed+1)
	res.Rerun = rerun(again, c.Duration, rec.CPU, rec.Memory)
	res.VPARerun = rerun(again, c.Duration, rec.VPA.CPUNoFloor, rec.VPA.MemoryNoFloor)
	return res, nil
}

// observe feeds m the samples of a run of s, unlimited, as job.
func observe(m *recommend.Model, job string, s Shape, c Config) {
	var usage float64
	cur := s.Memory(0)
	peak := cur
	m.ObserveCPU(job, recommend.CPUSample{Time: c.Start})
	m.ObserveMemory(job, recommend.MemorySample{Time: c.Start, CurrentBytes: uint64(cur), PeakBytes: uint64(peak), Peak: recommend.PeakSinceLastSample})
	for t := time.Duration(0); t < c.Duration; t += Period {
		usage += s.CPU(t) * Period.Seconds()
		peak = max(peak, s.Memory(t))
		next := t + Period
		at := c.Start.Add(next)
		if next%c.CPUEvery == 0 {
			m.ObserveCPU(job, recommend.CPUSample{Time: at, UsageSeconds: usage})
		}
		if next%c.MemoryEvery == 0 {
			cur = s.Memory(next)
			m.ObserveMemory(job, recommend.MemorySample{
				Time: at, CurrentBytes: uint64(cur), PeakBytes: uint64(max(peak, cur)), Peak: recommend.PeakSinceLastSample,
			})
			peak = cur // the watermark is reset to the current usage
		}
	}
}

// rerun runs s for d under cpu cores (0: unlimited) and memory bytes
// (0: unlimited).
func rerun(s Shape, d time.Duration, cpu float64, memory int64) Rerun {
	r := Rerun{CPU: cpu, Memory: memory}
	quota := cpu * Period.Seconds()
	backlog := 0.0
	for t := time.Duration(0); t < d; t += Period {
		work := backlog + s.CPU(t)*Period.Seconds()
		if work > 0 {
			r.Periods++
		}
		switch {
		case cpu <= 0:
			backlog = 0
		case work > quota*(1+1e-9):
			r.Throttled++
			backlog = work - quota
		default:
			backlog = 0
		}
		mem := s.Memory(t)
		r.Peak = max(r.Peak, mem)
		if memory > 0 && mem > memory {
			r.OOMKill = true
		}
	}
	return r
}

// String is r on one line, for logs.
func (r Result) String() string {
	return fmt.Sprintf("%s: cpu %.2f (VPA %.3f) throttled %.2f %% (VPA %.2f %%); memory %s over peak %s: slack %.1f %% (VPA %s, %.1f %%), OOM kill on re-run %v (VPA %v)",
		r.Shape, r.Rec.CPU, r.Rec.VPA.CPUNoFloor, 100*r.Rerun.ThrottledShare(), 100*r.VPARerun.ThrottledShare(),
		mibs(r.Rec.Memory), mibs(r.Peak), 100*r.Slack, mibs(r.Rec.VPA.MemoryNoFloor),
		100*(float64(r.Rec.VPA.MemoryNoFloor)/math.Max(1, float64(r.Peak))-1), r.Rerun.OOMKill, r.VPARerun.OOMKill)
}

func mibs(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/mib) }
