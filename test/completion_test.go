package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// complete runs cobra's completion request, as the shell scripts do, and
// returns the candidates (the lines before the ":directive" line).
func complete(t *testing.T, config string, words ...string) []string {
	t.Helper()
	args := append([]string{"--config", config, "__complete"}, words...)
	out, err := exec.Command(berthBin, args...).Output()
	if err != nil {
		t.Fatalf("berth %v: %v\n%s", args, err, out)
	}
	var cands []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, ":") {
			break
		}
		cands = append(cands, l)
	}
	return cands
}

// Job and connector names complete from the running agent found through
// --config; with no agent, nothing is offered, quickly and quietly.
func TestCompletionFromAgent(t *testing.T) {
	e := newEnv(t)
	e.write(showcase(e))
	e.start()
	e.waitRunning("orders-sink", "orders-sink-0", "orders-sink-1")

	got := strings.Join(complete(t, e.config, "logs", ""), " ")
	if got != "balloon flaky orders-sink orders-sink-0 orders-sink-1" {
		t.Errorf("berth logs <TAB>: %q, want every job", got)
	}
	if got := strings.Join(complete(t, e.config, "logs", "orders-sink-"), " "); got != "orders-sink-0 orders-sink-1" {
		t.Errorf("berth logs orders-sink-<TAB>: %q", got)
	}
	if got := complete(t, e.config, "logs", "orders-sink-0", ""); len(got) != 0 {
		t.Errorf("berth logs JOB <TAB> (one argument only): %q", got)
	}

	// No agent at agent.listen: nothing, within the completion timeout.
	dead := filepath.Join(t.TempDir(), "dead.toml")
	if err := os.WriteFile(dead, []byte("[agent]\nlisten = \""+testutil.FreePort(t)+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if got := complete(t, dead, "logs", ""); len(got) != 0 {
		t.Errorf("no agent: %q, want nothing", got)
	}
	if d := time.Since(start); d > testutil.Deadline(10*time.Second) {
		t.Errorf("completion with no agent took %v", d)
	}
}

// The generated scripts complete in real interactive shells: bash, zsh
// and fish, each in a tmux pane, TAB pressed after "berth logs orders-sink-".
func TestCompletionInShells(t *testing.T) {
	tm := newTmux(t)
	e := newEnv(t)
	e.write(showcase(e))
	e.start()
	e.waitRunning("orders-sink", "orders-sink-0", "orders-sink-1")

	path := filepath.Dir(berthBin) + ":/usr/sbin:/usr/bin:/sbin:/bin"
	for _, sh := range []struct {
		name, cmd, setup string
	}{
		// cobra's bash script needs bash-completion, as every Debian
		// system that completes commands has.
		{"bash", "bash --norc --noprofile -i", "source /usr/share/bash-completion/bash_completion && source <(berth completion bash)"},
		{"zsh", "zsh -f -i", "autoload -Uz compinit && compinit -u && source <(berth completion zsh)"},
		{"fish", "fish --no-config -i", "berth completion fish | source"},
	} {
		t.Run(sh.name, func(t *testing.T) {
			if _, err := exec.LookPath(sh.name); err != nil {
				t.Skipf("%s not installed (Debian: apt-get install %s; test/deps.sh installs it)", sh.name, sh.name)
			}
			if _, err := os.Stat("/usr/share/bash-completion/bash_completion"); sh.name == "bash" && err != nil {
				t.Skip("bash-completion not installed (Debian: apt-get install bash-completion; test/deps.sh installs it)")
			}
			session := "complete-" + sh.name
			tm.run("new-session", "-d", "-s", session, "-x", "160", "-y", "30",
				"env PATH="+path+" HOME="+t.TempDir()+" TERM=screen "+sh.cmd)
			// Wait for the completion to be loaded before typing the line.
			tm.run("send-keys", "-t", session, sh.setup+" && echo completion-loaded", "Enter")
			waitPane(t, tm, session, "the completion script loaded", func(pane string) bool {
				for _, l := range strings.Split(pane, "\n") {
					if strings.TrimSpace(l) == "completion-loaded" {
						return true
					}
				}
				return false
			})
			tm.run("send-keys", "-t", session, "-l", "berth --config "+e.config+" logs orders-sink-")
			// bash lists the candidates on the second TAB; zsh and fish on
			// the first (a second one moves the selection in fish's pager).
			tm.run("send-keys", "-t", session, "Tab")
			if sh.name == "bash" {
				tm.run("send-keys", "-t", session, "Tab")
			}
			// The candidates are listed under the command line (fish
			// elides their common prefix: "…ers-sink-0").
			pane := waitPane(t, tm, session, "orders-sink-0 and orders-sink-1 listed", func(pane string) bool {
				for _, l := range strings.Split(pane, "\n") {
					if !strings.Contains(l, "logs") && strings.Contains(l, "sink-0") && strings.Contains(l, "sink-1") {
						return true
					}
				}
				return false
			})
			if strings.Contains(pane, "flaky") || strings.Contains(pane, "balloon") {
				t.Errorf("%s offered jobs that do not match the prefix:\n%s", sh.name, pane)
			}
		})
	}
}

// waitPane polls the session's pane until cond holds, and fails showing
// the pane when it does not within testutil.Deadline(15 s).
func waitPane(t *testing.T, tm *tmuxServer, session, what string, cond func(pane string) bool) string {
	t.Helper()
	deadline := time.Now().Add(testutil.Deadline(15 * time.Second))
	for {
		pane := tm.capture(session)
		if cond(pane) {
			return pane
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; the pane:\n%s", what, pane)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
