package store

import (
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var (
	// ErrNoValidator: a workload write without a Validator.
	ErrNoValidator = errors.New("no workload validator configured")
	// ErrNotFound: the named connector or group does not exist.
	ErrNotFound = errors.New("not found")
)

// Store reads and writes the records of one cluster's store (definitions,
// target states, restart requests, member records) over an etcd client.
// It is safe for concurrent use.
type Store struct {
	etcd      *clientv3.Client
	keys      Keys
	maxTxnOps int       // etcd's --max-txn-ops: most operations of one transaction
	validate  Validator // nil: workload writes fail with ErrNoValidator
}

// New returns the store of the cluster whose layout is keys, over etcd.
// maxTxnOps is etcd's --max-txn-ops (128 by default), the most reads a
// by-key read puts in one transaction; validate checks workload
// definitions before they are stored (nil: refuse every workload write).
// The caller owns etcd and closes it.
func New(etcd *clientv3.Client, keys Keys, maxTxnOps int, validate Validator) *Store {
	return &Store{etcd: etcd, keys: keys, maxTxnOps: maxTxnOps, validate: validate}
}

// Keys returns the store's key layout.
func (s *Store) Keys() Keys { return s.keys }

// CheckName refuses names that cannot be one key segment: empty, or
// holding "/" or NUL. what names the kind of name in the error
// ("connector name", "member ID", "job").
func CheckName(what, name string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%s %q: must be non-empty and contain no '/'", what, name)
	}
	return nil
}
