package config

import "testing"

// FuzzParse checks that no input makes the parser, the key locator or the
// validator panic, and that every rejection is an *Problems with entries.
// Run: go test -run '^$' -fuzz FuzzParse -fuzztime 30s ./limits/
func FuzzParse(f *testing.F) {
	f.Add([]byte(fullExample))
	f.Add([]byte(conn("command = [\"x\", \"${BERTH_TASK}\"]\nlimits = { cpu = 1, memory = \"1.5GiB\", io = [{ device = \"/\", read_bps = 1 }] }\n")))
	f.Add([]byte("[static]\ntasks = [\"c-1\"]\n[[group]]\nname = \"g\"\n"))
	f.Add([]byte("a.b.\"c\" = '''x'''\n[[x.y]]\n[x.y.z]\nd = 1979-05-27 07:32:00Z\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.toml", data, limitsHost())
		if err == nil {
			if c == nil {
				t.Fatal("nil Config without error")
			}
			_ = c.Jobs()
			return
		}
		errs, ok := err.(*Problems)
		if !ok || len(errs.List) == 0 {
			t.Fatalf("error %v (%T) is not a non-empty *Problems", err, err)
		}
		_ = errs.Error()
	})
}
