package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// The agent's GC target is agentGCPercent unless GOGC is in its
// environment, which wins whatever it says.
func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	t.Setenv("GOGC", "") // restored after the test
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	tuneGC()
	if got := debug.SetGCPercent(100); got != agentGCPercent {
		t.Errorf("no GOGC: GC percent %d, want %d", got, agentGCPercent)
	}
	// With GOGC set the runtime took it at start; tuneGC leaves the
	// percent as it finds it.
	t.Setenv("GOGC", "77")
	debug.SetGCPercent(77)
	tuneGC()
	if got := debug.SetGCPercent(100); got != 77 {
		t.Errorf("GOGC=77: GC percent %d, want 77 (the operator's)", got)
	}
}
