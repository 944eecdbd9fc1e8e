package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/berthd/berth/config"
	"sort"
	"time"

	"github.com/berthd/berth/assign"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MemberRecord is what an agent registers under <prefix>/members/<id>, bound
// to its session lease: it disappears when the lease ends.
type MemberRecord struct {
	ID         string          `json:"id"`         // agent ID, unique in the cluster
	Protocol   config.Protocol `json:"protocol"`   // static or balanced (KIP-987)
	Connectors []string        `json:"connectors"` // declared static.connectors
	Tasks      []string        `json:"tasks"`      // declared static.tasks
	Addr       string          `json:"addr"`       // the agent's API address, host:port (https://host:port with TLS)
	Started    time.Time       `json:"started"`    // when this session joined (UTC)
	Lease      int64           `json:"-"`          // the etcd lease ID the record is bound to
}

// Member returns the record as the assignment function sees it.
func (r MemberRecord) Member() assign.Member {
	return assign.Member{ID: r.ID, Protocol: r.Protocol, Connectors: r.Connectors, Tasks: r.Tasks}
}

// Members returns the live members' records, sorted by ID. It returns an
// error when the store cannot be read or a record is not valid JSON.
func (c *Client) Members(ctx context.Context) ([]MemberRecord, error) {
	resp, err := c.etcd.Get(ctx, c.key("members/"), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list members under %s: %w", c.key("members/"), err)
	}
	out := make([]MemberRecord, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r, err := decodeMember(kv.Value, kv.Lease)
		if err != nil {
			return nil, fmt.Errorf("member record %s: %w", kv.Key, err)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func decodeMember(b []byte, lease int64) (MemberRecord, error) {
	var r MemberRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decode member record: %w", err)
	}
	r.Lease = lease
	return r, nil
}
