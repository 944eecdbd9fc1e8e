package workload

import (
	"fmt"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster/store"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/spec"
)

// defFile is the name under which a stored definition is parsed, so that
// its errors read "connectors/orders:3:1: task.limits.memory: ...": the
// store directory and key of the definition.
func defFile(kind spec.DefKind, name string) string { return string(kind) + "s/" + name }

// Validator returns the store.Validator that checks every connector and
// group definition before the cluster store keeps it (a value that fails
// validation is refused, never stored), with the same code that validates
// the agent file, against the limits facts of host (host.LimitsOnly(): CPUs
// and devices; a definition's user and program need exist only where it
// runs; nil: no host checks).
//
// For kind spec.DefConnector it parses body with config.ParseConnector
// and returns assign.Connector{Name, Run: has [run], Tasks, Group}; for
// spec.DefGroup it parses body with config.ParseGroup and returns the
// zero assign.Connector. It refuses (returns an error) with the *limits.Errors
// of the parser, each entry "connectors/NAME:LINE:COL: key: message" (or
// "groups/NAME:..."), when the body does not validate; when the body's name
// key differs from name; and for any other kind. Whether a connector's group
// exists and whether its job IDs clash with other connectors' is not checked
// here (the store holds one definition per key); Parse and NewPlan check
// that.
func Validator(host *host.Host) store.Validator {
	host = host.LimitsOnly()
	return func(kind spec.DefKind, name string, body []byte) (assign.Connector, error) {
		switch kind {
		case spec.DefConnector:
			c, err := config.ParseConnector(defFile(kind, name), body, host)
			if err != nil {
				return assign.Connector{}, err
			}
			if c.Name != name {
				return assign.Connector{}, fmt.Errorf("%s: name: %q differs from the connector's key %q", defFile(kind, name), c.Name, name)
			}
			return assign.Connector{Name: c.Name, Run: c.Run != nil, Tasks: c.Tasks, Group: c.Group}, nil
		case spec.DefGroup:
			g, err := config.ParseGroup(defFile(kind, name), body, host)
			if err != nil {
				return assign.Connector{}, err
			}
			if g.Name != name {
				return assign.Connector{}, fmt.Errorf("%s: name: %q differs from the group's key %q", defFile(kind, name), g.Name, name)
			}
			return assign.Connector{}, nil
		default:
			return assign.Connector{}, fmt.Errorf("validate %s %s: unknown kind of definition (want %q or %q)", kind, name, spec.DefConnector, spec.DefGroup)
		}
	}
}
