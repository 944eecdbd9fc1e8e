package store

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/berthd/berth/spec"
)

// Keys is the store's key layout of one cluster: every key lives under
// "/berth/<cluster name>/" (see the package comment for the whole layout).
// A directory's name ends in "/", so that a prefix read of one never
// matches a sibling whose name starts the same. The zero Keys is not
// usable; make one with NewKeys.
type Keys struct {
	prefix string // "/berth/<name>/"
}

// NewKeys returns the layout of cluster name; the name is not checked
// here (see CheckName).
func NewKeys(name string) Keys { return Keys{prefix: "/berth/" + name + "/"} }

// Prefix is the directory of the whole cluster: "/berth/<name>/".
func (k Keys) Prefix() string { return k.prefix }

// MembersDir is the directory of member records: members/.
func (k Keys) MembersDir() string { return k.prefix + "members/" }

// Member is member id's record: members/<id>.
func (k Keys) Member(id string) string { return k.MembersDir() + id }

// LeaderDir is the directory of election candidates: leader/.
func (k Keys) LeaderDir() string { return k.prefix + "leader/" }

// LastSeenDir is the directory of departed members' last-seen times:
// lastseen/.
func (k Keys) LastSeenDir() string { return k.prefix + "lastseen/" }

// LastSeen is departed member id's last-seen time: lastseen/<id>.
func (k Keys) LastSeen(id string) string { return k.LastSeenDir() + id }

// DefDir is the directory of definitions of kind: connectors/ or groups/.
func (k Keys) DefDir(kind spec.DefKind) string { return k.prefix + string(kind) + "s/" }

// Def is definition kind/name: connectors/<name> or groups/<name>.
func (k Keys) Def(kind spec.DefKind, name string) string { return k.DefDir(kind) + name }

// FileApplied is the record of agent id's last applied file:
// applied/<id> (FileApplied).
func (k Keys) FileApplied(id string) string { return k.prefix + "applied/" + id }

// ClaimsDir is the directory of job claims: claims/.
func (k Keys) ClaimsDir() string { return k.prefix + "claims/" }

// Claim is job's claim: claims/<job>.
func (k Keys) Claim(job string) string { return k.ClaimsDir() + job }

// TargetsDir is the directory of connectors' target states: targets/.
func (k Keys) TargetsDir() string { return k.prefix + "targets/" }

// Target is connector's target state: targets/<connector>.
func (k Keys) Target(connector string) string { return k.TargetsDir() + connector }

// RestartsRoot is the directory of every pending restart: restarts/.
func (k Keys) RestartsRoot() string { return k.prefix + "restarts/" }

// RestartsDir is the directory of connector's pending restarts:
// restarts/<connector>/.
func (k Keys) RestartsDir(connector string) string { return k.RestartsRoot() + connector + "/" }

// Restart is the pending restart of connector's job:
// restarts/<connector>/<job>.
func (k Keys) Restart(connector, job string) string { return k.RestartsDir(connector) + job }

// PubDir is the directory of the publication: pub/.
func (k Keys) PubDir() string { return k.prefix + "pub/" }

// Head is the publication head: pub/head.
func (k Keys) Head() string { return k.PubDir() + "head" }

// SharesDir is the directory of every member's share: pub/shares/.
func (k Keys) SharesDir() string { return k.PubDir() + "shares/" }

// ShareDir is the directory of member's share chunks: pub/shares/<member>/.
func (k Keys) ShareDir(member string) string { return k.SharesDir() + member + "/" }

// ShareChunk is chunk i of member's share: pub/shares/<member>/<i, 4 digits>.
func (k Keys) ShareChunk(member string, i int) string {
	return fmt.Sprintf("%s%04d", k.ShareDir(member), i)
}

// ParseShareChunk splits a key under SharesDir into member and chunk
// index; ok is false for any other key.
func (k Keys) ParseShareChunk(key string) (member string, chunk int, ok bool) {
	rest, found := strings.CutPrefix(key, k.SharesDir())
	if !found {
		return "", 0, false
	}
	member, idx, found := strings.Cut(rest, "/")
	if !found {
		return "", 0, false
	}
	n, err := strconv.Atoi(idx)
	if err != nil || n < 0 {
		return "", 0, false
	}
	return member, n, true
}

// StatusDir is the directory of status buckets: pub/status/.
func (k Keys) StatusDir() string { return k.PubDir() + "status/" }

// StatusBucket is status bucket name (two hex digits): pub/status/<name>.
func (k Keys) StatusBucket(name string) string { return k.StatusDir() + name }

// Legacy is the single-key layout's whole assignment: assignment.
func (k Keys) Legacy() string { return k.prefix + "assignment" }
