package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersion follows a repository from no tag to a release candidate, a release, commits
// after it and uncommitted changes, and checks the Debian version version.sh derives at
// each step and that dpkg orders them as they were made.
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
	commit := func() string {
		t.Helper()
		f := filepath.Join(dir, "f")
		b, _ := os.ReadFile(f)
		if err := os.WriteFile(f, append(b, 'x'), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "f")
		git("commit", "-q", "-m", "c")
		return git("rev-parse", "--short=7", "HEAD")
	}
	version := func() string {
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
		v := version()
		if v != expected {
			t.Errorf("version %q, want %q", v, expected)
		}
		got, want = append(got, v), append(want, expected)
	}
	sha := commit()
	step("0.0.0~git1." + sha)
	sha = commit()
	step("0.0.0~git2." + sha)
	git("tag", "v1.3.0-rc.1")
	step("1.3.0~rc.1")
	sha = commit()
	step("1.3.0~rc.1+git1." + sha)
	git("tag", "-a", "-m", "release", "v1.3.0")
	step("1.3.0")
	sha = commit()
	step("1.3.0+git1." + sha)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	step("1.3.0+git1." + sha + "+dirty")
	git("stash", "-q")
	commit()
	git("tag", "v1.3.1")
	step("1.3.1")

	for i := 1; i < len(got); i++ {
		if err := exec.Command("dpkg", "--compare-versions", got[i-1], "lt", got[i]).Run(); err != nil {
			t.Errorf("dpkg does not order %q before %q", got[i-1], got[i])
		}
	}
}
