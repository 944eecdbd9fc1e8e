package testutil

import "testing"

// The overlap analysis itself: two processes of one job that share a
// moment are reported, touching included; disjoint ones are not; lines are
// grouped per (worker, pid) whatever their order in the file.
func TestStampAnalysis(t *testing.T) {
	ss := []Stamp{
		{Worker: "/r1/jobs/j", PID: 10, NS: 100}, {Worker: "/r2/jobs/j", PID: 20, NS: 300}, {Worker: "/r1/jobs/j", PID: 10, NS: 200},
		{Worker: "/r2/jobs/j", PID: 20, NS: 400}, {Worker: "/r1/jobs/j", PID: 11, NS: 400}, {Worker: "/r1/jobs/j", PID: 12, NS: 500},
	}
	ivs := Intervals(ss)
	if len(ivs) != 4 || ivs[0].PID != 10 || ivs[0].First != 100 || ivs[0].Last != 200 || ivs[0].N != 2 {
		t.Fatalf("intervals %v", ivs)
	}
	ov := Overlaps(ivs)
	if len(ov) != 1 || ov[0][0].PID != 20 || ov[0][1].PID != 11 {
		t.Fatalf("overlaps %v, want exactly pid 20 [300,400] with pid 11 [400,400]", ov)
	}
	if got := Overlaps(ivs[:2]); len(got) != 0 {
		t.Fatalf("disjoint intervals reported as overlapping: %v", got)
	}
}
