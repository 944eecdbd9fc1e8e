package main

import (
	"fmt"
	"io"
)

// result is one run's measurements (also its JSON line).
type result struct {
	Members      int     `json:"members"`
	Jobs         int     `json:"jobs"`
	TTLSeconds   float64 `json:"ttl_s"`
	Date         string  `json:"date"`
	ClaimWindow  int     `json:"claim_window"` // cluster.Config.ClaimWindow (0: default)
	StoreSeconds float64 `json:"store_s"`      // storing the workload (jobs/10 connectors)
	LoadBefore   float64 `json:"load_before"`  // 1-minute load average when the run started
	LoadAfter    float64 `json:"load_after"`   // … when it ended

	Anchor     anchorPhase `json:"anchor"`
	Cold       coldPhase   `json:"cold"`
	MemberLoss *lossPhase  `json:"member_loss,omitempty"`
	LeaderLoss *lossPhase  `json:"leader_loss,omitempty"`

	LargestRequestBytes int64 `json:"largest_request_bytes"` // largest message any client sent to etcd
	DBBytes             int64 `json:"db_bytes"`              // etcd's database size at the end (largest member)
	DoubleRuns          int   `json:"double_runs"`           // from the stand-in workers' records
	ClaimMismatches     int   `json:"claim_mismatches"`      // running jobs whose claim in etcd names another member, or claims without a run
	Fencings            int   `json:"fencings"`              // sessions lost by live members (late renewals)
}

// coldPhase: every member starts at once until every job runs.
type coldPhase struct {
	Seconds                float64       `json:"s"`                  // start of the members until every job runs
	FirstGenerationSeconds float64       `json:"first_generation_s"` // … until the first publication
	JoinedSeconds          float64       `json:"joined_s"`           // … until every member has joined
	Generations            int           `json:"generations"`        // publications during the cold start
	Starts                 int           `json:"starts"`             // job starts (jobs moved during the start count again)
	EtcdCPUSeconds         float64       `json:"etcd_cpu_s"`         // CPU of the three etcd processes
	SimCPUSeconds          float64       `json:"sim_cpu_s"`          // CPU of this process (every member and the leader)
	BytesPerAgentMedian    float64       `json:"bytes_per_agent_median"`
	BytesPerAgentMax       float64       `json:"bytes_per_agent_max"`
	LeaderBytes            int64         `json:"leader_bytes"` // bytes read by the leader
	DBBytes                int64         `json:"db_bytes"`
	Publications           []publication `json:"publications"`
	RenewMillis            [3]float64    `json:"renew_ms"` // session renewal round trip p50, p99, max
}

// publication is one generation as its leader reported it.
type publication struct {
	Generation    int64   `json:"generation"`
	AtSeconds     float64 `json:"at_s"` // stored, seconds after the phase began
	ComputeMillis float64 `json:"compute_ms"`
	WriteMillis   float64 `json:"write_ms"`
	Shares        int     `json:"shares"`
	Buckets       int     `json:"buckets"`
	Transactions  int     `json:"transactions"`
	Bytes         int     `json:"bytes"`
}

// lossPhase: a member (or the leader) is killed.
type lossPhase struct {
	Victim              string        `json:"victim"`
	Jobs                int           `json:"jobs"`                 // jobs it ran
	NewLeader           string        `json:"new_leader,omitempty"` // leader of the first new generation
	LeaseLeftSeconds    float64       `json:"lease_left_s"`         // its lease's earliest expiry after the kill (last renewal + TTL)
	ToGenerationSeconds float64       `json:"to_generation_s"`      // kill until a new generation is published
	ToRunningSeconds    float64       `json:"to_running_s"`         // kill until all its jobs run elsewhere
	AfterExpirySeconds  float64       `json:"after_expiry_s"`       // earliest lease expiry until all its jobs run elsewhere
	Generations         int           `json:"generations"`          // generations published meanwhile
	EtcdCPUSeconds      float64       `json:"etcd_cpu_s"`
	SharesChanged       int           `json:"shares_changed"`       // agents whose share changed
	SharesUnchanged     int           `json:"shares_unchanged"`     // agents whose share did not
	BytesChangedMedian  float64       `json:"bytes_changed_median"` // bytes read per generation by those agents
	BytesChangedMax     float64       `json:"bytes_changed_max"`
	BytesUnchangedMax   float64       `json:"bytes_unchanged_max"` // … by the others (renewals only)
	LeaderBytes         int64         `json:"leader_bytes"`        // … by the leader
	DBBytes             int64         `json:"db_bytes"`
	Publications        []publication `json:"publications"`
	RenewMillis         [3]float64    `json:"renew_ms"` // session renewal round trip p50, p99, max
}

// kib formats bytes: "812 B", "3.4 KiB".
func kib(b float64) string {
	if b < 1024 {
		return fmt.Sprintf("%.0f B", b)
	}
	return fmt.Sprintf("%.1f KiB", b/1024)
}

// print writes the result as a Markdown table.
func (r *result) print(w io.Writer) {
	window := "default"
	if r.ClaimWindow != 0 {
		window = fmt.Sprint(r.ClaimWindow)
	}
	fmt.Fprintf(w, "\n## %d members × %d jobs (session TTL %.0f s, claim window %s)\n\n", r.Members, r.Jobs, r.TTLSeconds, window)
	fmt.Fprintln(w, "| measure | value |")
	fmt.Fprintln(w, "|---|---|")
	row := func(k, f string, a ...any) { fmt.Fprintf(w, "| %s | %s |\n", k, fmt.Sprintf(f, a...)) }
	row("machine load (1-min average) before / after", "%.1f / %.1f", r.LoadBefore, r.LoadAfter)
	an := r.Anchor
	row("anchor, bare etcd clients: connect + grant + put, one per member", "%.1f s", an.JoinSeconds)
	row("anchor: lease renewals (KeepAliveOnce) at the session interval", "p50 %.0f ms, p99 %.0f ms, max %.0f ms, %d failed",
		an.RenewMillis[0], an.RenewMillis[1], an.RenewMillis[2], an.RenewFailures)
	row("anchor: one lease-bound key per job, 127 per txn, 8 txns in flight", "%.1f s", an.PutSeconds)
	row("store the workload", "%.1f s (%d connectors)", r.StoreSeconds, r.Jobs/tasksPerConnector)
	c := r.Cold
	row("cold start: every job claimed and running", "%.1f s = %.1f × anchor (join + puts) (every member joined at %.1f s; first generation at %.1f s; %d generation(s); %d starts)",
		c.Seconds, c.Seconds/max(an.JoinSeconds+an.PutSeconds, 0.001), c.JoinedSeconds, c.FirstGenerationSeconds, c.Generations, c.Starts)
	row("cold start: publications", "%s", pubs(c.Publications))
	row("cold start: CPU", "etcd %.1f s, members + leader %.1f s", c.EtcdCPUSeconds, c.SimCPUSeconds)
	row("cold start: session renewal round trip", "p50 %.0f ms, p99 %.0f ms, max %.0f ms", c.RenewMillis[0], c.RenewMillis[1], c.RenewMillis[2])
	row("cold start: bytes read per agent", "median %s, max %s; leader %s", kib(c.BytesPerAgentMedian), kib(c.BytesPerAgentMax), kib(float64(c.LeaderBytes)))
	for _, l := range []struct {
		name string
		p    *lossPhase
	}{{"member lost", r.MemberLoss}, {"leader lost", r.LeaderLoss}} {
		p := l.p
		if p == nil {
			continue
		}
		row(l.name+": new generation", "%.2f s after the kill (lease expired %.2f s after it)", p.ToGenerationSeconds, p.LeaseLeftSeconds)
		row(l.name+": its jobs running elsewhere", "%.2f s after the kill, %.2f s after its lease expired (%d jobs)",
			p.ToRunningSeconds, p.AfterExpirySeconds, p.Jobs)
		unchanged := "none"
		if p.SharesUnchanged > 0 {
			unchanged = fmt.Sprintf("%d agents, max %s", p.SharesUnchanged, kib(p.BytesUnchangedMax))
		}
		row(l.name+": bytes read per agent per generation", "share changed (%d agents): median %s, max %s; unchanged: %s; leader %s",
			p.SharesChanged, kib(p.BytesChangedMedian), kib(p.BytesChangedMax), unchanged, kib(float64(p.LeaderBytes)))
		row(l.name+": publications", "%s", pubs(p.Publications))
		row(l.name+": session renewal round trip", "p50 %.0f ms, p99 %.0f ms, max %.0f ms", p.RenewMillis[0], p.RenewMillis[1], p.RenewMillis[2])
		row(l.name+": etcd CPU", "%.1f s over %d generation(s)", p.EtcdCPUSeconds, p.Generations)
	}
	row("largest etcd request", "%s (limit 1536 KiB)", kib(float64(r.LargestRequestBytes)))
	row("etcd db size", "%.1f MiB after the cold start, %.1f MiB at the end", float64(r.Cold.DBBytes)/(1<<20), float64(r.DBBytes)/(1<<20))
	row("double runs (stand-in workers' records)", "%d", r.DoubleRuns)
	row("claims in etcd ≠ running jobs", "%d", r.ClaimMismatches)
	row("sessions lost by live members", "%d", r.Fencings)
}

// pubs summarises publications: "g1 at 1.2 s (compute 210 ms, write 380 ms,
// 300 shares in 4 txns)"; …
func pubs(ps []publication) string {
	if len(ps) == 0 {
		return "-"
	}
	out := ""
	for i, p := range ps {
		if i > 0 {
			out += "; "
		}
		out += fmt.Sprintf("g%d at %.1f s (compute %.0f ms, write %.0f ms, %d shares + %d buckets in %d txns, %s)",
			p.Generation, p.AtSeconds, p.ComputeMillis, p.WriteMillis, p.Shares, p.Buckets, p.Transactions, kib(float64(p.Bytes)))
	}
	return out
}
