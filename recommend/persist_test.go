package recommend

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/limits"
)

// sampleModel is a model with several jobs and every kind of figure.
func sampleModel(t testing.TB) *Model {
	m, err := New(DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	for j, id := range []string{"orders-sink", "orders-sink-0", "orders-sink-1"} {
		at, usage, periods, thr, oom := t0, 0.0, uint64(0), uint64(0), uint64(0)
		for i := range 3600 {
			at = at.Add(time.Second)
			usage += 0.1 + 0.05*float64((i+j)%7)
			periods += 10
			thr += uint64(i % 2)
			m.ObserveCPU(id, CPUSample{Time: at, UsageSeconds: usage, Periods: periods, ThrottledPeriods: thr, QuotaCores: 0.5})
			if i%15 == 0 {
				if i == 1500 {
					oom++
				}
				m.ObserveMemory(id, MemorySample{Time: at, CurrentBytes: uint64(40+j+i%5) << 20, PeakBytes: uint64(50+i/100) << 20, Peak: PeakSinceLastSample,
					InactiveFileBytes: 1 << 20, HasInactiveFile: true, LimitBytes: 256 << 20, OOMKills: oom,
					MemoryStallSeconds: float64(i) / 100, CPUStallSeconds: float64(i) / 10, HasPressure: true})
			}
		}
	}
	return m
}

// A history written and read back recommends the same and encodes to the
// same bytes.
func TestPersistRoundTrip(t *testing.T) {
	m := sampleModel(t)
	data := m.Encode()
	back, _ := New(DefaultParams())
	if err := back.Decode(data); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Encode(), data) {
		t.Error("encoding differs after a round trip")
	}
	now := t0.Add(2 * time.Hour)
	for _, id := range m.Jobs() {
		a, _ := m.Recommend(id, now, limits.Limits{CPU: 0.5}, Host{CPUs: 2, MemoryHigh: true})
		b, ok := back.Recommend(id, now, limits.Limits{CPU: 0.5}, Host{CPUs: 2, MemoryHigh: true})
		if !ok || !reflect.DeepEqual(a, b) {
			t.Errorf("%s: recommendation differs after a round trip:\n%+v\n%+v", id, a, b)
		}
		if a.Evidence.OOMKills != 1 || !a.Evidence.HasPressure || a.Evidence.ThrottledPeriods == 0 {
			t.Errorf("%s: sample model lacks a figure: %+v", id, a.Evidence)
		}
	}
}

// A job the model sampled before the file was read keeps its own
// history.
func TestPersistKeepsLive(t *testing.T) {
	data := sampleModel(t).Encode()
	m, _ := New(DefaultParams())
	m.ObserveMemory("orders-sink", MemorySample{Time: t0, CurrentBytes: 7 << 20})
	if err := m.Decode(data); err != nil {
		t.Fatal(err)
	}
	r, _ := m.Recommend("orders-sink", t0, limits.Limits{}, Host{})
	if r.Evidence.MemoryPeak != 7<<20 || len(m.Jobs()) != 3 {
		t.Errorf("live job's peak %d, %d jobs", r.Evidence.MemoryPeak, len(m.Jobs()))
	}
}

// A file of another version, truncated or corrupt is refused with
// ErrHistoryFile, and the model is left as it was.
func TestPersistRefused(t *testing.T) {
	good := sampleModel(t).Encode()
	withVersion := func(v uint64) []byte {
		b := append([]byte(fileMagic), binary.AppendUvarint(nil, v)...)
		b = append(b, good[len(fileMagic)+1:len(good)-4]...)
		return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x40
	for _, c := range []struct {
		name, data, why string
	}{
		{"empty", "", "not a usage history file"},
		{"other file", "[agent]\nid = \"a\"\n", "not a usage history file"},
		{"next version", string(withVersion(2)), "version 2; this berth reads version 1"},
		{"truncated", string(good[:len(good)-100]), "checksum"},
		{"corrupt", string(flipped), "checksum"},
	} {
		m, _ := New(DefaultParams())
		m.ObserveCPU("x", CPUSample{Time: t0})
		err := m.Decode([]byte(c.data))
		if !errors.Is(err, ErrHistoryFile) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: error %v, want ErrHistoryFile saying %q", c.name, err, c.why)
		}
		if got := m.Jobs(); len(got) != 1 || got[0] != "x" {
			t.Errorf("%s: the model changed: %v", c.name, got)
		}
	}
}

// Save writes the file atomically (no temporary file left, mode 0600),
// Load reads it back; a missing file is no history and no error; an
// unreadable one is ErrHistoryFile naming the path.
func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	m := sampleModel(t)
	if err := m.Save(path); err != nil {
		t.Fatal(err)
	}
	if err := m.Save(path); err != nil { // over the old one
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want the file alone", len(entries))
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v (%v)", fi.Mode(), err)
	}
	back, _ := New(DefaultParams())
	if err := back.Load(path); err != nil || len(back.Jobs()) != 3 {
		t.Fatalf("load: %v, %d jobs", err, len(back.Jobs()))
	}
	if err := back.Load(filepath.Join(dir, "none")); err != nil {
		t.Errorf("missing file: %v", err)
	}
	if err := os.WriteFile(path, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := back.Load(path); !errors.Is(err, ErrHistoryFile) || !strings.Contains(err.Error(), path) {
		t.Errorf("junk file: %v", err)
	}
	if err := m.Save(filepath.Join(dir, "no", "such", "dir", FileName)); err == nil {
		t.Error("saved into a missing directory")
	}
}

// Decoding never panics and never yields a history that breaks a
// recommendation or an encoding. The input is the file without its
// checksum, which the fuzz function appends, so that the parser behind
// the checksum is what gets exercised.
func FuzzDecode(f *testing.F) {
	body := func(b []byte) []byte { return b[:len(b)-4] }
	f.Add(body(sampleModel(f).Encode()))
	m, _ := New(DefaultParams())
	m.ObserveCPU("a", CPUSample{Time: t0})
	f.Add(body(m.Encode()))
	f.Fuzz(func(t *testing.T, data []byte) {
		data = binary.LittleEndian.AppendUint32(bytes.Clone(data), crc32.Checksum(data, crcTable))
		m, _ := New(DefaultParams())
		if m.Decode(data) != nil {
			return
		}
		for _, id := range m.Jobs() {
			m.Recommend(id, t0, limits.Limits{}, Host{})
		}
		m.Encode()
	})
}
