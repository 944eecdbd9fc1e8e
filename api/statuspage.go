package api

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/berthd/berth/limits"
	"github.com/munnerz/goautoneg"
)

// StatusRefresh is how often the status page reloads itself (its meta
// refresh), seconds.
const StatusRefresh = 5

//go:embed statuspage.html
var statusPageHTML string

var statusTmpl = template.Must(template.New("status").Parse(statusPageHTML))

// statusPage serves GET / to a browser: the status page, server-rendered
// HTML without scripts or external assets, when the request's Accept
// header prefers text/html to application/json (goautoneg, as Prometheus
// negotiates its formats). Every other request goes to next.
func statusPage(b Backend, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if goautoneg.Negotiate(r.Header.Get("Accept"), []string{"application/json", "text/html"}) != "text/html" {
			next.ServeHTTP(w, r)
			return
		}
		view := newStatusView(r, b, time.Now())
		var buf bytes.Buffer
		if err := statusTmpl.Execute(&buf, view); err != nil {
			WriteError(w, http.StatusInternalServerError, "render status page: "+err.Error())
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(buf.Bytes())
	})
}

// statusView is what the status page shows, formatted.
type statusView struct {
	Agent      Agent
	Refresh    int
	Now        string
	Summary    string
	Jobs       []jobView
	Pressure   bool // some job has pressure figures
	Members    []memberView
	MembersErr string
	Assigned   bool // an assignment is published (the agent has joined)
	Unassigned []keyValue
	Conflicts  []Conflict
}

type keyValue struct{ Key, Value string }

// jobView is one row of the jobs table.
type jobView struct {
	ID, Kind, Group, State, Reason string
	PID, Started, LastExit, OOM    string
	Restarts                       int
	CPU, CPULimit                  string
	Memory, MemoryLimit            string
	MemoryMax, MemoryUsed          uint64 // for the <meter>; 0 max: no meter
	Pids, IOLimit                  string
	IO                             []string // read, written
	Pressure                       []string // per resource; nil: none
}

// memberView is one row of the members table.
type memberView struct {
	ID, Protocol, Addr, Started, Declared string
	Jobs                                  int
	Leader, Self                          bool
}

func newStatusView(r *http.Request, b Backend, now time.Time) statusView {
	v := statusView{Agent: b.AgentInfo(), Refresh: StatusRefresh, Now: now.UTC().Format("2006-01-02 15:04:05 UTC")}
	counts := map[string]int{}
	for _, j := range b.Jobs() {
		jv := newJobView(j, now)
		if jv.Pressure != nil {
			v.Pressure = true
		}
		v.Jobs = append(v.Jobs, jv)
		counts[string(j.State)]++
	}
	states := make([]string, 0, len(counts))
	for s := range counts {
		states = append(states, s)
	}
	sort.Strings(states)
	parts := []string{fmt.Sprintf("%d jobs", len(v.Jobs))}
	for _, s := range states {
		parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
	}
	v.Summary = strings.Join(parts, ", ")

	a, err := b.Assignment(r.Context())
	v.Assigned = err == nil
	if err == nil {
		for j, why := range a.Unassigned {
			v.Unassigned = append(v.Unassigned, keyValue{j, why})
		}
		sort.Slice(v.Unassigned, func(i, k int) bool { return v.Unassigned[i].Key < v.Unassigned[k].Key })
		v.Conflicts = a.Conflicts
	}
	ms, err := b.Members(r.Context())
	if err != nil {
		v.MembersErr = err.Error()
	}
	for _, m := range ms {
		declared := append(append([]string{}, m.Connectors...), m.Tasks...)
		d := strings.Join(declared, ", ")
		if d == "" {
			d = "none (standby)"
		}
		v.Members = append(v.Members, memberView{ID: m.ID, Protocol: m.Protocol, Addr: m.Addr,
			Started: ago(now, m.Started), Declared: d, Jobs: len(a.Members[m.ID]),
			Leader: v.Assigned && a.Leader == m.ID, Self: m.ID == v.Agent.ID})
	}
	return v
}

func newJobView(j Job, now time.Time) jobView {
	v := jobView{ID: j.ID, Kind: j.Kind, Group: j.Group, State: string(j.State), Reason: j.Reason,
		Restarts: j.Restarts, PID: "-", Started: "-", LastExit: "-", OOM: "-",
		CPU: "-", Memory: "-", Pids: "-", IO: []string{"-"}}
	if j.PID > 0 {
		v.PID = fmt.Sprint(j.PID)
	}
	if j.StartedAt != nil {
		v.Started = ago(now, *j.StartedAt)
	}
	if j.LastExit != nil {
		v.LastExit = j.LastExit.Reason + ", " + ago(now, j.LastExit.Time)
	}
	l := j.Limits
	v.CPULimit = "no limit"
	if l.CPU > 0 {
		v.CPULimit = fmt.Sprintf("%g cores", l.CPU)
	}
	if l.Cpuset != "" {
		v.CPULimit += ", CPUs " + l.Cpuset
	}
	v.MemoryLimit = "no limit"
	if l.Memory > 0 {
		v.MemoryLimit = humanBytes(uint64(l.Memory))
	}
	var io []string
	for _, d := range l.IO {
		var rates []string
		for _, r := range []struct {
			name string
			n    int64
			unit string
		}{{"read", d.ReadBPS, "/s"}, {"write", d.WriteBPS, "/s"}, {"read", d.ReadIOPS, " IOPS"}, {"write", d.WriteIOPS, " IOPS"}} {
			if r.n > 0 {
				if r.unit == "/s" {
					rates = append(rates, r.name+" "+humanBytes(uint64(r.n))+"/s")
				} else {
					rates = append(rates, fmt.Sprintf("%s %d IOPS", r.name, r.n))
				}
			}
		}
		io = append(io, strings.Join(rates, ", ")+" on "+d.Device)
	}
	v.IOLimit = strings.Join(io, "; ")
	if u := j.Usage; u != nil {
		v.CPU = fmt.Sprintf("%.1f s", u.CPUSeconds)
		v.Memory = humanBytes(u.MemoryBytes)
		if u.MemoryLimitBytes > 0 {
			v.MemoryMax, v.MemoryUsed = u.MemoryLimitBytes, min(u.MemoryBytes, u.MemoryLimitBytes)
		}
		v.OOM = fmt.Sprint(u.OOMKills)
		v.Pids = fmt.Sprint(u.Pids)
		if u.PidsLimit > 0 {
			v.Pids += " / " + fmt.Sprint(u.PidsLimit)
		}
		v.IO = []string{humanBytes(u.IOReadBytes) + " read", humanBytes(u.IOWriteBytes) + " written"}
		if p := u.Pressure; p != nil {
			v.Pressure = []string{fmt.Sprintf("cpu %.1f s", p.CPU.SomeSeconds),
				fmt.Sprintf("memory %.1f s", p.Memory.SomeSeconds), fmt.Sprintf("io %.1f s", p.IO.SomeSeconds)}
		}
	} else if l.Pids > 0 {
		v.Pids = "- / " + fmt.Sprint(l.Pids)
	}
	return v
}

// ago is how long before now t was: "3m ago", "just now".
func ago(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// humanBytes is n in binary units, as limits are written, spaced for
// prose: "512 B", "32.0 MiB".
func humanBytes(n uint64) string { return limits.FormatBytes(n, " ") }
