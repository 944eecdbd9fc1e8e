package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdBinary is the server of Debian's etcd-server package.
const etcdBinary = "/usr/bin/etcd"

// etcdCluster is three etcd processes on loopback, each with its data in
// dir/<name>, started and killed by this process (by PID).
type etcdCluster struct {
	dir       string
	procs     []*exec.Cmd
	logs      []*os.File
	Endpoints []string // client URLs
}

// freePort asks the kernel for a free loopback port; it is released before
// etcd binds it, and a collision makes etcd fail to start (and the run
// fail), never a silent reuse.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startEtcd starts a three-member etcd cluster under dir and waits until it
// answers a write.
func startEtcd(dir string) (*etcdCluster, error) {
	if _, err := os.Stat(etcdBinary); err != nil {
		return nil, fmt.Errorf("%s not installed (apt-get install -y etcd-server): %w", etcdBinary, err)
	}
	e := &etcdCluster{dir: dir}
	names := []string{"e0", "e1", "e2"}
	var clients, peers, initial []string
	for _, n := range names {
		cp, err := freePort()
		if err != nil {
			return nil, err
		}
		pp, err := freePort()
		if err != nil {
			return nil, err
		}
		clients = append(clients, fmt.Sprintf("http://127.0.0.1:%d", cp))
		peers = append(peers, fmt.Sprintf("http://127.0.0.1:%d", pp))
		initial = append(initial, fmt.Sprintf("%s=%s", n, peers[len(peers)-1]))
	}
	for i, n := range names {
		cmd := exec.Command(etcdBinary,
			"--name", n, "--data-dir", filepath.Join(dir, n),
			"--listen-client-urls", clients[i], "--advertise-client-urls", clients[i],
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "berth-sim",
			// As berth's embedded etcd: keep an hour of history.
			"--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1h",
			"--log-level", "error", "--logger", "zap", "--enable-pprof")
		log, err := os.Create(filepath.Join(dir, n+".log"))
		if err != nil {
			e.stop()
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			log.Close()
			e.stop()
			return nil, fmt.Errorf("start %s: %w", etcdBinary, err)
		}
		e.procs = append(e.procs, cmd)
		e.logs = append(e.logs, log)
	}
	e.Endpoints = clients
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := e.ping()
		if err == nil {
			return e, nil
		}
		if time.Now().After(deadline) {
			e.stop()
			return nil, fmt.Errorf("etcd cluster not ready after 30 s (logs in %s): %w", dir, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ping writes one key through every member.
func (e *etcdCluster) ping() error {
	for _, ep := range e.Endpoints {
		cli, err := e.client(ep)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = cli.Put(ctx, "/berth-sim/ping", ep)
		cancel()
		cli.Close()
		if err != nil {
			return fmt.Errorf("put through %s: %w", ep, err)
		}
	}
	return nil
}

func (e *etcdCluster) client(endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = e.Endpoints
	}
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// cpu returns the CPU time (user + system) the three processes have used.
func (e *etcdCluster) cpu() (time.Duration, error) {
	var total time.Duration
	for _, p := range e.procs {
		d, err := cpuTime(p.Process.Pid)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

// cpuTime is the CPU time (user + system: utime and stime of
// /proc/PID/stat, proc(5)) process pid has used.
func cpuTime(pid int) (time.Duration, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return time.Duration(st.CPUTime() * float64(time.Second)), nil
}

// dbSize returns the largest backend database size among the members,
// bytes (etcd's Status, the file on disk including free pages).
func (e *etcdCluster) dbSize(ctx context.Context) (int64, error) {
	cli, err := e.client()
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	var most int64
	for _, ep := range e.Endpoints {
		st, err := cli.Status(ctx, ep)
		if err != nil {
			return 0, fmt.Errorf("status of %s: %w", ep, err)
		}
		most = max(most, st.DbSize)
	}
	return most, nil
}

// profile fetches a CPU profile of every member for d (etcd runs with
// --enable-pprof) into dir/etcd-<n>.prof, in the background; wait returns
// when all are written.
func (e *etcdCluster) profile(dir string, d time.Duration) (wait func()) {
	var wg sync.WaitGroup
	for i, ep := range e.Endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", ep, int(d.Seconds()))
			resp, err := (&http.Client{Timeout: d + 30*time.Second}).Get(url)
			if err != nil {
				fmt.Fprintln(os.Stderr, "sim: etcd profile:", err)
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("etcd-e%d.prof", i)))
			if err != nil {
				fmt.Fprintln(os.Stderr, "sim: etcd profile:", err)
				return
			}
			defer f.Close()
			_, _ = io.Copy(f, resp.Body)
		}()
	}
	return wg.Wait
}

// stop kills the processes (by PID) and waits for them.
func (e *etcdCluster) stop() {
	for _, p := range e.procs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
	for _, l := range e.logs {
		l.Close()
	}
}
