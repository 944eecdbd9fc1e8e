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
	// prev is false until the first event; lastAt and lastStall are the
	// time and the "some" total of the latest event.
	prev      bool
	lastAt    time.Time
	lastStall time.Duration
	// chain is true while consecutive events hold the rule; the span held
	// so far began at start, when the total was at least startStall.
	chain      bool
	start      time.Time
	startStall time.Duration
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
	if held, share, over := h.psi.observe(now, stall); over {
		h.w.post(h, Event{Kind: Over, At: now, Held: held, Share: share, Avg10: avg10, Stall: stall})
	}
}

// observe counts one trigger event, at now with the "some" total stall,
// into the chain, and reports whether the chain now holds the rule's
// Duration (over), the span it covers (held) and the stall share over
// that span, in percent (at least share: the stall in the chain's first
// window is known only to have reached the threshold). After an Over the
// next span starts at now, so that Over comes again after each further
// Duration held.
//
// The kernel fires when the stall within its window reaches the
// threshold, checking ten times per window (privileged) or every 2 s (its
// averages, unprivileged), and at most once per window: while the stall
// holds, events come one window apart, or two when a check fell just
// short of the window's end. The rule, with the totals read at each event:
//
//   - An event within 2¼ windows of the previous one continues the chain
//     when the total grew since by at least Limit percent of the time
//     between them: the stall held Limit on average over that stretch.
//   - One that comes that soon with less growth than the threshold is not
//     counted and breaks the chain: the window before it (which lies
//     within the stretch) did not reach the threshold, so it is the
//     kernel's late report of a window already counted (a breach it
//     could not report within the previous window, reported when that
//     window ends).
//   - Any other event (the first, one after a pause, one after a stretch
//     below Limit on average) starts a chain with the window that fired
//     it: the span held starts one window before it (or when the trigger
//     was made, if later).
//
// So Over means the stall reached Limit percent within the window before
// the chain's first event and on average over each stretch between its
// events, over at least Duration less a tenth of a window (the kernel's
// checks are a tenth of a window apart). The error is on the late side:
// a chain that breaks starts again, so Over may come up to about one
// window later than the stall first held for Duration.
func (s *psiState) observe(now time.Time, stall time.Duration) (held time.Duration, share float64, over bool) {
	t := s.trig
	dt := now.Sub(s.lastAt)
	grown := stall - s.lastStall
	soon := s.prev && dt <= 2*t.window+t.window/4
	switch {
	case soon && s.chain && float64(grown)*float64(t.window) >= float64(t.threshold)*float64(dt):
	case soon && grown < t.threshold:
		s.chain = false
	default:
		s.chain, s.start, s.startStall = true, now.Add(-t.window), stall-t.threshold
		if s.start.Before(s.since) {
			s.start = s.since
		}
	}
	s.prev, s.lastAt, s.lastStall = true, now, stall
	if !s.chain {
		return 0, 0, false
	}
	held = now.Sub(s.start)
	if held < t.hold {
		return held, 0, false
	}
	share = 100 * float64(stall-s.startStall) / float64(held)
	s.start, s.startStall = now, stall
	return held, share, true
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
