package spec

import (
	"fmt"
	"strings"
)

// Environment variables berth sets for every job.
const (
	EnvJobID     = "BERTH_JOB_ID"    // the job ID
	EnvConnector = "BERTH_CONNECTOR" // the connector's name
	EnvTask      = "BERTH_TASK"      // the task index, "" for a connector job
	EnvCgroup    = "BERTH_CGROUP"    // the job's cgroup path, supplied at start
	// EnvFencingToken is the run's fencing token, a decimal integer
	// greater than every earlier run's of the job (docs/fencing.md).
	EnvFencingToken = "BERTH_FENCING_TOKEN"
	// EnvClaimFile is the claim file a run reads to learn until when no
	// other run of the job can start (docs/fencing.md).
	EnvClaimFile = "BERTH_CLAIM_FILE"
)

// reservedEnv are the names a process's env may not set.
var reservedEnv = map[string]bool{EnvJobID: true, EnvConnector: true, EnvTask: true, EnvCgroup: true,
	EnvFencingToken: true, EnvClaimFile: true}

// ReservedEnv reports whether name is one of the variables berth sets for
// every job (EnvJobID, EnvConnector, EnvTask, EnvCgroup, EnvFencingToken,
// EnvClaimFile), which a process's env and env_file may not set.
func ReservedEnv(name string) bool { return reservedEnv[name] }

// expandable are the references allowed in a command.
var expandable = map[string]bool{EnvJobID: true, EnvConnector: true, EnvTask: true}

// Expand replaces ${BERTH_JOB_ID}, ${BERTH_CONNECTOR} and ${BERTH_TASK} in
// s with their values in vars, and "$$" with "$". Any other "$" is kept as
// it is (so "$HOME" reaches a shell untouched). A nil vars only checks the
// syntax.
//
// It returns an error for an unterminated "${" and for a reference to any
// other name (write "$${NAME}" to pass "${NAME}" through to the program).
func Expand(s string, vars map[string]string) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("unterminated \"${\" in %q (write \"$$\" for a literal \"$\")", s)
			}
			name := s[i+2 : i+2+end]
			if !expandable[name] {
				return "", fmt.Errorf("unknown reference ${%s} in %q (allowed: ${BERTH_JOB_ID}, ${BERTH_CONNECTOR}, ${BERTH_TASK}; write \"$${%s}\" for a literal)", name, s, name)
			}
			b.WriteString(vars[name])
			i += 2 + end
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
