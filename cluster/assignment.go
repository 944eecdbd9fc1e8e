package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/berthd/berth/assign"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Published is an assignment as the leader published it at
// <prefix>/assignment.
type Published struct {
	Generation int64             // 1 for the first assignment; +1 on every change
	Leader     string            // member ID of the leader that published it
	Assignment assign.Assignment // who runs what, what is unassigned and why, conflicts
}

// publishedJSON is the stored form: {generation, leader, members:{id:[jobs]},
// unassigned:{job:reason}, conflicts:[{job, members, winner}],
// held:{job:member}, declared:{job:member}}. Held and Declared carry rule 5
// holds and absent members' declarations into the next Input.Previous.
type publishedJSON struct {
	Generation int64               `json:"generation"`
	Leader     string              `json:"leader"`
	Members    map[string][]string `json:"members"`
	Unassigned map[string]string   `json:"unassigned"`
	Conflicts  []conflictJSON      `json:"conflicts"`
	Held       map[string]string   `json:"held"`
	Declared   map[string]string   `json:"declared"`
}

type conflictJSON struct {
	Job     string   `json:"job"`
	Members []string `json:"members"`
	Winner  string   `json:"winner"`
}

func encodePublished(p Published) ([]byte, error) {
	j := publishedJSON{Generation: p.Generation, Leader: p.Leader,
		Members: map[string][]string{}, Unassigned: map[string]string{}, Conflicts: []conflictJSON{},
		Held: map[string]string{}, Declared: map[string]string{}}
	for m, jobs := range p.Assignment.Members {
		if jobs == nil {
			jobs = []string{}
		}
		j.Members[m] = jobs
	}
	maps.Copy(j.Unassigned, p.Assignment.Unassigned)
	maps.Copy(j.Held, p.Assignment.Held)
	maps.Copy(j.Declared, p.Assignment.Declared)
	for _, cf := range p.Assignment.Conflicts {
		j.Conflicts = append(j.Conflicts, conflictJSON{Job: cf.Job, Members: cf.Members, Winner: cf.Winner})
	}
	return json.Marshal(j)
}

func decodePublished(b []byte) (Published, error) {
	var j publishedJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return Published{}, fmt.Errorf("decode published assignment: %w", err)
	}
	p := Published{Generation: j.Generation, Leader: j.Leader, Assignment: assign.Assignment{
		Members: j.Members, Unassigned: j.Unassigned, Held: j.Held, Declared: j.Declared}}
	for _, cf := range j.Conflicts {
		p.Assignment.Conflicts = append(p.Assignment.Conflicts, assign.Conflict{Job: cf.Job, Members: cf.Members, Winner: cf.Winner})
	}
	return p, nil
}

// sameAssignment reports whether a and b are equal in every published field
// (nil and empty alike).
func sameAssignment(a, b assign.Assignment) bool {
	ea, err1 := encodePublished(Published{Assignment: a})
	eb, err2 := encodePublished(Published{Assignment: b})
	return err1 == nil && err2 == nil && bytes.Equal(ea, eb)
}

// Assignment returns the published assignment; the zero Published
// (Generation 0) when none has been published yet. It returns an error when
// the store cannot be read or the value is not valid JSON.
func (c *Client) Assignment(ctx context.Context) (Published, error) {
	p, _, err := c.readAssignment(ctx)
	return p, err
}

// readAssignment returns the published assignment and the store revision it
// was read at.
func (c *Client) readAssignment(ctx context.Context) (Published, int64, error) {
	key := c.key("assignment")
	resp, err := c.etcd.Get(ctx, key)
	if err != nil {
		return Published{}, 0, fmt.Errorf("read assignment %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return Published{}, resp.Header.Revision, nil
	}
	p, err := decodePublished(resp.Kvs[0].Value)
	if err != nil {
		return Published{}, 0, fmt.Errorf("read assignment %s: %w", key, err)
	}
	return p, resp.Header.Revision, nil
}

// watchRetry is the pause before re-reading after a failed watch or read.
const watchRetry = 500 * time.Millisecond

// WatchAssignment returns a channel that delivers the published assignment:
// first the current one (if any has been published), then every new
// generation in increasing order, never one twice. If the watch breaks (etcd
// compacted the history, or lost its leader) it re-reads and continues, so
// generations published meanwhile may be skipped but order is kept. The
// channel is closed when ctx ends. A slow reader holds up delivery; it never
// loses the newest generation.
func (c *Client) WatchAssignment(ctx context.Context) <-chan Published {
	out := make(chan Published)
	go func() {
		defer close(out)
		var last int64
		send := func(p Published) bool {
			if p.Generation <= last {
				return true
			}
			select {
			case out <- p:
				last = p.Generation
				return true
			case <-ctx.Done():
				return false
			}
		}
		for ctx.Err() == nil {
			p, rev, err := c.readAssignment(ctx)
			if err != nil {
				if !sleepCtx(ctx, watchRetry) {
					return
				}
				continue
			}
			if !send(p) {
				return
			}
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for wr := range c.etcd.Watch(wctx, c.key("assignment"), clientv3.WithRev(rev+1)) {
				if wr.Err() != nil {
					break
				}
				for _, ev := range wr.Events {
					if ev.Type != clientv3.EventTypePut {
						continue
					}
					p, err := decodePublished(ev.Kv.Value)
					if err != nil {
						continue // a foreign write; the next generation replaces it
					}
					if !send(p) {
						cancel()
						return
					}
				}
			}
			cancel()
			if !sleepCtx(ctx, watchRetry) {
				return
			}
		}
	}()
	return out
}

// sleepCtx waits d or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
