package worker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// logPipe carries a job's stdout and stderr to its sink. One pipe serves
// every run of a worker: each run's process gets the write end as fd 1 and
// 2, and the agent writes its "berth:" marker lines into the same pipe, so
// they land in order with what the job wrote before. The agent holds the
// read end alone: a write end is opened again through /proc/self/fd when
// a run starts or a line is marked, and closed at once, so that a job
// costs the agent one descriptor. The read end is not read by a goroutine
// of its own: it sits in the epoll set of one of a few process-wide log
// readers (logMux), which read every job's pipe into one shared buffer.
// So a job that writes nothing costs no goroutine and no buffer. When no
// process holds a write end (between runs) the pipe leaves the epoll set
// until the agent opens one again (parked). Its output is copied until the
// worker has released it and every process holding a write end is gone;
// done is then closed.
type logPipe struct {
	rfd  int // read end, non-blocking, owned by the mux once added
	mux  *logMux
	sink io.Writer
	// closer closes the sink when the copy ends; nil for a caller's writer.
	closer io.Closer
	done   chan struct{}
	// doneMu guards then: called once the copy has ended (onDone).
	doneMu sync.Mutex
	then   func()
	// mu orders the agent's opening of a write end against the reader's
	// finding none: once a read has returned end of file under mu, no
	// write end can appear until mu is released. It guards the fields
	// below; consume runs under it too.
	mu       sync.Mutex
	parked   bool // out of the epoll set: no write end anywhere
	released bool // the worker is done with it (release)
	finished bool // finish has run
	// partial is the start of a line not yet ended by a newline; nil when
	// none (allocated only while a line is incomplete).
	partial []byte
}

// maxLine is the longest line kept whole: a longer one is written in
// pieces of this size.
const maxLine = 64 << 10

// newLogPipe makes the pipe and hands its read end to a log reader. A sink
// write error does not stop the copy (the job must never block on a full
// pipe): the data is then lost.
func (rt *Runtime) newLogPipe(sink io.Writer, closer io.Closer) (*logPipe, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("create log pipe: %w", err)
	}
	// The write end is opened again when a run or a line needs it.
	unix.Close(fds[1])
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("create log pipe: %w", err)
	}
	return rt.addLogPipe(fds[0], true, sink, closer)
}

// adoptLogPipe makes a log pipe over r, the read end of the pipe of a run
// an earlier agent started; r is owned by the pipe from here on, closed
// on error too.
func (rt *Runtime) adoptLogPipe(r *os.File, sink io.Writer, closer io.Closer) (*logPipe, error) {
	rfd, err := unix.FcntlInt(r.Fd(), unix.F_DUPFD_CLOEXEC, 0) // reaches no job
	r.Close()
	if err != nil {
		return nil, fmt.Errorf("adopt log pipe: %w", err)
	}
	if err := unix.SetNonblock(rfd, true); err != nil {
		unix.Close(rfd)
		return nil, fmt.Errorf("adopt log pipe: %w", err)
	}
	return rt.addLogPipe(rfd, false, sink, closer)
}

// addLogPipe hands the read end rfd of a pipe to a log reader; parked when
// no process holds a write end (a new pipe): it joins the epoll set when
// the agent opens one.
func (rt *Runtime) addLogPipe(rfd int, parked bool, sink io.Writer, closer io.Closer) (*logPipe, error) {
	p := &logPipe{rfd: rfd, mux: rt.pickMux(), sink: sink, closer: closer, done: make(chan struct{}), parked: parked}
	if err := p.mux.add(p); err != nil {
		unix.Close(p.rfd)
		return nil, fmt.Errorf("create log pipe: %w", err)
	}
	return p, nil
}

// writer opens a write end of the pipe (blocking: jobs expect a blocking
// stdout), through /proc/self/fd (proc(5): opening a pipe's descriptor
// there opens the pipe itself, in the mode asked for), and puts a parked
// pipe back in its reader's epoll set. The caller closes it. Errors: the
// open's (EMFILE) or epoll_ctl's.
func (p *logPipe) writer() (*os.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return nil, errors.New("log pipe closed")
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(p.rfd), unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the log pipe's write end: %w", err)
	}
	if p.parked {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(p.rfd)}
		if err := unix.EpollCtl(p.mux.epfd, unix.EPOLL_CTL_ADD, p.rfd, &ev); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("epoll_ctl: %w", err)
		}
		p.parked = false
	}
	return os.NewFile(uintptr(fd), "log pipe"), nil
}

// mark writes one "berth: ..." line into the pipe. Lines are far shorter
// than PIPE_BUF, so the write is atomic (pipe(7)). A line that cannot be
// written (no descriptor left) is lost.
func (p *logPipe) mark(format string, args ...any) {
	w, err := p.writer()
	if err != nil {
		return
	}
	markTo(w, format, args...)
	_ = w.Close()
}

// markTo writes one "berth: ..." line to w, a write end of a log pipe.
func markTo(w *os.File, format string, args ...any) {
	_, _ = fmt.Fprintf(w, "berth: "+format+"\n", args...)
}

// release tells the pipe its worker is done with it: the copy ends once
// every process that holds a write end is gone (at once if none does).
func (p *logPipe) release() {
	p.mu.Lock()
	p.released = true
	parked := p.parked
	p.mu.Unlock()
	if parked {
		// Out of the epoll set with no write end anywhere, and none can
		// be opened now: the copy is over.
		p.mux.remove(p)
		p.finish(nil)
	}
}

// onDone has f called once the copy has ended (at once if it has): from
// the log reader's goroutine or release's caller, so f must not block.
func (p *logPipe) onDone(f func()) {
	p.doneMu.Lock()
	select {
	case <-p.done:
		p.doneMu.Unlock()
		f()
		return
	default:
	}
	p.then = f
	p.doneMu.Unlock()
}

// consume writes the whole lines of data (read from the pipe) to the sink
// and keeps the rest as the start of the next line: each Write holds one or
// more complete lines, so a rotating sink never splits a line across files.
// A line longer than maxLine is written in maxLine pieces.
func (p *logPipe) consume(data []byte) {
	for len(data) > 0 {
		if len(p.partial) > 0 {
			end := len(data)
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				end = i + 1
			}
			n := min(end, maxLine-len(p.partial))
			p.partial = append(p.partial, data[:n]...)
			data = data[n:]
			if (n == end && p.partial[len(p.partial)-1] == '\n') || len(p.partial) >= maxLine {
				p.flushPartial()
			}
			continue
		}
		i := bytes.LastIndexByte(data, '\n')
		if i >= 0 {
			p.write(data[:i+1])
			data = data[i+1:]
		}
		for len(data) >= maxLine {
			p.write(data[:maxLine])
			data = data[maxLine:]
		}
		if len(data) > 0 {
			p.partial = append(make([]byte, 0, max(len(data), 256)), data...)
		}
		return
	}
}

// flushPartial writes the kept line and lets its buffer go.
func (p *logPipe) flushPartial() {
	p.write(p.partial)
	p.partial = nil
}

func (p *logPipe) write(b []byte) { _, _ = p.sink.Write(b) }

// finish ends the copy: the last line without a newline is written as it
// stands, a read error is noted in the sink, the read end and the sink are
// closed.
func (p *logPipe) finish(err error) {
	p.mu.Lock()
	if p.finished {
		p.mu.Unlock()
		return
	}
	p.finished = true
	p.mu.Unlock()
	if len(p.partial) > 0 {
		p.flushPartial()
	}
	if err != nil {
		_, _ = fmt.Fprintf(p.sink, "berth: log pipe read: %v\n", err)
	}
	_ = unix.Close(p.rfd)
	if p.closer != nil {
		_ = p.closer.Close()
	}
	p.doneMu.Lock()
	close(p.done)
	then := p.then
	p.doneMu.Unlock()
	if then != nil {
		then()
	}
}

// logMux is one log reader of a Runtime: a goroutine that waits in
// epoll_wait(2) on the read ends of many jobs' pipes (level-triggered) and
// copies what is ready to each pipe's sink through one shared buffer.
type logMux struct {
	epfd  int
	wake  int // eventfd(2) in the epoll set: written by stop
	mu    sync.Mutex
	pipes map[int]*logPipe // by read fd
	buf   []byte
	done  chan struct{} // closed when run has returned
}

// logMuxCount is the number of log readers: one per P, at most 4.
func logMuxCount() int { return max(1, min(runtime.GOMAXPROCS(0), 4)) }

// startLogMuxes starts rt's log readers; on error the ones started are in
// rt.muxes (rt.stop stops them).
func (rt *Runtime) startLogMuxes() error {
	for range logMuxCount() {
		m, err := newLogMux()
		if err != nil {
			return fmt.Errorf("start log reader: %w", err)
		}
		rt.muxes = append(rt.muxes, m)
		go m.run()
	}
	return nil
}

func newLogMux() (*logMux, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(wake)
		unix.Close(epfd)
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	return &logMux{epfd: epfd, wake: wake, pipes: map[int]*logPipe{}, buf: make([]byte, maxLine), done: make(chan struct{})}, nil
}

// pickMux spreads pipes over the readers, round robin.
func (rt *Runtime) pickMux() *logMux {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	m := rt.muxes[rt.nextMux%len(rt.muxes)]
	rt.nextMux++
	return m
}

// stop ends the reader and waits for it. A pipe still in its set (none
// once every worker has ended) has its copy ended, as at a read error.
func (m *logMux) stop() {
	one := [8]byte{1} // a non-zero uint64 in either byte order (eventfd(2))
	_, _ = unix.Write(m.wake, one[:])
	<-m.done
	m.mu.Lock()
	pipes := m.pipes
	m.pipes = map[int]*logPipe{}
	m.mu.Unlock()
	for _, p := range pipes {
		p.finish(errors.New("log reader stopped"))
	}
	unix.Close(m.wake)
	unix.Close(m.epfd)
}

// add puts p in the reader's set, and in its epoll set unless p is parked.
func (m *logMux) add(p *logPipe) error {
	m.mu.Lock()
	m.pipes[p.rfd] = p
	m.mu.Unlock()
	if p.parked {
		return nil
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(p.rfd)}
	if err := unix.EpollCtl(m.epfd, unix.EPOLL_CTL_ADD, p.rfd, &ev); err != nil {
		m.mu.Lock()
		delete(m.pipes, p.rfd)
		m.mu.Unlock()
		return fmt.Errorf("epoll_ctl: %w", err)
	}
	return nil
}

// remove takes p out of the reader's sets (its epoll set: ENOENT when p
// is parked), before its read end is closed.
func (m *logMux) remove(p *logPipe) {
	_ = unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, p.rfd, nil)
	m.mu.Lock()
	delete(m.pipes, p.rfd)
	m.mu.Unlock()
}

// readsPerEvent bounds how many buffers one ready pipe is read into before
// the reader turns to the next: a chatty job cannot starve the others
// (epoll is level-triggered, so the rest is reported again).
const readsPerEvent = 4

// run is the reader's loop, until stop writes the wake eventfd.
func (m *logMux) run() {
	defer close(m.done)
	events := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(m.epfd, events, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			panic(fmt.Sprintf("berth: log reader: epoll_wait: %v", err))
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == m.wake {
				return
			}
			m.mu.Lock()
			p := m.pipes[fd]
			m.mu.Unlock()
			if p != nil {
				m.drain(p)
			}
		}
	}
}

// drain reads what p has ready; at end of file (every writer gone) or on
// a read error the pipe leaves the epoll set and its copy ends.
func (m *logMux) drain(p *logPipe) {
	for range readsPerEvent {
		n, err := unix.Read(p.rfd, m.buf)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return
		case n > 0:
			p.consume(m.buf[:n])
			if n < len(m.buf) {
				return // the pipe is likely empty; epoll says if not
			}
			continue
		}
		// n == 0: end of file (no write end anywhere); or a read error.
		if err == nil && m.park(p) {
			return
		}
		m.remove(p)
		p.finish(err)
		return
	}
}

// park takes p, at end of file, out of the epoll set until the agent
// opens a write end again (logPipe.writer), unless its worker has
// released it: false then, and the copy ends. Under p.mu no write end
// can be opened, so it reads again first: what was written meanwhile is
// copied, and a write end opened meanwhile keeps p in the set.
func (m *logMux) park(p *logPipe) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return false
	}
	for {
		n, err := unix.Read(p.rfd, m.buf)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return true
		case err != nil:
			return false
		case n > 0:
			p.consume(m.buf[:n])
			continue
		}
		if err := unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, p.rfd, nil); err != nil {
			return false
		}
		p.parked = true
		return true
	}
}
