package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/crishim/crishim/test/harness"
)

// Every image critest (critestVersion) pulls, by the names its specs use, built from the
// host's busybox and served by a harness.Registry. What each stands in for is what the specs
// look at, read from pkg/validate and cri-tools' images/ directory:
//   - busybox: the default container image; specs bring their own commands. Debian's static
//     busybox lacks two applets the specs run, pgrep and ipcs, so scripts stand in. It is
//     also a standalone shell (sh runs applets without a PATH lookup), so the MaskedPaths
//     spec, which masks /bin/ls and expects `sh -c ls` to fail, fails both ways.
//   - nginx, hostnet-nginx: a process named nginx whose command line says "master process",
//     its PID in /var/run/nginx.pid, HTTP 200 on "/" (port 80; 12003 for hostnet).
//   - httpd: HTTP 200 on "/" at port 80, and "httpd" in its log.
//   - nonewprivs: a setuid-root program printing "Effective uid: N" (built from ./nnp).
//   - test-image-user-*: only their config's User is read.
//   - test-image-predefined-group: user 1000 in group 50000 by the image's /etc/group.
//   - test-image-*: distinct images, one file each (as cri-tools' image-test Dockerfile
//     does), except test-image-tags:1..3, one image under three tags; pause:3.9 under two
//     registries is one image too.
//
// Not served: test-image-digest@sha256:9700f9a2…, since a digest names upstream bytes that no
// offline build reproduces. Its spec ("public image with digest should be pulled and
// removed") fails directly and through crishim alike.

const (
	e2eImages = "registry.k8s.io/e2e-test-images/"
	criTools  = "gcr.io/k8s-staging-cri-tools/"
)

// nginxScript is /usr/sbin/nginx. The kernel names a process after the script it runs, so
// `pidof nginx` finds it; it re-executes itself once to put "master process" into its command
// line, as nginx retitles itself. SIGTERM ends it at once: a shell as PID 1 would ignore it.
const nginxScript = `#!/bin/sh
[ "$1" = "nginx: master process" ] || exec "$0" "nginx: master process" "$@"
echo $$ > /var/run/nginx.pid
httpd -f -p "${NGINX_PORT:-80}" -h /usr/share/nginx/html &
trap 'kill $!; exit 0' TERM INT QUIT
wait
`

// serveScript is /usr/local/bin/serve-http PORT DIR, busybox httpd ending on SIGTERM. It logs
// a line naming httpd, as the real httpd's start-up does and a spec reads in the log.
const serveScript = `#!/bin/sh
echo "httpd (busybox) serving $2 on port $1" >&2
httpd -f -p "$1" -h "$2" &
trap 'kill $!; exit 0' TERM INT QUIT
wait
`

// pgrepScript is /usr/bin/pgrep NAME: the PIDs of the processes named NAME.
const pgrepScript = `#!/bin/sh
status=1
for d in /proc/[0-9]*; do
	read -r comm 2>/dev/null < "$d/comm" && [ "$comm" = "$1" ] && echo "${d#/proc/}" && status=0
done
exit $status
`

// ipcsScript is /usr/bin/ipcs -m: the shared memory segments of the IPC namespace, which is
// what the specs look for (a segment's ID, in the host's namespace and not in a pod's).
const ipcsScript = `#!/bin/sh
cat /proc/sysvipc/shm
`

// critestImages returns the images to serve; nnp is the path of the built ./nnp program.
func critestImages(nnp []byte) []harness.RegistryImage {
	page := "<html><body>crishim conformance stand-in</body></html>\n"
	nginx := func(ref string, env ...string) harness.RegistryImage {
		return harness.RegistryImage{
			Ref: ref, Cmd: []string{"nginx", "-g", "daemon off;"}, Env: env,
			Files: []harness.ImageFile{
				{Path: "/usr/sbin/nginx", Mode: 0o755, Data: nginxScript},
				{Path: "/usr/share/nginx/html/index.html", Data: page},
				{Path: "/var/run/.keep"},
			},
		}
	}
	marked := func(ref, file string) harness.RegistryImage {
		return harness.RegistryImage{Ref: ref, Cmd: []string{"sh"}, Files: []harness.ImageFile{{Path: "/" + file}}}
	}
	user := func(ref, u string) harness.RegistryImage {
		return harness.RegistryImage{Ref: ref, Cmd: []string{"sh"}, User: u}
	}
	images := []harness.RegistryImage{
		{Ref: e2eImages + "busybox:1.29-2", Cmd: []string{"sh"},
			Files: []harness.ImageFile{
				{Path: "/usr/bin/pgrep", Mode: 0o755, Data: pgrepScript},
				{Path: "/usr/bin/ipcs", Mode: 0o755, Data: ipcsScript},
			}},
		nginx(e2eImages + "nginx:1.14-2"),
		nginx(criTools+"hostnet-nginx-amd64", "NGINX_PORT=12003"),
		{Ref: e2eImages + "httpd:2.4.39-4", Cmd: []string{"serve-http", "80", "/usr/local/apache2/htdocs"},
			Files: []harness.ImageFile{
				{Path: "/usr/local/bin/serve-http", Mode: 0o755, Data: serveScript},
				{Path: "/usr/local/apache2/htdocs/index.html", Data: page},
			}},
		{Ref: e2eImages + "nonewprivs:1.3", Entrypoint: []string{"/usr/local/bin/nnp"},
			Files: []harness.ImageFile{{Path: "/usr/local/bin/nnp", Mode: 0o4755, Data: string(nnp)}}},
		user(criTools+"test-image-user-uid", "1002"),
		user(criTools+"test-image-user-username", "www-data"),
		user(criTools+"test-image-user-uid-group", "1003:1004"),
		user(criTools+"test-image-user-username-group", "www-data:1004"),
		{Ref: criTools + "test-image-predefined-group", Cmd: []string{"sh"}, User: "1000",
			Files: []harness.ImageFile{
				{Path: "/etc/passwd", Data: "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\ndefault-user:x:1000:1000::/home/default-user:/bin/sh\n"},
				{Path: "/etc/group", Data: "root:x:0:\nnobody:x:65534:\ndefault-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n"},
			}},
		marked(criTools+"test-image-latest", "test-image-latest"),
		marked(criTools+"test-image-tag:test", "test"),
		marked(criTools+"test-image-tag:all", "all"),
		// The pause image critest pulls from two registries; it must not be the sandbox image
		// (harness.PauseImage), which removing it by ID would take away.
		marked("registry.k8s.io/pause:3.9", "pause-3.9"),
		marked("k8s.gcr.io/pause:3.9", "pause-3.9"),
	}
	for _, n := range []string{"1", "2", "3"} {
		images = append(images,
			marked(criTools+"test-image-"+n+":latest", "test-image-"+n),
			marked(criTools+"test-image-tags:"+n, "same-image"))
	}
	return images
}

// buildNNP compiles ./nnp statically (CGO off), to run in busybox's world.
func buildNNP(ctx context.Context, dir string) ([]byte, error) {
	out := filepath.Join(dir, "nnp")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "github.com/crishim/crishim/test/conformance/nnp")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build nnp: %w\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("read nnp: %w", err)
	}
	return b, nil
}
