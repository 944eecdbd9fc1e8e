package worker

import (
	"bytes"

	"github.com/coreos/go-systemd/v22/journal"
)

// JournalWriter sends a job's output to the systemd journal, one entry per
// line, with the job ID as the field BERTH_JOB_ID and SYSLOG_IDENTIFIER
// set to the job ID, so `journalctl BERTH_JOB_ID=orders-sink-0` or
// `journalctl -t orders-sink-0` shows one job (the agent's log_sink =
// "journal"). Writes are dropped when no journal socket exists
// (/run/systemd/journal/socket, sd_journal_send(3)); Write never fails, so
// a missing journal never blocks a job.
type JournalWriter struct {
	// JobID names the job in every entry.
	JobID string
}

// Write implements io.Writer. p holds whole lines (the worker's log copier
// writes only complete lines, except for an overlong or final one).
func (j *JournalWriter) Write(p []byte) (int, error) {
	if !journal.Enabled() {
		return len(p), nil
	}
	vars := map[string]string{"BERTH_JOB_ID": j.JobID, "SYSLOG_IDENTIFIER": j.JobID}
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte{'\n'}) {
		pri := journal.PriInfo
		if bytes.HasPrefix(line, []byte("berth: ")) {
			pri = journal.PriNotice
		}
		_ = journal.Send(string(line), pri, vars)
	}
	return len(p), nil
}
