package cluster

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// Layout is the version of the store layout this package writes: 2, the
// per-member assignment (doc.go). Agents of the single-key layout register
// member records without a layout (0).
const Layout = 2

// Share is one member's part of a published assignment: what that member
// must run, stored under <prefix>/pub/shares/<member>/ and watched by that
// member alone (WatchShare).
type Share struct {
	Member string // member ID
	// Generation is the generation in which the share last changed. The
	// leader rewrites a share only when it changes, so a share keeps an
	// older generation while others move on; per member it only grows.
	Generation int64
	Leader     string   // member ID of the leader that wrote it
	Jobs       []string // job IDs the member runs, sorted; empty when none
	// Connectors maps the name of every connector one of Jobs belongs to
	// to the mod revision of its definition (<prefix>/connectors/<name>)
	// the leader assigned from. A change of a definition changes the
	// revision, hence the share: a member re-reads exactly the definitions
	// whose revisions changed (Client.Definitions). Revision 0 means not
	// known (a share derived from a leader of the single-key layout): read
	// the definition again on every delivery.
	Connectors map[string]int64
	// Groups maps the sharing group of every such connector to the mod
	// revision of its definition (<prefix>/groups/<name>), as Connectors.
	Groups map[string]int64
	// Departed is true when the leader published the member as gone (its
	// session ended); Jobs is then empty. A member that is live again gets
	// a new share once the leader sees its new session.
	Departed bool
}

// shareChunk is the stored form of one chunk of a share,
// <prefix>/pub/shares/<member>/<chunk, 4 digits>. A share is stored in as
// many chunks as keep each value under the chunk size (a share of 100 jobs
// is one chunk of about 2 KiB); chunk 0 carries the definition revisions.
// A share is complete when chunks 0 … Chunks-1 exist with one generation.
type shareChunk struct {
	Generation int64            `json:"generation"`
	Leader     string           `json:"leader"`
	Chunk      int              `json:"chunk"`
	Chunks     int              `json:"chunks"`
	Departed   bool             `json:"departed,omitempty"`
	Jobs       []string         `json:"jobs"`
	Connectors map[string]int64 `json:"connectors,omitempty"`
	Groups     map[string]int64 `json:"groups,omitempty"`
}

// shareContent is what a share says, without its generation and leader: the
// leader compares it to decide whether a share changed.
type shareContent struct {
	jobs       []string
	connectors map[string]int64
	groups     map[string]int64
	departed   bool
}

func (a shareContent) equal(b shareContent) bool {
	return a.departed == b.departed && slices.Equal(a.jobs, b.jobs) &&
		maps.Equal(a.connectors, b.connectors) && maps.Equal(a.groups, b.groups)
}

// chunkBytes is the most bytes one share chunk's value holds: a quarter of
// the request budget, at most 256 KiB, so several chunks fit one
// transaction.
func (c *Client) chunkBytes() int { return min(c.requestBudget()/4, 256*1024) }

// encodeShare returns the stored chunk values of content at generation gen
// by leader: as few chunks as keep each under chunkBytes.
func (c *Client) encodeShare(content shareContent, gen int64, leader string) ([][]byte, error) {
	limit := c.chunkBytes()
	var parts [][]string
	var cur []string
	size := 256 + len(leader) // the chunk's fixed fields
	for name := range content.connectors {
		size += len(name) + 24
	}
	for name := range content.groups {
		size += len(name) + 24
	}
	for _, j := range content.jobs {
		if len(cur) > 0 && size+len(j)+3 > limit {
			parts = append(parts, cur)
			cur, size = nil, 256+len(leader)
		}
		cur = append(cur, j)
		size += len(j) + 3
	}
	parts = append(parts, cur)
	out := make([][]byte, len(parts))
	for i, jobs := range parts {
		ch := shareChunk{Generation: gen, Leader: leader, Chunk: i, Chunks: len(parts), Departed: content.departed, Jobs: jobs}
		if ch.Jobs == nil {
			ch.Jobs = []string{}
		}
		if i == 0 {
			ch.Connectors, ch.Groups = content.connectors, content.groups
		}
		b, err := json.Marshal(ch)
		if err != nil {
			return nil, fmt.Errorf("encode share chunk %d: %w", i, err)
		}
		out[i] = b
	}
	return out, nil
}

// chunkSet is the stored chunks of one member's share as read or watched.
type chunkSet map[int]shareChunk

// assemble returns the share the chunks make when it is complete (chunks 0
// … Chunks-1 present, all of chunk 0's generation).
func (cs chunkSet) assemble(member string) (Share, bool) {
	c0, ok := cs[0]
	if !ok || c0.Chunks < 1 {
		return Share{}, false
	}
	s := Share{Member: member, Generation: c0.Generation, Leader: c0.Leader, Departed: c0.Departed,
		Connectors: c0.Connectors, Groups: c0.Groups, Jobs: []string{}}
	for i := range c0.Chunks {
		ch, ok := cs[i]
		if !ok || ch.Generation != c0.Generation || ch.Chunks != c0.Chunks {
			return Share{}, false
		}
		s.Jobs = append(s.Jobs, ch.Jobs...)
	}
	if s.Connectors == nil {
		s.Connectors = map[string]int64{}
	}
	if s.Groups == nil {
		s.Groups = map[string]int64{}
	}
	return s, true
}

// allJobs returns the jobs of every stored chunk, complete or not: what a
// new leader takes as a member's previous jobs after a publication that was
// cut short.
func (cs chunkSet) allJobs() []string {
	var out []string
	for _, ch := range cs {
		out = append(out, ch.Jobs...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func decodeShareChunk(b []byte) (shareChunk, error) {
	var ch shareChunk
	if err := json.Unmarshal(b, &ch); err != nil {
		return ch, fmt.Errorf("decode share chunk: %w", err)
	}
	return ch, nil
}
