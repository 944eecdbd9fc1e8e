package source

import (
	"context"
	"maps"

	"github.com/berthd/berth/cluster"
)

// definitions are the stored bodies of the connectors and sharing groups
// of one member's jobs, with the definition revisions they were read for
// (cluster.Share.Connectors and Groups). They are owned by one goroutine.
type definitions struct {
	conns, groups     map[string][]byte // body by name
	connRev, groupRev map[string]int64  // revision of the body held; 0: read again every time
}

func newDefinitions() *definitions {
	return &definitions{conns: map[string][]byte{}, groups: map[string][]byte{},
		connRev: map[string]int64{}, groupRev: map[string]int64{}}
}

// update reads by key (cluster.Client.Definitions) the definitions of
// share sh whose revisions differ from those held: the connectors whose
// revision changed, or all of the share's connectors when its set of
// groups or a group's revision changed (the group bodies come with the
// connectors that name them). A revision 0 (a share derived from the
// single-key layout) is read again every time. Connectors that left the
// share are forgotten. On a store error nothing held changes.
func (d *definitions) update(ctx context.Context, c *cluster.Client, sh cluster.Share) error {
	groupsChanged := len(sh.Groups) != len(d.groupRev)
	for g, rev := range sh.Groups {
		if held, ok := d.groupRev[g]; !ok || rev == 0 || held != rev {
			groupsChanged = true
		}
	}
	var read []string
	for name, rev := range sh.Connectors {
		if held, ok := d.connRev[name]; groupsChanged || !ok || rev == 0 || held != rev {
			read = append(read, name)
		}
	}
	var conns, groups map[string][]byte
	if len(read) > 0 {
		var err error
		if conns, groups, err = c.Definitions(ctx, read); err != nil {
			return err
		}
	}
	for _, name := range read {
		if body, ok := conns[name]; ok {
			d.conns[name] = body
		} else {
			delete(d.conns, name) // deleted since the share was published
		}
		d.connRev[name] = sh.Connectors[name]
	}
	for name := range d.connRev {
		if _, ok := sh.Connectors[name]; !ok {
			delete(d.connRev, name)
			delete(d.conns, name)
		}
	}
	if len(read) == len(sh.Connectors) {
		d.groups = groups // every connector was read: exactly the groups they name
		if d.groups == nil {
			d.groups = map[string][]byte{}
		}
	} else {
		maps.Copy(d.groups, groups)
	}
	d.groupRev = maps.Clone(sh.Groups)
	if d.groupRev == nil {
		d.groupRev = map[string]int64{}
	}
	return nil
}
