package memwatch

// The PSI trigger: Documentation/accounting/psi.rst, "Monitoring for
// pressure thresholds" and "Userspace monitor usage example". A trigger
// is written to an open pressure file as "some <threshold µs> <window
// µs>" (the kernel replaces the last byte written with a NUL, so the NUL
// is written too, as psi.rst's example does); the file then polls
// EPOLLPRI when the stall within the window reaches the threshold, at
// most once per window, and EPOLLERR once its cgroup is removed. One
// trigger per open file; closing the file destroys it.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"time"

	"github.com/berthd/berth/internal/kernfile"
	"golang.org/x/sys/unix"
)

// psiState is a PSI watch's trigger and the chain of its events that
// holds the rule's Duration.
type psiState struct {
	trig trigger
	// prev is false until the first event; lastAt is the time of the
	// latest event.
	prev   bool
	lastAt time.Time
	// start is when the span held by the chain began.
	start time.Time
	// since is when the trigger was made: the kernel's first window
	// begins there, so no span held begins before it.
	since time.Time
}

// registerPSI opens h's pressure file and writes its trigger.
func (h *Handle) registerPSI(privileged bool) error {
	if err := h.rule.checkPressure(); err != nil {
		return err
	}
	h.psi.trig = triggerFor(h.rule, privileged)
	file := h.target.PressureFile
	fd, err := unix.Open(file, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: file, Err: err}
	}
	trig := append([]byte(h.psi.trig.String()), 0)
	if _, err := unix.Write(fd, trig); err != nil {
		unix.Close(fd)
		return fmt.Errorf("write trigger %q to %s: %w", h.psi.trig, file, err)
	}
	h.fd = fd
	h.psi.since = time.Now()
	return nil
}

// onPressure handles one notification of h's pressure file. w.mu held.
func (h *Handle) onPressure(events uint32, now time.Time, buf []byte) {
	if events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		h.w.post(h, Event{Kind: Gone, At: now})
		return
	}
	if events&unix.EPOLLPRI == 0 {
		return
	}
	b, err := pread(h.fd, buf)
	if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT) {
		h.w.post(h, Event{Kind: Gone, At: now})
		return
	}
	var avg10 float64
	var stall time.Duration
	if err == nil {
		avg10, stall, err = parseSome(b)
	}
	if err != nil {
		h.w.post(h, Event{Kind: Failed, At: now, Err: fmt.Errorf("read %s: %w", h.target.PressureFile, err)})
		return
	}
	if held, over := h.psi.observe(now); over {
		h.w.post(h, Event{Kind: Over, At: now, Held: held, Avg10: avg10, Stall: stall})
	}
}

// observe counts one trigger event, at now, into the chain, and reports
// whether the chain now holds the rule's Duration (over) and the span it
// covers (held). After an Over the next span starts at now, so that Over
// comes again after each further Duration held.
//
// The kernel fires when the stall within its window reaches the
// threshold, checking ten times per window (privileged) or every 2 s (its
// averages, unprivileged), and at most once per window: while the stall
// holds, events come one window (and a check) apart. The rule: an event
// within the trigger's gap of the previous one (1½ windows privileged;
// 2¼ unprivileged, where a 2 s check that runs late moves the next event
// a whole check later) continues the chain; any other event starts one
// with the window that fired it, so the span held starts one window
// before it (or when the trigger was made, if later).
//
// So Over means the kernel saw the stall reach Limit percent of a window
// in each window of a span of at least Duration less a tenth of a window
// (the checks' spacing), with these errors, both on the early side:
//
//   - a breach the kernel sees in the last checks of a window it reports
//     when the window ends (it fires at most once per window), so a chain
//     may run one window past the stall;
//   - a chain bridges a stretch of less stall of up to half a window (1¼
//     windows unprivileged) between two events.
//
// The totals of the pressure file are not used to correct either: the
// kernel sums each of its aggregators (the trigger's and the file's) from
// per-CPU times weighted by each CPU's busy time in whole jiffies, and
// over one window the two differ by a third or more (seen on 6.1).
func (s *psiState) observe(now time.Time) (held time.Duration, over bool) {
	t := s.trig
	if !s.prev || now.Sub(s.lastAt) > t.gap {
		s.start = now.Add(-t.window)
		if s.start.Before(s.since) {
			s.start = s.since
		}
	}
	s.prev, s.lastAt = true, now
	held = now.Sub(s.start)
	if held < t.hold {
		return held, false
	}
	s.start = now
	return held, true
}

// pread reads the whole of a pressure file from its start into buf.
func pread(fd int, buf []byte) ([]byte, error) {
	for {
		n, err := unix.Pread(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == len(buf) {
			return nil, kernfile.ErrTooLong
		}
		return buf[:n], nil
	}
}

// parseSome reads the "some" line of a pressure file, "some avg10=A
// avg60=A avg300=A total=MICROSECONDS" (psi.rst, "Pressure interface"):
// its avg10, in percent, and its total.
func parseSome(b []byte) (avg10 float64, stall time.Duration, err error) {
	found := false
	err = kernfile.Nested(b, func(name, fields []byte) error {
		if string(name) != "some" {
			return nil
		}
		us, ok, err := kernfile.Field(fields, "total")
		if err != nil || !ok {
			return fmt.Errorf("\"some\" line without a total= of microseconds: %q", fields)
		}
		i := bytes.Index(fields, []byte("avg10="))
		if i < 0 {
			return fmt.Errorf("\"some\" line without avg10=: %q", fields)
		}
		v, _, _ := bytes.Cut(fields[i+len("avg10="):], []byte(" "))
		avg10, err = strconv.ParseFloat(string(v), 64)
		if err != nil {
			return fmt.Errorf("\"some\" line: avg10=%q: %w", v, err)
		}
		stall, found = time.Duration(us)*time.Microsecond, true
		return nil
	})
	if err == nil && !found {
		err = fmt.Errorf("no \"some\" line in %q", b)
	}
	return avg10, stall, err
}
