package memwatch

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrClosed is returned by Watch after the Watcher was closed.
var ErrClosed = errors.New("memory watcher closed")

// Watcher watches the memory of many jobs with one goroutine and one epoll
// set: a job costs one descriptor in the agent (the trigger's pressure
// file, or the threshold's eventfd), no goroutine and no timer. Its events
// are queued for its owner, who waits on Ready and takes them with Drain:
// the loop never waits for the owner.
//
// Create it with New; every method may be called from any goroutine. The
// owner calls Close when it is done, which waits for the goroutine.
type Watcher struct {
	epfd int
	wake int // eventfd(2) in the epoll set: written by Close
	// privileged is whether the agent holds CAP_SYS_RESOURCE, which
	// decides the PSI trigger's window (triggerFor).
	privileged bool
	ready      chan struct{} // capacity 1: something was queued
	done       chan struct{} // closed when run has returned
	closeOnce  sync.Once

	mu      sync.Mutex
	closed  bool
	nextID  uint64
	handles map[uint64]*Handle // by epoll data
	queue   []*Handle          // handles with an event to drain, in order
	// ended are the descriptors of watches that ended in the loop (Gone,
	// Failed), which the loop closes once it has released mu.
	ended []int
}

// wakeID is the epoll data of the wake eventfd; handles count from 1.
const wakeID = 0

// Handle is one job's watch, from Watch until Close (or a Gone or Failed
// event). Its state is guarded by its Watcher's mutex.
type Handle struct {
	w      *Watcher
	id     uint64
	fd     int // the pressure file (PSI) or the eventfd (Threshold); -1 once ended
	target Target
	mech   Mechanism
	rule   Rule

	psi psiState // Mechanism PSI
	thr thrState // Mechanism Threshold

	pending bool  // ev waits in the watcher's queue
	ev      Event // the event to drain (merged)
}

// New starts a Watcher: its epoll set and its goroutine.
//
// Errors: epoll_create1(2) or eventfd(2) fails (out of descriptors).
func New() (*Watcher, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("start memory watcher: epoll_create1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("start memory watcher: eventfd: %w", err)
	}
	ev := epollEvent(unix.EPOLLIN, wakeID)
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(wake)
		unix.Close(epfd)
		return nil, fmt.Errorf("start memory watcher: epoll_ctl: %w", err)
	}
	w := &Watcher{
		epfd: epfd, wake: wake, privileged: hasSysResource(),
		ready: make(chan struct{}, 1), done: make(chan struct{}),
		nextID: wakeID + 1, handles: map[uint64]*Handle{},
	}
	go w.run()
	return w, nil
}

// Watch registers the memory watch of one job's cgroup t under rule r and
// returns its handle, whose Close unregisters it. The mechanism follows
// the cgroup version that accounts the job's memory (Target.Mechanism):
//
//   - Threshold (t.V1Dir set: a legacy or hybrid host): an eventfd(2) is
//     registered in the cgroup's cgroup.event_control for its
//     memory.usage_in_bytes crossing r.High; the usage file is closed once
//     registered (the kernel keeps the cgroup, not the file), so the watch
//     holds the eventfd alone. Usage already above r.High at Watch is
//     reported as Over at once (an adopted job may be there already).
//   - PSI (t.PressureFile only: a unified host): memory.pressure is opened
//     O_RDWR|O_NONBLOCK and the trigger "some <threshold µs> <window µs>"
//     written to it (Handle.Trigger); the watch holds that file.
//
// Watch the job's cgroup, not a run's leaf: the cgroup outlives its runs,
// so one watch covers every restart. Close the handle before deleting the
// cgroup (a Gone event is for a removal by someone else).
//
// Errors: ErrClosed; ErrRule (wrapped) when r lacks what the mechanism
// needs (Threshold: High; PSI: Limit and Duration); t names no file; the
// cgroup does not exist (wrapping fs.ErrNotExist); the kernel refuses the
// trigger or the registration (EINVAL; EOPNOTSUPP or ENOENT where the
// kernel keeps no PSI); out of descriptors.
func (w *Watcher) Watch(t Target, r Rule) (*Handle, error) {
	h := &Handle{w: w, fd: -1, target: t, mech: t.Mechanism(), rule: r}
	var (
		err   error
		above bool
		usage uint64
	)
	switch h.mech {
	case Threshold:
		above, usage, err = h.registerThreshold()
	case PSI:
		err = h.registerPSI(w.privileged)
	default:
		err = errors.New("target names neither a v1 memory cgroup nor a memory.pressure file")
	}
	if err != nil {
		return nil, fmt.Errorf("watch memory of %s: %w", t.path(), err)
	}
	if err := w.add(h, above, usage); err != nil {
		unix.Close(h.fd)
		return nil, fmt.Errorf("watch memory of %s: %w", t.path(), err)
	}
	return h, nil
}

// add puts the registered h in the epoll set and the handles, and queues
// Over when the usage was above the threshold at registration.
func (w *Watcher) add(h *Handle, above bool, usage uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	h.id = w.nextID
	w.nextID++
	events := uint32(unix.EPOLLPRI)
	if h.mech == Threshold {
		events = unix.EPOLLIN
	}
	ev := epollEvent(events, h.id)
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, h.fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl: %w", err)
	}
	w.handles[h.id] = h
	if above {
		w.post(h, Event{Kind: Over, At: time.Now(), Usage: usage})
	}
	return nil
}

// path is the file or directory t's watch uses, for messages.
func (t Target) path() string {
	if t.V1Dir != "" {
		return t.V1Dir
	}
	return t.PressureFile
}

// Target is the target the handle watches.
func (h *Handle) Target() Target { return h.target }

// Mechanism is how the handle watches.
func (h *Handle) Mechanism() Mechanism { return h.mech }

// Rule is the rule the handle watches.
func (h *Handle) Rule() Rule { return h.rule }

// Trigger is what the watch registered, in the kernel's words: the PSI
// trigger ("some 200000 2000000": 200 ms of stall in a 2 s window), or
// the v1 threshold ("memory.usage_in_bytes 268435456").
func (h *Handle) Trigger() string {
	if h.mech == Threshold {
		return fmt.Sprintf("memory.usage_in_bytes %d", h.rule.High)
	}
	return h.psi.trig.String()
}

// Window is the PSI trigger's window (0 for a threshold): the rule's
// Duration is held over consecutive windows of this length.
func (h *Handle) Window() time.Duration { return h.psi.trig.window }

// Close ends the watch: its descriptor leaves the epoll set and is closed
// (closing a v1 eventfd unregisters its threshold; closing a pressure file
// destroys its trigger). No event of the handle is delivered after Close
// returns, including one queued and not yet drained. Closing an ended
// watch does nothing.
//
// Close of a PSI watch waits for an RCU grace period in the kernel (the
// trigger's destruction: about 10 ms on a busy host), in the caller's
// goroutine only: the watcher's loop and other watches go on meanwhile,
// and closes in several goroutines share their grace periods.
func (h *Handle) Close() {
	w := h.w
	w.mu.Lock()
	h.pending = false
	h.ev = Event{}
	fd := w.detach(h)
	w.mu.Unlock()
	if fd >= 0 {
		unix.Close(fd)
	}
}

// detach takes h out of the epoll set and of the handles, and returns its
// descriptor for the caller to close once w.mu is released (-1 when h had
// ended). Once detached, nothing of the watcher touches the descriptor.
// w.mu held.
func (w *Watcher) detach(h *Handle) int {
	fd := h.fd
	if fd < 0 {
		return -1
	}
	delete(w.handles, h.id)
	if !w.closed {
		_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	}
	h.fd = -1
	return fd
}

// Ready receives a value when events are waiting to be drained (one value
// for any number of events: drain them all).
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Drain appends the waiting events to dst, oldest first, and returns it.
// A handle has at most one waiting event: the ones it had since the last
// Drain are merged (a Gone or Failed one wins; an Over is never replaced
// by an Under).
func (w *Watcher) Drain(dst []Event) []Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range w.queue {
		if h.pending {
			dst = append(dst, h.ev)
			h.pending = false
			h.ev = Event{}
		}
	}
	clear(w.queue)
	w.queue = w.queue[:0]
	return dst
}

// post queues e for h's owner, merged with what h already has waiting,
// and says so on ready without waiting. A final event ends the watch.
// w.mu held.
func (w *Watcher) post(h *Handle, e Event) {
	e.Handle = h
	if h.pending {
		h.ev = merge(h.ev, e)
	} else {
		h.ev, h.pending = e, true
		w.queue = append(w.queue, h)
	}
	if e.Kind.final() {
		if fd := w.detach(h); fd >= 0 {
			w.ended = append(w.ended, fd)
		}
	}
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// Close stops the watcher's goroutine, waits for it, and closes every
// watch left and the epoll set. Events not yet drained may still be
// drained; Watch fails with ErrClosed. Closing twice does nothing.
func (w *Watcher) Close() {
	w.closeOnce.Do(func() {
		one := [8]byte{1} // a non-zero uint64 in either byte order (eventfd(2))
		_, _ = unix.Write(w.wake, one[:])
		<-w.done
		w.mu.Lock()
		w.closed = true
		fds := w.ended
		w.ended = nil
		for _, h := range w.handles {
			fds = append(fds, w.detach(h))
		}
		w.mu.Unlock()
		closeAll(fds)
		unix.Close(w.wake)
		unix.Close(w.epfd)
	})
}

// closers is how many goroutines closeAll closes descriptors in.
const closers = 16

// closeAll closes fds, in up to closers goroutines at once and waits for
// them: the kernel waits for an RCU grace period in the close of each PSI
// trigger, and concurrent closes share one.
func closeAll(fds []int) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(closers, len(fds)) {
		wg.Go(func() {
			for fd := range next {
				unix.Close(fd)
			}
		})
	}
	for _, fd := range fds {
		next <- fd
	}
	close(next)
	wg.Wait()
}

// run is the watcher's loop, until Close writes the wake eventfd. Each
// notification is handled under w.mu, so that a handle closed meanwhile
// (its epoll data no longer in handles) is never read from, and a
// descriptor number reused by a newer watch is never taken for the old
// one's.
func (w *Watcher) run() {
	defer close(w.done)
	events := make([]unix.EpollEvent, 64)
	buf := make([]byte, 512)
	for {
		n, err := unix.EpollWait(w.epfd, events, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			panic(fmt.Sprintf("berth: memory watcher: epoll_wait: %v", err))
		}
		now := time.Now()
		w.mu.Lock()
		for _, ev := range events[:n] {
			id := epollID(ev)
			if id == wakeID {
				w.mu.Unlock()
				return
			}
			h := w.handles[id]
			if h == nil {
				continue // closed after epoll_wait returned it
			}
			switch h.mech {
			case PSI:
				h.onPressure(ev.Events, now, buf)
			case Threshold:
				h.onThreshold(now, buf)
			}
		}
		ended := w.ended
		w.ended = nil
		w.mu.Unlock()
		for _, fd := range ended {
			unix.Close(fd)
		}
	}
}

// epollEvent is an epoll_event whose data is id (its Fd and Pad halves).
func epollEvent(events uint32, id uint64) unix.EpollEvent {
	return unix.EpollEvent{Events: events, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
}

// epollID is the id epollEvent put in ev.
func epollID(ev unix.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

// hasSysResource reports whether the process holds CAP_SYS_RESOURCE in its
// effective set, which makes its PSI triggers privileged (psi.rst: an
// unprivileged trigger's window must be a multiple of 2 s).
func hasSysResource() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_SYS_RESOURCE/32].Effective&(1<<(unix.CAP_SYS_RESOURCE%32)) != 0
}
