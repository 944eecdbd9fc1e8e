package config

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/berthd/berth/spec"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The reference and the decoder agree: a file setting every key validates,
// and the decoder reads exactly the keys the reference lists, section by
// section (a key added to one and not the other fails here).
func TestReferenceMatchesDecoder(t *testing.T) {
	file := ExampleFile()
	read := map[string]map[string]bool{}
	if _, err := parse("example.toml", []byte(file), nil, read); err != nil {
		t.Fatalf("the reference's example file does not validate:\n%v\n%s", err, file)
	}
	// A connectors file's top level, as ParseConnectors reads it.
	root, _, err := decodeTOML("defs.toml", []byte("[[group]]\nname = \"g\"\n[[connector]]\nname = \"c\"\ngroup = \"g\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := &decoder{read: read}
	defs := d.open("", SectionDefinitions, root)
	d.workload(defs)
	defs.done()
	if len(d.errs.list) > 0 {
		t.Fatalf("connectors file: %v", d.errs.list[0])
	}

	for _, s := range Sections() {
		var want, got []string
		for _, k := range s.Keys {
			want = append(want, k.Name)
		}
		for k := range read[s.ID] {
			got = append(got, k)
		}
		sort.Strings(want)
		sort.Strings(got)
		if strings.Join(want, " ") != strings.Join(got, " ") {
			t.Errorf("section %s: the reference lists %v, the decoder reads %v", s.ID, want, got)
		}
		delete(read, s.ID)
	}
	for sec, keys := range read {
		t.Errorf("the decoder reads section %q (%v), which the reference does not list", sec, keys)
	}
}

// Every key is documented: a meaning, a type, an example, and what an
// absent key means; tables name a section that exists.
func TestReferenceComplete(t *testing.T) {
	for _, s := range Sections() {
		if s.Doc == "" {
			t.Errorf("section %s has no Doc", s.ID)
		}
		for _, k := range s.Keys {
			name := s.ID + "." + k.Name
			if k.Doc == "" || strings.Contains(k.Doc, "\n") {
				t.Errorf("%s: Doc must be one line, got %q", name, k.Doc)
			}
			switch k.Type {
			case TypeTable, TypeTables:
				if _, ok := LookupSection(k.Section); !ok {
					t.Errorf("%s: section %q does not exist", name, k.Section)
				}
				continue
			case "":
				t.Errorf("%s: no Type", name)
			}
			if k.Example == "" {
				t.Errorf("%s: no Example", name)
			}
			if !k.Required && k.Default == "" && k.DefaultNote == "" {
				t.Errorf("%s: neither required nor a default", name)
			}
			if k.Range != nil && k.Type != TypeInteger {
				t.Errorf("%s: a Range on a %s", name, k.Type)
			}
		}
	}
}

// context is a minimal valid file in which body sets keys of section sec.
func context(sec, body string) string {
	const conn = "[[connector]]\nname = \"c\"\n[connector.task]\ncommand = [\"/bin/true\"]\n"
	switch sec {
	case SectionAgent:
		return "[agent]\nid = \"h\"\n" + body
	case SectionStatic:
		return "[static]\n" + body
	case SectionCluster:
		return "[cluster]\n" + body
	case SectionClusterTLS:
		return "[cluster.tls]\ncert = \"/c.pem\"\nkey = \"/k.pem\"\n" + body
	case SectionClient:
		return "[agent.client]\n" + body
	case SectionClientTLS:
		return "[agent.client.tls]\ncert = \"/c.pem\"\nkey = \"/k.pem\"\n" + body
	case SectionGroup:
		return "[[group]]\nname = \"g\"\n" + body
	case SectionConnector:
		return "[[connector]]\nname = \"c\"\n" + body + "\n[connector.task]\ncommand = [\"/bin/true\"]\n"
	case SectionProcess:
		return conn + body
	case SectionLimits:
		return conn + "[connector.task.limits]\ncpu = 1\nmemory = \"1GiB\"\n" + body
	case SectionIO:
		return conn + "[[connector.task.limits.io]]\ndevice = \"/\"\nread_iops = 10\n" + body
	}
	return ""
}

// withKey is the context of sec with k set to value: the context's own
// line for k replaced, or a line added.
func withKey(sec string, k Key, value string) string {
	base := context(sec, "")
	line := k.Name + " = "
	var out []string
	replaced := false
	for _, l := range strings.Split(base, "\n") {
		if strings.HasPrefix(l, line) && !replaced {
			out = append(out, line+value)
			replaced = true
			continue
		}
		out = append(out, l)
	}
	if !replaced {
		return context(sec, line+value+"\n")
	}
	return strings.Join(out, "\n")
}

// Writing a key's documented default changes nothing: the decoder applies
// exactly that value when the key is absent.
func TestReferenceDefaults(t *testing.T) {
	n := 0
	for _, s := range Sections() {
		if context(s.ID, "") == "" {
			continue
		}
		for _, k := range s.Keys {
			if k.Default == "" {
				continue
			}
			n++
			base := context(s.ID, "")
			set := withKey(s.ID, k, k.Default)
			if strings.Contains(base, k.Name+" = ") {
				t.Fatalf("%s.%s: the test's context sets the key itself", s.ID, k.Name)
			}
			want, err := Parse("absent.toml", []byte(base), nil)
			if err != nil {
				t.Fatalf("%s.%s: context does not validate: %v\n%s", s.ID, k.Name, err, base)
			}
			got, err := Parse("default.toml", []byte(set), nil)
			if err != nil {
				t.Errorf("%s.%s = %s (its documented default) does not validate: %v", s.ID, k.Name, k.Default, err)
				continue
			}
			// What the file means; not its name, hash or key positions.
			type meaning struct {
				Agent    Agent
				Static   Static
				Cluster  Cluster
				Workload spec.Workload
				Warnings int
			}
			mean := func(c *Config) meaning { return meaning{c.Agent, c.Static, c.Cluster, c.Workload, len(c.Warnings)} }
			if d := cmp.Diff(mean(want), mean(got), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("%s.%s = %s (its documented default) is not what an absent key gives (-absent +set):\n%s", s.ID, k.Name, k.Default, d)
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d defaults checked", n)
	}
}

// Each key's example is valid on its own, integer bounds are inclusive and
// enforced with a message naming them, and enumerations accept exactly
// their values.
func TestReferenceBoundsAndValues(t *testing.T) {
	// Keys that are valid only with others: a user and its password.
	companions := map[string]string{
		SectionCluster + ".username":      "endpoints = [\"https://e:2379\"]\npassword = \"p\"\n",
		SectionCluster + ".password":      "endpoints = [\"https://e:2379\"]\nusername = \"u\"\n",
		SectionCluster + ".password_file": "endpoints = [\"https://e:2379\"]\nusername = \"u\"\n",
		SectionClient + ".username":       "password = \"p\"\n",
		SectionClient + ".password":       "username = \"u\"\n",
		SectionClient + ".password_file":  "username = \"u\"\n",
		// restart needs a threshold of the job's own (host.CheckPressure).
		SectionProcess + ".memory_pressure": "limits = { memory = \"64MiB\", memory_high = \"48MiB\" }\n",
	}
	valid := func(s Section, k Key, v string) error {
		src := withKey(s.ID, k, v)
		if extra, ok := companions[s.ID+"."+k.Name]; ok {
			src = context(s.ID, extra+k.Name+" = "+v+"\n")
		}
		_, err := Parse("t.toml", []byte(src), nil)
		return err
	}
	for _, s := range Sections() {
		if context(s.ID, "") == "" {
			continue
		}
		for _, k := range s.Keys {
			name := s.ID + "." + k.Name
			if k.Type == TypeTable || k.Type == TypeTables {
				continue
			}
			if k.Name == "group" && s.ID == SectionConnector {
				continue // names a [[group]]: checked by TestReferenceMatchesDecoder's file
			}
			if s.ID == SectionStatic {
				continue // names declared jobs: ditto
			}
			if err := valid(s, k, k.Example); err != nil {
				t.Errorf("%s = %s (its example): %v", name, k.Example, err)
			}
			if r := k.Range; r != nil {
				for _, v := range []int64{r.Min, r.Max} {
					if err := valid(s, k, fmt.Sprint(v)); err != nil {
						t.Errorf("%s = %d is within %v but refused: %v", name, v, r, err)
					}
				}
				for _, v := range []int64{r.Min - 1, r.Max + 1} {
					err := valid(s, k, fmt.Sprint(v))
					want := fmt.Sprintf("must be between %d and %d", r.Min, r.Max)
					if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), k.Name) {
						t.Errorf("%s = %d is outside %v: got %v, want an error naming the key and %q", name, v, r, err, want)
					}
				}
			}
			if k.Values != nil {
				for _, v := range k.Values {
					if err := valid(s, k, tomlString(v)); err != nil {
						t.Errorf("%s = %q is listed but refused: %v", name, v, err)
					}
				}
				err := valid(s, k, tomlString("bogus"))
				want := "(allowed: " + strings.Join(k.Values, ", ") + ")"
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s = \"bogus\": got %v, want an error listing %s", name, err, want)
				}
			}
		}
	}
}
