package kernfile

import (
	"errors"
	"io/fs"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrTooLong is returned (wrapped in an fs.PathError) by ReadAt for a file
// longer than the buffer it was given.
var ErrTooLong = errors.New("longer than the read buffer")

// ReadAt reads the file at path, relative to the directory fd dirFD (or
// absolute with unix.AT_FDCWD), into buf and returns the bytes read. A
// file of a cgroup file system or of procfs is a seq_file: a read(2) with
// room to spare returns the whole content, so one read that does not fill
// buf is the end.
//
// Errors: the file cannot be opened or read (an fs.PathError naming path,
// wrapping ENOENT or ENODEV when a cgroup is gone, ESRCH when a process
// is); ErrTooLong when the content fills buf.
func ReadAt(dirFD int, path string, buf []byte) ([]byte, error) {
	fd, err := unix.Openat(dirFD, path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	b, err := readOnce(fd, buf)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return b, nil
}

// readOnce reads fd into buf with one read(2) (again after EINTR): the
// whole content of a seq_file when it does not fill buf. Errors: the
// read's, or ErrTooLong when the content fills buf.
func readOnce(fd int, buf []byte) ([]byte, error) {
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == len(buf) {
			return nil, ErrTooLong
		}
		return buf[:n], nil
	}
}

// Read reads the whole file at the absolute path, however long, with
// plain open(2) and read(2) calls.
//
// Errors: the file cannot be opened or read (an fs.PathError naming path).
func Read(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// Write writes s to the file at the absolute path with one open(2),
// write(2) and close(2): a control file takes one value per write.
//
// Errors: the file cannot be opened, or the kernel refuses the value
// (EINVAL, EBUSY...), returned as the bare errno.
func Write(path, s string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, werr := unix.Write(fd, []byte(s))
	cerr := unix.Close(fd)
	if werr != nil {
		return werr
	}
	return cerr
}

// Path is a relative file path for ReadPath, built in place without
// allocating (a value on the caller's stack) as long as it stays shorter
// than 240 bytes; a longer one is kept in an allocated slice. The zero
// Path is empty.
type Path struct {
	b    [240]byte
	n    int
	long []byte // the whole path once it outgrew b
}

// Add appends s to the path and returns p.
func (p *Path) Add(s string) *Path {
	if p.long == nil && p.n+len(s) < len(p.b) {
		p.n += copy(p.b[p.n:], s)
		return p
	}
	if p.long == nil {
		p.long = append([]byte(nil), p.b[:p.n]...)
	}
	p.long = append(p.long, s...)
	return p
}

// AddInt appends the decimal form of v to the path and returns p.
func (p *Path) AddInt(v int) *Path {
	if p.long == nil && p.n+20 < len(p.b) {
		p.n = len(strconv.AppendInt(p.b[:p.n], int64(v), 10))
		return p
	}
	return p.Add(strconv.Itoa(v))
}

// String returns the path.
func (p *Path) String() string {
	if p.long != nil {
		return string(p.long)
	}
	return string(p.b[:p.n])
}

// ReadPath is ReadAt of the path p relative to dirFD, without allocating:
// the path is passed to openat(2) from p's own bytes (ReadAt copies its
// string argument to the heap to terminate it, and its callers build the
// string by concatenation: two allocations per file, measured at 2 % of a
// scrape's CPU).
//
// Errors: as ReadAt, naming p.
func ReadPath(dirFD int, p *Path, buf []byte) ([]byte, error) {
	if p.long != nil {
		return ReadAt(dirFD, string(p.long), buf)
	}
	p.b[p.n] = 0 // n < len(b): Add keeps a byte free
	r, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirFD), uintptr(unsafe.Pointer(&p.b[0])), uintptr(unix.O_RDONLY|unix.O_CLOEXEC), 0, 0, 0)
	if errno != 0 {
		return nil, &fs.PathError{Op: "open", Path: p.String(), Err: errno}
	}
	fd := int(r)
	defer unix.Close(fd)
	b, err := readOnce(fd, buf)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: p.String(), Err: err}
	}
	return b, nil
}
