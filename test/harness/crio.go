package harness

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
)

// CRI-O 1.34 in a slot: built from the Go module proxy and cached (criobins.go), configured
// with every path in the slot (crioconfig.go), its images copied into its store offline
// (crioimages.go), and what it leaves behind found by teardown (crioteardown.go). conmon,
// runc and the CNI plugins are Debian's.

// crioRequirements are what CRI-O needs from Debian beyond commonRequirements: conmon (its
// container monitor); nft (1.34.0 panics on a hostPort pod without it); and, for the build,
// a C compiler with a static libc (pinns) and libseccomp's headers found by pkg-config.
var crioRequirements = []requirement{
	{name: "conmon", pkg: "conmon"},
	{name: "nft", pkg: "nftables"},
	{name: "cc", pkg: "gcc"},
	{name: "cc", pkg: "libc6-dev", isValid: hasStaticLibc},
	{name: "pkg-config", pkg: "pkg-config"},
	{name: "pkg-config", pkg: "libseccomp-dev", isValid: hasLibseccomp},
}

// crioBackend runs CRI-O from the harness's own build.
func crioBackend() *backend {
	return &backend{
		runtime: RuntimeCRIO,
		prepare: func(ctx context.Context) error {
			if err := ensurePackages(ctx, RuntimeCRIO); err != nil {
				return err
			}
			if err := ensure(ctx, crioRequirements, nil); err != nil {
				return err
			}
			_, err := ensureCRIOBinaries(ctx)
			return err
		},
		writeConfig: writeCRIOConfig,
		command: func(l layout) ([]string, string) {
			return crioCommand(l), callerPath()
		},
		env:           crioEnv,
		importImages:  importCRIOImages,
		importArchive: importCRIOArchive,
		tagImage:      tagCRIOImage,
		writeMirrors:  writeCRIOMirrors,
	}
}

// hasStaticLibc checks that cc can link pinns statically: gcc without libc6-dev cannot.
func hasStaticLibc(cc string) error {
	out, err := exec.Command(cc, "-print-file-name=libc.a").Output()
	if p := strings.TrimSpace(string(out)); err != nil || !filepath.IsAbs(p) {
		return errors.New("no static libc (libc.a)")
	}
	return nil
}

// hasLibseccomp checks that pkg-config finds libseccomp, which CRI-O's seccomp tag links.
func hasLibseccomp(pkgConfig string) error {
	if err := exec.Command(pkgConfig, "--exists", "libseccomp").Run(); err != nil {
		return errors.New("pkg-config finds no libseccomp")
	}
	return nil
}
