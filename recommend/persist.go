package recommend

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"slices"

	"github.com/berthd/berth/internal/atomicfile"
)

// The history file: every job's history in one file of data_dir, so that
// an agent restart or upgrade keeps it.
//
//	magic    "berth usage history\n"
//	version  uvarint (fileVersion)
//	count    uvarint
//	count job records, in job ID order (encodeHistory)
//	crc      CRC-32C (Castagnoli) of everything before it, 4 bytes little-endian
//
// Integers are varints (encoding/binary), floats IEEE 754 little-endian.
// A change of the record or of a bucketing scheme (histogram.go) needs a
// new version; a file of another version is ignored, never misread.
const (
	fileMagic   = "berth usage history\n"
	fileVersion = 1
	// FileName is the history file's name in data_dir.
	FileName = "usage-history"
	// maxJobID bounds a stored job ID's length (a job ID is a connector
	// name, at most 253 bytes, and a task number).
	maxJobID = 512
)

// ErrHistoryFile is returned (wrapped, with the reason) by Load and
// Decode when the file is not a history this berth can read: another
// version, truncated, or corrupt. The caller logs it as a warning and
// starts with an empty history; it is never fatal.
var ErrHistoryFile = errors.New("usage history not read")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Encode returns every job's history in the history file's format.
func (m *Model) Encode() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.jobs))
	size := len(fileMagic) + 16
	for id, h := range m.jobs {
		ids = append(ids, id)
		size += len(id) + h.bytes()
	}
	slices.Sort(ids)
	b := make([]byte, 0, size)
	b = append(b, fileMagic...)
	b = binary.AppendUvarint(b, fileVersion)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
		b = m.jobs[id].encode(b)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// Decode replaces m's histories with those of data, in the history
// file's format, except that a job m has samples of since it was made
// keeps its own.
//
// Errors: ErrHistoryFile (wrapped, saying why) when data is not a
// history file of this version or does not check; m is then unchanged.
func (m *Model) Decode(data []byte) error {
	jobs, err := decodeFile(data)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, h := range m.jobs {
		jobs[id] = h
	}
	m.jobs = jobs
	return nil
}

// EncodedBytes is the size of job's record in the history file (0
// without a history).
func (m *Model) EncodedBytes(job string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.jobs[job]
	if h == nil {
		return 0
	}
	return len(binary.AppendUvarint(nil, uint64(len(job)))) + len(job) + len(h.encode(nil))
}

// Save writes every job's history to path atomically: to a temporary
// file in the same directory, synced, renamed over path, and the
// directory synced, so that a crash leaves the old file or the new one.
//
// Errors: the file cannot be written (wrapped with its path).
func (m *Model) Save(path string) error {
	if err := atomicfile.WriteFile(path, m.Encode(), 0o600); err != nil {
		return fmt.Errorf("save usage history: %w", err)
	}
	return nil
}

// Load reads the history file at path into m (as Decode). A missing file
// is no error: there is no history yet.
//
// Errors: ErrHistoryFile (wrapped, naming path and why) when the file is
// of another version, truncated or corrupt, or cannot be read; m is then
// unchanged and the caller carries on with it, logging a warning.
func (m *Model) Load(path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrHistoryFile, err)
	}
	if err := m.Decode(data); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// encode appends h's record to b.
func (h *history) encode(b []byte) []byte {
	f64 := func(b []byte, v float64) []byte { return binary.LittleEndian.AppendUint64(b, math.Float64bits(v)) }
	b = binary.AppendVarint(b, h.first)
	b = binary.AppendVarint(b, h.cpuAt)
	b = f64(b, h.cpuUsage)
	b = binary.AppendUvarint(b, h.cpuPeriods)
	b = binary.AppendUvarint(b, h.cpuThrottled)
	b = binary.AppendVarint(b, h.memAt)
	b = binary.AppendUvarint(b, h.memPeak)
	b = binary.AppendUvarint(b, h.memInactive)
	b = binary.AppendUvarint(b, h.memOOM)
	b = f64(b, h.memStall)
	b = f64(b, h.cpuStall)
	var flags byte
	for i, f := range []bool{h.memHasInactive, h.memHasPressure, h.tot.pressure} {
		if f {
			flags |= 1 << i
		}
	}
	b = append(b, flags)
	for _, hg := range []*histogram{&h.cpu, &h.mem} {
		b = binary.AppendVarint(b, hg.ref)
		b = append(b, hg.lo)
		b = binary.AppendUvarint(b, uint64(len(hg.w)))
		for _, w := range hg.w {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(w))
		}
	}
	for _, s := range h.peaks {
		b = binary.AppendUvarint(b, uint64(s.at))
		b = binary.AppendUvarint(b, uint64(s.kib))
		b = binary.AppendUvarint(b, uint64(s.oomKiB))
	}
	r := &h.trend
	for _, v := range []float64{r.at, r.sw, r.sx, r.sxx, r.sy, r.sxy, r.syy} {
		b = f64(b, v)
	}
	t := &h.tot
	b = f64(b, t.covered)
	b = f64(b, t.memCovered)
	b = binary.AppendUvarint(b, uint64(t.cpuSamples))
	b = binary.AppendUvarint(b, uint64(t.memSamples))
	b = binary.AppendUvarint(b, uint64(t.oomKills))
	b = binary.AppendUvarint(b, t.periods)
	b = binary.AppendUvarint(b, t.throttled)
	b = f64(b, t.memStall)
	return f64(b, t.cpuStall)
}

// decoder reads a history file, keeping its first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, a...)
	}
}

func (d *decoder) uvarint(max uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated")
		return 0
	}
	d.b = d.b[n:]
	if v > max {
		d.fail("a count or value %d is above %d", v, max)
		return 0
	}
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("truncated")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.fail("truncated")
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// f64 reads a float that must be finite and, when nonNeg, not negative.
func (d *decoder) f64(nonNeg bool) float64 {
	b := d.bytes(8)
	if b == nil {
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(b))
	if math.IsNaN(v) || math.IsInf(v, 0) || (nonNeg && v < 0) {
		d.fail("a number is %v", v)
		return 0
	}
	return v
}

// decodeFile parses a history file.
func decodeFile(data []byte) (map[string]*history, error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrHistoryFile, fmt.Sprintf(format, a...))
	}
	if len(data) < len(fileMagic)+4 || string(data[:len(fileMagic)]) != fileMagic {
		return nil, fail("not a usage history file")
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	d := &decoder{b: body[len(fileMagic):]}
	if v := d.uvarint(math.MaxUint32); d.err == nil && v != fileVersion {
		return nil, fail("version %d; this berth reads version %d", v, fileVersion)
	}
	if crc32.Checksum(body, crcTable) != sum {
		return nil, fail("checksum mismatch (truncated or corrupt)")
	}
	n := d.uvarint(uint64(len(d.b)))
	jobs := make(map[string]*history, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		id := string(d.bytes(int(d.uvarint(maxJobID))))
		h := d.history()
		if d.err == nil {
			if id == "" || jobs[id] != nil {
				d.fail("job ID %q empty or repeated", id)
			}
			jobs[id] = h
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the last job", len(d.b))
	}
	if d.err != nil {
		return nil, fail("%v", d.err)
	}
	return jobs, nil
}

// history reads one job's record (encode's order).
func (d *decoder) history() *history {
	h := &history{}
	h.first = d.varint()
	h.cpuAt = d.varint()
	h.cpuUsage = d.f64(true)
	h.cpuPeriods = d.uvarint(math.MaxUint64)
	h.cpuThrottled = d.uvarint(math.MaxUint64)
	h.memAt = d.varint()
	h.memPeak = d.uvarint(math.MaxUint64)
	h.memInactive = d.uvarint(math.MaxUint64)
	h.memOOM = d.uvarint(math.MaxUint64)
	h.memStall = d.f64(true)
	h.cpuStall = d.f64(true)
	if f := d.bytes(1); f != nil {
		h.memHasInactive, h.memHasPressure, h.tot.pressure = f[0]&1 != 0, f[0]&2 != 0, f[0]&4 != 0
	}
	for _, x := range []struct {
		hg *histogram
		s  *scheme
	}{{&h.cpu, &cpuScheme}, {&h.mem, &memScheme}} {
		x.hg.ref = d.varint()
		lo := d.bytes(1)
		if lo == nil {
			return nil
		}
		x.hg.lo = lo[0]
		n := d.uvarint(uint64(max(0, x.s.n-int(lo[0]))))
		if n > 0 {
			x.hg.w = make([]float32, n)
		}
		for i := range x.hg.w {
			b := d.bytes(4)
			if b == nil {
				return nil
			}
			w := math.Float32frombits(binary.LittleEndian.Uint32(b))
			if !(w >= 0) || math.IsInf(float64(w), 0) {
				d.fail("a bucket weight is %v", w)
				return nil
			}
			x.hg.w[i] = w
		}
	}
	for i := range h.peaks {
		h.peaks[i] = peakSlot{
			at:     uint32(d.uvarint(math.MaxUint32)),
			kib:    uint32(d.uvarint(math.MaxUint32)),
			oomKiB: uint32(d.uvarint(math.MaxUint32)),
		}
	}
	r := &h.trend
	r.at = d.f64(false)
	r.sw, r.sx, r.sxx, r.sy, r.sxy, r.syy = d.f64(true), d.f64(false), d.f64(true), d.f64(false), d.f64(false), d.f64(true)
	t := &h.tot
	t.covered = d.f64(true)
	t.memCovered = d.f64(true)
	t.cpuSamples = uint32(d.uvarint(math.MaxUint32))
	t.memSamples = uint32(d.uvarint(math.MaxUint32))
	t.oomKills = uint32(d.uvarint(math.MaxUint32))
	t.periods = d.uvarint(math.MaxUint64)
	t.throttled = d.uvarint(math.MaxUint64)
	t.memStall = d.f64(true)
	t.cpuStall = d.f64(true)
	return h
}
