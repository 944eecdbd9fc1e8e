package scope

import "testing"

func TestServiceOf(t *testing.T) {
	for _, c := range []struct {
		p      string
		want   Service
		ok     bool
		slice  string
		jobsSc string
	}{
		{p: "/system.slice/berth.service", want: Service{Unit: "berth.service", Cgroup: "/system.slice/berth.service"}, ok: true, slice: "system.slice", jobsSc: "berth-jobs.scope"},
		{p: "/system.slice/berth.service/agent", want: Service{Unit: "berth.service", Cgroup: "/system.slice/berth.service", Leaf: "/agent"}, ok: true, slice: "system.slice", jobsSc: "berth-jobs.scope"},
		{p: "/foo.slice/foo-bar.slice/berth@a.service", want: Service{Unit: "berth@a.service", Cgroup: "/foo.slice/foo-bar.slice/berth@a.service"}, ok: true, slice: "foo-bar.slice", jobsSc: "berth@a-jobs.scope"},
		{p: "/berth.service", want: Service{Unit: "berth.service", Cgroup: "/berth.service"}, ok: true, slice: "-.slice", jobsSc: "berth-jobs.scope"},
		// Not a service: a session scope, berth's own root, a deeper
		// process, the root, nothing (no cgroup2).
		{p: "/user.slice/user-0.slice/session-3.scope"},
		{p: "/berth/agent"},
		{p: "/system.slice/berth.service/jobs/a/run-1"},
		{p: "/"},
		{p: ""},
		{p: "/.service"},
	} {
		got, ok := serviceOf(c.p)
		if ok != c.ok || got != c.want {
			t.Errorf("serviceOf(%q) = %+v, %v; want %+v, %v", c.p, got, ok, c.want, c.ok)
			continue
		}
		if !ok {
			continue
		}
		if got.Slice() != c.slice || got.JobsScope() != c.jobsSc {
			t.Errorf("%q: Slice %q JobsScope %q; want %q %q", c.p, got.Slice(), got.JobsScope(), c.slice, c.jobsSc)
		}
	}
}
