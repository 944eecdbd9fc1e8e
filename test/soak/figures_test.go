//go:build soak

package soak

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// writeFigures logs a soak's figures as a Markdown table and, with
// -soak.report, appends the table to that file.
func writeFigures(t testing.TB, title string, rows [][2]string) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### %s (%s, %s)\n\n| figure | value |\n|---|---|\n", title, t.Name(), time.Now().UTC().Format(time.RFC3339))
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s |\n", r[0], r[1])
	}
	t.Log(b.String())
	if *flagReport == "" {
		return
	}
	f, err := os.OpenFile(*flagReport, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Errorf("report: %v", err)
		return
	}
	defer f.Close()
	if _, err := f.WriteString(b.String()); err != nil {
		t.Errorf("report: %v", err)
	}
}
