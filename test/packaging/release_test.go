package packaging

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/crishim/crishim/test/harness"
)

// TestRelease runs `make release` twice, in the checkout and in a copy of the tree elsewhere
// without .git, and compares the two directories byte for byte; then checks what the
// release holds: the artifacts named for the version in the file VERSION, SHA256SUMS over
// them, tarballs whose entries have fixed owners and times and whose binaries are static,
// for their architecture, and say the version; the Debian packages' versions; the
// Kubernetes manifests as one YAML stream of every object in packaging/kubernetes.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles crishim for amd64 and arm64 twice")
	}
	for _, tool := range []string{"git", "dpkg-deb", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s missing: %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// Concurrent runs would install nfpm into bin/tools at once.
	unlock, err := harness.LockFile(ctx, filepath.Join(harness.BaseDir, "packaging.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(b))
	epoch := run(ctx, t, root, "git", "log", "-1", "--format=%ct")
	tmp := t.TempDir()

	first := filepath.Join(tmp, "first")
	run(ctx, t, root, "make", "-s", "release", "DIST="+first)
	src := copyTree(ctx, t, root, filepath.Join(tmp, "src"))
	again := filepath.Join(tmp, "again")
	run(ctx, t, src, "make", "-s", "release", "DIST="+again,
		"COMMIT="+run(ctx, t, root, "git", "rev-parse", "--short", "HEAD"),
		"SOURCE_DATE_EPOCH="+epoch,
		"TOOLS="+filepath.Join(root, "bin", "tools"))

	want := []string{
		"SHA256SUMS",
		"crishim-" + version + "-kubernetes.yaml",
		"crishim-" + version + "-linux-amd64.tar.gz",
		"crishim-" + version + "-linux-arm64.tar.gz",
		"crishim_" + version + "_amd64.deb",
		"crishim_" + version + "_arm64.deb",
	}
	if got := names(t, first); !slices.Equal(got, want) {
		t.Fatalf("make release wrote %v, want %v", got, want)
	}
	if got := names(t, again); !slices.Equal(got, want) {
		t.Fatalf("make release from a copy wrote %v, want %v", got, want)
	}
	for _, name := range want {
		a, errA := os.ReadFile(filepath.Join(first, name))
		b, errB := os.ReadFile(filepath.Join(again, name))
		if err := errors.Join(errA, errB); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two releases of one commit (%s and %s)", name, first, again)
		}
	}

	t.Run("SHA256SUMS", func(t *testing.T) {
		var lines []string
		for _, name := range want[1:] {
			b, err := os.ReadFile(filepath.Join(first, name))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(b)
			lines = append(lines, hex.EncodeToString(sum[:])+"  "+name)
		}
		sums, err := os.ReadFile(filepath.Join(first, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(sums), strings.Join(lines, "\n")+"\n"; got != want {
			t.Errorf("SHA256SUMS:\n%s\nwant (sha256sum -c format):\n%s", got, want)
		}
	})

	for _, arch := range []string{"amd64", "arm64"} {
		t.Run("tarball "+arch, func(t *testing.T) {
			checkTarball(ctx, t, root, filepath.Join(first, "crishim-"+version+"-linux-"+arch+".tar.gz"), version, arch, epoch)
		})
		t.Run("deb "+arch, func(t *testing.T) {
			deb := filepath.Join(first, "crishim_"+version+"_"+arch+".deb")
			if got := run(ctx, t, "", "dpkg-deb", "--field", deb, "Version", "Architecture"); got != "Version: "+version+"\nArchitecture: "+arch {
				t.Errorf("%s: fields %q, want version %s, architecture %s", deb, got, version, arch)
			}
		})
	}

	t.Run("kubernetes manifests", func(t *testing.T) {
		sources, err := filepath.Glob(filepath.Join(root, "packaging/kubernetes/*.yaml"))
		if err != nil || len(sources) == 0 {
			t.Fatalf("no manifests in packaging/kubernetes (%v)", err)
		}
		var wantKinds []string
		for _, s := range sources {
			wantKinds = append(wantKinds, kinds(t, s)...)
		}
		if got := kinds(t, filepath.Join(first, want[1])); !slices.Equal(got, wantKinds) {
			t.Errorf("%s holds %v, want the objects of %v: %v", want[1], got, sources, wantKinds)
		}
	})
}

// checkTarball checks the release tarball of arch: one top directory named as the file,
// the binaries, LICENSE, README.md, CHANGELOG.md and the systemd units, every entry owned by
// root and dated SOURCE_DATE_EPOCH; static binaries for arch that print the version when
// the machine runs them.
func checkTarball(ctx context.Context, t *testing.T, root, path, version, arch, epoch string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	top := strings.TrimSuffix(filepath.Base(path), ".tar.gz") + "/"
	units, err := filepath.Glob(filepath.Join(root, "packaging/systemd/*"))
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := []string{"CHANGELOG.md", "LICENSE", "README.md", "THIRD_PARTY_NOTICES", "crishim", "crishimctl"}
	for _, u := range units {
		wantFiles = append(wantFiles, filepath.Base(u))
	}
	slices.Sort(wantFiles)
	var files []string
	bin := t.TempDir()
	tr := tar.NewReader(zr)
	for first := true; ; first = false {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(hdr.ModTime.Unix()) != epoch || hdr.Uid != 0 || hdr.Gid != 0 {
			t.Errorf("%s: %s dated %d, owned by %d:%d; want SOURCE_DATE_EPOCH %s, 0:0", path, hdr.Name, hdr.ModTime.Unix(), hdr.Uid, hdr.Gid, epoch)
		}
		if first {
			if hdr.Name != top || hdr.Typeflag != tar.TypeDir {
				t.Fatalf("%s: first entry %s, want the directory %s", path, hdr.Name, top)
			}
			continue
		}
		name, ok := strings.CutPrefix(hdr.Name, top)
		if !ok || strings.Contains(name, "/") {
			t.Errorf("%s: entry %s is not a file of %s", path, hdr.Name, top)
			continue
		}
		files = append(files, name)
		if name == "THIRD_PARTY_NOTICES" {
			checkNotices(t, path, tr)
			continue
		}
		if name != "crishim" && name != "crishimctl" {
			continue
		}
		if hdr.Mode != 0o755 {
			t.Errorf("%s: %s has mode %o, want 0755", path, name, hdr.Mode)
		}
		out, err := os.OpenFile(filepath.Join(bin, name), os.O_CREATE|os.O_WRONLY, 0o755)
		if err == nil {
			_, err = io.Copy(out, tr)
			err = errors.Join(err, out.Close())
		}
		if err != nil {
			t.Fatal(err)
		}
		checkStatic(t, filepath.Join(bin, name), arch)
	}
	if !slices.Equal(files, wantFiles) {
		t.Errorf("%s holds %v, want %v in that order", path, files, wantFiles)
	}
	if arch != runtime.GOARCH {
		return
	}
	if got := run(ctx, t, "", filepath.Join(bin, "crishim"), "--version"); got != "crishim "+version {
		t.Errorf("crishim --version: %q, want %q", got, "crishim "+version)
	}
	if got := run(ctx, t, "", filepath.Join(bin, "crishimctl"), "version", "--client"); !slices.Contains(strings.Split(got, "\n"), "Client Version: "+version) {
		t.Errorf("crishimctl version --client: %q, want Client Version: %s", got, version)
	}
}

// checkNotices: the licence and notice files of what the binaries link, the standard
// library's and grpc's (its NOTICE.txt too) among them.
func checkNotices(t *testing.T, path string, r io.Reader) {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nGo standard library go1.", "\ngoogle.golang.org/grpc v", "\n--- NOTICE.txt\n", "\nk8s.io/cri-api v"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s: THIRD_PARTY_NOTICES lacks %q", path, want)
		}
	}
}

// checkStatic: an ELF executable for arch with no program interpreter (no dynamic loader,
// no libc of the build machine).
func checkStatic(t *testing.T, path, arch string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != machine {
		t.Errorf("%s is for %v, want %v", path, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked (it has a program interpreter)", path)
		}
	}
}

// names lists dir's files, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// kinds lists the kind and name of every object of a YAML stream, in order.
func kinds(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	d := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var obj struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := d.Decode(&obj); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if obj.Kind != "" {
			out = append(out, obj.Kind+"/"+obj.Metadata.Name)
		}
	}
}
