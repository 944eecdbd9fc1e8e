package fencing

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berthd/berth/internal/atomicfile"
	"github.com/coreos/go-systemd/v22/unit"
	"golang.org/x/sys/unix"
)

// ClaimDir holds the claim files of the agents of this host (FHS /run: a
// claim means nothing after a reboot, and a tmpfs takes a write at every
// renewal without a disk). It is searchable by every user, as a job with
// a `user` must read its agent's file.
const ClaimDir = "/run/berth"

// ClaimFilePath is the claim file of the agent whose data_dir is dataDir:
// ClaimDir/<data_dir escaped as systemd escapes a path>.claim
// (systemd-escape --path: /var/lib/berth is var-lib-berth), or, for a
// data_dir whose escaped name would not fit a file name, a hash of it. A
// run gets it in BERTH_CLAIM_FILE.
func ClaimFilePath(dataDir string) string {
	name := unit.UnitNamePathEscape(filepath.Clean(dataDir))
	if len(name) > 200 {
		sum := sha256.Sum256([]byte(filepath.Clean(dataDir)))
		name = "data-dir-" + hex.EncodeToString(sum[:16])
	}
	return filepath.Join(ClaimDir, name+".claim")
}

// claimVersion is the claim file's format (docs/fencing.md), its first
// line's value.
const claimVersion = "1"

// Claim is what a claim file says of the agent's session.
type Claim struct {
	// Member is the agent's member ID; Lease its session's lease.
	Member string
	Lease  int64
	// Expiry is the earliest the store can expire the lease: the last
	// successful renewal's send time plus the session TTL
	// (cluster.Session.LastRenewal + TTL), read with its monotonic
	// reading. Another member can claim a job of this agent only once the
	// store has expired the lease, so no other run of the agent's jobs
	// can start before it (and a run of this agent is killed earlier: at
	// the agent's fencing deadline, or the guard's, half a margin later).
	Expiry time.Time
}

// ClaimFile keeps an agent's claim file: the newest Claim it was given
// (Set), written by a goroutine of its own (so a slow file system never
// delays a renewal) as the jobs' clock reads it. Close ends that
// goroutine.
type ClaimFile struct {
	path   string
	forker func() int
	log    *slog.Logger

	mu       sync.Mutex
	cond     *sync.Cond // a write ended
	latest   Claim
	set      uint64 // numbers the Sets
	written  uint64 // the Set the file holds (or whose write failed: err)
	err      error  // the last write's error
	reported string // the last error logged
	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{}
}

// StartClaimFile starts the writer of the claim file at path
// (ClaimFilePath). forker returns the pid of the process that forks the
// jobs (the lease guard), whose children's time namespace is the jobs'
// (time_namespaces(7): /proc/PID/timens_offsets); 0, or a nil forker:
// this process. log receives the write errors, once each.
func StartClaimFile(path string, forker func() int, log *slog.Logger) *ClaimFile {
	if log == nil {
		log = slog.Default()
	}
	f := &ClaimFile{path: path, forker: forker, log: log, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	f.cond = sync.NewCond(&f.mu)
	go f.loop()
	return f
}

// Path is the claim file's path.
func (f *ClaimFile) Path() string { return f.path }

// Set makes c the claim the file holds, written soon; it never blocks.
func (f *ClaimFile) Set(c Claim) {
	f.mu.Lock()
	f.latest = c
	f.set++
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Written returns once the claim of the newest Set is in the file, nil,
// or its write failed, with the error: a run starts only while the file
// says its session's deadline. It returns ctx's error when ctx ends first,
// and nil when nothing was ever Set.
func (f *ClaimFile) Written(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		f.mu.Lock()
		f.cond.Broadcast()
		f.mu.Unlock()
	})
	defer stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	want := f.set
	for f.written < want {
		if ctx.Err() != nil {
			return fmt.Errorf("claim file %s: %w", f.path, ctx.Err())
		}
		f.cond.Wait()
	}
	if f.err != nil {
		return fmt.Errorf("claim file %s: %w", f.path, f.err)
	}
	return nil
}

// Close ends the writer, after the write under way; the file stays.
func (f *ClaimFile) Close() {
	close(f.stop)
	<-f.done
}

// Remove removes the file (a clean stop: no job of the agent is left).
func (f *ClaimFile) Remove() {
	_ = os.Remove(f.path)
}

// loop writes the newest claim each time one is Set, until Close.
func (f *ClaimFile) loop() {
	defer close(f.done)
	for {
		select {
		case <-f.stop:
			return
		case <-f.kick:
		}
		f.mu.Lock()
		c, n := f.latest, f.set
		f.mu.Unlock()
		err := f.write(c)
		f.mu.Lock()
		f.written, f.err = n, err
		report := ""
		if err != nil {
			report = err.Error()
		}
		changed := report != f.reported
		f.reported = report
		f.cond.Broadcast()
		f.mu.Unlock()
		switch {
		case changed && err != nil:
			f.log.Error("the claim file cannot be written: no run starts until it is", "path", f.path, "error", err)
		case changed:
			f.log.Info("the claim file is written again", "path", f.path)
		}
	}
}

// write writes c to the file, its deadline on the jobs' CLOCK_BOOTTIME.
func (f *ClaimFile) write(c Claim) error {
	if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
		return err
	}
	off, err := f.offset()
	if err != nil {
		return err
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return fmt.Errorf("clock_gettime(CLOCK_BOOTTIME): %w", err)
	}
	deadline := ts.Nano() + off + int64(time.Until(c.Expiry))
	return atomicfile.WriteFile(f.path, encodeClaim(c, deadline), 0o644)
}

// encodeClaim is the claim file of c whose deadline is deadline
// nanoseconds on the jobs' CLOCK_BOOTTIME: KEY=value lines, as a shell
// reads them.
func encodeClaim(c Claim, deadline int64) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "version=%s\n", claimVersion)
	fmt.Fprintf(&b, "deadline=%d.%09d\n", deadline/1e9, deadline%1e9)
	fmt.Fprintf(&b, "deadline_ns=%d\n", deadline)
	fmt.Fprintf(&b, "member=%s\n", c.Member)
	fmt.Fprintf(&b, "lease=%x\n", c.Lease)
	return b.Bytes()
}

// offset is how far the jobs' CLOCK_BOOTTIME is ahead of this process's,
// nanoseconds: the boottime offset of the forker's children's time
// namespace less this process's own.
func (f *ClaimFile) offset() (int64, error) {
	pid := 0
	if f.forker != nil {
		pid = f.forker()
	}
	if pid == 0 {
		return 0, nil
	}
	theirs, err := boottimeOffset(strconv.Itoa(pid))
	if err != nil {
		return 0, err
	}
	ours, err := boottimeOffset("self")
	if err != nil {
		return 0, err
	}
	return theirs - ours, nil
}

// boottimeOffset reads the CLOCK_BOOTTIME offset of the time namespace
// the children of process pid ("self", or a number) are born in,
// nanoseconds (/proc/PID/timens_offsets, time_namespaces(7): lines
// "<clock> <secs> <nanosecs>"); 0 on a kernel without time namespaces.
func boottimeOffset(pid string) (int64, error) {
	path := "/proc/" + pid + "/timens_offsets"
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && pid == "self" {
		return 0, nil // no CONFIG_TIME_NS
	}
	if err != nil {
		return 0, fmt.Errorf("read the jobs' clock offset: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "boottime" {
			continue
		}
		secs, err1 := strconv.ParseInt(f[1], 10, 64)
		nsecs, err2 := strconv.ParseInt(f[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
		}
		return secs*1e9 + nsecs, nil
	}
	return 0, nil
}

// ReadClaim reads the claim file at path as a job does: its deadline in
// nanoseconds on the reader's CLOCK_BOOTTIME, its member and lease.
// Errors: the file cannot be read, or is not of the format
// (docs/fencing.md).
func ReadClaim(path string) (deadline int64, member string, lease int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, "", 0, err
	}
	kv := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return 0, "", 0, fmt.Errorf("claim file %s: line %q is not KEY=value", path, line)
		}
		kv[k] = v
	}
	if kv["version"] != claimVersion {
		return 0, "", 0, fmt.Errorf("claim file %s: version %q, want %s", path, kv["version"], claimVersion)
	}
	if deadline, err = strconv.ParseInt(kv["deadline_ns"], 10, 64); err != nil {
		return 0, "", 0, fmt.Errorf("claim file %s: deadline_ns: %w", path, err)
	}
	if lease, err = strconv.ParseInt(kv["lease"], 16, 64); err != nil {
		return 0, "", 0, fmt.Errorf("claim file %s: lease: %w", path, err)
	}
	return deadline, kv["member"], lease, nil
}
