package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersion follows a repository through releases cut by changing the file VERSION (a
// release candidate, a release, commits after it, uncommitted changes, the next release, a
// copy without git) and checks the Debian version version.sh derives at each step, that it
// never reads a tag, and that dpkg orders the versions as they were made.
func TestVersion(t *testing.T) {
	for _, tool := range []string{"git", "dpkg"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s missing: %v", tool, err)
		}
	}
	script, err := filepath.Abs("../../packaging/deb/version.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	commit := func() string {
		t.Helper()
		b, _ := os.ReadFile(filepath.Join(dir, "f"))
		write("f", string(b)+"x")
		git("add", "-A")
		git("commit", "-q", "-m", "c")
		return git("rev-parse", "--short=7", "HEAD")
	}
	version := func(dir string) string {
		t.Helper()
		cmd := exec.Command(script)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("version.sh: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}

	git("init", "-q")
	var got, want []string
	step := func(expected string) {
		t.Helper()
		v := version(dir)
		if v != expected {
			t.Errorf("version %q, want %q", v, expected)
		}
		got, want = append(got, v), append(want, expected)
	}
	write("VERSION", "0.0.0\n")
	commit()
	step("0.0.0")
	sha := commit()
	step("0.0.0+git1." + sha)
	write("VERSION", "1.3.0-rc.1\n")
	commit()
	step("1.3.0~rc.1")
	sha = commit()
	step("1.3.0~rc.1+git1." + sha)
	write("VERSION", "1.3.0\n")
	commit()
	// A tag, even one saying otherwise, changes nothing.
	git("tag", "v9.9.9")
	step("1.3.0")
	commit()
	sha = commit()
	step("1.3.0+git2." + sha)
	write("f", "changed")
	step("1.3.0+git2." + sha + "+dirty")
	git("checkout", "-q", "f")
	write("VERSION", "1.3.1\n")
	commit()
	step("1.3.1")

	for i := 1; i < len(got); i++ {
		if err := exec.Command("dpkg", "--compare-versions", got[i-1], "lt", got[i]).Run(); err != nil {
			t.Errorf("dpkg does not order %q before %q", got[i-1], got[i])
		}
	}

	// A copy of the tree without .git is the release VERSION names.
	bare := t.TempDir()
	if err := os.WriteFile(filepath.Join(bare, "VERSION"), []byte("1.3.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v := version(bare); v != "1.3.1" {
		t.Errorf("without git: version %q, want 1.3.1", v)
	}
}
